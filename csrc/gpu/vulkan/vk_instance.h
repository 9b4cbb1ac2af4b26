// The process's one Vulkan instance and what it knows about each physical device: the
// DeviceInfo, the compute queue family, and the features to enable on a logical device.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gpu/device.h"
#include "gpu/vulkan/vk_loader.h"

namespace dasllama::gpu::vk {

struct PhysicalDevice {
    VkPhysicalDevice handle = VK_NULL_HANDLE;
    DeviceInfo info;
    uint32_t api_version = 0;           // the lower of the device's and the instance's
    uint32_t queue_family = 0;          // the first family with compute
    uint32_t timestamp_valid_bits = 0;  // of that family; 0 = no timestamps
    float timestamp_period_ns = 0.0f;
    uint32_t max_groups[3] = {0, 0, 0};  // maxComputeWorkGroupCount
    VkPhysicalDeviceMemoryProperties memory{};
    std::vector<std::string> extensions;
    bool has_extension(const char* name) const;
};

class Instance {
public:
    // The instance, created on first use; nullptr when Vulkan is unavailable (see reason()).
    static Instance* get();
    static const std::string& reason();

    VkInstance handle() const { return handle_; }
    const InstanceFunctions& fn() const { return fn_; }
    const std::vector<PhysicalDevice>& devices() const { return devices_; }

private:
    Instance() = default;
    void create();
    void probe_devices();

    VkInstance handle_ = VK_NULL_HANDLE;
    uint32_t api_version_ = 0;
    InstanceFunctions fn_;
    VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
    std::vector<PhysicalDevice> devices_;
};

ValidationReport validation_report_vulkan();

// The devices listed by Instance, or empty; never throws.
std::vector<DeviceInfo> list_vulkan_devices();
std::string vulkan_unavailable_reason();

// "vulkan", "vulkan:N" or "vulkan:NAME" (the text after "vulkan", colon included).
std::shared_ptr<Device> open_vulkan_device(std::string_view selector);

}  // namespace dasllama::gpu::vk

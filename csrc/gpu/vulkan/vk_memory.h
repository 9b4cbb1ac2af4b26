// Device memory: one VkBuffer with its own VkDeviceMemory per allocation (weights are few,
// large buffers, so sub-allocation would buy little yet). Device-local buffers are reached
// through a staging buffer; host-visible ones stay mapped.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "gpu/device.h"
#include "gpu/vulkan/vk_loader.h"

namespace dasllama::gpu::vk {

struct PhysicalDevice;
class VulkanDevice;

struct Allocation {
    VkBuffer buffer = VK_NULL_HANDLE;
    VkDeviceMemory memory = VK_NULL_HANDLE;
    void* mapped = nullptr;  // host-visible allocations only
    size_t bytes = 0;        // as asked for
};

// Throws DeviceError naming the size and the label when the memory cannot be had.
Allocation allocate(const DeviceFunctions& fn, VkDevice device, const PhysicalDevice& pd,
                    size_t bytes, bool host_visible, const char* label);
void release(const DeviceFunctions& fn, VkDevice device, Allocation& a);

class VulkanBuffer final : public Buffer {
public:
    VulkanBuffer(std::shared_ptr<VulkanDevice> owner, Allocation a, std::string label, uint64_t id)
        : owner_(std::move(owner)), a_(a), label_(std::move(label)), id_(id) {}
    ~VulkanBuffer() override;
    size_t size() const override { return a_.bytes; }
    void* mapped() override { return a_.mapped; }

    VkBuffer handle() const { return a_.buffer; }
    const std::string& label() const { return label_; }
    // Unique for the life of the process (handles may be reused after a buffer dies).
    uint64_t id() const { return id_; }
    const VulkanDevice* owner() const { return owner_.get(); }

private:
    std::shared_ptr<VulkanDevice> owner_;
    Allocation a_;
    std::string label_;
    uint64_t id_;
};

}  // namespace dasllama::gpu::vk

// Logical device creation (with the features kernels may use), lifetime, and the glue the
// encoder and buffers call back into.
#include "gpu/vulkan/vk_device.h"

#include <algorithm>
#include <string>

#include "core/errors.h"
#include "gpu/vulkan/vk_features.h"

namespace dasllama::gpu::vk {

VulkanDevice::VulkanDevice(const Instance& instance, const PhysicalDevice& pd)
    : instance_(instance), pd_(pd) {
    const DeviceInfo& info = pd.info;
    float priority = 1.0f;
    VkDeviceQueueCreateInfo qi{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    qi.queueFamilyIndex = pd.queue_family;
    qi.queueCount = 1;
    qi.pQueuePriorities = &priority;

    // Ask for exactly what DeviceInfo reports: the kernels' needs, not every feature there is
    // (robustBufferAccess and friends cost speed).
    FeatureChain features;
    features.link(pd.api_version, pd.extensions);
    features.core.features.shaderInt16 = info.int16;
    features.float16_int8.shaderFloat16 = info.fp16;
    features.float16_int8.shaderInt8 = info.int8;
    features.storage16.storageBuffer16BitAccess = info.storage_16bit;
    features.storage8.storageBuffer8BitAccess = info.storage_8bit;
    features.coopmat.cooperativeMatrix = info.coopmat_khr;
    features.memory_model.vulkanMemoryModel = info.coopmat_khr;
    std::vector<const char*> extensions = features.extensions;
    if (!info.coopmat_khr) {
        // The struct stays linked (harmless, all false) but the extension need not be on.
        auto is_coopmat = [](const char* e) { return std::string(e) == kCoopmatKhrExtension; };
        extensions.erase(std::remove_if(extensions.begin(), extensions.end(), is_coopmat),
                         extensions.end());
    }
    // Portability drivers (MoltenVK) must have their subset extension enabled.
    if (pd.has_extension("VK_KHR_portability_subset"))
        extensions.push_back("VK_KHR_portability_subset");

    VkDeviceCreateInfo ci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
    ci.pNext = &features.core;
    ci.queueCreateInfoCount = 1;
    ci.pQueueCreateInfos = &qi;
    ci.enabledExtensionCount = static_cast<uint32_t>(extensions.size());
    ci.ppEnabledExtensionNames = extensions.data();
    const InstanceFunctions& ifn = instance.fn();
    VK_CALL(ifn, vkCreateDevice, pd.handle, &ci, nullptr, &device_);
    try {
        load_device_functions(ifn, device_, fn_);
        fn_.vkGetDeviceQueue(device_, pd.queue_family, 0, &queue_);
        VkFenceCreateInfo fi{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
        VK_CALL(fn_, vkCreateFence, device_, &fi, nullptr, &fence_);
        VkCommandPoolCreateInfo pi{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
        pi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
        pi.queueFamilyIndex = pd.queue_family;
        VK_CALL(fn_, vkCreateCommandPool, device_, &pi, nullptr, &transfer_pool_);
        VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
        ai.commandPool = transfer_pool_;
        ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
        ai.commandBufferCount = 1;
        VK_CALL(fn_, vkAllocateCommandBuffers, device_, &ai, &transfer_cb_);
        pipelines_ = std::make_unique<PipelineCache>(fn_, device_, pd_.info);
    } catch (...) {
        destroy();
        throw;
    }
}

VulkanDevice::~VulkanDevice() { destroy(); }

void VulkanDevice::destroy() {
    if (!device_) return;
    if (fn_.vkDeviceWaitIdle) fn_.vkDeviceWaitIdle(device_);
    pipelines_.reset();
    if (fn_.vkDestroyBuffer) release(fn_, device_, staging_);
    if (transfer_pool_) fn_.vkDestroyCommandPool(device_, transfer_pool_, nullptr);
    if (fence_) fn_.vkDestroyFence(device_, fence_, nullptr);
    // vkDestroyDevice comes from the instance table when the device table failed to load.
    if (fn_.vkDestroyDevice) {
        fn_.vkDestroyDevice(device_, nullptr);
    } else if (auto destroy_device = reinterpret_cast<PFN_vkDestroyDevice>(
                   instance_.fn().vkGetDeviceProcAddr(device_, "vkDestroyDevice"))) {
        destroy_device(device_, nullptr);
    }
    device_ = VK_NULL_HANDLE;
}

PipelineCache::Binding VulkanDevice::prepare_dispatch(const StampInfo& stamp,
                                                      const std::vector<const VulkanBuffer*>& buffers) {
    std::lock_guard<std::mutex> lock(mutex_);
    return pipelines_->bind(stamp, buffers);
}

void VulkanDevice::on_buffer_destroyed(uint64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    live_buffers_.erase(id);
    pipelines_->forget_buffer(id);
}

std::pair<size_t, size_t> VulkanDevice::cache_sizes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return {pipelines_->pipeline_count(), pipelines_->descriptor_set_count()};
}

VulkanBuffer& VulkanDevice::own(Buffer& b, const char* what) const {
    auto* vb = dynamic_cast<VulkanBuffer*>(&b);
    if (!vb || vb->owner() != this)
        throw DeviceError(std::string(what) + ": the buffer belongs to another device than " +
                          pd_.info.name);
    return *vb;
}

void VulkanDevice::set_profiling(bool on) {
    if (on && !pd_.info.timestamps)
        throw DeviceError(pd_.info.name + " cannot time kernels (its compute queue has no timestamps)");
    profiling_.store(on);
}

std::vector<KernelTime> VulkanDevice::last_profile() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return last_profile_;
}

std::shared_ptr<Device> open_logical_device(const Instance& instance, const PhysicalDevice& pd) {
    return std::make_shared<VulkanDevice>(instance, pd);
}

}  // namespace dasllama::gpu::vk

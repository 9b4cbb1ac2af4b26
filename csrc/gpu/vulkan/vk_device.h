// A Vulkan logical device: one compute queue, memory, the pipeline and descriptor caches, and
// submission. Its members are defined by concern: vk_device.cpp (creation, lifetime),
// vk_memory.cpp (buffers, upload, download), vk_encoder.cpp (encoders, submit, profiling).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "gpu/device.h"
#include "gpu/vulkan/vk_instance.h"
#include "gpu/vulkan/vk_memory.h"
#include "gpu/vulkan/vk_pipelines.h"

namespace dasllama::gpu::vk {

class VulkanEncoder;

class VulkanDevice final : public Device, public std::enable_shared_from_this<VulkanDevice> {
public:
    VulkanDevice(const Instance& instance, const PhysicalDevice& pd);
    ~VulkanDevice() override;

    const DeviceInfo& info() const override { return pd_.info; }
    std::unique_ptr<Buffer> alloc(size_t bytes, const char* label) override;
    std::unique_ptr<Buffer> alloc_host(size_t bytes, const char* label) override;
    void upload(Buffer& dst, size_t offset, const void* src, size_t bytes) override;
    void download(Buffer& src, size_t offset, void* dst, size_t bytes) override;
    std::unique_ptr<Encoder> encoder() override;
    void submit(Encoder& enc) override;
    void set_profiling(bool on) override;
    std::vector<KernelTime> last_profile() const override;

    // For the encoder and buffers of this device.
    const DeviceFunctions& fn() const { return fn_; }
    VkDevice handle() const { return device_; }
    const PhysicalDevice& physical() const { return pd_; }
    bool profiling() const override { return profiling_.load(); }
    // The pipeline and descriptor set for one dispatch (cached; see PipelineCache).
    PipelineCache::Binding prepare_dispatch(const StampInfo& stamp,
                                            const std::vector<const VulkanBuffer*>& buffers);
    void on_buffer_destroyed(uint64_t id);
    // (pipelines, descriptor sets) cached now; for tests.
    std::pair<size_t, size_t> cache_sizes() const;
    // The buffer of this device behind `b`, or DeviceError naming `what`.
    VulkanBuffer& own(Buffer& b, const char* what) const;

private:
    std::unique_ptr<Buffer> make_buffer(size_t bytes, bool host, const char* label);
    // Run `record` into the transfer command buffer, submit, wait (mutex held).
    template <class Record>
    void run_transfer(Record&& record);
    void ensure_staging(size_t bytes);
    void submit_and_wait(VkCommandBuffer cb);
    void destroy();

    const Instance& instance_;
    const PhysicalDevice& pd_;
    DeviceFunctions fn_;
    VkDevice device_ = VK_NULL_HANDLE;
    VkQueue queue_ = VK_NULL_HANDLE;
    VkFence fence_ = VK_NULL_HANDLE;
    VkCommandPool transfer_pool_ = VK_NULL_HANDLE;
    VkCommandBuffer transfer_cb_ = VK_NULL_HANDLE;
    Allocation staging_;
    std::unique_ptr<PipelineCache> pipelines_;

    // Guards the queue, the staging buffer, the caches, live_buffers_ and last_profile_.
    mutable std::mutex mutex_;
    std::unordered_set<uint64_t> live_buffers_;
    std::atomic<bool> profiling_{false};
    std::vector<KernelTime> last_profile_;

    friend class VulkanEncoder;
};

std::shared_ptr<Device> open_logical_device(const Instance& instance, const PhysicalDevice& pd);

}  // namespace dasllama::gpu::vk

// An Encoder on Vulkan: one primary command buffer (from its own pool, so encoders may be
// recorded on different threads), recorded once and submitted any number of times. In
// profiling mode each dispatch is bracketed by two timestamps.
#pragma once

#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "gpu/device.h"
#include "gpu/vulkan/vk_loader.h"

namespace dasllama::gpu::vk {

class VulkanDevice;
class VulkanBuffer;

class VulkanEncoder final : public Encoder {
public:
    explicit VulkanEncoder(std::shared_ptr<VulkanDevice> device);
    ~VulkanEncoder() override;

    void dispatch(const StampInfo& stamp, const std::vector<Buffer*>& buffers, const void* args,
                  size_t args_bytes, uint32_t gx, uint32_t gy, uint32_t gz) override;
    using Encoder::dispatch;
    void barrier() override;
    void copy(Buffer& src, size_t src_offset, Buffer& dst, size_t dst_offset, size_t bytes) override;
    void fill(Buffer& dst, size_t offset, size_t bytes, uint32_t word) override;
    size_t dispatches() const override { return stamps_.size(); }

    // For VulkanDevice::submit.
    const VulkanDevice* owner() const { return device_.get(); }
    void finish();  // end recording; later recording throws
    VkCommandBuffer command_buffer() const { return cb_; }
    const std::vector<uint64_t>& buffer_ids() const { return buffer_ids_; }
    // Per-dispatch times of the last execution (profiling encoders only; call after the wait).
    std::vector<KernelTime> read_times() const;
    bool profiled() const { return profiled_; }

private:
    VulkanBuffer& use(Buffer& b, const char* what);
    void ensure_recording(const char* what) const;
    void write_timestamp(VkPipelineStageFlagBits stage);

    std::shared_ptr<VulkanDevice> device_;
    VkCommandPool pool_ = VK_NULL_HANDLE;
    VkCommandBuffer cb_ = VK_NULL_HANDLE;
    bool finished_ = false;
    bool profiled_ = false;
    std::vector<std::string> stamps_;
    std::vector<uint64_t> buffer_ids_;
    std::unordered_set<uint64_t> seen_ids_;
    // Timestamp pools of kQueriesPerPool queries; the last one fills up first.
    std::vector<VkQueryPool> query_pools_;
    uint32_t queries_used_ = 0;  // in total, across pools
};

}  // namespace dasllama::gpu::vk

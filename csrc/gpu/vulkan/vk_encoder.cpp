// Recording dispatches, barriers, copies and fills; submitting and timing them.
#include "gpu/vulkan/vk_encoder.h"

#include <cstring>

#include "core/errors.h"
#include "gpu/vulkan/vk_device.h"

namespace dasllama::gpu::vk {

namespace {

constexpr uint32_t kQueriesPerPool = 256;  // two per dispatch

// Every compute and transfer write before it, visible to every compute and transfer access
// after it.
void full_barrier(const DeviceFunctions& fn, VkCommandBuffer cb) {
    VkMemoryBarrier b{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    b.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    b.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                      VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    const VkPipelineStageFlags stages =
        VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
    fn.vkCmdPipelineBarrier(cb, stages, stages, 0, 1, &b, 0, nullptr, 0, nullptr);
}

}  // namespace

VulkanEncoder::VulkanEncoder(std::shared_ptr<VulkanDevice> device)
    : device_(std::move(device)), profiled_(device_->profiling()) {
    const DeviceFunctions& fn = device_->fn();
    VkDevice dev = device_->handle();
    VkCommandPoolCreateInfo pi{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    pi.queueFamilyIndex = device_->physical().queue_family;
    VK_CALL(fn, vkCreateCommandPool, dev, &pi, nullptr, &pool_);
    try {
        VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
        ai.commandPool = pool_;
        ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
        ai.commandBufferCount = 1;
        VK_CALL(fn, vkAllocateCommandBuffers, dev, &ai, &cb_);
        // No one-time flag: the same recording may be submitted again.
        VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
        VK_CALL(fn, vkBeginCommandBuffer, cb_, &bi);
    } catch (...) {
        fn.vkDestroyCommandPool(dev, pool_, nullptr);
        throw;
    }
    // Writes of earlier submissions (kernels, uploads) before anything this one records.
    full_barrier(fn, cb_);
}

VulkanEncoder::~VulkanEncoder() {
    const DeviceFunctions& fn = device_->fn();
    for (VkQueryPool qp : query_pools_) fn.vkDestroyQueryPool(device_->handle(), qp, nullptr);
    fn.vkDestroyCommandPool(device_->handle(), pool_, nullptr);  // frees cb_
}

void VulkanEncoder::ensure_recording(const char* what) const {
    if (finished_)
        throw DeviceError(std::string(what) + ": this encoder was submitted and is closed; "
                          "record a new one (a submitted encoder can only be submitted again)");
}

VulkanBuffer& VulkanEncoder::use(Buffer& b, const char* what) {
    VulkanBuffer& vb = device_->own(b, what);
    if (seen_ids_.insert(vb.id()).second) buffer_ids_.push_back(vb.id());
    return vb;
}

void VulkanEncoder::write_timestamp(VkPipelineStageFlagBits stage) {
    const DeviceFunctions& fn = device_->fn();
    const uint32_t slot = queries_used_ % kQueriesPerPool;
    if (slot == 0) {
        VkQueryPoolCreateInfo qi{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
        qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
        qi.queryCount = kQueriesPerPool;
        VkQueryPool qp = VK_NULL_HANDLE;
        VK_CALL(fn, vkCreateQueryPool, device_->handle(), &qi, nullptr, &qp);
        query_pools_.push_back(qp);
        // Recorded, so every re-submission resets the pool before writing it again.
        fn.vkCmdResetQueryPool(cb_, qp, 0, kQueriesPerPool);
    }
    fn.vkCmdWriteTimestamp(cb_, stage, query_pools_.back(), slot);
    ++queries_used_;
}

void VulkanEncoder::dispatch(const StampInfo& stamp, const std::vector<Buffer*>& buffers,
                             const void* args, size_t args_bytes, uint32_t gx, uint32_t gy,
                             uint32_t gz) {
    const std::string what = std::string("dispatch of stamp '") + stamp.name + "'";
    ensure_recording(what.c_str());
    if (args_bytes != stamp.args_bytes)
        throw DeviceError(what + ": its arguments are " + std::to_string(stamp.args_bytes) +
                          " bytes, got " + std::to_string(args_bytes));
    const uint32_t groups[3] = {gx, gy, gz};
    const uint32_t* limit = device_->physical().max_groups;
    for (int d = 0; d < 3; ++d)
        if (groups[d] > limit[d])
            throw DeviceError(what + ": " + std::to_string(groups[d]) + " workgroups in dimension " +
                              "xyz"[d] + ", over the device's limit of " + std::to_string(limit[d]));
    std::vector<const VulkanBuffer*> bound;
    bound.reserve(buffers.size());
    for (Buffer* b : buffers) {
        if (!b) throw DeviceError(what + ": a null buffer");
        bound.push_back(&use(*b, what.c_str()));
    }
    const PipelineCache::Binding bind = device_->prepare_dispatch(stamp, bound);

    const DeviceFunctions& fn = device_->fn();
    fn.vkCmdBindPipeline(cb_, VK_PIPELINE_BIND_POINT_COMPUTE, bind.pipeline);
    if (bind.set)
        fn.vkCmdBindDescriptorSets(cb_, VK_PIPELINE_BIND_POINT_COMPUTE, bind.layout, 0, 1,
                                   &bind.set, 0, nullptr);
    if (bind.push_bytes) {
        // The push range is the argument size rounded up to whole words; pad with zeros.
        std::vector<unsigned char> block(bind.push_bytes, 0);
        if (args_bytes) std::memcpy(block.data(), args, args_bytes);
        fn.vkCmdPushConstants(cb_, bind.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, bind.push_bytes,
                              block.data());
    }
    if (profiled_) write_timestamp(VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT);
    fn.vkCmdDispatch(cb_, gx, gy, gz);
    if (profiled_) write_timestamp(VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT);
    stamps_.emplace_back(stamp.name);
}

void VulkanEncoder::barrier() {
    ensure_recording("barrier");
    full_barrier(device_->fn(), cb_);
}

void VulkanEncoder::copy(Buffer& src, size_t src_offset, Buffer& dst, size_t dst_offset,
                         size_t bytes) {
    ensure_recording("copy");
    VulkanBuffer& s = use(src, "copy");
    VulkanBuffer& d = use(dst, "copy");
    auto in_range = [](const Buffer& b, size_t off, size_t n) {
        return off <= b.size() && n <= b.size() - off;
    };
    if (!in_range(s, src_offset, bytes) || !in_range(d, dst_offset, bytes))
        throw ShapeError("copy of " + std::to_string(bytes) + " bytes from '" + s.label() + "' (" +
                         std::to_string(s.size()) + " bytes) at " + std::to_string(src_offset) +
                         " to '" + d.label() + "' (" + std::to_string(d.size()) + " bytes) at " +
                         std::to_string(dst_offset) + " falls outside a buffer");
    if (bytes == 0) return;
    VkBufferCopy region{src_offset, dst_offset, bytes};
    device_->fn().vkCmdCopyBuffer(cb_, s.handle(), d.handle(), 1, &region);
}

void VulkanEncoder::fill(Buffer& dst, size_t offset, size_t bytes, uint32_t word) {
    ensure_recording("fill");
    VulkanBuffer& d = use(dst, "fill");
    if (offset % 4 || bytes % 4)
        throw ShapeError("fill of '" + d.label() + "': offset " + std::to_string(offset) +
                         " and size " + std::to_string(bytes) + " must be multiples of 4");
    if (offset > d.size() || bytes > d.size() - offset)
        throw ShapeError("fill of " + std::to_string(bytes) + " bytes at " + std::to_string(offset) +
                         " falls outside '" + d.label() + "' (" + std::to_string(d.size()) + " bytes)");
    if (bytes == 0) return;
    device_->fn().vkCmdFillBuffer(cb_, d.handle(), offset, bytes, word);
}

void VulkanEncoder::finish() {
    if (finished_) return;
    const DeviceFunctions& fn = device_->fn();
    // Everything written, visible to the host once the fence is waited on (mapped buffers).
    VkMemoryBarrier b{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    b.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    b.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    fn.vkCmdPipelineBarrier(cb_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                            VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &b, 0, nullptr, 0, nullptr);
    VK_CALL(fn, vkEndCommandBuffer, cb_);
    finished_ = true;
}

std::vector<KernelTime> VulkanEncoder::read_times() const {
    std::vector<KernelTime> out;
    if (!profiled_ || queries_used_ == 0) return out;
    const DeviceFunctions& fn = device_->fn();
    std::vector<uint64_t> ticks(queries_used_);
    for (size_t p = 0; p < query_pools_.size(); ++p) {
        const uint32_t first = static_cast<uint32_t>(p) * kQueriesPerPool;
        const uint32_t n = std::min(kQueriesPerPool, queries_used_ - first);
        VK_CALL(fn, vkGetQueryPoolResults, device_->handle(), query_pools_[p], 0, n,
                n * sizeof(uint64_t), ticks.data() + first, sizeof(uint64_t),
                VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
    }
    const PhysicalDevice& pd = device_->physical();
    const uint64_t mask = pd.timestamp_valid_bits >= 64 ? ~uint64_t(0)
                                                        : (uint64_t(1) << pd.timestamp_valid_bits) - 1;
    out.reserve(stamps_.size());
    for (size_t i = 0; i < stamps_.size(); ++i) {
        const uint64_t elapsed = (ticks[2 * i + 1] - ticks[2 * i]) & mask;
        out.push_back({stamps_[i], static_cast<double>(elapsed) * pd.timestamp_period_ns / 1000.0});
    }
    return out;
}

std::unique_ptr<Encoder> VulkanDevice::encoder() {
    return std::make_unique<VulkanEncoder>(shared_from_this());
}

void VulkanDevice::submit(Encoder& enc) {
    auto* e = dynamic_cast<VulkanEncoder*>(&enc);
    if (!e || e->owner() != this)
        throw DeviceError("submit: the encoder belongs to another device than " + pd_.info.name);
    e->finish();
    std::lock_guard<std::mutex> lock(mutex_);
    for (uint64_t id : e->buffer_ids())
        if (!live_buffers_.count(id))
            throw DeviceError("submit: the encoder uses a buffer that has been destroyed since "
                              "it was recorded; record it again");
    check_submit_fault(pd_.info.name);
    submit_and_wait(e->command_buffer());
    if (e->profiled()) last_profile_ = e->read_times();
}

}  // namespace dasllama::gpu::vk

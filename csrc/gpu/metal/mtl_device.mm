// Device creation and lifetime, waiting on a command buffer, and the glue the encoder and
// buffers call back into.
#include "gpu/metal/mtl_device.h"

#include "core/errors.h"
#include "gpu/metal/mtl_memory.h"

namespace dasllama::gpu::mtl {

namespace {

const char* status_name(MTLCommandBufferStatus s) {
    switch (s) {
        case MTLCommandBufferStatusNotEnqueued: return "not enqueued";
        case MTLCommandBufferStatusEnqueued: return "enqueued";
        case MTLCommandBufferStatusCommitted: return "committed";
        case MTLCommandBufferStatusScheduled: return "scheduled";
        case MTLCommandBufferStatusCompleted: return "completed";
        case MTLCommandBufferStatusError: return "error";
    }
    return "unknown";
}

}  // namespace

std::string utf8(NSString* s) {
    const char* text = s ? s.UTF8String : nullptr;
    return text ? text : "";
}

std::string describe_error(NSError* error) {
    if (!error) return "no error details";
    return "code " + std::to_string(error.code) + ": " + utf8(error.localizedDescription);
}

MetalDevice::MetalDevice(id<MTLDevice> device, DeviceInfo info)
    : device_(device), info_(std::move(info)), queue_([device_ newCommandQueue]),
      pipelines_(device_, info_) {
    if (!queue_) throw DeviceError("cannot open " + info_.name + ": Metal gave no command queue");
    queue_.label = @"dasllama";
}

// Every submit and transfer waits for its command buffer, so nothing is in flight here; ARC
// releases the queue, pipelines and buffers.
MetalDevice::~MetalDevice() = default;

std::string MetalDevice::commit_and_wait(id<MTLCommandBuffer> cb, const std::string& what) const {
    [cb commit];
    [cb waitUntilCompleted];
    const MTLCommandBufferStatus status = cb.status;
    if (status == MTLCommandBufferStatusCompleted) return "";
    return what + " failed on " + info_.name + ": command buffer status '" + status_name(status) +
           "' (" + describe_error(cb.error) + ")";
}

id<MTLComputePipelineState> MetalDevice::pipeline(const StampInfo& stamp) {
    std::lock_guard<std::mutex> lock(mutex_);
    return pipelines_.get(stamp);
}

void MetalDevice::on_buffer_destroyed(uint64_t serial) {
    std::lock_guard<std::mutex> lock(mutex_);
    live_buffers_.erase(serial);
}

MetalBuffer& MetalDevice::own(Buffer& b, const char* what) const {
    auto* mb = dynamic_cast<MetalBuffer*>(&b);
    if (!mb || mb->owner() != this)
        throw DeviceError(std::string(what) + ": the buffer belongs to another device than " +
                          info_.name);
    return *mb;
}

void MetalDevice::set_profiling(bool on) {
    if (on)
        throw DeviceError(info_.name + ": per-kernel timing is not supported on Metal in this "
                          "build (no MTLCounterSampleBuffer timing); profile on Vulkan instead");
}

std::shared_ptr<Device> open_logical_device(id<MTLDevice> device, const DeviceInfo& info) {
    return std::make_shared<MetalDevice>(device, info);
}

}  // namespace dasllama::gpu::mtl

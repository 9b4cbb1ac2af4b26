// A Metal device: one command queue, the pipeline cache, the staging buffer for transfers, and
// submission. Its members are defined by concern: mtl_device.mm (creation, lifetime, waiting on
// a command buffer), mtl_memory.mm (buffers, upload, download), mtl_encoder.mm (encoders,
// submit). Objective-C++: included by the home's .mm files only.
#pragma once

#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "gpu/device.h"
#include "gpu/metal/mtl_pipelines.h"

namespace dasllama::gpu::mtl {

// setBytes:length:atIndex: copies at most 4 KiB; the argument block travels that way.
constexpr size_t kMaxArgsBytes = 4096;
// The argument block's buffer slot: GK_MSL_ARGS_SLOT in shaders/gk/gk_msl.h (a test checks that
// the two agree). Storage buffers take slots 0..n-1 below it.
constexpr uint32_t kArgsSlot = 30;

class MetalBuffer;

// The UTF-8 text of `s` ("" for nil).
std::string utf8(NSString* s);
// "code N: description" of a Metal error ("no error details" for nil).
std::string describe_error(NSError* error);

class MetalDevice final : public Device, public std::enable_shared_from_this<MetalDevice> {
public:
    MetalDevice(id<MTLDevice> device, DeviceInfo info);
    ~MetalDevice() override;

    const DeviceInfo& info() const override { return info_; }
    std::unique_ptr<Buffer> alloc(size_t bytes, const char* label) override;
    std::unique_ptr<Buffer> alloc_host(size_t bytes, const char* label) override;
    void upload(Buffer& dst, size_t offset, const void* src, size_t bytes) override;
    void download(Buffer& src, size_t offset, void* dst, size_t bytes) override;
    std::unique_ptr<Encoder> encoder() override;
    void submit(Encoder& enc) override;
    // Per-kernel timing would need MTLCounterSampleBuffer at stage boundaries (one pass per
    // dispatch on Apple GPUs); it is not implemented: turning profiling on throws DeviceError.
    void set_profiling(bool on) override;
    bool profiling() const override { return false; }
    std::vector<KernelTime> last_profile() const override { return {}; }

    // For the encoder and buffers of this device.
    id<MTLDevice> handle() const { return device_; }
    // The pipeline of `stamp`, compiled from its MSL on first use (see PipelineCache).
    id<MTLComputePipelineState> pipeline(const StampInfo& stamp);
    void on_buffer_destroyed(uint64_t serial);
    // The buffer of this device behind `b`, or DeviceError naming `what`.
    MetalBuffer& own(Buffer& b, const char* what) const;

private:
    std::unique_ptr<Buffer> make_buffer(size_t bytes, bool host, const char* label);
    void ensure_staging(size_t bytes);
    // One blit between two buffers in its own command buffer, waited for (mutex held).
    void blit_and_wait(id<MTLBuffer> src, size_t src_offset, id<MTLBuffer> dst, size_t dst_offset,
                       size_t bytes, const std::string& what);
    // Commit `cb` and wait for it: "" when it completed, else why not, naming `what`. Returns
    // instead of throwing so callers can throw outside their @autoreleasepool.
    std::string commit_and_wait(id<MTLCommandBuffer> cb, const std::string& what) const;

    id<MTLDevice> device_;
    DeviceInfo info_;
    id<MTLCommandQueue> queue_;
    PipelineCache pipelines_;
    id<MTLBuffer> staging_;  // shared storage, grown on demand

    // Guards the queue's use, the staging buffer, the pipeline cache and live_buffers_.
    mutable std::mutex mutex_;
    std::unordered_set<uint64_t> live_buffers_;
};

// Throws DeviceError when Metal gives no command queue.
std::shared_ptr<Device> open_logical_device(id<MTLDevice> device, const DeviceInfo& info);

}  // namespace dasllama::gpu::mtl

// An Encoder on Metal. A Metal command buffer runs once (a committed MTLCommandBuffer cannot be
// committed again) while an Encoder may be submitted any number of times, so the encoder records
// its commands on the host (pipeline, buffers, argument bytes and grid per dispatch; barriers;
// copies; fills) and each submit encodes them into a fresh command buffer. Pipelines are compiled
// while recording, so a stamp that does not compile fails at dispatch(), naming it.
// Objective-C++: included by the home's .mm files only.
#pragma once

#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "gpu/device.h"

namespace dasllama::gpu::mtl {

class MetalDevice;
class MetalBuffer;

class MetalEncoder final : public Encoder {
public:
    explicit MetalEncoder(std::shared_ptr<MetalDevice> device);

    void dispatch(const StampInfo& stamp, const std::vector<Buffer*>& buffers, const void* args,
                  size_t args_bytes, uint32_t gx, uint32_t gy, uint32_t gz) override;
    using Encoder::dispatch;
    void barrier() override;
    void copy(Buffer& src, size_t src_offset, Buffer& dst, size_t dst_offset,
              size_t bytes) override;
    void fill(Buffer& dst, size_t offset, size_t bytes, uint32_t word) override;
    size_t dispatches() const override { return stamps_.size(); }

    // For MetalDevice::submit.
    const MetalDevice* owner() const { return device_.get(); }
    void close() { closed_ = true; }  // later recording throws, as on Vulkan
    const std::vector<uint64_t>& buffer_serials() const { return buffer_serials_; }
    // Encode every recorded command into `cb`; "" on success, else why not.
    std::string encode(id<MTLCommandBuffer> cb) const;
    // "N dispatches (stamps a, b, ...)", for labels and error messages.
    std::string describe() const;

private:
    enum class Kind { dispatch, barrier, copy, fill };
    struct Command {
        Kind kind = Kind::barrier;
        id<MTLComputePipelineState> pipeline = nil;  // dispatch
        std::vector<id<MTLBuffer>> buffers;  // dispatch: bindings 0..n-1; copy: src, dst; fill: dst
        std::vector<uint8_t> args;           // dispatch: the argument block, whole words
        MTLSize groups = {0, 0, 0}, threads = {0, 0, 0};
        size_t src_offset = 0, dst_offset = 0, bytes = 0;  // copy, fill (dst_offset)
        uint8_t byte = 0;                                  // fill
    };

    MetalBuffer& use(Buffer& b, const char* what);
    void ensure_recording(const char* what) const;
    // A shared buffer of kPatternBytes holding `word` repeated (for fills of mixed bytes).
    id<MTLBuffer> pattern(uint32_t word);

    std::shared_ptr<MetalDevice> device_;
    std::vector<Command> commands_;
    bool closed_ = false;
    std::vector<std::string> stamps_;  // one per dispatch
    std::vector<uint64_t> buffer_serials_;
    std::unordered_set<uint64_t> seen_serials_;
    std::unordered_map<uint32_t, id<MTLBuffer>> patterns_;
};

}  // namespace dasllama::gpu::mtl

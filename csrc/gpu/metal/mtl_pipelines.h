// Compute pipelines. A stamp's kernel is MSL text embedded at build time (shaders/stamp.py); the
// Metal driver compiles it into a library on first use, and the pipeline is cached by stamp name
// for the device's life. The kernel function is named after the stamp's template (GK_KERNEL's
// first argument is the template name; a test checks every stamp). Threadgroup memory is
// declared inside each kernel (gk_msl.h), so no pipeline needs threadgroup-memory bindings.
// Not thread-safe: the owning device calls it under its lock.
#pragma once

#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <string>
#include <unordered_map>

#include "gpu/device.h"

namespace dasllama::gpu::mtl {

class PipelineCache {
public:
    PipelineCache(id<MTLDevice> device, const DeviceInfo& info);
    PipelineCache(const PipelineCache&) = delete;
    PipelineCache& operator=(const PipelineCache&) = delete;

    // Throws DeviceError naming the stamp for a stamp without MSL, a compile error (with the
    // compiler's log), a missing kernel function, or a pipeline that cannot run the stamp's
    // threadgroup size on this device.
    id<MTLComputePipelineState> get(const StampInfo& stamp);
    size_t size() const { return pipelines_.size(); }

private:
    id<MTLComputePipelineState> compile(const StampInfo& stamp, std::string& error);

    id<MTLDevice> device_;
    const DeviceInfo& info_;
    MTLCompileOptions* options_;
    std::unordered_map<std::string, id<MTLComputePipelineState>> pipelines_;
};

}  // namespace dasllama::gpu::mtl

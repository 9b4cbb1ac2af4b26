// Compiling a stamp's MSL into a compute pipeline, once per stamp and device.
#include "gpu/metal/mtl_pipelines.h"

#include "core/errors.h"
#include "gpu/metal/mtl_device.h"

namespace dasllama::gpu::mtl {

PipelineCache::PipelineCache(id<MTLDevice> device, const DeviceInfo& info)
    : device_(device), info_(info), options_([MTLCompileOptions new]) {
    // The stamps are MSL 2.4 (gk_msl.h). Results that both homes must round alike rely on no
    // fast math (DESIGN.md). Before macOS 15 one switch says so; from macOS 15 it is mathMode,
    // and the precise library functions, which fastMathEnabled = NO implied, are a second one.
    if (@available(macOS 12.0, *)) {
        options_.languageVersion = MTLLanguageVersion2_4;
    } else {
        throw DeviceError(info_.name + ": the Metal home needs macOS 12 or later (MSL 2.4)");
    }
    if (@available(macOS 15.0, *)) {
        options_.mathMode = MTLMathModeSafe;
        options_.mathFloatingPointFunctions = MTLMathFloatingPointFunctionsPrecise;
    } else {
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wdeprecated-declarations"
        options_.fastMathEnabled = NO;
#pragma clang diagnostic pop
    }
}

id<MTLComputePipelineState> PipelineCache::get(const StampInfo& stamp) {
    auto it = pipelines_.find(stamp.name);
    if (it != pipelines_.end()) return it->second;
    std::string error;
    id<MTLComputePipelineState> pipeline = compile(stamp, error);
    if (!pipeline)
        throw DeviceError("stamp '" + std::string(stamp.name) + "' on " + info_.name + ": " + error);
    pipelines_.emplace(stamp.name, pipeline);
    return pipeline;
}

id<MTLComputePipelineState> PipelineCache::compile(const StampInfo& stamp, std::string& error) {
    if (!stamp.msl) {
        error = "this build embedded no MSL for it (shaders/stamps.txt lists no metal home)";
        return nil;
    }
    @autoreleasepool {
        NSString* source = [NSString stringWithUTF8String:stamp.msl];
        NSString* entry = [NSString stringWithUTF8String:stamp.family];
        if (!source || !entry) {
            error = "its MSL text or template name is not valid UTF-8";
            return nil;
        }
        // A library may come back with an error that holds only warnings: nil alone is failure.
        NSError* ns_error = nil;
        id<MTLLibrary> library = [device_ newLibraryWithSource:source options:options_
                                                          error:&ns_error];
        if (!library) {
            error = "the Metal compiler rejected its MSL: " + describe_error(ns_error);
            return nil;
        }
        id<MTLFunction> function = [library newFunctionWithName:entry];
        if (!function) {
            std::string names;
            NSArray<NSString*>* all = library.functionNames;
            for (NSUInteger i = 0; i < all.count; ++i)
                names += (names.empty() ? "" : ", ") + utf8(all[i]);
            error = "its MSL has no kernel '" + std::string(stamp.family) + "' (it has: " +
                    (names.empty() ? "none" : names) + ")";
            return nil;
        }
        ns_error = nil;
        id<MTLComputePipelineState> pipeline =
            [device_ newComputePipelineStateWithFunction:function error:&ns_error];
        if (!pipeline) {
            error = "no compute pipeline for kernel '" + std::string(stamp.family) +
                    "': " + describe_error(ns_error);
            return nil;
        }
        // A kernel's register and threadgroup-memory use can lower this below the device's
        // 1024; dispatching more threads than it allows is an error Metal does not forgive.
        if (pipeline.maxTotalThreadsPerThreadgroup < stamp.wg_size) {
            error = "it needs " + std::to_string(stamp.wg_size) +
                    " threads per threadgroup; its pipeline allows at most " +
                    std::to_string(pipeline.maxTotalThreadsPerThreadgroup);
            return nil;
        }
        return pipeline;
    }
}

}  // namespace dasllama::gpu::mtl

// A stand-in for Apple's <Metal/Metal.h> so clang++ can check the Metal home (csrc/gpu/metal/*.mm)
// for syntax and types off Apple platforms. It declares only the Metal API the home uses, with
// the signatures, nullability and enum values of the SDK headers (MTLDevice.h, MTLResource.h,
// MTLBuffer.h, MTLLibrary.h, MTLComputePipeline.h, MTLCommandQueue.h, MTLCommandBuffer.h,
// MTLCommandEncoder.h, MTLComputeCommandEncoder.h, MTLBlitCommandEncoder.h, MTLTypes.h); nothing
// here runs or links. A call the SDK does not declare, or with other argument types, fails here.
#pragma once

#import <Foundation/Foundation.h>

NS_ASSUME_NONNULL_BEGIN

// --- MTLTypes.h ---
typedef struct {
    NSUInteger width, height, depth;
} MTLSize;

static inline MTLSize MTLSizeMake(NSUInteger width, NSUInteger height, NSUInteger depth) {
    MTLSize size;
    size.width = width;
    size.height = height;
    size.depth = depth;
    return size;
}

// --- MTLResource.h ---
typedef NS_ENUM(NSUInteger, MTLCPUCacheMode) {
    MTLCPUCacheModeDefaultCache = 0,
    MTLCPUCacheModeWriteCombined = 1,
};

typedef NS_ENUM(NSUInteger, MTLStorageMode) {
    MTLStorageModeShared = 0,
    MTLStorageModeManaged = 1,
    MTLStorageModePrivate = 2,
    MTLStorageModeMemoryless = 3,
};

typedef NS_ENUM(NSUInteger, MTLHazardTrackingMode) {
    MTLHazardTrackingModeDefault = 0,
    MTLHazardTrackingModeUntracked = 1,
    MTLHazardTrackingModeTracked = 2,
};

#define MTLResourceCPUCacheModeShift 0
#define MTLResourceStorageModeShift 4
#define MTLResourceHazardTrackingModeShift 8

typedef NS_OPTIONS(NSUInteger, MTLResourceOptions) {
    MTLResourceCPUCacheModeDefaultCache =
        MTLCPUCacheModeDefaultCache << MTLResourceCPUCacheModeShift,
    MTLResourceCPUCacheModeWriteCombined =
        MTLCPUCacheModeWriteCombined << MTLResourceCPUCacheModeShift,
    MTLResourceStorageModeShared = MTLStorageModeShared << MTLResourceStorageModeShift,
    MTLResourceStorageModePrivate = MTLStorageModePrivate << MTLResourceStorageModeShift,
    MTLResourceHazardTrackingModeDefault =
        MTLHazardTrackingModeDefault << MTLResourceHazardTrackingModeShift,
    MTLResourceHazardTrackingModeUntracked =
        MTLHazardTrackingModeUntracked << MTLResourceHazardTrackingModeShift,
    MTLResourceHazardTrackingModeTracked =
        MTLHazardTrackingModeTracked << MTLResourceHazardTrackingModeShift,
};

@protocol MTLResource <NSObject>
@property (nullable, copy, atomic) NSString* label;
@property (readonly) MTLStorageMode storageMode;
@end

// --- MTLBuffer.h ---
@protocol MTLBuffer <MTLResource>
@property (readonly) NSUInteger length;
- (void*)contents NS_RETURNS_INNER_POINTER;
@end

// --- MTLLibrary.h ---
typedef NS_ENUM(NSUInteger, MTLLanguageVersion) {
    MTLLanguageVersion2_3 = (2 << 16) + 3,
    MTLLanguageVersion2_4 = (2 << 16) + 4,
};

typedef NS_ENUM(NSInteger, MTLMathMode) {
    MTLMathModeSafe = 0,
    MTLMathModeRelaxed = 1,
    MTLMathModeFast = 2,
};

typedef NS_ENUM(NSInteger, MTLMathFloatingPointFunctions) {
    MTLMathFloatingPointFunctionsFast = 0,
    MTLMathFloatingPointFunctionsPrecise = 1,
};

@interface MTLCompileOptions : NSObject <NSCopying>
@property (readwrite, nonatomic) BOOL fastMathEnabled;  // deprecated from macOS 15 for mathMode
@property (readwrite, nonatomic) MTLMathMode mathMode;  // macOS 15
@property (nonatomic) MTLMathFloatingPointFunctions mathFloatingPointFunctions;  // macOS 15
@property (readwrite, nonatomic) MTLLanguageVersion languageVersion;
@end

@protocol MTLFunction <NSObject>
@property (readonly) NSString* name;
@end

@protocol MTLLibrary <NSObject>
@property (nullable, copy, atomic) NSString* label;
- (nullable id<MTLFunction>)newFunctionWithName:(NSString*)functionName;
@property (readonly) NSArray<NSString*>* functionNames;
@end

// --- MTLComputePipeline.h ---
@protocol MTLComputePipelineState <NSObject>
@property (readonly) NSUInteger maxTotalThreadsPerThreadgroup;
@property (readonly) NSUInteger threadExecutionWidth;
@property (readonly) NSUInteger staticThreadgroupMemoryLength;
@end

// --- MTLCommandEncoder.h ---
@protocol MTLCommandEncoder <NSObject>
@property (nullable, copy, atomic) NSString* label;
- (void)endEncoding;
@end

// --- MTLComputeCommandEncoder.h, MTLCommandBuffer.h (MTLDispatchType) ---
typedef NS_OPTIONS(NSUInteger, MTLBarrierScope) {
    MTLBarrierScopeBuffers = 1 << 0,
    MTLBarrierScopeTextures = 1 << 1,
    MTLBarrierScopeRenderTargets = 1 << 2,
};

typedef NS_ENUM(NSUInteger, MTLDispatchType) {
    MTLDispatchTypeSerial,
    MTLDispatchTypeConcurrent,
};

@protocol MTLComputeCommandEncoder <MTLCommandEncoder>
@property (readonly) MTLDispatchType dispatchType;
- (void)setComputePipelineState:(id<MTLComputePipelineState>)state;
- (void)setBytes:(const void*)bytes length:(NSUInteger)length atIndex:(NSUInteger)index;
- (void)setBuffer:(nullable id<MTLBuffer>)buffer
           offset:(NSUInteger)offset
          atIndex:(NSUInteger)index;
- (void)dispatchThreadgroups:(MTLSize)threadgroupsPerGrid
       threadsPerThreadgroup:(MTLSize)threadsPerThreadgroup;
- (void)memoryBarrierWithScope:(MTLBarrierScope)scope;
@end

// --- MTLBlitCommandEncoder.h ---
@protocol MTLBlitCommandEncoder <MTLCommandEncoder>
- (void)copyFromBuffer:(id<MTLBuffer>)sourceBuffer
          sourceOffset:(NSUInteger)sourceOffset
              toBuffer:(id<MTLBuffer>)destinationBuffer
     destinationOffset:(NSUInteger)destinationOffset
                  size:(NSUInteger)size;
- (void)fillBuffer:(id<MTLBuffer>)buffer range:(NSRange)range value:(uint8_t)value;
@end

// --- MTLCommandBuffer.h ---
typedef NS_ENUM(NSUInteger, MTLCommandBufferStatus) {
    MTLCommandBufferStatusNotEnqueued = 0,
    MTLCommandBufferStatusEnqueued = 1,
    MTLCommandBufferStatusCommitted = 2,
    MTLCommandBufferStatusScheduled = 3,
    MTLCommandBufferStatusCompleted = 4,
    MTLCommandBufferStatusError = 5,
};

@protocol MTLCommandBuffer <NSObject>
@property (nullable, copy, atomic) NSString* label;
- (void)commit;
- (void)waitUntilCompleted;
@property (readonly) MTLCommandBufferStatus status;
@property (nullable, readonly) NSError* error;
- (nullable id<MTLBlitCommandEncoder>)blitCommandEncoder;
- (nullable id<MTLComputeCommandEncoder>)computeCommandEncoder;
- (nullable id<MTLComputeCommandEncoder>)computeCommandEncoderWithDispatchType:
    (MTLDispatchType)dispatchType;
@end

// --- MTLCommandQueue.h ---
@protocol MTLCommandQueue <NSObject>
@property (nullable, copy, atomic) NSString* label;
- (nullable id<MTLCommandBuffer>)commandBuffer;
@end

// --- MTLDevice.h ---
typedef NS_ENUM(NSInteger, MTLGPUFamily) {
    MTLGPUFamilyApple1 = 1001,
    MTLGPUFamilyApple2 = 1002,
    MTLGPUFamilyApple3 = 1003,
    MTLGPUFamilyApple4 = 1004,
    MTLGPUFamilyApple5 = 1005,
    MTLGPUFamilyApple6 = 1006,
    MTLGPUFamilyApple7 = 1007,
    MTLGPUFamilyMac2 = 2002,
};

@protocol MTLDevice <NSObject>
@property (nonnull, readonly) NSString* name;
@property (readonly) uint64_t registryID;
@property (readonly, getter=isLowPower) BOOL lowPower;
@property (readonly) BOOL hasUnifiedMemory;
@property (readonly) uint64_t recommendedMaxWorkingSetSize;
@property (readonly) NSUInteger maxThreadgroupMemoryLength;
@property (readonly) NSUInteger maxBufferLength;
@property (readonly) MTLSize maxThreadsPerThreadgroup;
- (nullable id<MTLCommandQueue>)newCommandQueue;
- (nullable id<MTLBuffer>)newBufferWithLength:(NSUInteger)length
                                      options:(MTLResourceOptions)options;
- (nullable id<MTLLibrary>)newLibraryWithSource:(NSString*)source
                                        options:(nullable MTLCompileOptions*)options
                                          error:(__autoreleasing NSError**)error;
- (nullable id<MTLComputePipelineState>)
    newComputePipelineStateWithFunction:(id<MTLFunction>)computeFunction
                                  error:(__autoreleasing NSError**)error;
- (BOOL)supportsFamily:(MTLGPUFamily)gpuFamily;
@end

// The SDK writes __nullable, Apple's <sys/cdefs.h> spelling of _Nullable (glibc's differs).
extern "C" id<MTLDevice> _Nullable MTLCreateSystemDefaultDevice(void) NS_RETURNS_RETAINED;
extern "C" NSArray<id<MTLDevice>>* MTLCopyAllDevices(void) NS_RETURNS_RETAINED;

NS_ASSUME_NONNULL_END

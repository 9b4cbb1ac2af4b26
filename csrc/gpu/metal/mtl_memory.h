// Device memory: one MTLBuffer per allocation. Device-local buffers use private storage (GPU
// only; the CPU reaches them through a shared staging buffer and blits); host-visible ones use
// shared storage and stay mapped. Objective-C++: included by the home's .mm files only.
#pragma once

#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <cstdint>
#include <memory>
#include <string>

#include "gpu/device.h"

namespace dasllama::gpu::mtl {

class MetalDevice;

// A buffer of at least `bytes` (rounded up to whole words); throws DeviceError naming the size
// and the label when Metal cannot give it.
id<MTLBuffer> allocate(id<MTLDevice> device, const DeviceInfo& info, size_t bytes, bool host,
                       const char* label);

class MetalBuffer final : public Buffer {
public:
    MetalBuffer(std::shared_ptr<MetalDevice> owner, id<MTLBuffer> buffer, size_t bytes, bool host,
                std::string label, uint64_t serial);
    ~MetalBuffer() override;
    size_t size() const override { return bytes_; }
    void* mapped() override { return mapped_; }

    id<MTLBuffer> handle() const { return buffer_; }
    const std::string& label() const { return label_; }
    // Unique for the life of the process (an encoder checks its buffers are still alive).
    uint64_t serial() const { return serial_; }
    const MetalDevice* owner() const { return owner_.get(); }

private:
    std::shared_ptr<MetalDevice> owner_;
    id<MTLBuffer> buffer_;
    size_t bytes_;     // as asked for
    void* mapped_;     // shared storage's contents, nullptr for private storage
    std::string label_;
    uint64_t serial_;
};

}  // namespace dasllama::gpu::mtl

// Buffers and transfers: allocation with errors that name the size and label, and synchronous
// upload/download through a reusable shared staging buffer and a blit.
#include "gpu/metal/mtl_memory.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "core/errors.h"
#include "gpu/metal/mtl_device.h"

namespace dasllama::gpu::mtl {

namespace {

// Transfers larger than this go through the staging buffer in pieces.
constexpr size_t kStagingMaxBytes = size_t(64) << 20;
constexpr size_t kStagingMinBytes = size_t(1) << 20;

std::atomic<uint64_t> next_serial{1};

std::string mib(uint64_t bytes) {
    return std::to_string(bytes) + " bytes (" + std::to_string((bytes + (1u << 19)) >> 20) +
           " MiB)";
}

void check_range(const Buffer& b, size_t offset, size_t bytes, const std::string& what) {
    if (offset > b.size() || bytes > b.size() - offset)
        throw ShapeError(what + ": bytes [" + std::to_string(offset) + ", " +
                         std::to_string(offset) + " + " + std::to_string(bytes) +
                         ") fall outside a buffer of " + std::to_string(b.size()) + " bytes");
}

}  // namespace

id<MTLBuffer> allocate(id<MTLDevice> device, const DeviceInfo& info, size_t bytes, bool host,
                       const char* label) {
    const std::string what = std::string(host ? "shared" : "private") + " buffer '" +
                             (label ? label : "") + "' of " + mib(bytes) + " on " + info.name;
    // Metal has no empty buffers, and fills work in whole words: round up to 4 bytes.
    const size_t length = std::max<size_t>(4, (bytes + 3) & ~size_t(3));
    if (length > info.max_allocation_bytes)
        throw DeviceError("cannot allocate " + what + ": Metal allocates at most " +
                          mib(info.max_allocation_bytes) + " at once (maxBufferLength)");
    // Hazard tracking stays on (it is the default for buffers; said here because the encoder
    // relies on it): Metal orders the passes of one command buffer that touch the same buffer.
    const MTLResourceOptions options =
        (host ? MTLResourceStorageModeShared | MTLResourceCPUCacheModeDefaultCache
              : MTLResourceStorageModePrivate) |
        MTLResourceHazardTrackingModeTracked;
    id<MTLBuffer> buffer = [device newBufferWithLength:length options:options];
    if (!buffer)
        throw DeviceError("cannot allocate " + what + ": Metal returned no buffer (out of memory)");
    if (label) buffer.label = [NSString stringWithUTF8String:label];
    return buffer;
}

MetalBuffer::MetalBuffer(std::shared_ptr<MetalDevice> owner, id<MTLBuffer> buffer, size_t bytes,
                         bool host, std::string label, uint64_t serial)
    : owner_(std::move(owner)), buffer_(buffer), bytes_(bytes),
      mapped_(host ? [buffer contents] : nullptr), label_(std::move(label)), serial_(serial) {}

MetalBuffer::~MetalBuffer() { owner_->on_buffer_destroyed(serial_); }

std::unique_ptr<Buffer> MetalDevice::make_buffer(size_t bytes, bool host, const char* label) {
    id<MTLBuffer> buffer = allocate(device_, info_, bytes, host, label);
    const uint64_t serial = next_serial.fetch_add(1);
    {
        std::lock_guard<std::mutex> lock(mutex_);
        live_buffers_.insert(serial);
    }
    return std::make_unique<MetalBuffer>(shared_from_this(), buffer, bytes, host,
                                         label ? label : "", serial);
}

std::unique_ptr<Buffer> MetalDevice::alloc(size_t bytes, const char* label) {
    return make_buffer(bytes, false, label);
}

std::unique_ptr<Buffer> MetalDevice::alloc_host(size_t bytes, const char* label) {
    return make_buffer(bytes, true, label);
}

void MetalDevice::ensure_staging(size_t bytes) {
    const size_t have = staging_ ? size_t(staging_.length) : 0;
    if (have >= bytes) return;
    size_t want = std::max(kStagingMinBytes, have * 2);
    while (want < bytes) want *= 2;
    want = std::min(want, kStagingMaxBytes);
    staging_ = nil;  // release the old one before asking for the new
    staging_ = allocate(device_, info_, std::max(want, bytes), true, "staging");
}

void MetalDevice::blit_and_wait(id<MTLBuffer> src, size_t src_offset, id<MTLBuffer> dst,
                                size_t dst_offset, size_t bytes, const std::string& what) {
    std::string error;
    @autoreleasepool {
        id<MTLCommandBuffer> cb = [queue_ commandBuffer];
        id<MTLBlitCommandEncoder> blit = cb ? [cb blitCommandEncoder] : nil;
        if (!blit) {
            error = what + " on " + info_.name + ": Metal gave no command buffer or blit encoder";
        } else {
            [blit copyFromBuffer:src sourceOffset:src_offset toBuffer:dst
                 destinationOffset:dst_offset size:bytes];
            [blit endEncoding];
            error = commit_and_wait(cb, what);
        }
    }
    if (!error.empty()) throw DeviceError(error);
}

// Blits on macOS move whole words (offsets and sizes multiples of 4), so a transfer to or from
// private storage is widened to the words it touches, [lo, hi): buffers are allocated in whole
// words, so hi stays inside. An upload piece whose ends fall inside a word first reads that
// piece back, so the bytes around the caller's range survive.
void MetalDevice::upload(Buffer& dst, size_t offset, const void* src, size_t bytes) {
    MetalBuffer& d = own(dst, "upload");
    const std::string what = "upload to '" + d.label() + "'";
    check_range(d, offset, bytes, what);
    if (bytes == 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    if (void* p = d.mapped()) {  // shared storage; no GPU work is in flight (submits wait)
        std::memcpy(static_cast<char*>(p) + offset, src, bytes);
        return;
    }
    const size_t lo = offset & ~size_t(3), hi = (offset + bytes + 3) & ~size_t(3);
    ensure_staging(std::min(hi - lo, kStagingMaxBytes));
    const size_t room = staging_.length & ~size_t(3);
    char* staging = static_cast<char*>([staging_ contents]);
    const char* from = static_cast<const char*>(src);
    for (size_t at = lo; at < hi;) {
        const size_t n = std::min(hi - at, room);
        const size_t first = std::max(at, offset), last = std::min(at + n, offset + bytes);
        if (first != at || last != at + n) blit_and_wait(d.handle(), at, staging_, 0, n, what);
        std::memcpy(staging + (first - at), from + (first - offset), last - first);
        blit_and_wait(staging_, 0, d.handle(), at, n, what);
        at += n;
    }
}

void MetalDevice::download(Buffer& src, size_t offset, void* dst, size_t bytes) {
    MetalBuffer& s = own(src, "download");
    const std::string what = "download from '" + s.label() + "'";
    check_range(s, offset, bytes, what);
    if (bytes == 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    if (const void* p = s.mapped()) {
        std::memcpy(dst, static_cast<const char*>(p) + offset, bytes);
        return;
    }
    const size_t lo = offset & ~size_t(3), hi = (offset + bytes + 3) & ~size_t(3);
    ensure_staging(std::min(hi - lo, kStagingMaxBytes));
    const size_t room = staging_.length & ~size_t(3);
    const char* staging = static_cast<const char*>([staging_ contents]);
    char* to = static_cast<char*>(dst);
    for (size_t at = lo; at < hi;) {
        const size_t n = std::min(hi - at, room);
        const size_t first = std::max(at, offset), last = std::min(at + n, offset + bytes);
        blit_and_wait(s.handle(), at, staging_, 0, n, what);
        std::memcpy(to + (first - offset), staging + (first - at), last - first);
        at += n;
    }
}

}  // namespace dasllama::gpu::mtl

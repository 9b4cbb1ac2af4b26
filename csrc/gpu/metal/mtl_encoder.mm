// Recording dispatches, barriers, copies and fills; encoding them into a command buffer and
// submitting it.
//
// Barriers. Dispatches go into a compute pass opened with MTLDispatchTypeConcurrent, and
// barrier() becomes memoryBarrierWithScope:MTLBarrierScopeBuffers. That is the Encoder contract
// as written (dispatches with no barrier between them may overlap; a barrier orders all buffer
// writes before it against all accesses after it) and the placement the Vulkan home already
// needs, so the two homes synchronise at the same points. A serial pass would make every
// barrier implicit and every pair of dispatches ordered, hiding a missing barrier on Metal that
// Vulkan would expose. Copies and fills go into blit passes; between passes Metal orders the
// work on hazard-tracked buffers (every buffer of this home is tracked, see mtl_memory.mm), and
// a barrier also closes an open blit pass so the next command starts a new one.
#include "gpu/metal/mtl_encoder.h"

#include <algorithm>
#include <cstring>

#include "core/errors.h"
#include "gpu/metal/mtl_device.h"
#include "gpu/metal/mtl_memory.h"

namespace dasllama::gpu::mtl {

namespace {

// Fills whose word is not one repeated byte are copies from a pattern buffer of this size.
constexpr size_t kPatternBytes = size_t(64) << 10;

bool in_range(const Buffer& b, size_t offset, size_t bytes) {
    return offset <= b.size() && bytes <= b.size() - offset;
}

}  // namespace

MetalEncoder::MetalEncoder(std::shared_ptr<MetalDevice> device) : device_(std::move(device)) {}

void MetalEncoder::ensure_recording(const char* what) const {
    if (closed_)
        throw DeviceError(std::string(what) + ": this encoder was submitted and is closed; "
                          "record a new one (a submitted encoder can only be submitted again)");
}

MetalBuffer& MetalEncoder::use(Buffer& b, const char* what) {
    MetalBuffer& mb = device_->own(b, what);
    if (seen_serials_.insert(mb.serial()).second) buffer_serials_.push_back(mb.serial());
    return mb;
}

void MetalEncoder::dispatch(const StampInfo& stamp, const std::vector<Buffer*>& buffers,
                            const void* args, size_t args_bytes, uint32_t gx, uint32_t gy,
                            uint32_t gz) {
    const std::string what = std::string("dispatch of stamp '") + stamp.name + "'";
    ensure_recording(what.c_str());
    if (args_bytes != stamp.args_bytes)
        throw DeviceError(what + ": its arguments are " + std::to_string(stamp.args_bytes) +
                          " bytes, got " + std::to_string(args_bytes));
    if (args_bytes > kMaxArgsBytes)
        throw DeviceError(what + ": " + std::to_string(args_bytes) + " bytes of arguments, over "
                          "the " + std::to_string(kMaxArgsBytes) + " that setBytes carries");
    if (buffers.size() != stamp.n_buffers || stamp.n_buffers > kArgsSlot)
        throw DeviceError(what + ": it binds " + std::to_string(stamp.n_buffers) +
                          " buffers (slots below " + std::to_string(kArgsSlot) + "), got " +
                          std::to_string(buffers.size()));
    Command c;
    c.kind = Kind::dispatch;
    for (Buffer* b : buffers) {
        if (!b) throw DeviceError(what + ": a null buffer");
        c.buffers.push_back(use(*b, what.c_str()).handle());
    }
    c.pipeline = device_->pipeline(stamp);
    // The argument block in whole words, at least one: the kernel declares it, so slot 30 must
    // be bound even for an empty block.
    c.args.assign(std::max<size_t>(4, (args_bytes + 3) & ~size_t(3)), 0);
    if (args_bytes) std::memcpy(c.args.data(), args, args_bytes);
    c.groups = MTLSizeMake(gx, gy, gz);
    c.threads = MTLSizeMake(stamp.wg_size, 1, 1);
    stamps_.emplace_back(stamp.name);
    // An empty grid is a no-op on Vulkan; Metal rejects it, so it is counted but not encoded.
    if (gx && gy && gz) commands_.push_back(std::move(c));
}

void MetalEncoder::barrier() {
    ensure_recording("barrier");
    if (!commands_.empty() && commands_.back().kind != Kind::barrier) {
        Command c;
        c.kind = Kind::barrier;
        commands_.push_back(std::move(c));
    }
}

void MetalEncoder::copy(Buffer& src, size_t src_offset, Buffer& dst, size_t dst_offset,
                        size_t bytes) {
    ensure_recording("copy");
    MetalBuffer& s = use(src, "copy");
    MetalBuffer& d = use(dst, "copy");
    if (!in_range(s, src_offset, bytes) || !in_range(d, dst_offset, bytes))
        throw ShapeError("copy of " + std::to_string(bytes) + " bytes from '" + s.label() + "' (" +
                         std::to_string(s.size()) + " bytes) at " + std::to_string(src_offset) +
                         " to '" + d.label() + "' (" + std::to_string(d.size()) + " bytes) at " +
                         std::to_string(dst_offset) + " falls outside a buffer");
    // A macOS blit moves whole words; the callers copy floats.
    if (src_offset % 4 || dst_offset % 4 || bytes % 4)
        throw ShapeError("copy from '" + s.label() + "' to '" + d.label() + "' on Metal: offsets " +
                         std::to_string(src_offset) + ", " + std::to_string(dst_offset) +
                         " and size " + std::to_string(bytes) + " must be multiples of 4");
    if (bytes == 0) return;
    Command c;
    c.kind = Kind::copy;
    c.buffers = {s.handle(), d.handle()};
    c.src_offset = src_offset;
    c.dst_offset = dst_offset;
    c.bytes = bytes;
    commands_.push_back(std::move(c));
}

id<MTLBuffer> MetalEncoder::pattern(uint32_t word) {
    auto it = patterns_.find(word);
    if (it != patterns_.end()) return it->second;
    id<MTLBuffer> p = allocate(device_->handle(), device_->info(), kPatternBytes, true,
                               "fill pattern");
    auto* words = static_cast<uint32_t*>([p contents]);
    for (size_t i = 0; i < kPatternBytes / 4; ++i) words[i] = word;
    patterns_.emplace(word, p);
    return p;
}

void MetalEncoder::fill(Buffer& dst, size_t offset, size_t bytes, uint32_t word) {
    ensure_recording("fill");
    MetalBuffer& d = use(dst, "fill");
    if (offset % 4 || bytes % 4)
        throw ShapeError("fill of '" + d.label() + "': offset " + std::to_string(offset) +
                         " and size " + std::to_string(bytes) + " must be multiples of 4");
    if (!in_range(d, offset, bytes))
        throw ShapeError("fill of " + std::to_string(bytes) + " bytes at " +
                         std::to_string(offset) + " falls outside '" + d.label() + "' (" +
                         std::to_string(d.size()) + " bytes)");
    if (bytes == 0) return;
    // fillBuffer:range:value: repeats one byte; a word of four equal bytes (0, ~0) is that.
    // Other words (a NaN pre-fill) are copied from a pattern buffer, piece by piece.
    const uint8_t byte = uint8_t(word);
    if (word == 0x01010101u * byte) {
        Command c;
        c.kind = Kind::fill;
        c.buffers = {d.handle()};
        c.dst_offset = offset;
        c.bytes = bytes;
        c.byte = byte;
        commands_.push_back(std::move(c));
        return;
    }
    id<MTLBuffer> p = pattern(word);
    for (size_t done = 0; done < bytes; done += kPatternBytes) {
        Command c;
        c.kind = Kind::copy;
        c.buffers = {p, d.handle()};
        c.dst_offset = offset + done;
        c.bytes = std::min(kPatternBytes, bytes - done);
        commands_.push_back(std::move(c));
    }
}

std::string MetalEncoder::encode(id<MTLCommandBuffer> cb) const {
    id<MTLComputeCommandEncoder> compute = nil;
    id<MTLBlitCommandEncoder> blit = nil;
    auto end_compute = [&] {
        if (compute) [compute endEncoding];
        compute = nil;
    };
    auto end_blit = [&] {
        if (blit) [blit endEncoding];
        blit = nil;
    };
    for (const Command& c : commands_) {
        switch (c.kind) {
            case Kind::dispatch:
                end_blit();
                if (!compute)
                    compute = [cb computeCommandEncoderWithDispatchType:MTLDispatchTypeConcurrent];
                if (!compute) return "Metal gave no compute command encoder";
                [compute setComputePipelineState:c.pipeline];
                for (size_t i = 0; i < c.buffers.size(); ++i)
                    [compute setBuffer:c.buffers[i] offset:0 atIndex:i];
                [compute setBytes:c.args.data() length:c.args.size() atIndex:kArgsSlot];
                [compute dispatchThreadgroups:c.groups threadsPerThreadgroup:c.threads];
                break;
            case Kind::barrier:
                if (compute) [compute memoryBarrierWithScope:MTLBarrierScopeBuffers];
                end_blit();
                break;
            case Kind::copy:
            case Kind::fill:
                end_compute();
                if (!blit) blit = [cb blitCommandEncoder];
                if (!blit) return "Metal gave no blit command encoder";
                if (c.kind == Kind::copy)
                    [blit copyFromBuffer:c.buffers[0] sourceOffset:c.src_offset
                                toBuffer:c.buffers[1] destinationOffset:c.dst_offset
                                    size:c.bytes];
                else
                    [blit fillBuffer:c.buffers[0] range:NSMakeRange(c.dst_offset, c.bytes)
                               value:c.byte];
                break;
        }
    }
    end_compute();
    end_blit();
    return "";
}

std::string MetalEncoder::describe() const {
    constexpr size_t kNamed = 6;
    std::vector<std::string> names;
    for (const std::string& s : stamps_) {
        if (names.size() == kNamed) break;
        if (std::find(names.begin(), names.end(), s) == names.end()) names.push_back(s);
    }
    std::string out = std::to_string(stamps_.size()) + " dispatches";
    if (names.empty()) return out;
    out += " (stamps ";
    for (size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + names[i];
    return out + (names.size() == kNamed ? ", ...)" : ")");
}

std::unique_ptr<Encoder> MetalDevice::encoder() {
    return std::make_unique<MetalEncoder>(shared_from_this());
}

void MetalDevice::submit(Encoder& enc) {
    auto* e = dynamic_cast<MetalEncoder*>(&enc);
    if (!e || e->owner() != this)
        throw DeviceError("submit: the encoder belongs to another device than " + info_.name);
    e->close();
    std::lock_guard<std::mutex> lock(mutex_);
    for (uint64_t serial : e->buffer_serials())
        if (!live_buffers_.count(serial))
            throw DeviceError("submit: the encoder uses a buffer that has been destroyed since "
                              "it was recorded; record it again");
    check_submit_fault(info_.name);
    const std::string what = "submit of " + e->describe();
    std::string error;
    @autoreleasepool {
        id<MTLCommandBuffer> cb = [queue_ commandBuffer];
        if (!cb) {
            error = what + " on " + info_.name + ": Metal gave no command buffer";
        } else {
            cb.label = [NSString stringWithUTF8String:what.c_str()];
            error = e->encode(cb);
            if (!error.empty()) error = what + " on " + info_.name + ": " + error;
            else error = commit_and_wait(cb, what);
        }
    }
    if (!error.empty()) throw DeviceError(error);
}

}  // namespace dasllama::gpu::mtl

// The backend-neutral face of a GPU: a Device owns memory and runs Encoders; an Encoder records
// one command buffer of kernel dispatches (one forward step of a model, all layers) and is
// submitted whole. Homes (csrc/gpu/vulkan, csrc/gpu/metal) implement these interfaces; model code
// above them never names a home.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/stamps.h"

namespace dasllama::gpu {

enum class DeviceType { discrete, integrated, virtual_gpu, cpu, other };

struct DeviceInfo {
    std::string backend;            // "vulkan"
    int index = -1;                 // position in that backend's enumeration
    std::string name;               // e.g. "NVIDIA H200", "llvmpipe (LLVM 15.0.6, 256 bits)"
    DeviceType type = DeviceType::other;
    std::string driver;             // driver name and version
    std::string api_version;        // e.g. "1.3.239"
    uint32_t vendor_id = 0, device_id = 0;
    uint32_t subgroup_size = 0;
    uint64_t memory_bytes = 0;      // largest device-local heap
    uint64_t max_allocation_bytes = 0;  // largest single buffer the driver allocates
    uint32_t max_shared_bytes = 0;  // workgroup memory
    uint32_t max_push_constant_bytes = 0;
    uint64_t max_storage_range = 0; // bytes one storage-buffer binding can address
    // What kernels may use. Each is set when the device supports it, and a home enables on
    // the device it opens everything set here.
    bool fp16 = false;              // shader float16 arithmetic
    bool int8 = false;              // shader int8 arithmetic
    bool int16 = false;             // shader int16 arithmetic
    bool storage_16bit = false;     // 16-bit loads and stores in storage buffers
    bool storage_8bit = false;      // 8-bit loads and stores in storage buffers
    bool subgroup_arithmetic = false;  // subgroup add/max/... in compute kernels
    bool subgroup_shuffle = false;     // subgroup shuffle / broadcast in compute kernels
    bool coopmat_khr = false;       // VK_KHR_cooperative_matrix
    bool coopmat_nv = false;        // VK_NV_cooperative_matrix2 (reported, not enabled)
    bool timestamps = false;        // kernel timing (profiling) works on this device
};

const char* device_type_name(DeviceType t);

// Device memory. Device-local buffers are reached through Device::upload/download or
// Encoder::copy; host-visible ones are also mapped for the CPU.
class Buffer {
public:
    virtual ~Buffer() = default;
    virtual size_t size() const = 0;
    // The CPU's pointer into a host-visible buffer, nullptr for a device-local one.
    virtual void* mapped() = 0;
};

// Per-kernel GPU time of one submitted encoder (profiling mode only).
struct KernelTime {
    std::string stamp;
    double microseconds = 0.0;
};

class Encoder {
public:
    virtual ~Encoder() = default;
    // Record a dispatch of `stamp` over groups (gx, gy, gz) with `buffers` bound to bindings
    // 0..n-1 (whole buffers; offsets travel in the argument block as element offsets).
    virtual void dispatch(const StampInfo& stamp, const std::vector<Buffer*>& buffers,
                          const void* args, size_t args_bytes,
                          uint32_t gx, uint32_t gy = 1, uint32_t gz = 1) = 0;
    template <class Args>
    void dispatch(const StampInfo& stamp, const std::vector<Buffer*>& buffers,
                  const Args& args, uint32_t gx, uint32_t gy = 1, uint32_t gz = 1) {
        dispatch(stamp, buffers, &args, sizeof(Args), gx, gy, gz);
    }
    // Make every write recorded so far visible to everything recorded after (compute and
    // transfer). Dispatches with no barrier between them may run concurrently.
    virtual void barrier() = 0;
    virtual void copy(Buffer& src, size_t src_offset, Buffer& dst, size_t dst_offset,
                      size_t bytes) = 0;
    virtual void fill(Buffer& dst, size_t offset, size_t bytes, uint32_t word) = 0;
    // Dispatches recorded so far.
    virtual size_t dispatches() const = 0;
};

// A Device may be used from several threads (a home serialises its calls); an Encoder, by one
// thread at a time. Buffers and encoders keep their device alive.
class Device {
public:
    virtual ~Device() = default;
    virtual const DeviceInfo& info() const = 0;
    // Throws DeviceError when the memory cannot be had (callers decline with `memory`).
    virtual std::unique_ptr<Buffer> alloc(size_t bytes, const char* label) = 0;
    virtual std::unique_ptr<Buffer> alloc_host(size_t bytes, const char* label) = 0;
    // Synchronous transfers through a staging buffer.
    virtual void upload(Buffer& dst, size_t offset, const void* src, size_t bytes) = 0;
    virtual void download(Buffer& src, size_t offset, void* dst, size_t bytes) = 0;
    virtual std::unique_ptr<Encoder> encoder() = 0;
    // Submit a recorded encoder and wait for it. An encoder can be submitted again unchanged.
    virtual void submit(Encoder& enc) = 0;
    // Profiling: encoders made while it is on record a timestamp around every dispatch, and
    // submitting one of them replaces last_profile() with its per-dispatch times.
    virtual void set_profiling(bool on) = 0;
    virtual bool profiling() const = 0;
    virtual std::vector<KernelTime> last_profile() const = 0;
};

// Every GPU device the homes of this build can see (empty when no loader or driver). Never
// throws; a home that cannot load says why through unavailable_reason().
std::vector<DeviceInfo> list_devices();
std::string unavailable_reason();

// The driver's debug layer (DASLLAMA_VULKAN_VALIDATION=1 before the first device call): whether
// it is on, why not when asked for and missing, and the errors and warnings it reported so far.
struct ValidationReport {
    bool requested = false;
    bool enabled = false;
    std::string reason;                 // why it is off although requested
    std::vector<std::string> errors;    // messages of error severity, oldest first
    std::vector<std::string> warnings;  // messages of warning severity (capped)
};
ValidationReport validation_report();

// "vulkan" (the best non-CPU device), "vulkan:N" (index N, any type, lavapipe included), or
// "vulkan:NAME" (the first device whose name contains NAME, case-insensitive); "metal",
// "metal:N", "metal:NAME" alike on Apple platforms. Throws
// DeviceError naming the spec and the devices there are.
std::shared_ptr<Device> open_device(std::string_view spec);

// Fault injection, so tests can fail a device mid-request and watch the seats fall back: the
// nth encoder submit from now on any device (1: the next one) throws DeviceError("injected
// fault"); 0 disarms it. DASLLAMA_GPU_FAIL_SUBMIT=N arms it for the nth submit of the process.
void inject_submit_fault(uint64_t nth);
// Each home calls this at every encoder submit, before the work is queued.
void check_submit_fault(const std::string& device_name);

}  // namespace dasllama::gpu

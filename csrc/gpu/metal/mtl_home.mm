// The Metal devices of this machine: listed once (MTLCopyAllDevices), each described as a
// DeviceInfo, and one chosen by spec. MTLCopyAllDevices and the working-set size are macOS APIs
// and the stamps are MSL 2.4, so the home serves macOS 12 or later.
#include "gpu/metal/mtl_home.h"

#include <algorithm>
#include <cctype>
#include <cstdint>

#include "core/errors.h"
#include "gpu/metal/mtl_device.h"

namespace dasllama::gpu::mtl {

namespace {

// What the process learned about Metal on first use.
struct Home {
    NSArray<id<MTLDevice>>* devices = nil;
    std::vector<DeviceInfo> infos;  // one per device, same order
    std::string reason;             // why there are none
};

// The GPU families the kernels care about: simd_shuffle needs Apple6 or Mac2; simd_sum and
// simd_max need Apple7 or Mac2 (Metal feature set tables).
std::string family_names(id<MTLDevice> d) {
    std::string out;
    if ([d supportsFamily:MTLGPUFamilyApple7]) out = "Apple7";
    else if ([d supportsFamily:MTLGPUFamilyApple6]) out = "Apple6";
    if ([d supportsFamily:MTLGPUFamilyMac2]) out += out.empty() ? "Mac2" : " Mac2";
    return out.empty() ? "none of Apple6, Apple7, Mac2" : out;
}

DeviceInfo describe(id<MTLDevice> d, int index) {
    DeviceInfo info;
    info.backend = "metal";
    info.index = index;
    info.name = utf8(d.name);
    // Apple-silicon GPUs share the CPU's memory; on an Intel Mac the low-power GPU is the
    // integrated one. Metal names no PCI vendor or device ids.
    info.type = (d.hasUnifiedMemory || d.lowPower) ? DeviceType::integrated : DeviceType::discrete;
    info.driver = "Metal (GPU families: " + family_names(d) + ")";
    info.api_version = "MSL 2.4";
    // Apple GPUs run SIMD-groups of 32. Other Macs' GPUs report a width per pipeline only
    // (threadExecutionWidth); the kernels read the width at run time either way.
    info.subgroup_size = [d supportsFamily:MTLGPUFamilyApple1] ? 32 : 0;
    info.memory_bytes = d.recommendedMaxWorkingSetSize;
    info.max_allocation_bytes = d.maxBufferLength;
    info.max_shared_bytes = static_cast<uint32_t>(d.maxThreadgroupMemoryLength);
    info.max_push_constant_bytes = static_cast<uint32_t>(kMaxArgsBytes);
    // A binding reaches a whole buffer, but the kernels index with 32-bit element offsets, as
    // on Vulkan (whose storage range is a 32-bit limit): larger tensors are split by rows.
    info.max_storage_range = std::min<uint64_t>(d.maxBufferLength, UINT32_MAX);
    // MSL has half, char and short arithmetic and 8/16-bit device pointers on every GPU.
    info.fp16 = info.int8 = info.int16 = true;
    info.storage_16bit = info.storage_8bit = true;
    const bool mac2 = [d supportsFamily:MTLGPUFamilyMac2];
    info.subgroup_arithmetic = mac2 || [d supportsFamily:MTLGPUFamilyApple7];
    info.subgroup_shuffle = mac2 || [d supportsFamily:MTLGPUFamilyApple6];
    info.timestamps = false;  // see MetalDevice::set_profiling
    return info;
}

void probe(Home& h) {
    if (@available(macOS 12.0, *)) {
        @autoreleasepool {
            NSArray<id<MTLDevice>>* all = MTLCopyAllDevices();
            if (!all || all.count == 0) {
                h.reason = "Metal lists no GPU on this machine (MTLCopyAllDevices is empty)";
                return;
            }
            h.devices = all;
            for (NSUInteger i = 0; i < all.count; ++i)
                h.infos.push_back(describe(all[i], static_cast<int>(i)));
        }
    } else {
        h.reason = "the Metal home needs macOS 12 or later (its kernels are MSL 2.4)";
    }
}

// Never destroyed: devices may still be in use while static objects are torn down at exit.
const Home& home() {
    static const Home* h = [] {
        auto* out = new Home;
        probe(*out);
        return out;
    }();
    return *h;
}

std::string lower(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

std::string describe_devices(const Home& h) {
    std::string out;
    for (const DeviceInfo& info : h.infos) {
        if (!out.empty()) out += ", ";
        out += "metal:" + std::to_string(info.index) + " " + info.name + " (" +
               device_type_name(info.type) + ")";
    }
    return out.empty() ? "none" : out;
}

// The system's preferred GPU (on a Mac with two, the high-power one), found by registry id.
size_t default_index(const Home& h) {
    id<MTLDevice> preferred = MTLCreateSystemDefaultDevice();
    if (preferred)
        for (NSUInteger i = 0; i < h.devices.count; ++i)
            if (h.devices[i].registryID == preferred.registryID) return i;
    return 0;
}

}  // namespace

std::vector<DeviceInfo> list_metal_devices() {
    try {
        return home().infos;
    } catch (const std::exception&) {
        return {};
    }
}

std::string metal_unavailable_reason() { return home().reason; }

std::shared_ptr<Device> open_metal_device(std::string_view selector) {
    const std::string spec = "metal" + std::string(selector);
    const Home& h = home();
    if (h.infos.empty()) throw DeviceError("cannot open '" + spec + "': " + h.reason);
    constexpr size_t kNone = ~size_t(0);
    size_t chosen = kNone;
    if (selector.empty()) {
        chosen = default_index(h);
    } else {
        if (selector.front() != ':' || selector.size() < 2)
            throw DeviceError("bad device spec '" + spec +
                              "': use metal, metal:N or metal:NAME; devices: " +
                              describe_devices(h));
        const std::string_view what = selector.substr(1);
        const bool numeric = std::all_of(what.begin(), what.end(),
                                         [](char c) { return c >= '0' && c <= '9'; });
        if (numeric) {
            const size_t index = what.size() <= 6 ? std::stoul(std::string(what)) : kNone;
            if (index < h.infos.size()) chosen = index;
        } else {
            const std::string needle = lower(what);
            for (size_t i = 0; i < h.infos.size() && chosen == kNone; ++i)
                if (lower(h.infos[i].name).find(needle) != std::string::npos) chosen = i;
        }
        if (chosen == kNone)
            throw DeviceError("no Metal device matches '" + spec + "'; devices: " +
                              describe_devices(h));
    }
    const DeviceInfo& info = h.infos[chosen];
    if (!info.subgroup_arithmetic)
        throw DeviceError("cannot open '" + spec + "' (" + info.name + "): it lacks SIMD-group "
                          "reductions (simd_sum, simd_max), which the kernels use; Metal offers "
                          "them on GPU families Apple7 and Mac2, this GPU has " +
                          family_names(h.devices[chosen]));
    return open_logical_device(h.devices[chosen], info);
}

}  // namespace dasllama::gpu::mtl

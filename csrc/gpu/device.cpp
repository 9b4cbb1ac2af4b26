// The backend-neutral entry points: each home that this build carries is asked in turn.
#include "gpu/device.h"

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "core/errors.h"

#if DASLLAMA_VULKAN
#include "gpu/vulkan/vk_instance.h"
#endif
#if DASLLAMA_METAL
#include "gpu/metal/mtl_home.h"
#endif

namespace dasllama::gpu {

const char* device_type_name(DeviceType t) {
    switch (t) {
        case DeviceType::discrete: return "discrete";
        case DeviceType::integrated: return "integrated";
        case DeviceType::virtual_gpu: return "virtual";
        case DeviceType::cpu: return "cpu";
        case DeviceType::other: return "other";
    }
    return "other";
}

namespace {

std::string vulkan_reason() {
#if DASLLAMA_VULKAN
    return vk::vulkan_unavailable_reason();
#else
    // The build's reason (no headers, no shader compiler, switched off), kept in the stamp table.
    const std::string why = vulkan_stamps_missing_reason();
    return why.empty() ? "this build of dasllama has no GPU home" : why;
#endif
}

}  // namespace

std::vector<DeviceInfo> list_devices() {
    std::vector<DeviceInfo> out;
#if DASLLAMA_VULKAN
    try {
        out = vk::list_vulkan_devices();
    } catch (const std::exception&) {
        // the reason is kept by the home
    }
#endif
#if DASLLAMA_METAL
    for (DeviceInfo& d : mtl::list_metal_devices()) out.push_back(std::move(d));
#endif
    return out;
}

std::string unavailable_reason() {
#if DASLLAMA_METAL
    // Either home's devices make the list non-empty; with none, both homes say why.
    const std::string metal_why = mtl::metal_unavailable_reason();
    const std::string vulkan_why = vulkan_reason();
    if (metal_why.empty() || vulkan_why.empty()) return "";
    return "Metal: " + metal_why + "; Vulkan: " + vulkan_why;
#else
    return vulkan_reason();
#endif
}

ValidationReport validation_report() {
#if DASLLAMA_VULKAN
    return vk::validation_report_vulkan();
#else
    return {};
#endif
}

std::shared_ptr<Device> open_device(std::string_view spec) {
    auto names = [&](std::string_view home) {
        return spec.substr(0, home.size()) == home &&
               (spec.size() == home.size() || spec[home.size()] == ':');
    };
    const std::string_view vulkan = "vulkan";
    if (names(vulkan)) {
#if DASLLAMA_VULKAN
        return vk::open_vulkan_device(spec.substr(vulkan.size()));
#else
        throw DeviceError("cannot open '" + std::string(spec) + "': " + vulkan_reason());
#endif
    }
    const std::string_view metal = "metal";
    if (names(metal)) {
#if DASLLAMA_METAL
        return mtl::open_metal_device(spec.substr(metal.size()));
#else
        throw DeviceError("cannot open '" + std::string(spec) +
                          "': this build of dasllama has no Metal home (Apple platforms only)");
#endif
    }
    throw DeviceError("unknown device '" + std::string(spec) +
                      "': use vulkan, vulkan:N (an index), vulkan:NAME (part of a name), "
                      "or metal, metal:N, metal:NAME");
}

namespace {
// Submits left before the injected fault; 0: none armed.
std::atomic<uint64_t> submits_to_fault{0};
std::once_flag fault_env_read;
}  // namespace

void inject_submit_fault(uint64_t nth) {
    std::call_once(fault_env_read, [] {});  // an explicit arming wins over the environment
    submits_to_fault.store(nth);
}

void check_submit_fault(const std::string& device_name) {
    std::call_once(fault_env_read, [] {
        if (const char* v = std::getenv("DASLLAMA_GPU_FAIL_SUBMIT"))
            submits_to_fault.store(std::strtoull(v, nullptr, 10));
    });
    uint64_t left = submits_to_fault.load();
    while (left > 0 && !submits_to_fault.compare_exchange_weak(left, left - 1)) {
    }
    if (left == 1)
        throw DeviceError("submit on " + device_name + ": injected fault "
                          "(DASLLAMA_GPU_FAIL_SUBMIT / inject_submit_fault)");
}

}  // namespace dasllama::gpu

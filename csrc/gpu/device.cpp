// The backend-neutral entry points: each home that this build carries is asked in turn.
#include "gpu/device.h"

#include "core/errors.h"

#if DASLLAMA_VULKAN
#include "gpu/vulkan/vk_instance.h"
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

std::vector<DeviceInfo> list_devices() {
#if DASLLAMA_VULKAN
    try {
        return vk::list_vulkan_devices();
    } catch (const std::exception&) {
        return {};  // the reason is kept by the home
    }
#else
    return {};
#endif
}

std::string unavailable_reason() {
#if DASLLAMA_VULKAN
    return vk::vulkan_unavailable_reason();
#else
    // The build's reason (no headers, no shader compiler, switched off), kept in the stamp table.
    const std::string why = vulkan_stamps_missing_reason();
    return why.empty() ? "this build of dasllama has no GPU home" : why;
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
    const std::string_view vulkan = "vulkan";
    if (spec.substr(0, vulkan.size()) == vulkan &&
        (spec.size() == vulkan.size() || spec[vulkan.size()] == ':')) {
#if DASLLAMA_VULKAN
        return vk::open_vulkan_device(spec.substr(vulkan.size()));
#else
        throw DeviceError("cannot open '" + std::string(spec) + "': " + unavailable_reason());
#endif
    }
    throw DeviceError("unknown device '" + std::string(spec) +
                      "': use vulkan, vulkan:N (an index) or vulkan:NAME (part of a name)");
}

}  // namespace dasllama::gpu

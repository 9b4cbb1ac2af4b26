// Opening the Vulkan loader with dlopen / LoadLibrary and fetching entry points.
#include "gpu/vulkan/vk_loader.h"

#include <cstdlib>
#include <mutex>

#include "core/errors.h"

#if defined(_WIN32)
#include <windows.h>
#else
#include <dlfcn.h>
#endif

namespace dasllama::gpu::vk {

namespace {

#if defined(_WIN32)
constexpr const char* kLoaderName = "vulkan-1.dll";
#elif defined(__APPLE__)
constexpr const char* kLoaderName = "libvulkan.1.dylib";
#else
constexpr const char* kLoaderName = "libvulkan.so.1";
#endif

struct LoaderState {
    GlobalFunctions fn;
    bool ok = false;
    std::string error;
};

void* open_library(const std::string& name, std::string& error) {
#if defined(_WIN32)
    HMODULE h = LoadLibraryA(name.c_str());
    if (!h) error = "LoadLibrary failed with error " + std::to_string(GetLastError());
    return reinterpret_cast<void*>(h);
#else
    void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char* why = dlerror();
        error = why ? why : "dlopen failed";
    }
    return h;
#endif
}

void* library_symbol(void* lib, const char* name) {
#if defined(_WIN32)
    return reinterpret_cast<void*>(GetProcAddress(reinterpret_cast<HMODULE>(lib), name));
#else
    return dlsym(lib, name);
#endif
}

LoaderState& state() {
    static LoaderState s;
    static std::once_flag once;
    std::call_once(once, [] {
        const char* override_name = std::getenv("DASLLAMA_VULKAN_LOADER");
        const std::string name = override_name && *override_name ? override_name : kLoaderName;
        std::string why;
        // The library stays open for the life of the process: devices may outlive any owner.
        void* lib = open_library(name, why);
        if (!lib) {
            s.error = "no Vulkan loader (" + name + "): " + why;
            return;
        }
        s.fn.vkGetInstanceProcAddr = reinterpret_cast<PFN_vkGetInstanceProcAddr>(
            library_symbol(lib, "vkGetInstanceProcAddr"));
        if (!s.fn.vkGetInstanceProcAddr) {
            s.error = "no Vulkan loader (" + name + "): it lacks vkGetInstanceProcAddr";
            return;
        }
        auto get = [&](const char* fn_name) {
            return s.fn.vkGetInstanceProcAddr(VK_NULL_HANDLE, fn_name);
        };
        s.fn.vkEnumerateInstanceVersion =
            reinterpret_cast<PFN_vkEnumerateInstanceVersion>(get("vkEnumerateInstanceVersion"));
#define DASLLAMA_VK_LOAD(fn_name) s.fn.fn_name = reinterpret_cast<PFN_##fn_name>(get(#fn_name));
        DASLLAMA_VK_GLOBAL_FUNCTIONS(DASLLAMA_VK_LOAD)
#undef DASLLAMA_VK_LOAD
#define DASLLAMA_VK_REQUIRE(fn_name)                                                      \
        if (!s.fn.fn_name) {                                                               \
            s.error = "the Vulkan loader (" + name + ") lacks " #fn_name;                  \
            return;                                                                        \
        }
        DASLLAMA_VK_GLOBAL_FUNCTIONS(DASLLAMA_VK_REQUIRE)
#undef DASLLAMA_VK_REQUIRE
        s.ok = true;
    });
    return s;
}

}  // namespace

const GlobalFunctions* loader() {
    LoaderState& s = state();
    return s.ok ? &s.fn : nullptr;
}

const std::string& loader_error() { return state().error; }

void load_instance_functions(VkInstance instance, InstanceFunctions& out) {
    const GlobalFunctions* g = loader();
    if (!g) throw DeviceError(loader_error());
#define DASLLAMA_VK_LOAD(fn_name) \
    out.fn_name = reinterpret_cast<PFN_##fn_name>(g->vkGetInstanceProcAddr(instance, #fn_name));
#define DASLLAMA_VK_REQUIRE(fn_name)                                                   \
    if (!out.fn_name) throw DeviceError("Vulkan instance lacks the function " #fn_name);
    DASLLAMA_VK_INSTANCE_FUNCTIONS(DASLLAMA_VK_LOAD)
    DASLLAMA_VK_INSTANCE_OPTIONAL_FUNCTIONS(DASLLAMA_VK_LOAD)
    DASLLAMA_VK_INSTANCE_FUNCTIONS(DASLLAMA_VK_REQUIRE)
#undef DASLLAMA_VK_LOAD
#undef DASLLAMA_VK_REQUIRE
}

void load_device_functions(const InstanceFunctions& ifn, VkDevice device, DeviceFunctions& out) {
#define DASLLAMA_VK_LOAD(fn_name)                                                          \
    out.fn_name = reinterpret_cast<PFN_##fn_name>(ifn.vkGetDeviceProcAddr(device, #fn_name)); \
    if (!out.fn_name) throw DeviceError("Vulkan device lacks the function " #fn_name);
    DASLLAMA_VK_DEVICE_FUNCTIONS(DASLLAMA_VK_LOAD)
#undef DASLLAMA_VK_LOAD
}

const char* result_name(VkResult r) {
    switch (r) {
#define DASLLAMA_VK_RESULT(x) case x: return #x;
        DASLLAMA_VK_RESULT(VK_SUCCESS)
        DASLLAMA_VK_RESULT(VK_NOT_READY)
        DASLLAMA_VK_RESULT(VK_TIMEOUT)
        DASLLAMA_VK_RESULT(VK_EVENT_SET)
        DASLLAMA_VK_RESULT(VK_EVENT_RESET)
        DASLLAMA_VK_RESULT(VK_INCOMPLETE)
        DASLLAMA_VK_RESULT(VK_ERROR_OUT_OF_HOST_MEMORY)
        DASLLAMA_VK_RESULT(VK_ERROR_OUT_OF_DEVICE_MEMORY)
        DASLLAMA_VK_RESULT(VK_ERROR_INITIALIZATION_FAILED)
        DASLLAMA_VK_RESULT(VK_ERROR_DEVICE_LOST)
        DASLLAMA_VK_RESULT(VK_ERROR_MEMORY_MAP_FAILED)
        DASLLAMA_VK_RESULT(VK_ERROR_LAYER_NOT_PRESENT)
        DASLLAMA_VK_RESULT(VK_ERROR_EXTENSION_NOT_PRESENT)
        DASLLAMA_VK_RESULT(VK_ERROR_FEATURE_NOT_PRESENT)
        DASLLAMA_VK_RESULT(VK_ERROR_INCOMPATIBLE_DRIVER)
        DASLLAMA_VK_RESULT(VK_ERROR_TOO_MANY_OBJECTS)
        DASLLAMA_VK_RESULT(VK_ERROR_FORMAT_NOT_SUPPORTED)
        DASLLAMA_VK_RESULT(VK_ERROR_FRAGMENTED_POOL)
        DASLLAMA_VK_RESULT(VK_ERROR_UNKNOWN)
        DASLLAMA_VK_RESULT(VK_ERROR_OUT_OF_POOL_MEMORY)
        DASLLAMA_VK_RESULT(VK_ERROR_INVALID_EXTERNAL_HANDLE)
        DASLLAMA_VK_RESULT(VK_ERROR_FRAGMENTATION)
        DASLLAMA_VK_RESULT(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS)
        DASLLAMA_VK_RESULT(VK_PIPELINE_COMPILE_REQUIRED)
        DASLLAMA_VK_RESULT(VK_ERROR_VALIDATION_FAILED_EXT)
#undef DASLLAMA_VK_RESULT
        default: return "VkResult";
    }
}

void check(VkResult r, const char* call) {
    if (r == VK_SUCCESS) return;
    throw DeviceError(std::string(call) + " failed: " + result_name(r) + " (" +
                      std::to_string(static_cast<int>(r)) + ")");
}

}  // namespace dasllama::gpu::vk

// The Vulkan instance (with the validation layer on request), the probe of every physical
// device into a DeviceInfo, and device selection by spec.
#include "gpu/vulkan/vk_instance.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/errors.h"
#include "gpu/vulkan/vk_device.h"
#include "gpu/vulkan/vk_features.h"

namespace dasllama::gpu::vk {

namespace {

constexpr const char* kValidationLayer = "VK_LAYER_KHRONOS_validation";
constexpr size_t kMaxWarnings = 200;

// What the debug messenger has collected; written from driver threads, hence the lock.
struct ValidationLog {
    std::mutex mutex;
    ValidationReport report;
};

// Never destroyed: the driver may report while the instance is torn down at exit.
ValidationLog& validation_log() {
    static ValidationLog* log = new ValidationLog;
    return *log;
}

VKAPI_ATTR VkBool32 VKAPI_CALL on_debug_message(
        VkDebugUtilsMessageSeverityFlagBitsEXT severity, VkDebugUtilsMessageTypeFlagsEXT,
        const VkDebugUtilsMessengerCallbackDataEXT* data, void*) {
    std::string text = data && data->pMessage ? data->pMessage : "(no message)";
    if (data && data->pMessageIdName) text = std::string(data->pMessageIdName) + ": " + text;
    ValidationLog& log = validation_log();
    std::lock_guard<std::mutex> lock(log.mutex);
    if (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) {
        log.report.errors.push_back(std::move(text));
    } else if ((severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) &&
               log.report.warnings.size() < kMaxWarnings) {
        log.report.warnings.push_back(std::move(text));
    }
    return VK_FALSE;  // never abort the call that triggered it
}

bool env_flag(const char* name) {
    const char* v = std::getenv(name);
    if (!v) return false;
    std::string s(v);
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return !(s.empty() || s == "0" || s == "false" || s == "no" || s == "off");
}

std::string version_text(uint32_t v) {
    return std::to_string(VK_API_VERSION_MAJOR(v)) + "." + std::to_string(VK_API_VERSION_MINOR(v)) +
           "." + std::to_string(VK_API_VERSION_PATCH(v));
}

std::string lower(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

bool layer_present(const GlobalFunctions& g, const char* name) {
    uint32_t n = 0;
    if (g.vkEnumerateInstanceLayerProperties(&n, nullptr) != VK_SUCCESS) return false;
    std::vector<VkLayerProperties> layers(n);
    if (g.vkEnumerateInstanceLayerProperties(&n, layers.data()) != VK_SUCCESS) return false;
    for (const auto& l : layers)
        if (std::strcmp(l.layerName, name) == 0) return true;
    return false;
}

std::vector<std::string> instance_extensions(const GlobalFunctions& g, const char* layer) {
    uint32_t n = 0;
    std::vector<std::string> out;
    if (g.vkEnumerateInstanceExtensionProperties(layer, &n, nullptr) != VK_SUCCESS) return out;
    std::vector<VkExtensionProperties> exts(n);
    if (g.vkEnumerateInstanceExtensionProperties(layer, &n, exts.data()) != VK_SUCCESS) return out;
    for (const auto& e : exts) out.emplace_back(e.extensionName);
    return out;
}

bool contains(const std::vector<std::string>& v, const char* s) {
    return std::find(v.begin(), v.end(), s) != v.end();
}

DeviceType device_type(VkPhysicalDeviceType t) {
    switch (t) {
        case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return DeviceType::discrete;
        case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return DeviceType::integrated;
        case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return DeviceType::virtual_gpu;
        case VK_PHYSICAL_DEVICE_TYPE_CPU: return DeviceType::cpu;
        default: return DeviceType::other;
    }
}

struct InstanceState {
    std::once_flag once;
    Instance* instance = nullptr;
    std::string reason;
};

InstanceState& instance_state() {
    static InstanceState s;
    return s;
}

}  // namespace

bool PhysicalDevice::has_extension(const char* name) const { return contains(extensions, name); }

Instance* Instance::get() {
    InstanceState& s = instance_state();
    std::call_once(s.once, [&] {
        if (!loader()) {
            s.reason = loader_error();
            return;
        }
        // The instance lives as long as the process: devices held by Python objects may be
        // released after static destructors run.
        auto* inst = new Instance();
        try {
            inst->create();
            inst->probe_devices();
        } catch (const std::exception& e) {
            s.reason = e.what();
            return;
        }
        if (inst->devices_.empty())
            s.reason = "the Vulkan loader found no devices (no Vulkan driver installed?)";
        s.instance = inst;
    });
    return s.instance;
}

const std::string& Instance::reason() {
    get();
    return instance_state().reason;
}

void Instance::create() {
    const GlobalFunctions& g = *loader();
    uint32_t loader_version = VK_API_VERSION_1_0;
    if (g.vkEnumerateInstanceVersion) g.vkEnumerateInstanceVersion(&loader_version);
    if (loader_version < VK_API_VERSION_1_1)
        throw DeviceError("the Vulkan loader offers only API " + version_text(loader_version) +
                          "; dasllama needs 1.1 or later");

    VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
    app.pApplicationName = "dasllama";
    app.pEngineName = "dasllama";
    app.apiVersion = std::min<uint32_t>(loader_version, VK_API_VERSION_1_3);
    api_version_ = app.apiVersion;

    std::vector<const char*> layers, extensions;
    const std::vector<std::string> available = instance_extensions(g, nullptr);
    VkInstanceCreateFlags flags = 0;
    // MoltenVK and other portability drivers are listed only when asked for.
    if (contains(available, "VK_KHR_portability_enumeration")) {
        extensions.push_back("VK_KHR_portability_enumeration");
        flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
    }

    ValidationLog& log = validation_log();
    log.report.requested = env_flag("DASLLAMA_VULKAN_VALIDATION");
    VkDebugUtilsMessengerCreateInfoEXT messenger_info{
        VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
    messenger_info.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT |
                                     VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT;
    messenger_info.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                                 VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                                 VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
    messenger_info.pfnUserCallback = on_debug_message;
    // Synchronization validation catches missing barriers, the likeliest bug of a new kernel.
    VkValidationFeatureEnableEXT sync_check =
        VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT;
    VkValidationFeaturesEXT validation_features{VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT};
    validation_features.enabledValidationFeatureCount = 1;
    validation_features.pEnabledValidationFeatures = &sync_check;

    VkInstanceCreateInfo info{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    info.flags = flags;
    info.pApplicationInfo = &app;
    if (log.report.requested) {
        const std::vector<std::string> layer_exts = instance_extensions(g, kValidationLayer);
        if (!layer_present(g, kValidationLayer)) {
            log.report.reason = std::string(kValidationLayer) + " is not installed";
        } else if (!contains(available, VK_EXT_DEBUG_UTILS_EXTENSION_NAME) &&
                   !contains(layer_exts, VK_EXT_DEBUG_UTILS_EXTENSION_NAME)) {
            log.report.reason = "no " VK_EXT_DEBUG_UTILS_EXTENSION_NAME " to receive its messages";
        } else {
            layers.push_back(kValidationLayer);
            extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
            // The messenger in pNext also reports on vkCreateInstance itself.
            info.pNext = &messenger_info;
            if (contains(layer_exts, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME)) {
                extensions.push_back(VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME);
                messenger_info.pNext = &validation_features;
            }
            log.report.enabled = true;
        }
    }
    info.enabledLayerCount = static_cast<uint32_t>(layers.size());
    info.ppEnabledLayerNames = layers.data();
    info.enabledExtensionCount = static_cast<uint32_t>(extensions.size());
    info.ppEnabledExtensionNames = extensions.data();
    VK_CALL(g, vkCreateInstance, &info, nullptr, &handle_);
    load_instance_functions(handle_, fn_);
    if (log.report.enabled) {
        if (!fn_.vkCreateDebugUtilsMessengerEXT)
            throw DeviceError("validation requested but vkCreateDebugUtilsMessengerEXT is missing");
        messenger_info.pNext = nullptr;
        VK_CALL(fn_, vkCreateDebugUtilsMessengerEXT, handle_, &messenger_info, nullptr, &messenger_);
    }
}

void Instance::probe_devices() {
    uint32_t n = 0;
    VK_CALL(fn_, vkEnumeratePhysicalDevices, handle_, &n, nullptr);
    std::vector<VkPhysicalDevice> handles(n);
    if (n) VK_CALL(fn_, vkEnumeratePhysicalDevices, handle_, &n, handles.data());
    for (uint32_t i = 0; i < n; ++i) {
        PhysicalDevice pd;
        pd.handle = handles[i];
        VkPhysicalDeviceProperties base{};
        fn_.vkGetPhysicalDeviceProperties(pd.handle, &base);
        pd.api_version = std::min(base.apiVersion, api_version_);
        DeviceInfo& info = pd.info;
        info.backend = "vulkan";
        info.index = static_cast<int>(i);
        info.name = base.deviceName;
        info.type = device_type(base.deviceType);
        info.api_version = version_text(base.apiVersion);
        info.vendor_id = base.vendorID;
        info.device_id = base.deviceID;
        info.max_shared_bytes = base.limits.maxComputeSharedMemorySize;
        info.max_push_constant_bytes = base.limits.maxPushConstantsSize;
        info.max_storage_range = base.limits.maxStorageBufferRange;
        pd.timestamp_period_ns = base.limits.timestampPeriod;
        for (int d = 0; d < 3; ++d) pd.max_groups[d] = base.limits.maxComputeWorkGroupCount[d];
        // A 1.0 device cannot answer the questions below; it is listed but not usable.
        if (pd.api_version < VK_API_VERSION_1_1) {
            info.driver = "Vulkan 1.0 driver (unsupported: dasllama needs 1.1)";
            devices_.push_back(std::move(pd));
            continue;
        }

        uint32_t n_ext = 0;
        VK_CALL(fn_, vkEnumerateDeviceExtensionProperties, pd.handle, nullptr, &n_ext, nullptr);
        std::vector<VkExtensionProperties> exts(n_ext);
        VK_CALL(fn_, vkEnumerateDeviceExtensionProperties, pd.handle, nullptr, &n_ext, exts.data());
        for (const auto& e : exts) pd.extensions.emplace_back(e.extensionName);

        VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
        VkPhysicalDeviceSubgroupProperties subgroup{
            VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
        VkPhysicalDeviceMaintenance3Properties maint3{
            VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
        VkPhysicalDeviceDriverProperties driver{
            VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
        props.pNext = &subgroup;
        subgroup.pNext = &maint3;
        const bool has_driver_props = pd.api_version >= VK_API_VERSION_1_2 ||
                                      pd.has_extension("VK_KHR_driver_properties");
        if (has_driver_props) maint3.pNext = &driver;
        fn_.vkGetPhysicalDeviceProperties2(pd.handle, &props);
        info.subgroup_size = subgroup.subgroupSize;
        const bool compute_ops = subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT;
        info.subgroup_arithmetic =
            compute_ops && (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
        info.subgroup_shuffle =
            compute_ops && (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
        info.max_allocation_bytes = maint3.maxMemoryAllocationSize;
        info.driver = has_driver_props
                          ? std::string(driver.driverName) + " (" + driver.driverInfo + ")"
                          : "driver version " + std::to_string(base.driverVersion);

        FeatureChain features;
        features.link(pd.api_version, pd.extensions);
        fn_.vkGetPhysicalDeviceFeatures2(pd.handle, &features.core);
        info.int16 = features.core.features.shaderInt16;
        info.fp16 = features.has_float16_int8 && features.float16_int8.shaderFloat16;
        info.int8 = features.has_float16_int8 && features.float16_int8.shaderInt8;
        info.storage_16bit = features.has_storage16 && features.storage16.storageBuffer16BitAccess;
        info.storage_8bit = features.has_storage8 && features.storage8.storageBuffer8BitAccess;
        // Cooperative matrices as the matmul_*_coopmat stamps use them: their shape listed,
        // float16 arithmetic and the Vulkan memory model (which their SPIR-V declares), and
        // subgroups of 32 (a workgroup of 128 is the four subgroups the kernel tiles by).
        info.coopmat_khr =
            features.has_coopmat && features.coopmat.cooperativeMatrix && info.fp16 &&
            features.has_memory_model && features.memory_model.vulkanMemoryModel &&
            info.subgroup_size == 32 &&
            offers_coopmat_f16_16x16x16(loader()->vkGetInstanceProcAddr, handle_, pd.handle);
        info.coopmat_nv = pd.has_extension(kCoopmatNv2Extension);

        fn_.vkGetPhysicalDeviceMemoryProperties(pd.handle, &pd.memory);
        for (uint32_t h = 0; h < pd.memory.memoryHeapCount; ++h) {
            const VkMemoryHeap& heap = pd.memory.memoryHeaps[h];
            if (heap.flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
                info.memory_bytes = std::max<uint64_t>(info.memory_bytes, heap.size);
        }

        uint32_t n_families = 0;
        fn_.vkGetPhysicalDeviceQueueFamilyProperties(pd.handle, &n_families, nullptr);
        std::vector<VkQueueFamilyProperties> families(n_families);
        fn_.vkGetPhysicalDeviceQueueFamilyProperties(pd.handle, &n_families, families.data());
        bool found = false;
        for (uint32_t f = 0; f < n_families && !found; ++f) {
            if (families[f].queueFlags & VK_QUEUE_COMPUTE_BIT) {
                pd.queue_family = f;
                pd.timestamp_valid_bits = families[f].timestampValidBits;
                found = true;
            }
        }
        if (!found) info.driver += " [no compute queue: unusable]";
        info.timestamps = found && pd.timestamp_valid_bits > 0 && pd.timestamp_period_ns > 0;
        devices_.push_back(std::move(pd));
    }
}

ValidationReport validation_report_vulkan() {
    Instance::get();
    ValidationLog& log = validation_log();
    std::lock_guard<std::mutex> lock(log.mutex);
    return log.report;
}

std::vector<DeviceInfo> list_vulkan_devices() {
    std::vector<DeviceInfo> out;
    if (Instance* inst = Instance::get())
        for (const auto& pd : inst->devices()) out.push_back(pd.info);
    return out;
}

std::string vulkan_unavailable_reason() { return Instance::reason(); }

namespace {

std::string describe_devices(const Instance& inst) {
    std::string out;
    for (const auto& pd : inst.devices()) {
        if (!out.empty()) out += ", ";
        out += "vulkan:" + std::to_string(pd.info.index) + " " + pd.info.name + " (" +
               device_type_name(pd.info.type) + ")";
    }
    return out.empty() ? "none" : out;
}

// Lower is better; CPU-type devices are never picked by "vulkan" alone.
int type_rank(DeviceType t) {
    switch (t) {
        case DeviceType::discrete: return 0;
        case DeviceType::integrated: return 1;
        case DeviceType::virtual_gpu: return 2;
        case DeviceType::other: return 3;
        case DeviceType::cpu: return 99;
    }
    return 99;
}

}  // namespace

std::shared_ptr<Device> open_vulkan_device(std::string_view selector) {
    const std::string spec = "vulkan" + std::string(selector);
    Instance* inst = Instance::get();
    if (!inst) throw DeviceError("cannot open '" + spec + "': " + Instance::reason());
    const auto& devices = inst->devices();
    const PhysicalDevice* chosen = nullptr;
    if (selector.empty()) {
        for (const auto& pd : devices) {
            if (type_rank(pd.info.type) >= 99 || pd.api_version < VK_API_VERSION_1_1) continue;
            if (!chosen || type_rank(pd.info.type) < type_rank(chosen->info.type) ||
                (type_rank(pd.info.type) == type_rank(chosen->info.type) &&
                 pd.info.memory_bytes > chosen->info.memory_bytes))
                chosen = &pd;
        }
        if (!chosen)
            throw DeviceError("no Vulkan GPU for '" + spec + "' (CPU-type devices are used only "
                              "when named by index or name); devices: " + describe_devices(*inst));
    } else {
        if (selector.front() != ':' || selector.size() < 2)
            throw DeviceError("bad device spec '" + spec +
                              "': use vulkan, vulkan:N or vulkan:NAME; devices: " +
                              describe_devices(*inst));
        const std::string_view what = selector.substr(1);
        const bool numeric = std::all_of(what.begin(), what.end(),
                                         [](char c) { return c >= '0' && c <= '9'; });
        if (numeric) {
            const unsigned long index = what.size() <= 6 ? std::stoul(std::string(what)) : ~0ul;
            if (index < devices.size()) chosen = &devices[index];
        } else {
            const std::string needle = lower(what);
            for (const auto& pd : devices) {
                if (lower(pd.info.name).find(needle) != std::string::npos) {
                    chosen = &pd;
                    break;
                }
            }
        }
        if (!chosen)
            throw DeviceError("no Vulkan device matches '" + spec + "'; devices: " +
                              describe_devices(*inst));
    }
    if (chosen->api_version < VK_API_VERSION_1_1)
        throw DeviceError("cannot open '" + spec + "' (" + chosen->info.name +
                          "): its driver offers only Vulkan 1.0");
    return open_logical_device(*inst, *chosen);
}

}  // namespace dasllama::gpu::vk

#include "gpu/vulkan/vk_features.h"

#include <algorithm>

namespace dasllama::gpu::vk {

void FeatureChain::link(uint32_t api_version, const std::vector<std::string>& device_extensions) {
    auto has = [&](const char* name) {
        return std::find(device_extensions.begin(), device_extensions.end(), name) !=
               device_extensions.end();
    };
    core = {};
    core.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
    storage16 = {};
    storage16.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES;
    storage8 = {};
    storage8.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES;
    float16_int8 = {};
    float16_int8.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES;
    memory_model = {};
    memory_model.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES;
    coopmat = CooperativeMatrixFeaturesKHR{};
    extensions.clear();

    const bool v12 = api_version >= VK_API_VERSION_1_2;
    has_storage16 = api_version >= VK_API_VERSION_1_1 || has("VK_KHR_16bit_storage");
    has_storage8 = v12 || has("VK_KHR_8bit_storage");
    has_float16_int8 = v12 || has("VK_KHR_shader_float16_int8");
    has_memory_model = v12 || has("VK_KHR_vulkan_memory_model");
    has_coopmat = has(kCoopmatKhrExtension);
    if (api_version < VK_API_VERSION_1_1 && has_storage16) extensions.push_back("VK_KHR_16bit_storage");
    if (!v12 && has_storage8) extensions.push_back("VK_KHR_8bit_storage");
    if (!v12 && has_float16_int8) extensions.push_back("VK_KHR_shader_float16_int8");
    if (!v12 && has_memory_model) extensions.push_back("VK_KHR_vulkan_memory_model");
    if (has_coopmat) extensions.push_back(kCoopmatKhrExtension);

    void** tail = &core.pNext;
    auto append = [&](auto& s) {
        *tail = &s;
        tail = &s.pNext;
    };
    if (has_storage16) append(storage16);
    if (has_storage8) append(storage8);
    if (has_float16_int8) append(float16_int8);
    if (has_memory_model) append(memory_model);
    if (has_coopmat) append(coopmat);
}

bool offers_coopmat_f16_16x16x16(PFN_vkGetInstanceProcAddr get_proc, VkInstance instance,
                                 VkPhysicalDevice device) {
    using Query =
        VkResult(VKAPI_PTR*)(VkPhysicalDevice, uint32_t*, CooperativeMatrixPropertiesKHR*);
    auto query = reinterpret_cast<Query>(
        get_proc(instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR"));
    if (!query) return false;
    uint32_t n = 0;
    if (query(device, &n, nullptr) != VK_SUCCESS || n == 0) return false;
    std::vector<CooperativeMatrixPropertiesKHR> shapes(n);
    if (query(device, &n, shapes.data()) != VK_SUCCESS) return false;
    constexpr uint32_t kFloat16 = 0, kFloat32 = 1, kScopeSubgroup = 3;  // the registry's values
    for (uint32_t i = 0; i < n; ++i) {
        const CooperativeMatrixPropertiesKHR& s = shapes[i];
        if (s.MSize == 16 && s.NSize == 16 && s.KSize == 16 && s.AType == kFloat16 &&
            s.BType == kFloat16 && s.CType == kFloat32 && s.ResultType == kFloat32 &&
            !s.saturatingAccumulation && s.scope == kScopeSubgroup)
            return true;
    }
    return false;
}

}  // namespace dasllama::gpu::vk

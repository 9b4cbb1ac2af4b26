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
    coopmat = CooperativeMatrixFeaturesKHR{};
    extensions.clear();

    const bool v12 = api_version >= VK_API_VERSION_1_2;
    has_storage16 = api_version >= VK_API_VERSION_1_1 || has("VK_KHR_16bit_storage");
    has_storage8 = v12 || has("VK_KHR_8bit_storage");
    has_float16_int8 = v12 || has("VK_KHR_shader_float16_int8");
    has_coopmat = has(kCoopmatKhrExtension);
    if (api_version < VK_API_VERSION_1_1 && has_storage16) extensions.push_back("VK_KHR_16bit_storage");
    if (!v12 && has_storage8) extensions.push_back("VK_KHR_8bit_storage");
    if (!v12 && has_float16_int8) extensions.push_back("VK_KHR_shader_float16_int8");
    if (has_coopmat) extensions.push_back(kCoopmatKhrExtension);

    void** tail = &core.pNext;
    auto append = [&](auto& s) {
        *tail = &s;
        tail = &s.pNext;
    };
    if (has_storage16) append(storage16);
    if (has_storage8) append(storage8);
    if (has_float16_int8) append(float16_int8);
    if (has_coopmat) append(coopmat);
}

}  // namespace dasllama::gpu::vk

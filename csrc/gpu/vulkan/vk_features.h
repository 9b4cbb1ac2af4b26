// The feature structs a device is asked about and enabled with, as one pNext chain. Only the
// structs the device knows (by its API version or extension list) are linked.
#pragma once

#include <string>
#include <vector>

#include "gpu/vulkan/vk_loader.h"

namespace dasllama::gpu::vk {

constexpr const char* kCoopmatKhrExtension = "VK_KHR_cooperative_matrix";
constexpr const char* kCoopmatNv2Extension = "VK_NV_cooperative_matrix2";

// VkPhysicalDeviceCooperativeMatrixFeaturesKHR, spelled out because it arrived in Vulkan
// headers 1.3.255 and older ones (Debian 12 ships 1.3.239) lack it. The structure type is the
// registry's (extension number 507).
struct CooperativeMatrixFeaturesKHR {
    VkStructureType sType = static_cast<VkStructureType>(1000506000);
    void* pNext = nullptr;
    VkBool32 cooperativeMatrix = VK_FALSE;
    VkBool32 cooperativeMatrixRobustBufferAccess = VK_FALSE;
};

// VkCooperativeMatrixPropertiesKHR, likewise (structure type 1000506001); the component types
// and the scope are VkComponentTypeKHR and VkScopeKHR values.
struct CooperativeMatrixPropertiesKHR {
    VkStructureType sType = static_cast<VkStructureType>(1000506001);
    void* pNext = nullptr;
    uint32_t MSize = 0, NSize = 0, KSize = 0;
    uint32_t AType = 0, BType = 0, CType = 0, ResultType = 0;
    VkBool32 saturatingAccumulation = VK_FALSE;
    uint32_t scope = 0;
};

// Whether the device lists the cooperative-matrix shape the matmul_*_coopmat stamps use:
// 16 x 16 x 16 on a subgroup, float16 A and B, float32 accumulator and result
// (vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR, looked up through `get_proc`).
bool offers_coopmat_f16_16x16x16(PFN_vkGetInstanceProcAddr get_proc, VkInstance instance,
                                 VkPhysicalDevice device);

struct FeatureChain {
    VkPhysicalDeviceFeatures2 core{};
    VkPhysicalDevice16BitStorageFeatures storage16{};
    VkPhysicalDevice8BitStorageFeatures storage8{};
    VkPhysicalDeviceShaderFloat16Int8Features float16_int8{};
    // The cooperative-matrix stamps' SPIR-V declares the Vulkan memory model.
    VkPhysicalDeviceVulkanMemoryModelFeatures memory_model{};
    CooperativeMatrixFeaturesKHR coopmat{};
    bool has_storage16 = false, has_storage8 = false, has_float16_int8 = false,
         has_memory_model = false, has_coopmat = false;
    // Device extensions to enable for the linked structs (those not core in api_version).
    std::vector<const char*> extensions;

    FeatureChain() = default;
    FeatureChain(const FeatureChain&) = delete;
    FeatureChain& operator=(const FeatureChain&) = delete;

    // Zero every struct and link those the device knows, core first.
    void link(uint32_t api_version, const std::vector<std::string>& device_extensions);
};

}  // namespace dasllama::gpu::vk

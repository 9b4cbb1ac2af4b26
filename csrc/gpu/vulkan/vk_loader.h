// The Vulkan loader, opened at run time: no link-time dependency on Vulkan, so importing
// dasllama never needs it. Every entry point is a function pointer fetched through
// vkGetInstanceProcAddr / vkGetDeviceProcAddr into one of three tables (global, instance,
// device), listed once below as X-macros so a table and its loading code cannot disagree.
#pragma once

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <string>

// The Vulkan idiom `VkFenceCreateInfo info{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};` zero-fills
// the other members on purpose; -Wextra would flag every one. Only Vulkan files include this.
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#endif

namespace dasllama::gpu::vk {

// Functions callable before an instance exists.
#define DASLLAMA_VK_GLOBAL_FUNCTIONS(X) \
    X(vkCreateInstance)                 \
    X(vkEnumerateInstanceExtensionProperties) \
    X(vkEnumerateInstanceLayerProperties)

// Functions of an instance (and of its physical devices). Optional ones may stay null.
#define DASLLAMA_VK_INSTANCE_FUNCTIONS(X)      \
    X(vkDestroyInstance)                       \
    X(vkEnumeratePhysicalDevices)              \
    X(vkGetPhysicalDeviceProperties)           \
    X(vkGetPhysicalDeviceProperties2)          \
    X(vkGetPhysicalDeviceFeatures2)            \
    X(vkGetPhysicalDeviceMemoryProperties)     \
    X(vkGetPhysicalDeviceQueueFamilyProperties) \
    X(vkEnumerateDeviceExtensionProperties)    \
    X(vkCreateDevice)                          \
    X(vkGetDeviceProcAddr)
#define DASLLAMA_VK_INSTANCE_OPTIONAL_FUNCTIONS(X) \
    X(vkCreateDebugUtilsMessengerEXT)              \
    X(vkDestroyDebugUtilsMessengerEXT)

// Functions of a logical device.
#define DASLLAMA_VK_DEVICE_FUNCTIONS(X) \
    X(vkDestroyDevice)                  \
    X(vkDeviceWaitIdle)                 \
    X(vkGetDeviceQueue)                 \
    X(vkQueueSubmit)                    \
    X(vkCreateBuffer)                   \
    X(vkDestroyBuffer)                  \
    X(vkGetBufferMemoryRequirements)    \
    X(vkAllocateMemory)                 \
    X(vkFreeMemory)                     \
    X(vkBindBufferMemory)               \
    X(vkMapMemory)                      \
    X(vkUnmapMemory)                    \
    X(vkCreateShaderModule)             \
    X(vkDestroyShaderModule)            \
    X(vkCreatePipelineCache)            \
    X(vkDestroyPipelineCache)           \
    X(vkCreateComputePipelines)         \
    X(vkDestroyPipeline)                \
    X(vkCreatePipelineLayout)           \
    X(vkDestroyPipelineLayout)          \
    X(vkCreateDescriptorSetLayout)      \
    X(vkDestroyDescriptorSetLayout)     \
    X(vkCreateDescriptorPool)           \
    X(vkDestroyDescriptorPool)          \
    X(vkAllocateDescriptorSets)         \
    X(vkFreeDescriptorSets)             \
    X(vkUpdateDescriptorSets)           \
    X(vkCreateCommandPool)              \
    X(vkDestroyCommandPool)             \
    X(vkAllocateCommandBuffers)         \
    X(vkBeginCommandBuffer)             \
    X(vkEndCommandBuffer)               \
    X(vkResetCommandBuffer)             \
    X(vkCmdBindPipeline)                \
    X(vkCmdBindDescriptorSets)          \
    X(vkCmdPushConstants)               \
    X(vkCmdDispatch)                    \
    X(vkCmdPipelineBarrier)             \
    X(vkCmdCopyBuffer)                  \
    X(vkCmdFillBuffer)                  \
    X(vkCmdWriteTimestamp)              \
    X(vkCmdResetQueryPool)              \
    X(vkCreateQueryPool)                \
    X(vkDestroyQueryPool)               \
    X(vkGetQueryPoolResults)            \
    X(vkCreateFence)                    \
    X(vkDestroyFence)                   \
    X(vkResetFences)                    \
    X(vkWaitForFences)

#define DASLLAMA_VK_MEMBER(name) PFN_##name name = nullptr;

struct GlobalFunctions {
    PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
    PFN_vkEnumerateInstanceVersion vkEnumerateInstanceVersion = nullptr;  // null on 1.0 loaders
    DASLLAMA_VK_GLOBAL_FUNCTIONS(DASLLAMA_VK_MEMBER)
};

struct InstanceFunctions {
    DASLLAMA_VK_INSTANCE_FUNCTIONS(DASLLAMA_VK_MEMBER)
    DASLLAMA_VK_INSTANCE_OPTIONAL_FUNCTIONS(DASLLAMA_VK_MEMBER)
};

struct DeviceFunctions {
    DASLLAMA_VK_DEVICE_FUNCTIONS(DASLLAMA_VK_MEMBER)
};

// The loader's global functions, or nullptr when the loader cannot be opened; then
// loader_error() says why. Opened once per process. DASLLAMA_VULKAN_LOADER names another
// library file to open instead of the platform's loader.
const GlobalFunctions* loader();
const std::string& loader_error();

// Fill a table; throws DeviceError naming a required function the driver lacks.
void load_instance_functions(VkInstance instance, InstanceFunctions& out);
void load_device_functions(const InstanceFunctions& ifn, VkDevice device, DeviceFunctions& out);

// "VK_ERROR_OUT_OF_DEVICE_MEMORY" for a result code.
const char* result_name(VkResult r);

// Throws DeviceError("<call> failed: <result>") unless r is VK_SUCCESS.
void check(VkResult r, const char* call);

}  // namespace dasllama::gpu::vk

// Call `table.name(...)` and throw DeviceError naming the call and its result unless it
// succeeds: VK_CALL(fn, vkCreateFence, device, &info, nullptr, &fence).
#define VK_CALL(table, name, ...) ::dasllama::gpu::vk::check((table).name(__VA_ARGS__), #name)

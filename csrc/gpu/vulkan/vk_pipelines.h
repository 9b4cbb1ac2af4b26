// Compute pipelines and descriptor sets. One VkPipeline per stamp, made on first use from its
// SPIR-V and cached; all stamps with n buffers share one descriptor set layout (n storage
// buffers) and, per argument size, one pipeline layout. Descriptor sets are cached per tuple
// of bound buffers (buffer offsets travel in the arguments), so recording the same forward
// step twice allocates nothing; a set is freed when one of its buffers is destroyed.
// Not thread-safe: the owning device calls it under its lock.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "gpu/device.h"
#include "gpu/vulkan/vk_loader.h"

namespace dasllama::gpu::vk {

class VulkanBuffer;

class PipelineCache {
public:
    struct Binding {
        VkPipeline pipeline = VK_NULL_HANDLE;
        VkPipelineLayout layout = VK_NULL_HANDLE;
        VkDescriptorSet set = VK_NULL_HANDLE;  // null for a stamp without buffers
        uint32_t push_bytes = 0;
    };

    PipelineCache(const DeviceFunctions& fn, VkDevice device, const DeviceInfo& info);
    ~PipelineCache();
    PipelineCache(const PipelineCache&) = delete;
    PipelineCache& operator=(const PipelineCache&) = delete;

    // Throws DeviceError for a stamp without SPIR-V, a wrong buffer count, arguments over the
    // push-constant limit, or a buffer larger than one storage binding can address.
    Binding bind(const StampInfo& stamp, const std::vector<const VulkanBuffer*>& buffers);
    void forget_buffer(uint64_t id);

    size_t pipeline_count() const { return pipelines_.size(); }
    size_t descriptor_set_count() const { return sets_.size(); }

private:
    struct Pipeline {
        VkPipeline pipeline = VK_NULL_HANDLE;
        VkPipelineLayout layout = VK_NULL_HANDLE;
        VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
        uint32_t push_bytes = 0;
    };
    using SetKey = std::vector<uint64_t>;  // buffer ids, binding order
    struct CachedSet {
        VkDescriptorSet set = VK_NULL_HANDLE;
        VkDescriptorPool pool = VK_NULL_HANDLE;
    };

    const Pipeline& pipeline(const StampInfo& stamp);
    VkDescriptorSetLayout set_layout(uint32_t n_buffers);
    VkPipelineLayout pipeline_layout(uint32_t n_buffers, uint32_t push_bytes);
    CachedSet allocate_set(VkDescriptorSetLayout layout);
    void free_set(const SetKey& key);

    const DeviceFunctions& fn_;
    VkDevice device_;
    const DeviceInfo& info_;
    VkPipelineCache cache_ = VK_NULL_HANDLE;
    std::unordered_map<std::string, Pipeline> pipelines_;
    std::map<uint32_t, VkDescriptorSetLayout> set_layouts_;
    std::map<std::pair<uint32_t, uint32_t>, VkPipelineLayout> pipeline_layouts_;
    std::vector<VkDescriptorPool> pools_;  // the last one is where new sets come from
    std::map<SetKey, CachedSet> sets_;
    std::unordered_map<uint64_t, std::vector<SetKey>> sets_of_buffer_;
};

}  // namespace dasllama::gpu::vk

#include "gpu/vulkan/vk_pipelines.h"

#include <algorithm>

#include "core/errors.h"
#include "gpu/vulkan/vk_memory.h"

namespace dasllama::gpu::vk {

namespace {

constexpr uint32_t kSetsPerPool = 256;
constexpr uint32_t kDescriptorsPerPool = kSetsPerPool * 8;

uint32_t round_up4(uint32_t n) { return (n + 3u) & ~3u; }

}  // namespace

PipelineCache::PipelineCache(const DeviceFunctions& fn, VkDevice device, const DeviceInfo& info)
    : fn_(fn), device_(device), info_(info) {
    VkPipelineCacheCreateInfo ci{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
    VK_CALL(fn_, vkCreatePipelineCache, device_, &ci, nullptr, &cache_);
}

PipelineCache::~PipelineCache() {
    for (auto& [name, p] : pipelines_) fn_.vkDestroyPipeline(device_, p.pipeline, nullptr);
    for (auto& [key, layout] : pipeline_layouts_) fn_.vkDestroyPipelineLayout(device_, layout, nullptr);
    for (auto& [n, layout] : set_layouts_) fn_.vkDestroyDescriptorSetLayout(device_, layout, nullptr);
    // Destroying a pool frees its sets.
    for (VkDescriptorPool pool : pools_) fn_.vkDestroyDescriptorPool(device_, pool, nullptr);
    fn_.vkDestroyPipelineCache(device_, cache_, nullptr);
}

VkDescriptorSetLayout PipelineCache::set_layout(uint32_t n_buffers) {
    auto it = set_layouts_.find(n_buffers);
    if (it != set_layouts_.end()) return it->second;
    std::vector<VkDescriptorSetLayoutBinding> bindings(n_buffers);
    for (uint32_t i = 0; i < n_buffers; ++i) {
        bindings[i].binding = i;
        bindings[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
        bindings[i].descriptorCount = 1;
        bindings[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
    }
    VkDescriptorSetLayoutCreateInfo ci{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
    ci.bindingCount = n_buffers;
    ci.pBindings = bindings.data();
    VkDescriptorSetLayout layout = VK_NULL_HANDLE;
    VK_CALL(fn_, vkCreateDescriptorSetLayout, device_, &ci, nullptr, &layout);
    set_layouts_[n_buffers] = layout;
    return layout;
}

VkPipelineLayout PipelineCache::pipeline_layout(uint32_t n_buffers, uint32_t push_bytes) {
    const auto key = std::make_pair(n_buffers, push_bytes);
    auto it = pipeline_layouts_.find(key);
    if (it != pipeline_layouts_.end()) return it->second;
    VkDescriptorSetLayout sl = set_layout(n_buffers);
    VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes};
    VkPipelineLayoutCreateInfo ci{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
    ci.setLayoutCount = 1;
    ci.pSetLayouts = &sl;
    ci.pushConstantRangeCount = push_bytes ? 1 : 0;
    ci.pPushConstantRanges = push_bytes ? &range : nullptr;
    VkPipelineLayout layout = VK_NULL_HANDLE;
    VK_CALL(fn_, vkCreatePipelineLayout, device_, &ci, nullptr, &layout);
    pipeline_layouts_[key] = layout;
    return layout;
}

const PipelineCache::Pipeline& PipelineCache::pipeline(const StampInfo& stamp) {
    auto it = pipelines_.find(stamp.name);
    if (it != pipelines_.end()) return it->second;
    const std::string what = std::string("stamp '") + stamp.name + "'";
    if (!stamp.spirv || stamp.spirv_words == 0) {
        const char* why = vulkan_stamps_built() ? "it has no Vulkan home"
                                                : vulkan_stamps_missing_reason();
        throw DeviceError(what + " has no SPIR-V in this build: " + std::string(why));
    }
    const uint32_t push_bytes = round_up4(stamp.args_bytes);
    if (push_bytes > info_.max_push_constant_bytes)
        throw DeviceError(what + " takes " + std::to_string(stamp.args_bytes) +
                          " bytes of arguments; " + info_.name + " allows " +
                          std::to_string(info_.max_push_constant_bytes) + " bytes of push constants");
    Pipeline p;
    p.push_bytes = push_bytes;
    p.set_layout = set_layout(stamp.n_buffers);
    p.layout = pipeline_layout(stamp.n_buffers, push_bytes);

    VkShaderModuleCreateInfo mi{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    mi.codeSize = stamp.spirv_words * sizeof(uint32_t);
    mi.pCode = stamp.spirv;
    VkShaderModule module = VK_NULL_HANDLE;
    try {
        VK_CALL(fn_, vkCreateShaderModule, device_, &mi, nullptr, &module);
        VkComputePipelineCreateInfo ci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
        ci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
        ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
        ci.stage.module = module;
        ci.stage.pName = "main";
        ci.layout = p.layout;
        VK_CALL(fn_, vkCreateComputePipelines, device_, cache_, 1, &ci, nullptr, &p.pipeline);
    } catch (const DeviceError& e) {
        if (module) fn_.vkDestroyShaderModule(device_, module, nullptr);
        throw DeviceError(what + ": " + e.what());
    }
    fn_.vkDestroyShaderModule(device_, module, nullptr);
    return pipelines_.emplace(stamp.name, p).first->second;
}

PipelineCache::CachedSet PipelineCache::allocate_set(VkDescriptorSetLayout layout) {
    VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
    ai.descriptorSetCount = 1;
    ai.pSetLayouts = &layout;
    CachedSet out;
    if (!pools_.empty()) {
        ai.descriptorPool = pools_.back();
        const VkResult r = fn_.vkAllocateDescriptorSets(device_, &ai, &out.set);
        if (r == VK_SUCCESS) {
            out.pool = pools_.back();
            return out;
        }
        // A full or fragmented pool is expected; anything else is an error.
        if (r != VK_ERROR_OUT_OF_POOL_MEMORY && r != VK_ERROR_FRAGMENTED_POOL)
            check(r, "vkAllocateDescriptorSets");
    }
    VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kDescriptorsPerPool};
    VkDescriptorPoolCreateInfo pi{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
    pi.flags = VK_DESCRIPTOR_POOL_CREATE_FREE_DESCRIPTOR_SET_BIT;
    pi.maxSets = kSetsPerPool;
    pi.poolSizeCount = 1;
    pi.pPoolSizes = &size;
    VkDescriptorPool pool = VK_NULL_HANDLE;
    VK_CALL(fn_, vkCreateDescriptorPool, device_, &pi, nullptr, &pool);
    pools_.push_back(pool);
    ai.descriptorPool = pool;
    VK_CALL(fn_, vkAllocateDescriptorSets, device_, &ai, &out.set);
    out.pool = pool;
    return out;
}

PipelineCache::Binding PipelineCache::bind(const StampInfo& stamp,
                                           const std::vector<const VulkanBuffer*>& buffers) {
    if (buffers.size() != stamp.n_buffers)
        throw DeviceError(std::string("stamp '") + stamp.name + "' binds " +
                          std::to_string(stamp.n_buffers) + " buffers, got " +
                          std::to_string(buffers.size()));
    for (size_t i = 0; i < buffers.size(); ++i) {
        const uint64_t bytes = buffers[i]->size();
        if (bytes > info_.max_storage_range)
            throw DeviceError(std::string("stamp '") + stamp.name + "' binding " +
                              std::to_string(i) + ": buffer '" + buffers[i]->label() + "' is " +
                              std::to_string(bytes) + " bytes, over " + info_.name +
                              "'s storage-binding range of " +
                              std::to_string(info_.max_storage_range) +
                              " bytes; split the tensor by rows");
    }
    const Pipeline& p = pipeline(stamp);
    Binding out{p.pipeline, p.layout, VK_NULL_HANDLE, p.push_bytes};
    if (buffers.empty()) return out;

    SetKey key(buffers.size());
    for (size_t i = 0; i < buffers.size(); ++i) key[i] = buffers[i]->id();
    auto it = sets_.find(key);
    if (it != sets_.end()) {
        out.set = it->second.set;
        return out;
    }
    CachedSet cs = allocate_set(p.set_layout);
    std::vector<VkDescriptorBufferInfo> infos(buffers.size());
    std::vector<VkWriteDescriptorSet> writes(buffers.size());
    for (size_t i = 0; i < buffers.size(); ++i) {
        infos[i] = {buffers[i]->handle(), 0, VK_WHOLE_SIZE};
        writes[i] = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
        writes[i].dstSet = cs.set;
        writes[i].dstBinding = static_cast<uint32_t>(i);
        writes[i].descriptorCount = 1;
        writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
        writes[i].pBufferInfo = &infos[i];
    }
    fn_.vkUpdateDescriptorSets(device_, static_cast<uint32_t>(writes.size()), writes.data(), 0,
                               nullptr);
    sets_.emplace(key, cs);
    SetKey unique_ids = key;
    std::sort(unique_ids.begin(), unique_ids.end());
    unique_ids.erase(std::unique(unique_ids.begin(), unique_ids.end()), unique_ids.end());
    for (uint64_t id : unique_ids) sets_of_buffer_[id].push_back(key);
    out.set = cs.set;
    return out;
}

void PipelineCache::free_set(const SetKey& key) {
    auto it = sets_.find(key);
    if (it == sets_.end()) return;
    fn_.vkFreeDescriptorSets(device_, it->second.pool, 1, &it->second.set);
    sets_.erase(it);
    for (uint64_t id : key) {
        auto lit = sets_of_buffer_.find(id);
        if (lit == sets_of_buffer_.end()) continue;
        auto& keys = lit->second;
        keys.erase(std::remove(keys.begin(), keys.end(), key), keys.end());
        if (keys.empty()) sets_of_buffer_.erase(lit);
    }
}

void PipelineCache::forget_buffer(uint64_t id) {
    auto it = sets_of_buffer_.find(id);
    if (it == sets_of_buffer_.end()) return;
    const std::vector<SetKey> keys = it->second;  // free_set edits the index
    for (const SetKey& key : keys) free_set(key);
}

}  // namespace dasllama::gpu::vk

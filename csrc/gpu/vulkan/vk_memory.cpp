// Buffers and transfers: memory-type choice, allocation with errors that name the size and
// label, and synchronous upload/download through a reusable staging buffer.
#include "gpu/vulkan/vk_memory.h"

#include <algorithm>
#include <cstring>

#include "core/errors.h"
#include "gpu/vulkan/vk_device.h"

namespace dasllama::gpu::vk {

namespace {

// Transfers larger than this go through the staging buffer in pieces.
constexpr size_t kStagingMaxBytes = size_t(64) << 20;
constexpr size_t kStagingMinBytes = size_t(1) << 20;

std::atomic<uint64_t> next_buffer_id{1};

// The first memory type allowed by `bits` with every `required` flag, trying in turn: all
// `preferred` flags and none of `avoided`; all `preferred`; any. ~0u when none has `required`.
uint32_t choose_memory_type(const VkPhysicalDeviceMemoryProperties& mp, uint32_t bits,
                            VkMemoryPropertyFlags required, VkMemoryPropertyFlags preferred,
                            VkMemoryPropertyFlags avoided) {
    for (int pass = 0; pass < 3; ++pass) {
        for (uint32_t i = 0; i < mp.memoryTypeCount; ++i) {
            if (!(bits & (1u << i))) continue;
            const VkMemoryPropertyFlags f = mp.memoryTypes[i].propertyFlags;
            if ((f & required) != required) continue;
            if (pass < 2 && (f & preferred) != preferred) continue;
            if (pass < 1 && (f & avoided)) continue;
            return i;
        }
    }
    return ~0u;
}

std::string mib(uint64_t bytes) {
    return std::to_string(bytes) + " bytes (" + std::to_string((bytes + (1u << 19)) >> 20) + " MiB)";
}

void check_range(const Buffer& b, size_t offset, size_t bytes, const char* what) {
    if (offset > b.size() || bytes > b.size() - offset)
        throw ShapeError(std::string(what) + ": bytes [" + std::to_string(offset) + ", " +
                         std::to_string(offset) + " + " + std::to_string(bytes) +
                         ") fall outside a buffer of " + std::to_string(b.size()) + " bytes");
}

}  // namespace

Allocation allocate(const DeviceFunctions& fn, VkDevice device, const PhysicalDevice& pd,
                    size_t bytes, bool host_visible, const char* label) {
    const DeviceInfo& info = pd.info;
    const std::string what = std::string(host_visible ? "host-visible" : "device") + " buffer '" +
                             (label ? label : "") + "' of " + mib(bytes) + " on " + info.name;
    if (info.max_allocation_bytes && bytes > info.max_allocation_bytes)
        throw DeviceError("cannot allocate " + what + ": the driver allocates at most " +
                          mib(info.max_allocation_bytes) + " at once");
    Allocation a;
    a.bytes = bytes;
    // Vulkan has no empty buffers, and fills work in whole words: round up to 4 bytes.
    VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
    bi.size = std::max<VkDeviceSize>(4, (static_cast<VkDeviceSize>(bytes) + 3) & ~VkDeviceSize(3));
    bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
               VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
    try {
        VK_CALL(fn, vkCreateBuffer, device, &bi, nullptr, &a.buffer);
        VkMemoryRequirements req{};
        fn.vkGetBufferMemoryRequirements(device, a.buffer, &req);
        // Device buffers avoid host-visible types (a small BAR window on discrete GPUs);
        // host buffers prefer cached memory, which the CPU reads back quickly.
        const VkMemoryPropertyFlags host_flags =
            VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
        const uint32_t type =
            host_visible
                ? choose_memory_type(pd.memory, req.memoryTypeBits, host_flags,
                                     VK_MEMORY_PROPERTY_HOST_CACHED_BIT, 0)
                : choose_memory_type(pd.memory, req.memoryTypeBits,
                                     VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0,
                                     VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT);
        if (type == ~0u) throw DeviceError("no suitable memory type");
        VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
        ai.allocationSize = req.size;
        ai.memoryTypeIndex = type;
        const VkResult r = fn.vkAllocateMemory(device, &ai, nullptr, &a.memory);
        if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY)
            throw DeviceError(std::string("out of memory (") + result_name(r) + ")");
        check(r, "vkAllocateMemory");
        VK_CALL(fn, vkBindBufferMemory, device, a.buffer, a.memory, 0);
        if (host_visible) VK_CALL(fn, vkMapMemory, device, a.memory, 0, VK_WHOLE_SIZE, 0, &a.mapped);
    } catch (const DeviceError& e) {
        release(fn, device, a);
        throw DeviceError("cannot allocate " + what + ": " + e.what());
    }
    return a;
}

void release(const DeviceFunctions& fn, VkDevice device, Allocation& a) {
    if (a.mapped) fn.vkUnmapMemory(device, a.memory);
    if (a.buffer) fn.vkDestroyBuffer(device, a.buffer, nullptr);
    if (a.memory) fn.vkFreeMemory(device, a.memory, nullptr);
    a = Allocation{};
}

VulkanBuffer::~VulkanBuffer() {
    owner_->on_buffer_destroyed(id_);
    release(owner_->fn(), owner_->handle(), a_);
}

std::unique_ptr<Buffer> VulkanDevice::make_buffer(size_t bytes, bool host, const char* label) {
    Allocation a = allocate(fn_, device_, pd_, bytes, host, label);
    const uint64_t id = next_buffer_id.fetch_add(1);
    {
        std::lock_guard<std::mutex> lock(mutex_);
        live_buffers_.insert(id);
    }
    return std::make_unique<VulkanBuffer>(shared_from_this(), a, label ? label : "", id);
}

std::unique_ptr<Buffer> VulkanDevice::alloc(size_t bytes, const char* label) {
    return make_buffer(bytes, false, label);
}

std::unique_ptr<Buffer> VulkanDevice::alloc_host(size_t bytes, const char* label) {
    return make_buffer(bytes, true, label);
}

void VulkanDevice::ensure_staging(size_t bytes) {
    if (staging_.bytes >= bytes) return;
    size_t want = std::max(kStagingMinBytes, staging_.bytes * 2);
    while (want < bytes) want *= 2;
    want = std::min(want, kStagingMaxBytes);
    release(fn_, device_, staging_);
    staging_ = allocate(fn_, device_, pd_, std::max(want, bytes), true, "staging");
}

void VulkanDevice::submit_and_wait(VkCommandBuffer cb) {
    VK_CALL(fn_, vkResetFences, device_, 1, &fence_);
    VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
    si.commandBufferCount = 1;
    si.pCommandBuffers = &cb;
    VK_CALL(fn_, vkQueueSubmit, queue_, 1, &si, fence_);
    VK_CALL(fn_, vkWaitForFences, device_, 1, &fence_, VK_TRUE, UINT64_MAX);
}

template <class Record>
void VulkanDevice::run_transfer(Record&& record) {
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    VK_CALL(fn_, vkBeginCommandBuffer, transfer_cb_, &bi);
    // Earlier submissions' writes (kernels, copies) before this copy reads or overwrites.
    VkMemoryBarrier before{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    before.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    before.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    fn_.vkCmdPipelineBarrier(transfer_cb_,
                             VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                             VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &before, 0, nullptr, 0, nullptr);
    record(transfer_cb_);
    // The copy's writes, visible to the host (download) and to later submissions.
    VkMemoryBarrier after{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    after.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
    after.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    fn_.vkCmdPipelineBarrier(transfer_cb_, VK_PIPELINE_STAGE_TRANSFER_BIT,
                             VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &after, 0, nullptr, 0, nullptr);
    VK_CALL(fn_, vkEndCommandBuffer, transfer_cb_);
    submit_and_wait(transfer_cb_);
}

void VulkanDevice::upload(Buffer& dst, size_t offset, const void* src, size_t bytes) {
    VulkanBuffer& d = own(dst, "upload");
    check_range(d, offset, bytes, ("upload to '" + d.label() + "'").c_str());
    if (bytes == 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    if (void* p = d.mapped()) {  // host-visible and coherent: no GPU work pending (submits wait)
        std::memcpy(static_cast<char*>(p) + offset, src, bytes);
        return;
    }
    ensure_staging(std::min(bytes, kStagingMaxBytes));
    const char* from = static_cast<const char*>(src);
    for (size_t done = 0; done < bytes;) {
        const size_t n = std::min(bytes - done, staging_.bytes);
        std::memcpy(staging_.mapped, from + done, n);
        run_transfer([&](VkCommandBuffer cb) {
            VkBufferCopy region{0, offset + done, n};
            fn_.vkCmdCopyBuffer(cb, staging_.buffer, d.handle(), 1, &region);
        });
        done += n;
    }
}

void VulkanDevice::download(Buffer& src, size_t offset, void* dst, size_t bytes) {
    VulkanBuffer& s = own(src, "download");
    check_range(s, offset, bytes, ("download from '" + s.label() + "'").c_str());
    if (bytes == 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    if (const void* p = s.mapped()) {
        std::memcpy(dst, static_cast<const char*>(p) + offset, bytes);
        return;
    }
    ensure_staging(std::min(bytes, kStagingMaxBytes));
    char* to = static_cast<char*>(dst);
    for (size_t done = 0; done < bytes;) {
        const size_t n = std::min(bytes - done, staging_.bytes);
        run_transfer([&](VkCommandBuffer cb) {
            VkBufferCopy region{offset + done, 0, n};
            fn_.vkCmdCopyBuffer(cb, s.handle(), staging_.buffer, 1, &region);
        });
        std::memcpy(to + done, staging_.mapped, n);
        done += n;
    }
}

}  // namespace dasllama::gpu::vk

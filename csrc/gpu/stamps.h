// The table of kernel stamps, generated at build time from shaders/stamps.txt: for each stamp its
// name, the template it instantiates, its binding count and argument-block size (taken from the
// template's BUFFERS and ARGS lists, so the host cannot disagree with the kernel), and its code
// for each home (SPIR-V words for Vulkan, flattened MSL text for Metal).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace dasllama::gpu {

struct StampInfo {
    const char* name;          // e.g. "matvec_q4_0"
    const char* family;        // the template, e.g. "matvec"
    uint32_t n_buffers;        // storage buffers at bindings 0..n_buffers-1
    uint32_t args_bytes;       // size of the push-constant argument block
    uint32_t wg_size;          // threads per workgroup (x; y = z = 1)
    const uint32_t* spirv;     // nullptr when this build compiled no Vulkan stamps
    size_t spirv_words;
    const char* msl;           // flattened Metal source, nullptr when not generated
};

// Every stamp of this build, in stamps.txt order.
const StampInfo* stamps_begin();
const StampInfo* stamps_end();

// The stamp called `name`, or nullptr.
const StampInfo* find_stamp(std::string_view name);

// Whether this build carries SPIR-V for its stamps; when not, why (e.g. no shader compiler).
bool vulkan_stamps_built();
const char* vulkan_stamps_missing_reason();

}  // namespace dasllama::gpu

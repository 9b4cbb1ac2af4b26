// Admission rule of Whisper's encoder seat (gpu_encoder.h): a pure function of the model's
// widths and the device's binding range, so it is tested without a model or a device. A rule
// that fails names the limit; the seat then declines (`shape`) and the CPU encoder serves.
//
// The limits are the kernels' (shaders/kernels): attention_f32 holds one query's scores in
// workgroup memory (GK_ATTN32_KEYS) and a head's dimensions in one workgroup
// (GK_ATTN32_DMAX); the encoder's attention runs one workgroup per (head, frame) in x; every
// activation buffer is one storage binding indexed by 32-bit element offsets.
#pragma once

#include <cstdint>
#include <string>

namespace dasllama::whisper {

constexpr int64_t kGpuMaxKeys = 4096;          // GK_ATTN32_KEYS
constexpr int64_t kGpuMaxHeadDim = 128;        // GK_ATTN32_DMAX
constexpr int64_t kGpuMaxGroupsX = 65535;      // workgroups every device allows in x
constexpr int64_t kGpuMaxElements = (int64_t(1) << 31) - 1;   // int32 element offsets

// What sizes the encoder's buffers (from the weights' configuration).
struct EncoderGpuDims {
    int64_t n_mels = 0, n_ctx = 0, d = 0, heads = 0, ff = 0, layers = 0;
};

// "" when the encoder fits; else which limit it passes.
std::string gpu_encoder_unfit(const EncoderGpuDims& e, uint64_t max_binding_bytes);

// The largest activation buffer (elements) and its name.
int64_t gpu_encoder_largest(const EncoderGpuDims& e, std::string* name = nullptr);

}  // namespace dasllama::whisper

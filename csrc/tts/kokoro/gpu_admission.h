// Admission rules of Kokoro's vocoder seat (decoder + generator on a GPU): pure functions of the
// model's widths and a call's frames, so they are tested without a model or a device. A rule
// that fails names the limit; the seat then declines (`shape`) and the CPU chain serves the call.
//
// The limits are the kernels' (shaders/kernels): every buffer is one storage binding (the
// device's max_storage_range; lavapipe's is 128 MiB) indexed by 32-bit element offsets, and
// mean_rows averages at most kGpuMaxResblocks blocks per upsampling stage.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dasllama::kokoro {

// Operands of mean_rows (shaders/kernels/mean_rows.gk.h).
constexpr int64_t kGpuMaxResblocks = 4;
// Elements one buffer may hold: the kernels index with int32 positions.
constexpr int64_t kGpuMaxElements = (int64_t(1) << 31) - 1;

// What sizes a call's buffers: read from the weights at load (vocoder_gpu_dims).
struct VocoderGpuDims {
    int64_t decoder_rows = 0;       // the widest decoder buffer's channels (a stacked input)
    int64_t decoder_out = 0;        // the decoder's output channels (at twice the frame rate)
    std::vector<int64_t> stage_channels;   // each upsampling stage's channels
    std::vector<int64_t> stage_strides;    // ... and its upsampling factor
    int64_t resblocks = 0;          // residual blocks per stage
    int64_t bins = 0;               // n_fft / 2 + 1
    int64_t hop = 0;
    int64_t harmonics = 0;
    int64_t upsample = 0;           // source samples per F0 value
    int64_t largest_weight = 0;     // elements of the largest weight tensor
};

// "" when a call of `frames` frames fits buffers of max_binding_bytes each.
std::string gpu_vocoder_unfit(const VocoderGpuDims& d, int64_t frames, uint64_t max_binding_bytes);

// The largest buffer of a call (elements) and its name, for the rule above and for reserving.
int64_t gpu_vocoder_largest(const VocoderGpuDims& d, int64_t frames, std::string* name = nullptr);

}  // namespace dasllama::kokoro

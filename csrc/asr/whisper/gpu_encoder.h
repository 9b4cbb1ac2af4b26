// Whisper's audio encoder on a GPU: the encoder seat (gpu/seat.h). The seat takes a mel window
// and gives the encoder output [n_audio_ctx, d] back to the CPU, whose decoder projects its
// cross-attention keys and values from it as it does from the CPU encoder's.
//
// The weights are uploaded as the loaded model holds them (float32 in the f32 lane, Q8_0 in the
// int8 lane: csrc/gpu/matrix.cpp's products read both); convolutions, norms, biases and
// positions as float32. One recording of every dispatch (conv1d, gelu_erf, layernorm, the matrix
// products, add_scale for biases, rows_copy and attention_f32 for the bidirectional attention)
// is made at the first call and submitted again for every later window. All arithmetic is
// float32; the int8 lane's CPU encoder rounds its activations to 8 bits (or bfloat16) where this
// seat does not, so that lane differs from the CPU by those roundings (tests/test_whisper_gpu.py
// states the bars).
//
// A call declines (and the CPU encoder serves it) when the seat is off (knob:
// DASLLAMA_SEAT_ENCODER=0 or set_enabled), when the model needs what the kernels do not cover
// (shape: gpu_admission.h's rule, or a weight format without kernels), when its buffers could
// not be had (memory), or when the device fails mid-call (gpu_error). last_reason() says why.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "asr/whisper/gpu_admission.h"
#include "asr/whisper/weights.h"
#include "gpu/device.h"
#include "gpu/seat.h"

namespace dasllama::whisper {

class EncoderGpu {
public:
    // Opens the device (DeviceError naming the devices there are when `spec` matches none) and
    // uploads the weights; weights it cannot take leave the seat declining with a reason.
    EncoderGpu(const WhisperWeights& w, const std::string& spec);
    ~EncoderGpu();
    EncoderGpu(const EncoderGpu&) = delete;
    EncoderGpu& operator=(const EncoderGpu&) = delete;

    std::string device_name() const;
    const gpu::SeatStats& stats() const { return stats_; }
    uint64_t bytes_up() const { return bytes_up_; }
    uint64_t bytes_down() const { return bytes_down_; }
    uint64_t weight_bytes() const { return weight_bytes_; }
    const std::string& last_reason() const { return reason_; }
    void set_enabled(bool on) { on_ = on; }
    bool enabled() const { return on_; }

    // Whether the seat takes the next window; counts the decline (and sets last_reason) when not.
    bool admit();
    void decline(gpu::Decline why, const std::string& reason);
    // window [n_mels, 2 * n_audio_ctx] -> out [n_audio_ctx, d] (resized). admit first. Throws
    // DeviceError (the caller declines with gpu_error and runs the CPU encoder).
    void run(const float* window, std::vector<float>& out);
    // Profiling: the next window records the encoder afresh with a timestamp around every
    // dispatch; last_profile() holds the times of the last window served.
    void set_profiling(bool on);
    std::vector<gpu::KernelTime> last_profile() const;

    struct Impl;

private:
    std::unique_ptr<Impl> p_;
    gpu::SeatStats stats_;
    uint64_t bytes_up_ = 0, bytes_down_ = 0, weight_bytes_ = 0;
    gpu::Decline absent_ = gpu::Decline::device;
    std::string absent_why_, reason_;
    bool on_ = true, resident_ = false;
};

}  // namespace dasllama::whisper

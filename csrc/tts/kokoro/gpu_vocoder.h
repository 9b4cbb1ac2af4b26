// Kokoro's decoder and generator (stages 6-7) on a GPU: the vocoder seat (gpu/seat.h). The
// predictor (stages 1-5) stays on the CPU, so the durations are the CPU's exactly; the seat takes
// its prediction (asr, F0, N) and the style row and gives the audio.
//
// The int8 weights are dequantized once at load, (q - zero point) * scale, to float32 device
// buffers; the float ones (transposed convolutions, conv_post, the STFT's window and basis) are
// uploaded as they are. One call records one command buffer: every dispatch a stamp of the
// shared templates (adain, conv1d, conv_tr1d, harmonic_source, stft, istft, mean_rows, rows),
// with a barrier between dependent ones. On devices with cooperative matrices the dense
// convolutions, plain and transposed, of 32 input channels or more run conv1d_coopmat
// (gpu/conv.h: float16 operands, float32 sums; knob vulkan.conv.coopmat). The CPU chain
// quantizes its activations to int8 on the fly; this seat computes in float32 (or float16
// operands), so the two differ by that quantization (the bar of tests/test_kokoro_gpu.py,
// measured).
//
// A call declines (and the CPU chain serves it) when the seat is off (knob: DASLLAMA_SEAT_VOCODER=0
// or set_enabled), when the weights or the call need what the kernels do not cover (shape:
// SineGen's noise, a peer's source spectrum, buffers past the device's binding range; the rule is
// gpu_admission.h's), when the weights or a call's buffers could not be had (memory), or when
// the device fails mid-call (gpu_error). last_reason() says why in words.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpu/device.h"
#include "gpu/seat.h"
#include "tts/kokoro/gpu_admission.h"
#include "tts/kokoro/weights.h"

namespace dasllama::kokoro {

class VocoderGpu {
public:
    // Opens the device (DeviceError naming the devices there are when `spec` matches none) and
    // uploads the weights; weights it cannot take leave the seat declining with a reason.
    VocoderGpu(const KokoroWeights& w, const std::string& spec);
    ~VocoderGpu();
    VocoderGpu(const VocoderGpu&) = delete;
    VocoderGpu& operator=(const VocoderGpu&) = delete;

    std::string device_name() const;
    const gpu::SeatStats& stats() const { return stats_; }
    uint64_t bytes_up() const { return bytes_up_; }       // inputs sent for served calls
    uint64_t bytes_down() const { return bytes_down_; }   // audio read back for served calls
    uint64_t weight_bytes() const { return weight_bytes_; }
    const std::string& last_reason() const { return reason_; }
    const VocoderGpuDims& dims() const;
    void set_enabled(bool on) { on_ = on; }
    bool enabled() const { return on_; }
    // Times every dispatch of the next calls (the device's timestamps); last_profile() holds
    // the times of the last call served.
    void set_profiling(bool on);
    std::vector<gpu::KernelTime> last_profile() const;

    // Whether the seat takes a call of `frames` frames; plain: no SineGen noise and no peer's
    // source spectrum. Counts the decline (and sets last_reason) when not.
    bool admit(int64_t frames, bool plain);
    void decline(gpu::Decline why, const std::string& reason);
    // asr [asr_channels, frames], f0 and n [2 frames], the style row (its decoder part first) ->
    // audio (resized). admit first. Throws DeviceError (the caller declines with gpu_error).
    void run(const float* asr, int64_t frames, const float* f0, const float* n,
             const float* style, std::vector<float>& audio);

    struct Impl;

private:
    std::unique_ptr<Impl> p_;
    gpu::SeatStats stats_;
    uint64_t bytes_up_ = 0, bytes_down_ = 0, weight_bytes_ = 0;
    gpu::Decline absent_ = gpu::Decline::device;
    std::string absent_why_, reason_;
    bool on_ = true, resident_ = false;
};

}  // namespace dasllama::kokoro

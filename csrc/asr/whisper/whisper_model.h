// Whisper on the CPU: the stages of one model file behind one object (weights.h, mel.h,
// encoder.h, decoder.h, greedy.h, beam.h, sampling.h). The window loop of a long clip
// (seeking, prompts from earlier text, segments) is dasllama.asr's. On a GPU device the encoder
// is a seat (gpu_encoder.h) that serves each window or declines it to the CPU encoder. Not
// thread-safe: one call at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "asr/whisper/alignment.h"
#include "asr/whisper/beam.h"
#include "asr/whisper/decoder.h"
#include "asr/whisper/encoder.h"
#include "asr/whisper/greedy.h"
#include "asr/whisper/mel.h"
#include "asr/whisper/sampling.h"
#include "asr/whisper/weights.h"
#include "core/thread_pool.h"

namespace dasllama::whisper {

class EncoderGpu;

class WhisperModel {
public:
    // n_threads <= 0: the physical cores. compute: the linears' lane (weights.h). device:
    // "cpu", or a GPU spec for gpu::open_device (the encoder seat); an unknown or missing device
    // throws DeviceError naming the devices there are.
    WhisperModel(const std::string& path, int n_threads, ComputeType compute = ComputeType::kF32,
                 const std::string& device = "cpu");
    ~WhisperModel();

    // The encoder seat on a GPU device, nullptr on the CPU.
    EncoderGpu* gpu() const { return gpu_.get(); }

    const WhisperConfig& config() const { return w_->cfg; }
    int n_threads() const { return pool_.size(); }

    // audio [n] (16 kHz float32) -> mel [n_mels, n / hop + 1].
    void log_mel(const float* audio, int64_t n, std::vector<float>& mel);
    // Frames [f0, f0 + nf) of log_mel's mel of a clip of n samples from the samples
    // [offset, offset + avail) at span (MelFrontEnd::raw_frames): the log10 values, or with
    // finish, the values log_mel gives a clip whose largest log10 value is top.
    void log_mel_frames(const float* span, int64_t offset, int64_t avail, int64_t n, int64_t f0,
                        int64_t nf, bool finish, float top, std::vector<float>& out);
    // window [n_mels, 2 * n_audio_ctx] -> encoder output [n_audio_ctx, d]; also makes it the
    // decoder's window when set_window is true.
    void encode(const float* window, std::vector<float>& out, bool set_window = true);
    // Makes enc [n_audio_ctx, d] the decoder's window (its cross-attention cache).
    void set_window(const float* enc);
    // Logits [n, n_vocab] of tokens [n] from position 0 on the current window.
    void decoder_logits(const int32_t* tokens, int64_t n, std::vector<float>& out);
    // Greedy decoding on the current window (beam search when b.beam_size > 1).
    DecodeResult generate(const std::vector<int32_t>& prompt, const DecodeOptions& o,
                          const BeamOptions& b = BeamOptions{1, 1.0f, 1.0f});
    // Sampling at s.temperature > 0 on the current window (sampling.h).
    DecodeResult sample(const std::vector<int32_t>& prompt, const DecodeOptions& o,
                        const SampleOptions& s);
    // Word alignment of text_tokens on the current window (alignment.h).
    AlignmentResult align(const std::vector<int32_t>& sot_sequence,
                          const std::vector<int32_t>& text_tokens, int64_t num_frames,
                          const AlignOptions& o = AlignOptions{});

private:
    std::shared_ptr<WhisperWeights> w_;
    ThreadPool pool_;
    MelFrontEnd mel_;
    Encoder encoder_;
    Decoder decoder_;
    std::unique_ptr<EncoderGpu> gpu_;
};

}  // namespace dasllama::whisper

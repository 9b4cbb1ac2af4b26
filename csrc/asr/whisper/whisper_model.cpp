#include "asr/whisper/whisper_model.h"

#include "asr/whisper/gpu_encoder.h"
#include "core/errors.h"

namespace dasllama::whisper {

WhisperModel::WhisperModel(const std::string& path, int n_threads, ComputeType compute,
                           const std::string& device)
    : w_(load_whisper(path, compute)), pool_(n_threads), mel_(*w_), encoder_(*w_),
      decoder_(*w_, pool_.size()) {
    if (device != "cpu") gpu_ = std::make_unique<EncoderGpu>(*w_, device);
}

WhisperModel::~WhisperModel() = default;

void WhisperModel::log_mel(const float* audio, int64_t n, std::vector<float>& mel) {
    mel_.compute(audio, n, mel, pool_);
}

void WhisperModel::log_mel_frames(const float* span, int64_t offset, int64_t avail, int64_t n,
                                  int64_t f0, int64_t nf, bool finish, float top,
                                  std::vector<float>& out) {
    mel_.raw_frames(span, offset, avail, n, f0, nf, out, pool_);
    if (finish) MelFrontEnd::finish(out.data(), int64_t(out.size()), top);
}

void WhisperModel::encode(const float* window, std::vector<float>& out, bool set) {
    bool served = false;
    if (gpu_ && gpu_->admit()) {
        try {
            gpu_->run(window, out);
            served = true;
        } catch (const DeviceError& e) {
            gpu_->decline(gpu::Decline::gpu_error, e.what());
        }
    }
    if (!served) encoder_.run(window, out, pool_);
    if (set) decoder_.set_audio(out.data(), pool_);
}

void WhisperModel::set_window(const float* enc) { decoder_.set_audio(enc, pool_); }

void WhisperModel::decoder_logits(const int32_t* tokens, int64_t n, std::vector<float>& out) {
    decoder_.reset();
    const float* h = decoder_.forward(tokens, n, pool_);
    out.resize(size_t(n * w_->cfg.n_vocab));
    decoder_.logits(h, n, out.data(), pool_);
}

DecodeResult WhisperModel::generate(const std::vector<int32_t>& prompt, const DecodeOptions& o,
                                    const BeamOptions& b) {
    if (b.beam_size > 1) return beam_decode(decoder_, w_->cfg, prompt, o, b, pool_);
    return greedy_decode(decoder_, w_->cfg, prompt, o, pool_);
}

DecodeResult WhisperModel::sample(const std::vector<int32_t>& prompt, const DecodeOptions& o,
                                  const SampleOptions& s) {
    return sample_decode(decoder_, w_->cfg, prompt, o, s, pool_);
}

AlignmentResult WhisperModel::align(const std::vector<int32_t>& sot_sequence,
                                    const std::vector<int32_t>& text_tokens, int64_t num_frames,
                                    const AlignOptions& o) {
    return whisper::align(decoder_, *w_, sot_sequence, text_tokens, num_frames, o, pool_);
}

}  // namespace dasllama::whisper

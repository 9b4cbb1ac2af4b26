#include "asr/whisper/encoder.h"

#include <cmath>

#include "asr/whisper/blocks.h"
#include "cpu/ops.h"
#include "nn/activations.h"
#include "nn/layer_norm.h"

namespace dasllama::whisper {


void Encoder::run(const float* window, std::vector<float>& out, ThreadPool& pool) {
    const WhisperConfig& c = w_.cfg;
    const int64_t T = c.n_frames(), n = c.n_audio_ctx, d = c.n_audio_state;
    const int64_t hd = d / c.n_audio_head;
    // [n_mels, T] -> time-major [T, n_mels] for the convolutions
    in_.resize(size_t(T * c.n_mels));
    for (int64_t m = 0; m < c.n_mels; ++m)
        for (int64_t t = 0; t < T; ++t) in_[size_t(t * c.n_mels + m)] = window[m * T + t];
    if (w_.precision == cpu::Precision::kF32) {   // bias and GELU fused into the products
        w_.conv1.forward_gelu(in_.data(), T, c1_, pool);
        w_.conv2.forward_gelu(c1_.data(), T, out, pool);
    } else {
        w_.conv1.forward(in_.data(), T, c1_, pool);
        nn::gelu_erf(c1_.data(), int64_t(c1_.size()), pool);
        w_.conv2.forward(c1_.data(), T, out, pool);
        nn::gelu_erf(out.data(), int64_t(out.size()), pool);
    }
    float* x = out.data();
    cpu::add(x, w_.enc_pos.data(), n * d);

    h_.resize(size_t(n * d));
    qkv_.resize(size_t(n * 3 * d));
    attn_.resize(size_t(n * d));
    proj_.resize(size_t(n * d));
    ff_.resize(size_t(n * 4 * d));
    const float scale = float(1.0 / std::sqrt(double(hd)));
    // Attention stays float32 in both lanes (CTranslate2's int8 lane keeps it so too).
    const nn::AttendPrecision attend = nn::AttendPrecision::kF32;
    for (const EncoderLayer& l : w_.enc) {
        nn::layer_norm(x, l.attn_ln.w.data(), l.attn_ln.b.data(), n, d, kLayerNormEps, h_.data());
        frames_linear(l.qkv, h_.data(), n, qkv_.data(), w_.precision, pool);
        nn::attend_self(qkv_.data(), qkv_.data() + d, qkv_.data() + 2 * d, 3 * d, n,
                        c.n_audio_head, hd, scale, attn_.data(), d, pool, scratch_, attend);
        frames_linear(l.out, attn_.data(), n, proj_.data(), w_.precision, pool);
        cpu::add(x, proj_.data(), n * d);
        frames_mlp(l.mlp_ln, l.fc1, l.fc2, x, n, d, w_.precision, pool, h_.data(), ff_.data(),
                   proj_.data());
    }
    nn::layer_norm(x, w_.ln_post.w.data(), w_.ln_post.b.data(), n, d, kLayerNormEps, x);
}

}  // namespace dasllama::whisper

#include "tts/pocket/voice_encoder.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "core/errors.h"
#include "core/thread_pool.h"
#include "cpu/ops.h"
#include "llm/kv_cache.h"
#include "tts/pocket/blocks.h"
#include "tts/pocket/conv.h"

namespace dasllama::pocket {

std::vector<float> end_on_pause(const float* audio, int64_t n, int64_t sample_rate) {
    const int64_t frame = std::max<int64_t>(1, int64_t(0.02 * double(sample_rate)));
    const int64_t frames = n / frame;
    if (frames == 0) return std::vector<float>(audio, audio + n);
    std::vector<double> db(static_cast<size_t>(frames));
    double loudest = -1e300;
    for (int64_t f = 0; f < frames; ++f) {
        double sq = 0.0;
        for (int64_t i = 0; i < frame; ++i) sq += double(audio[f * frame + i]) * audio[f * frame + i];
        db[size_t(f)] = 20.0 * std::log10(std::sqrt(sq / double(frame)) + 1e-12);
        loudest = std::max(loudest, db[size_t(f)]);
    }
    int64_t last = 0;
    for (int64_t f = 0; f < frames; ++f)
        if (db[size_t(f)] > loudest - 35.0) last = f;
    const int64_t end = (last + 1) * frame;
    const int64_t fade = std::min<int64_t>(int64_t(0.02 * double(sample_rate)), end);
    const int64_t pause = int64_t(0.08 * double(sample_rate));
    std::vector<float> out(audio, audio + end);
    // linspace(1, 0, fade) over the last `fade` samples
    for (int64_t i = 0; i < fade; ++i)
        out[size_t(end - fade + i)] *= fade > 1 ? float(1.0 - double(i) / double(fade - 1)) : 1.0f;
    out.resize(size_t(end + pause), 0.0f);
    return out;
}

std::vector<float> mimi_encode(const PocketConfig& c, const PocketWeights& w, const float* audio,
                               int64_t n, ThreadPool& pool) {
    const SeanetConfig& p = c.enc;
    const int64_t padded = (n + c.frame_size - 1) / c.frame_size * c.frame_size;
    std::vector<float> a(audio, audio + n), b, e, h;
    a.resize(size_t(padded), 0.0f);  // channels = 1: time-major [N, 1]
    int64_t T = padded;

    // SEANet encoder: conv; per stage residual blocks, ELU, strided conv; ELU, conv.
    StreamConv1d(w.enc.in, 1, 1, p.replicate_pad).process(a.data(), T, b, pool);
    const size_t n_stages = p.ratios.size();
    for (size_t s = 0; s < n_stages; ++s) {
        const int64_t ratio = p.ratios[n_stages - 1 - s];
        int64_t dilation = 1;
        for (size_t r = 0; r < w.enc.conv1[s].size(); ++r) {
            e.resize(b.size());
            elu(b.data(), e.data(), int64_t(b.size()));
            StreamConv1d(w.enc.conv1[s][r], 1, dilation, p.replicate_pad).process(e.data(), T, h, pool);
            elu(h.data(), h.data(), int64_t(h.size()));
            StreamConv1d(w.enc.conv2[s][r], 1, 1, p.replicate_pad).process(h.data(), T, a, pool);
            cpu::add(b.data(), a.data(), int64_t(b.size()));
            dilation *= p.dilation_base;
        }
        e.resize(b.size());
        elu(b.data(), e.data(), int64_t(b.size()));
        T = StreamConv1d(w.enc.resample[s], ratio, 1, p.replicate_pad).process(e.data(), T, b, pool);
    }
    e.resize(b.size());
    elu(b.data(), e.data(), int64_t(b.size()));
    T = StreamConv1d(w.enc.out, 1, 1, p.replicate_pad).process(e.data(), T, a, pool);

    // the encoder transformer over the T rows
    const TransformerConfig& t = c.enc_tf;
    if (w.enc_tf.has_in_proj) {
        b.resize(size_t(T * t.d_model));
        cpu::matmul(w.enc_tf.in_proj, a.data(), T, b.data(), pool, cpu::Precision::kF32);
        a.swap(b);
    }
    KVCache cache(t.num_layers, std::max<int64_t>(1, T), t.num_heads, t.head_dim, t.head_dim,
                  KVType::F32);
    TransformerRunner(w.enc_tf, pool.size()).run(a.data(), T, cache, pool, cpu::Precision::kF32);
    if (w.enc_tf.has_out_proj) {
        b.resize(size_t(T * t.output_dim));
        cpu::matmul(w.enc_tf.out_proj, a.data(), T, b.data(), pool, cpu::Precision::kF32);
        a.swap(b);
    }
    if (c.upsample_stride > 1) {
        T = StreamConv1d(w.downsample, c.upsample_stride, 1, true).process(a.data(), T, b, pool);
        a.swap(b);
    }
    a.resize(size_t(T * c.inner_dim));
    return a;
}

std::vector<float> encode_voice(const PocketConfig& c, const PocketWeights& w, const float* audio,
                                int64_t n, ThreadPool& pool, int64_t* n_rows) {
    if (!w.has_encoder)
        throw ShapeError("pocket: this model has no voice encoder (pocket.voice_cloning is false)");
    const std::vector<float> ended = end_on_pause(audio, n, c.sample_rate);
    const std::vector<float> latents = mimi_encode(c, w, ended.data(), int64_t(ended.size()), pool);
    const int64_t T = int64_t(latents.size()) / c.inner_dim, D = c.lm.d_model;
    const int64_t bos = w.bos_voice.empty() ? 0 : 1;
    std::vector<float> rows(size_t((bos + T) * D));
    if (bos) std::copy(w.bos_voice.begin(), w.bos_voice.end(), rows.begin());
    cpu::matmul(w.speaker_proj, latents.data(), T, rows.data() + bos * D, pool,
                cpu::Precision::kF32);
    *n_rows = bos + T;
    return rows;
}

}  // namespace dasllama::pocket

#include "tts/pocket/mimi_decoder.h"

#include <algorithm>

#include "core/thread_pool.h"
#include "cpu/ops.h"

namespace dasllama::pocket {

void grow_kv_cache(std::unique_ptr<KVCache>& cache, int64_t n_ctx) {
    if (cache->n_ctx() >= n_ctx) return;
    const int64_t want = std::max(n_ctx, cache->n_ctx() * 2);
    auto grown = std::make_unique<KVCache>(cache->n_layer(), want, cache->n_head_kv(),
                                           cache->head_dim_k(), cache->head_dim_v(),
                                           cache->type());
    const int64_t n = cache->n_past();
    if (n > 0) {
        std::vector<float> k(size_t(n * cache->n_head_kv() * cache->head_dim_k()));
        std::vector<float> v(size_t(n * cache->n_head_kv() * cache->head_dim_v()));
        for (int il = 0; il < int(cache->n_layer()); ++il) {
            cache->read_layer_rows(il, 0, n, k.data(), v.data());
            grown->kv_cache_append_rows(il, 0, n, k.data(), v.data());
        }
    }
    cache = std::move(grown);
}

MimiDecoder::MimiDecoder(const PocketConfig& c, const PocketWeights& w, int n_threads)
    : c_(c), w_(w), tf_(w.dec_tf, n_threads) {
    if (c.upsample_stride > 1) {
        ConvWeights up;
        up.weight = w.upsample;
        up.d0 = c.outer_dim;
        up.d1 = 1;
        up.k = 2 * c.upsample_stride;
        upsample_ = std::make_unique<StreamConvTr1d>(up, c.upsample_stride, true);
    }
    const TransformerConfig& t = c.dec_tf;
    // Room for 20 s at the encoder frame rate; grows when a chunk runs longer.
    const int64_t ctx = int64_t(20.0 * c.encoder_frame_rate) + 1;
    cache_ = std::make_unique<KVCache>(t.num_layers, ctx, t.num_heads, t.head_dim, t.head_dim,
                                       KVType::F32);
    const SeanetConfig& p = c.dec;
    in_ = std::make_unique<StreamConv1d>(w.dec.in, 1, 1, p.replicate_pad);
    for (size_t s = 0; s < p.ratios.size(); ++s) {
        Stage st{StreamConvTr1d(w.dec.resample[s], p.ratios[s]), {}, {}, {}, {}, {}, {}, {}};
        int64_t dilation = 1;
        for (size_t r = 0; r < w.dec.conv1[s].size(); ++r) {
            st.conv1.emplace_back(w.dec.conv1[s][r], 1, dilation, p.replicate_pad);
            st.conv2.emplace_back(w.dec.conv2[s][r], 1, 1, p.replicate_pad);
            dilation *= p.dilation_base;
        }
        stages_.push_back(std::move(st));
    }
    out_ = std::make_unique<StreamConv1d>(w.dec.out, 1, 1, p.replicate_pad);
}

void MimiDecoder::reset() {
    if (upsample_) upsample_->reset();
    cache_->truncate(0);
    in_->reset();
    for (Stage& s : stages_) {
        s.up.reset();
        for (StreamConv1d& conv : s.conv1) conv.reset();
        for (StreamConv1d& conv : s.conv2) conv.reset();
    }
    out_->reset();
}

void MimiDecoder::decode(const float* latents, int64_t n, std::vector<float>& audio,
                         ThreadPool& pool) {
    if (n <= 0) return;
    const TransformerConfig& t = c_.dec_tf;
    const int64_t Co = c_.outer_dim;
    // Every buffer below has one role, so its size only changes with n: a buffer shared by
    // roles of different sizes would be grown, and zero-filled, every call.

    // quantizer projection and upsampling: x_ [n u, Co]
    q_.resize(size_t(n * Co));
    cpu::matmul(w_.quant_proj, latents, n, q_.data(), pool, cpu::Precision::kF32);
    int64_t T = n;
    if (upsample_) {
        upsample_->process(q_.data(), n, x_, pool);
        T = n * c_.upsample_stride;
    } else {
        x_.assign(q_.begin(), q_.end());
    }

    // the decoder transformer
    if (w_.dec_tf.has_in_proj) {
        proj_.resize(size_t(T * t.d_model));
        cpu::matmul(w_.dec_tf.in_proj, x_.data(), T, proj_.data(), pool, cpu::Precision::kF32);
        x_.swap(proj_);
    }
    grow_kv_cache(cache_, cache_->n_past() + T);
    tf_.run(x_.data(), T, *cache_, pool, cpu::Precision::kF32);
    if (w_.dec_tf.has_out_proj) {
        proj_.resize(size_t(T * t.output_dim));
        cpu::matmul(w_.dec_tf.out_proj, x_.data(), T, proj_.data(), pool, cpu::Precision::kF32);
        x_.swap(proj_);
    }

    // SEANet
    T = in_->process(x_.data(), T, seanet_in_, pool);
    const std::vector<float>* cur = &seanet_in_;
    for (size_t si = 0; si < stages_.size(); ++si) {
        Stage& s = stages_[si];
        s.act.resize(cur->size());
        elu(cur->data(), s.act.data(), int64_t(cur->size()));
        s.up.process(s.act.data(), T, s.x, pool);
        T *= c_.dec.ratios[si];
        for (size_t r = 0; r < s.conv1.size(); ++r) {
            s.act_x.resize(s.x.size());
            elu(s.x.data(), s.act_x.data(), int64_t(s.x.size()));
            s.conv1[r].process(s.act_x.data(), T, s.h, pool);
            elu(s.h.data(), s.h.data(), int64_t(s.h.size()));
            s.conv2[r].process(s.h.data(), T, s.res, pool);
            cpu::add(s.x.data(), s.res.data(), int64_t(s.x.size()));
        }
        cur = &s.x;
    }
    out_act_.resize(cur->size());
    elu(cur->data(), out_act_.data(), int64_t(cur->size()));
    T = out_->process(out_act_.data(), T, out_rows_, pool);
    const int64_t ch = out_->cout();
    const size_t at = audio.size();
    audio.resize(at + size_t(T));
    for (int64_t i = 0; i < T; ++i) audio[at + size_t(i)] = out_rows_[size_t(i * ch)];
}

}  // namespace dasllama::pocket

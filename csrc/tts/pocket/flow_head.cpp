#include "tts/pocket/flow_head.h"

#include <algorithm>
#include <cmath>

#include "core/thread_pool.h"
#include "cpu/matmul.h"
#include "cpu/ops.h"
#include "tts/pocket/blocks.h"

namespace dasllama::pocket {

FlowHead::FlowHead(const PocketConfig& c, const PocketWeights& w) : c_(c), w_(w) {
    const size_t W = size_t(c.flow_dim);
    y_.resize(W);
    sy_.resize(W);
    h_.resize(W);
    x_.resize(W);
    ada_.resize(size_t(c.flow_depth * 3 + 2) * W);  // every block's shift, scale, gate; final
    for (size_t k = 0; k < w.blocks.size(); ++k)
        ada_targets_.push_back({&w.blocks[k].ada.w, ada_.data() + k * 3 * W});
    ada_targets_.push_back({&w.final_ada.w, ada_.data() + w.blocks.size() * 3 * W});
    m_.resize(W);
    v_.resize(size_t(c.latent_dim));
    freq_.resize(size_t(c.flow_freq_dim));
}

void FlowHead::time_embedding(int64_t j, double t, float* out, ThreadPool& pool) {
    const TimeEmbedWeights& te = w_.time[size_t(j)];
    const int64_t half = c_.flow_freq_dim / 2;
    for (int64_t i = 0; i < half; ++i) {
        const double a = t * double(te.freqs[size_t(i)]);
        freq_[size_t(i)] = float(std::cos(a));
        freq_[size_t(half + i)] = float(std::sin(a));
    }
    linear(te.in, freq_.data(), 1, m_.data(), pool);
    silu_inplace(m_.data(), c_.flow_dim);
    linear(te.out, m_.data(), 1, out, pool);
    flow_rms_norm(out, te.alpha.data(), c_.flow_dim, c_.flow_time_norm_eps);
}

const std::vector<float>& FlowHead::time_sums(int64_t steps, ThreadPool& pool) {
    auto it = time_sums_.find(steps);
    if (it != time_sums_.end()) return it->second;
    const int64_t W = c_.flow_dim, n_conds = c_.flow_time_conds;
    std::vector<float> sums(size_t(steps * W), 0.0f);
    std::vector<float> one(static_cast<size_t>(W));
    for (int64_t i = 0; i < steps; ++i) {
        // lsd: (s, t) = (i/n, (i+1)/n); flow_matching: t = i/n.
        const double times[2] = {double(i) / double(steps), double(i + 1) / double(steps)};
        for (int64_t j = 0; j < n_conds; ++j) {
            time_embedding(j, times[j], one.data(), pool);
            for (int64_t d = 0; d < W; ++d) sums[size_t(i * W + d)] += one[size_t(d)];
        }
        if (n_conds)
            for (int64_t d = 0; d < W; ++d) sums[size_t(i * W + d)] /= float(n_conds);
    }
    return time_sums_.emplace(steps, std::move(sums)).first->second;
}

void FlowHead::velocity(const float* cond_y, const float* tsum, const float* x, float* v,
                        ThreadPool& pool) {
    const int64_t W = c_.flow_dim, depth = int64_t(w_.blocks.size());
    for (int64_t d = 0; d < W; ++d) sy_[size_t(d)] = cond_y[d] + (tsum ? tsum[d] : 0.0f);
    silu_inplace(sy_.data(), W);
    linear(w_.flow_input, x, 1, x_.data(), pool);
    // Every block's modulation and the final one read only y: one pool job for them all (the
    // flow head's largest matrices, streamed at once).
    cpu::matmul_shared_input(ada_targets_.data(), int(ada_targets_.size()), sy_.data(), 1, pool,
                             cpu::Precision::kF32);
    for (size_t i = 0; i < ada_targets_.size(); ++i) {
        const Linear& l = i < size_t(depth) ? w_.blocks[i].ada : w_.final_ada;
        if (!l.bias.empty()) cpu::add(ada_targets_[i].y, l.bias.data(), l.w.rows);
    }
    for (int64_t k = 0; k < depth; ++k) {
        const FlowBlockWeights& b = w_.blocks[size_t(k)];
        const float* shift = ada_.data() + k * 3 * W;
        const float* scale = shift + W;
        const float* gate = scale + W;
        layer_norm(x_.data(), b.norm.weight.data(), b.norm.bias.data(), 1, W, c_.flow_norm_eps,
                   h_.data());
        for (int64_t d = 0; d < W; ++d) h_[size_t(d)] = h_[size_t(d)] * (1.0f + scale[d]) + shift[d];
        linear(b.mlp_in, h_.data(), 1, m_.data(), pool);
        silu_inplace(m_.data(), W);
        linear(b.mlp_out, m_.data(), 1, h_.data(), pool);
        for (int64_t d = 0; d < W; ++d) x_[size_t(d)] += gate[d] * h_[size_t(d)];
    }
    const float* shift = ada_.data() + depth * 3 * W;
    const float* scale = shift + W;
    layer_norm(x_.data(), nullptr, nullptr, 1, W, c_.flow_norm_eps, h_.data());
    for (int64_t d = 0; d < W; ++d) h_[size_t(d)] = h_[size_t(d)] * (1.0f + scale[d]) + shift[d];
    linear(w_.final_out, h_.data(), 1, v, pool);
}

void FlowHead::run(const float* cond, const float* eps, float temperature, int64_t steps,
                   float* latent, ThreadPool& pool) {
    const int64_t L = c_.latent_dim;
    if (steps <= 0) steps = c_.lsd_decode_steps;
    std::fill(latent, latent + L, 0.0f);
    if (eps && temperature > 0.0f) {
        const float std_dev = std::sqrt(temperature);
        for (int64_t i = 0; i < L; ++i) latent[i] = std_dev * eps[i];
    }
    std::vector<float> cond_y(size_t(c_.flow_dim));
    linear(w_.cond, cond, 1, cond_y.data(), pool);
    float* v = v_.data();
    switch (c_.flow_type) {
        case FlowType::kLSD:
        case FlowType::kFlowMatching: {
            const std::vector<float>& sums = time_sums(steps, pool);
            for (int64_t i = 0; i < steps; ++i) {
                velocity(cond_y.data(), sums.data() + i * c_.flow_dim, latent, v, pool);
                for (int64_t d = 0; d < L; ++d) latent[d] += v[d] / float(steps);
            }
            break;
        }
        case FlowType::kDrifting:
            velocity(cond_y.data(), nullptr, latent, v, pool);
            std::copy(v, v + L, latent);
            break;
        case FlowType::kPointwise:
            velocity(cond_y.data(), nullptr, latent, v, pool);
            for (int64_t d = 0; d < L; ++d) latent[d] += v[d];
            break;
    }
}

}  // namespace dasllama::pocket

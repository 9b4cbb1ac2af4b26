#include "llm/gpu_weights.h"

#include <algorithm>
#include <cctype>
#include <initializer_list>

#include "core/errors.h"
#include "core/formats.h"

namespace dasllama {

namespace {

using gpu::HostRows;
using gpu::upload_floats;

constexpr int64_t kMaxHeadDim = 256;  // GK_QKV_DMAX, GK_ATTN_DMAX

HostRows rows_of(const cpu::WeightMatrix& m) { return {m.data, m.rows}; }

DeviceMatrix upload_one(gpu::Device& dev, const cpu::WeightMatrix& m, const char* label,
                        uint64_t& bytes) {
    return gpu::upload_matrix(dev, *m.type, m.cols, {rows_of(m)}, label, bytes);
}

bool same_layout(const cpu::WeightMatrix& a, const cpu::WeightMatrix& b) {
    return a.type == b.type && a.cols == b.cols && a.row_bytes == b.row_bytes;
}

std::vector<float> concat(std::initializer_list<const std::vector<float>*> parts) {
    std::vector<float> out;
    for (const std::vector<float>* p : parts) out.insert(out.end(), p->begin(), p->end());
    return out;
}

}  // namespace

std::string device_weights_unsupported(const ModelConfig& cfg, const ModelWeights& w) {
    if (cfg.moe) return "mixture-of-experts layers have no GPU kernels";
    // qkv_rope_store.gk.h holds one head in workgroup memory and packs f16 pairs.
    if (cfg.head_dim != cfg.head_dim_v || cfg.head_dim % 2 != 0 || cfg.head_dim > kMaxHeadDim)
        return "head sizes " + std::to_string(cfg.head_dim) + "/" + std::to_string(cfg.head_dim_v) +
               " (the GPU kernels take equal, even head sizes up to " +
               std::to_string(kMaxHeadDim) + ")";
    auto check = [](const cpu::WeightMatrix& m, const char* what) -> std::string {
        if (!m.type || gpu::device_format(*m.type).empty())
            return std::string(what) + " is " + (m.type ? m.type->name : "missing") +
                   ", a format the GPU kernels do not read";
        return "";
    };
    std::string r = check(w.token_embd, "token_embd.weight");
    if (r.empty()) r = check(w.output, "output.weight");
    for (size_t i = 0; r.empty() && i < w.layers.size(); ++i) {
        const LayerWeights& l = w.layers[i];
        for (auto [m, name] : {std::pair{&l.wq, "attn_q"}, {&l.wk, "attn_k"}, {&l.wv, "attn_v"},
                               {&l.wo, "attn_output"}, {&l.ffn_gate, "ffn_gate"},
                               {&l.ffn_up, "ffn_up"}, {&l.ffn_down, "ffn_down"}}) {
            r = check(*m, ("blk." + std::to_string(i) + "." + name + ".weight").c_str());
            if (!r.empty()) break;
        }
    }
    return r;
}

DeviceWeights upload_weights(gpu::Device& dev, const ModelConfig& cfg, const ModelWeights& w) {
    DeviceWeights d;
    d.token_embd = upload_one(dev, w.token_embd, "token_embd", d.bytes);
    if (!w.tied_output) d.output = upload_one(dev, w.output, "output", d.bytes);
    d.output_norm = upload_floats(dev, w.output_norm, "output_norm", d.bytes);
    for (int64_t i = 0; i < cfg.n_layer; ++i) {
        const LayerWeights& l = w.layers[size_t(i)];
        DeviceLayer dl;
        dl.attn_norm = upload_floats(dev, l.attn_norm, "attn_norm", d.bytes);
        dl.q_norm = upload_floats(dev, l.q_norm, "attn_q_norm", d.bytes);
        dl.k_norm = upload_floats(dev, l.k_norm, "attn_k_norm", d.bytes);
        dl.post_attn_norm = upload_floats(dev, l.post_attn_norm, "post_attention_norm", d.bytes);
        dl.ffn_norm = upload_floats(dev, l.ffn_norm, "ffn_norm", d.bytes);
        dl.post_ffn_norm = upload_floats(dev, l.post_ffn_norm, "post_ffw_norm", d.bytes);
        if (!l.bq.empty())
            dl.bqkv = upload_floats(dev, concat({&l.bq, &l.bk, &l.bv}), "attn_qkv.bias", d.bytes);
        // One projection for q, k and v when their formats agree (one pass over x, one
        // dispatch); else the two neighbours that agree as one (Gemma-3-270M's q and k are
        // Q5_0 and its v Q8_0 in half the layers) and the third alone; else three. Either way
        // they write the same packed [q | k | v] rows.
        if (same_layout(l.wq, l.wk) && same_layout(l.wq, l.wv)) {
            dl.wqkv = gpu::upload_matrix(dev, *l.wq.type, l.wq.cols,
                                         {rows_of(l.wq), rows_of(l.wk), rows_of(l.wv)},
                                         "attn_qkv", d.bytes);
        } else if (same_layout(l.wq, l.wk)) {
            dl.wq = gpu::upload_matrix(dev, *l.wq.type, l.wq.cols, {rows_of(l.wq), rows_of(l.wk)},
                                       "attn_qk", d.bytes);
            dl.wv = upload_one(dev, l.wv, "attn_v", d.bytes);
        } else if (same_layout(l.wk, l.wv)) {
            dl.wq = upload_one(dev, l.wq, "attn_q", d.bytes);
            dl.wk = gpu::upload_matrix(dev, *l.wk.type, l.wk.cols, {rows_of(l.wk), rows_of(l.wv)},
                                       "attn_kv", d.bytes);
        } else {
            dl.wq = upload_one(dev, l.wq, "attn_q", d.bytes);
            dl.wk = upload_one(dev, l.wk, "attn_k", d.bytes);
            dl.wv = upload_one(dev, l.wv, "attn_v", d.bytes);
        }
        dl.wo = upload_one(dev, l.wo, "attn_output", d.bytes);
        // Gate and up likewise as one [gate | up] projection when their formats agree.
        if (same_layout(l.ffn_gate, l.ffn_up)) {
            dl.ffn_gate_up = gpu::upload_matrix(dev, *l.ffn_gate.type, l.ffn_gate.cols,
                                                {rows_of(l.ffn_gate), rows_of(l.ffn_up)},
                                                "ffn_gate_up", d.bytes);
        } else {
            dl.ffn_gate = upload_one(dev, l.ffn_gate, "ffn_gate", d.bytes);
            dl.ffn_up = upload_one(dev, l.ffn_up, "ffn_up", d.bytes);
        }
        dl.ffn_down = upload_one(dev, l.ffn_down, "ffn_down", d.bytes);
        d.layers.push_back(std::move(dl));
    }
    return d;
}

}  // namespace dasllama

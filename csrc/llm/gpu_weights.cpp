#include "llm/gpu_weights.h"

#include <algorithm>
#include <cctype>
#include <initializer_list>

#include "core/errors.h"
#include "core/formats.h"

namespace dasllama {

namespace {

// Formats with matvec/matmul/get_rows stamps (shaders/stamps.txt).
constexpr int64_t kMaxHeadDim = 256;  // GK_QKV_DMAX, GK_ATTN_DMAX

constexpr const char* kDeviceFormats[] = {"F32", "F16", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
                                          "Q8_0", "Q4_K", "Q5_K", "Q6_K"};

size_t round_up4(size_t n) { return (n + 3) & ~size_t(3); }

std::unique_ptr<gpu::Buffer> upload_vector(gpu::Device& dev, const std::vector<float>& v,
                                           const char* label, uint64_t& bytes) {
    if (v.empty()) return nullptr;
    auto buf = dev.alloc(v.size() * sizeof(float), label);
    dev.upload(*buf, 0, v.data(), v.size() * sizeof(float));
    bytes += v.size() * sizeof(float);
    return buf;
}

// Uploads the row-wise concatenation of `parts` (all of one type and width) as one matrix,
// split into bindings of at most the device's storage range.
DeviceMatrix upload_rows(gpu::Device& dev, std::initializer_list<const cpu::WeightMatrix*> parts,
                         const char* label, uint64_t& bytes) {
    const cpu::WeightMatrix& first = **parts.begin();
    DeviceMatrix d;
    d.format = device_format(*first.type);
    if (d.format.empty())
        throw Error(std::string(label) + ": format " + first.type->name + " has no GPU kernel");
    d.cols = first.cols;
    d.row_bytes = first.row_bytes;
    for (const cpu::WeightMatrix* m : parts) d.rows += m->rows;
    const uint64_t range = dev.info().max_storage_range;
    const int64_t per_split = std::max<int64_t>(
        1, int64_t(std::min<uint64_t>(range, uint64_t(1) << 40) / uint64_t(d.row_bytes)));
    for (int64_t r0 = 0; r0 < d.rows; r0 += per_split) {
        DeviceMatrix::Split s;
        s.row0 = r0;
        s.rows = std::min(per_split, d.rows - r0);
        s.buffer = dev.alloc(round_up4(size_t(s.rows * d.row_bytes)), label);
        // Copy the stretch of each part that falls in [r0, r0 + rows).
        int64_t part_row0 = 0;
        for (const cpu::WeightMatrix* m : parts) {
            const int64_t lo = std::max(r0, part_row0), hi = std::min(r0 + s.rows, part_row0 + m->rows);
            if (lo < hi)
                dev.upload(*s.buffer, size_t((lo - r0) * d.row_bytes),
                           m->data + (lo - part_row0) * m->row_bytes, size_t((hi - lo) * d.row_bytes));
            part_row0 += m->rows;
        }
        bytes += uint64_t(s.rows * d.row_bytes);
        d.splits.push_back(std::move(s));
    }
    return d;
}

DeviceMatrix upload_matrix(gpu::Device& dev, const cpu::WeightMatrix& m, const char* label,
                           uint64_t& bytes) {
    return upload_rows(dev, {&m}, label, bytes);
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

std::string device_format(const TypeTraits& type) {
    for (const char* f : kDeviceFormats) {
        if (std::string(type.name) == f) {
            std::string s = f;
            for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
            return s;
        }
    }
    return "";
}

std::string device_weights_unsupported(const ModelConfig& cfg, const ModelWeights& w) {
    if (cfg.moe) return "mixture-of-experts layers have no GPU kernels";
    // qkv_rope_store.gk.h holds one head in workgroup memory and packs f16 pairs.
    if (cfg.head_dim != cfg.head_dim_v || cfg.head_dim % 2 != 0 || cfg.head_dim > kMaxHeadDim)
        return "head sizes " + std::to_string(cfg.head_dim) + "/" + std::to_string(cfg.head_dim_v) +
               " (the GPU kernels take equal, even head sizes up to " +
               std::to_string(kMaxHeadDim) + ")";
    auto check = [](const cpu::WeightMatrix& m, const char* what) -> std::string {
        if (!m.type || device_format(*m.type).empty())
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
    d.token_embd = upload_matrix(dev, w.token_embd, "token_embd", d.bytes);
    if (!w.tied_output) d.output = upload_matrix(dev, w.output, "output", d.bytes);
    d.output_norm = upload_vector(dev, w.output_norm, "output_norm", d.bytes);
    for (int64_t i = 0; i < cfg.n_layer; ++i) {
        const LayerWeights& l = w.layers[size_t(i)];
        DeviceLayer dl;
        dl.attn_norm = upload_vector(dev, l.attn_norm, "attn_norm", d.bytes);
        dl.q_norm = upload_vector(dev, l.q_norm, "attn_q_norm", d.bytes);
        dl.k_norm = upload_vector(dev, l.k_norm, "attn_k_norm", d.bytes);
        dl.post_attn_norm = upload_vector(dev, l.post_attn_norm, "post_attention_norm", d.bytes);
        dl.ffn_norm = upload_vector(dev, l.ffn_norm, "ffn_norm", d.bytes);
        dl.post_ffn_norm = upload_vector(dev, l.post_ffn_norm, "post_ffw_norm", d.bytes);
        if (!l.bq.empty())
            dl.bqkv = upload_vector(dev, concat({&l.bq, &l.bk, &l.bv}), "attn_qkv.bias", d.bytes);
        // One projection for q, k and v when their formats agree (one pass over x, one
        // dispatch); otherwise three, writing the same packed [q | k | v] rows.
        if (same_layout(l.wq, l.wk) && same_layout(l.wq, l.wv)) {
            dl.wqkv = upload_rows(dev, {&l.wq, &l.wk, &l.wv}, "attn_qkv", d.bytes);
        } else {
            dl.wq = upload_matrix(dev, l.wq, "attn_q", d.bytes);
            dl.wk = upload_matrix(dev, l.wk, "attn_k", d.bytes);
            dl.wv = upload_matrix(dev, l.wv, "attn_v", d.bytes);
        }
        dl.wo = upload_matrix(dev, l.wo, "attn_output", d.bytes);
        // Gate and up likewise as one [gate | up] projection when their formats agree.
        if (same_layout(l.ffn_gate, l.ffn_up)) {
            dl.ffn_gate_up = upload_rows(dev, {&l.ffn_gate, &l.ffn_up}, "ffn_gate_up", d.bytes);
        } else {
            dl.ffn_gate = upload_matrix(dev, l.ffn_gate, "ffn_gate", d.bytes);
            dl.ffn_up = upload_matrix(dev, l.ffn_up, "ffn_up", d.bytes);
        }
        dl.ffn_down = upload_matrix(dev, l.ffn_down, "ffn_down", d.bytes);
        d.layers.push_back(std::move(dl));
    }
    return d;
}

}  // namespace dasllama

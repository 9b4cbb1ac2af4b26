#include "tts/pocket/gpu_weights.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/errors.h"
#include "core/formats.h"
#include "core/tuning.h"
#include "cpu/ops.h"

namespace dasllama::pocket {

namespace {

using gpu::upload_floats;

DeviceMatrix upload_matrix(gpu::Device& dev, const cpu::WeightMatrix& m, const char* label,
                           uint64_t& bytes) {
    return gpu::upload_matrix(dev, *m.type, m.cols, {{m.data, m.rows}}, label, bytes);
}

DeviceMatrix upload_f32(gpu::Device& dev, const std::vector<float>& v, int64_t rows,
                        int64_t cols, const char* label, uint64_t& bytes) {
    static const TypeTraits* f32 = type_traits("F32");
    return gpu::upload_matrix(dev, *f32, cols, {{reinterpret_cast<const uint8_t*>(v.data()), rows}},
                              label, bytes);
}

// [weight | bias] of a LayerNorm (zeros for a missing bias: w x + 0 rounds as w x).
std::vector<float> norm_pair(const std::vector<float>& w, const std::vector<float>& b) {
    std::vector<float> wb(w);
    if (b.empty()) wb.resize(2 * w.size(), 0.0f);
    else wb.insert(wb.end(), b.begin(), b.end());
    return wb;
}

// The rows of q, k and v as one matrix (one product makes all three).
DeviceMatrix upload_qkv(gpu::Device& dev, const TransformerLayer& l, uint64_t& bytes) {
    for (const cpu::WeightMatrix* m : {&l.wk, &l.wv})
        if (m->type != l.wq.type || m->cols != l.wq.cols)
            throw Error(std::string("attn_qkv: q, k and v differ in format or width (") +
                        l.wq.type->name + " x " + std::to_string(l.wq.cols) + " against " +
                        m->type->name + " x " + std::to_string(m->cols) + ")");
    return gpu::upload_matrix(dev, *l.wq.type, l.wq.cols,
                              {{l.wq.data, l.wq.rows}, {l.wk.data, l.wk.rows},
                               {l.wv.data, l.wv.rows}},
                              "attn_qkv", bytes);
}

DeviceLinear upload_linear(gpu::Device& dev, const Linear& l, const char* label, uint64_t& bytes) {
    DeviceLinear d;
    d.w = upload_matrix(dev, l.w, label, bytes);
    d.bias = upload_floats(dev, l.bias, label, bytes);
    return d;
}

// Rotary frequencies base^(-2i / head_dim) in double, sent as hi/lo float pairs.
DeviceBuffer rope_freqs(gpu::Device& dev, const TransformerConfig& c, uint64_t& bytes) {
    const int64_t half = c.head_dim / 2;
    std::vector<float> f(size_t(2 * half));
    for (int64_t i = 0; i < half; ++i) {
        const double freq = std::pow(c.rope_max_period, -2.0 * double(i) / double(c.head_dim));
        f[size_t(2 * i)] = float(freq);
        f[size_t(2 * i + 1)] = float(freq - double(float(freq)));
    }
    return upload_floats(dev, f, "rope_freqs", bytes);
}

DeviceTransformer upload_transformer(gpu::Device& dev, const TransformerWeights& w,
                                     uint64_t& bytes) {
    DeviceTransformer d;
    d.cfg = w.cfg;
    for (const TransformerLayer& l : w.layers) {
        DeviceTransformerLayer dl;
        dl.norm1_w = upload_floats(dev, l.norm1.weight, "norm1", bytes);
        dl.norm1_b = upload_floats(dev, l.norm1.bias, "norm1.bias", bytes);
        dl.norm2_w = upload_floats(dev, l.norm2.weight, "norm2", bytes);
        dl.norm2_b = upload_floats(dev, l.norm2.bias, "norm2.bias", bytes);
        dl.attn_scale = upload_floats(dev, l.attn_scale, "attn_scale", bytes);
        dl.ffn_scale = upload_floats(dev, l.ffn_scale, "ffn_scale", bytes);
        dl.norm1_wb =
            upload_floats(dev, norm_pair(l.norm1.weight, l.norm1.bias), "norm1.wb", bytes);
        dl.norm2_wb =
            upload_floats(dev, norm_pair(l.norm2.weight, l.norm2.bias), "norm2.wb", bytes);
        dl.wqkv = upload_qkv(dev, l, bytes);
        dl.wo = upload_matrix(dev, l.wo, "attn_out", bytes);
        dl.up = upload_matrix(dev, l.up, "ffn_up", bytes);
        dl.down = upload_matrix(dev, l.down, "ffn_down", bytes);
        d.layers.push_back(std::move(dl));
    }
    d.has_in_proj = w.has_in_proj;
    d.has_out_proj = w.has_out_proj;
    if (w.has_in_proj) d.in_proj = upload_matrix(dev, w.in_proj, "in_proj", bytes);
    if (w.has_out_proj) d.out_proj = upload_matrix(dev, w.out_proj, "out_proj", bytes);
    d.rope_freqs = rope_freqs(dev, w.cfg, bytes);
    return d;
}

// Whether Mimi's convolutions go up as float16 where the device has cooperative matrices and
// the backbone's matrices are not float32 (the served lane; the f32 lane, the parity reference,
// keeps float32): their products then run on cooperative matrices, as the backbone's do.
const tuning::Knob& kCodecHalf = tuning::define(
    "vulkan.pocket.codec_f16", 1, 0, 1,
    "1: Mimi's convolutions as float16 matrices (cooperative-matrix products) where the device "
    "has them and the model is not float32; 0: float32");

// Rows (output channels, or taps x outputs) from which a convolution's matrix goes up as
// float16 (the last one, to the audio samples, has one and stays float32).
constexpr int64_t kHalfMinOutputs = 16;

// A packed convolution matrix [rows, cols]: float16 when `half` and it has the rows to gain
// from it, else float32.
DeviceMatrix upload_packed(gpu::Device& dev, const std::vector<float>& packed, int64_t rows,
                           int64_t cols, const char* label, uint64_t& bytes, bool half) {
    if (!half || rows < kHalfMinOutputs) return upload_f32(dev, packed, rows, cols, label, bytes);
    static const TypeTraits* f16 = type_traits("F16");
    std::vector<uint16_t> h(packed.size());
    for (int64_t r = 0; r < rows; ++r)
        cpu::f32_to_f16_row(&packed[size_t(r * cols)], &h[size_t(r * cols)], cols);
    return gpu::upload_matrix(dev, *f16, cols, {{reinterpret_cast<const uint8_t*>(h.data()), rows}},
                              label, bytes);
}

// Conv1d (Cout, Cin, K) -> (Cout, K * Cin): one output row is one im2col row times a row.
DeviceConv upload_conv(gpu::Device& dev, const ConvWeights& w, const char* label,
                       uint64_t& bytes, bool half) {
    DeviceConv d;
    d.cout = w.d0;
    d.cin = w.d1;
    d.k = w.k;
    std::vector<float> packed(size_t(d.cout * d.k * d.cin));
    for (int64_t o = 0; o < d.cout; ++o)
        for (int64_t i = 0; i < d.cin; ++i)
            for (int64_t k = 0; k < d.k; ++k)
                packed[size_t((o * d.k + k) * d.cin + i)] = w.weight[size_t((o * d.cin + i) * d.k + k)];
    d.w = upload_packed(dev, packed, d.cout, d.k * d.cin, label, bytes, half);
    d.bias = upload_floats(dev, w.bias, label, bytes);
    return d;
}

// ConvTranspose1d (Cin, Cout, K) -> (K * Cout, Cin): row k * Cout + o is tap k of output o.
DeviceConv upload_conv_tr(gpu::Device& dev, const ConvWeights& w, const char* label,
                          uint64_t& bytes, bool half) {
    DeviceConv d;
    d.cin = w.d0;
    d.cout = w.d1;
    d.k = w.k;
    std::vector<float> packed(size_t(d.k * d.cout * d.cin));
    for (int64_t i = 0; i < d.cin; ++i)
        for (int64_t o = 0; o < d.cout; ++o)
            for (int64_t k = 0; k < d.k; ++k)
                packed[size_t((k * d.cout + o) * d.cin + i)] = w.weight[size_t((i * d.cout + o) * d.k + k)];
    d.w = upload_packed(dev, packed, d.k * d.cout, d.cin, label, bytes, half);
    d.bias = upload_floats(dev, w.bias, label, bytes);
    return d;
}

}  // namespace

std::string pocket_weights_unsupported(const PocketWeights& w) {
    auto check = [](const cpu::WeightMatrix& m, const std::string& what) -> std::string {
        if (!m.type || gpu::device_format(*m.type).empty())
            return what + " is " + (m.type ? m.type->name : "missing") +
                   ", a format the GPU kernels do not read";
        return "";
    };
    for (const TransformerWeights* tw : {&w.lm, &w.dec_tf}) {
        const char* part = tw == &w.lm ? "lm" : "mimi.dec_tf";
        for (size_t i = 0; i < tw->layers.size(); ++i) {
            const TransformerLayer& l = tw->layers[i];
            for (auto [m, name] : {std::pair{&l.wq, "attn_qkv"}, {&l.wk, "attn_qkv"},
                                   {&l.wv, "attn_qkv"}, {&l.wo, "attn_out"},
                                   {&l.up, "ffn_up"}, {&l.down, "ffn_down"}}) {
                std::string r = check(*m, std::string(part) + ".blk." + std::to_string(i) + "." +
                                              name + ".weight");
                if (!r.empty()) return r;
            }
        }
    }
    // The flow head's fused adaLN input stage and gated residual address their operands with
    // 16-bit element offsets (shaders/kernels/mm_input.h) into one buffer: every block's
    // [weight | bias], every block's shift | scale | gate and the final layer's shift | scale,
    // then every block's mlp_out bias.
    if (!w.blocks.empty()) {
        const int64_t W = int64_t(w.blocks[0].norm.weight.size());
        const int64_t last = (6 * int64_t(w.blocks.size()) + 1) * W;
        if (last > 0xffff)
            return "flow head: " + std::to_string(w.blocks.size()) + " blocks of width " +
                   std::to_string(W) + " put the last mlp_out bias at element " +
                   std::to_string(last) + ", past the 16-bit offsets of the GPU input stage";
    }
    return "";
}

DeviceBackbone upload_backbone(gpu::Device& dev, const PocketConfig& c, const PocketWeights& w) {
    (void)c;
    DeviceBackbone d;
    d.input = upload_matrix(dev, w.input, "lm.input", d.bytes);
    d.lm = upload_transformer(dev, w.lm, d.bytes);
    d.out_norm_w = upload_floats(dev, w.out_norm.weight, "lm.out_norm", d.bytes);
    d.out_norm_b = upload_floats(dev, w.out_norm.bias, "lm.out_norm.bias", d.bytes);
    d.has_z_proj = w.has_z_proj;
    if (w.has_z_proj) d.z_proj = upload_matrix(dev, w.z_proj, "lm.z_proj", d.bytes);
    d.cond = upload_linear(dev, w.cond, "flow.cond", d.bytes);
    d.flow_input = upload_linear(dev, w.flow_input, "flow.input", d.bytes);
    d.out_norm_wb = upload_floats(dev, norm_pair(w.out_norm.weight, w.out_norm.bias),
                                  "lm.out_norm.wb", d.bytes);
    d.final_out = upload_linear(dev, w.final_out, "flow.final.out", d.bytes);
    std::vector<float> norms, ada_bias;
    auto add_bias = [&](const Linear& l) {
        if (l.bias.empty()) ada_bias.resize(ada_bias.size() + size_t(l.w.rows), 0.0f);
        else ada_bias.insert(ada_bias.end(), l.bias.begin(), l.bias.end());
    };
    for (const FlowBlockWeights& b : w.blocks) {
        DeviceFlowBlock db;
        db.mlp_in = upload_linear(dev, b.mlp_in, "flow.res.mlp_in", d.bytes);
        db.mlp_out = upload_linear(dev, b.mlp_out, "flow.res.mlp_out", d.bytes);
        d.blocks.push_back(std::move(db));
        const std::vector<float> wb = norm_pair(b.norm.weight, b.norm.bias);
        norms.insert(norms.end(), wb.begin(), wb.end());
        add_bias(b.ada);
    }
    add_bias(w.final_ada);
    d.flow_norm_wb = upload_floats(dev, norms, "flow.res.norm.wb", d.bytes);
    // The ada linears, blocks then the final layer's, gathered on the host (upload_matrix
    // takes a fixed list of parts).
    const cpu::WeightMatrix& fa = w.final_ada.w;
    std::vector<uint8_t> ada_rows;
    int64_t ada_n = 0;
    auto add_rows = [&](const cpu::WeightMatrix& m) {
        if (m.type != fa.type || m.cols != fa.cols)
            throw Error("flow.res.ada: the blocks' adaLN linears differ in format or width from "
                        "the final layer's");
        ada_rows.insert(ada_rows.end(), m.data, m.data + size_t(m.rows * m.row_bytes));
        ada_n += m.rows;
    };
    for (const FlowBlockWeights& b : w.blocks) add_rows(b.ada.w);
    add_rows(fa);
    d.ada_all.w = gpu::upload_matrix(dev, *fa.type, fa.cols, {{ada_rows.data(), ada_n}},
                                     "flow.ada", d.bytes);
    d.ada_all.bias = upload_floats(dev, ada_bias, "flow.ada.bias", d.bytes);
    return d;
}

DeviceMimi upload_mimi(gpu::Device& dev, const PocketConfig& c, const PocketWeights& w) {
    DeviceMimi d;
    d.quant_proj = upload_matrix(dev, w.quant_proj, "mimi.quant_proj", d.bytes);
    if (c.upsample_stride > 1) d.upsample = upload_floats(dev, w.upsample, "mimi.upsample", d.bytes);
    d.tf = upload_transformer(dev, w.dec_tf, d.bytes);
    const bool half = kCodecHalf.get() != 0 && dev.info().coopmat_khr && !w.lm.layers.empty() &&
                      w.lm.layers.front().wq.type->type != GgmlType::F32;
    d.in = upload_conv(dev, w.dec.in, "mimi.dec.in", d.bytes, half);
    d.out = upload_conv(dev, w.dec.out, "mimi.dec.out", d.bytes, half);
    for (size_t s = 0; s < w.dec.resample.size(); ++s) {
        DeviceSeanetStage st;
        st.up = upload_conv_tr(dev, w.dec.resample[s], "mimi.dec.up", d.bytes, half);
        for (size_t r = 0; r < w.dec.conv1[s].size(); ++r) {
            st.conv1.push_back(
                upload_conv(dev, w.dec.conv1[s][r], "mimi.dec.conv1", d.bytes, half));
            st.conv2.push_back(
                upload_conv(dev, w.dec.conv2[s][r], "mimi.dec.conv2", d.bytes, half));
        }
        d.stages.push_back(std::move(st));
    }
    return d;
}

}  // namespace dasllama::pocket

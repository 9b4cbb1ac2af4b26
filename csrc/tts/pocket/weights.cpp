#include "tts/pocket/weights.h"

#include <string>

#include "core/errors.h"
#include "core/formats.h"
#include "core/gguf.h"
#include "nn/tensor_reader.h"

namespace dasllama::pocket {

namespace {

// Finds tensors by name and checks their NumPy-order shape (nn/tensor_reader.h).
class Tensors : public nn::TensorReader {
public:
    explicit Tensors(const std::shared_ptr<const GGUFFile>& f) : nn::TensorReader(f) {}

    std::vector<float> vec(const std::string& name, int64_t n) const { return floats(name, {n}); }

    // Rows [row0, row0 + rows) of the (total_rows, cols) matrix `name`.
    cpu::WeightMatrix matrix(const std::string& name, int64_t total_rows, int64_t cols,
                             int64_t row0 = 0, int64_t rows = -1) const {
        const GGUFTensor& t = get(name, {total_rows, cols});
        if (rows < 0) rows = total_rows;
        if (cols % t.traits->block_size)
            throw ShapeError(f_->path() + ": tensor '" + name + "': rows of " +
                             std::to_string(cols) + " are not a multiple of " + t.traits->name +
                             "'s block of " + std::to_string(t.traits->block_size));
        const uint8_t* data = f_->tensor_data(t) + row0 * row_bytes(*t.traits, cols);
        try {
            return cpu::prepare_weight(*t.traits, rows, cols, data, f_);
        } catch (const FormatError& e) {
            throw FormatError(f_->path() + ": tensor '" + name + "': " + e.what());
        }
    }

    Linear linear(const std::string& prefix, int64_t out, int64_t in, bool bias = true) const {
        Linear l;
        l.w = matrix(prefix + ".weight", out, in);
        if (bias) l.bias = vec(prefix + ".bias", out);
        return l;
    }

    Norm norm(const std::string& prefix, int64_t n) const {
        return {vec(prefix + ".weight", n), vec(prefix + ".bias", n)};
    }

    ConvWeights conv(const std::string& prefix, int64_t d0, int64_t d1, int64_t k,
                     int64_t bias_n) const {
        ConvWeights c;
        c.weight = floats(prefix + ".weight", {d0, d1, k});
        if (bias_n) c.bias = vec(prefix + ".bias", bias_n);
        c.d0 = d0;
        c.d1 = d1;
        c.k = k;
        return c;
    }

};

TransformerWeights load_transformer(const Tensors& t, const std::string& g,
                                    const TransformerConfig& c, bool mimi) {
    TransformerWeights tw;
    tw.cfg = c;
    const int64_t D = c.d_model, A = c.num_heads * c.head_dim, KV = c.num_kv_heads * c.head_dim;
    if (mimi && c.input_dim != D) {
        tw.has_in_proj = true;
        tw.in_proj = t.matrix(g + ".in_proj.weight", D, c.input_dim);
    }
    for (int64_t i = 0; i < c.num_layers; ++i) {
        const std::string b = g + ".blk." + std::to_string(i) + ".";
        TransformerLayer l;
        l.norm1 = t.norm(b + "attn_norm", D);
        l.wq = t.matrix(b + "attn_qkv.weight", A + 2 * KV, D, 0, A);
        l.wk = t.matrix(b + "attn_qkv.weight", A + 2 * KV, D, A, KV);
        l.wv = t.matrix(b + "attn_qkv.weight", A + 2 * KV, D, A + KV, KV);
        l.wo = t.matrix(b + "attn_out.weight", D, A);
        l.norm2 = t.norm(b + "ffn_norm", D);
        l.up = t.matrix(b + "ffn_up.weight", c.ffn_dim, D);
        l.down = t.matrix(b + "ffn_down.weight", D, c.ffn_dim);
        if (mimi && c.layer_scale) {
            l.attn_scale = t.vec(b + "attn_scale", D);
            l.ffn_scale = t.vec(b + "ffn_scale", D);
        }
        tw.layers.push_back(std::move(l));
    }
    if (mimi && c.output_dim != D) {
        tw.has_out_proj = true;
        tw.out_proj = t.matrix(g + ".out_proj.weight", c.output_dim, D);
    }
    return tw;
}

// The SEANet convolutions by role (dasllama.convert.pocket _seanet_plan).
SeanetWeights load_seanet(const Tensors& t, const SeanetConfig& p, bool decoder, int64_t channels) {
    SeanetWeights s;
    const std::string g = decoder ? "mimi.dec" : "mimi.enc";
    const int64_t nf = p.n_filters, n_stages = int64_t(p.ratios.size());
    int64_t mult = decoder ? (int64_t(1) << n_stages) : 1;
    if (decoder)
        s.in = t.conv(g + ".in", mult * nf, p.dimension, p.kernel_size, mult * nf);
    else
        s.in = t.conv(g + ".in", nf, channels, p.kernel_size, nf);
    auto res_blocks = [&](int64_t stage, int64_t c) {
        const int64_t h = c / p.compress;
        s.conv1.emplace_back();
        s.conv2.emplace_back();
        for (int64_t r = 0; r < p.n_residual_layers; ++r) {
            const std::string b = g + ".res." + std::to_string(stage) + "." + std::to_string(r);
            s.conv1.back().push_back(t.conv(b + ".conv1", h, c, p.residual_kernel_size, h));
            s.conv2.back().push_back(t.conv(b + ".conv2", c, h, 1, c));
        }
    };
    for (int64_t stage = 0; stage < n_stages; ++stage) {
        const int64_t ratio = decoder ? p.ratios[size_t(stage)]
                                      : p.ratios[size_t(n_stages - 1 - stage)];
        const std::string name = g + (decoder ? ".up." : ".down.") + std::to_string(stage);
        if (decoder) {
            // ConvTranspose1d: (in, out, k)
            s.resample.push_back(t.conv(name, mult * nf, mult * nf / 2, 2 * ratio, mult * nf / 2));
            res_blocks(stage, mult * nf / 2);
            mult /= 2;
        } else {
            res_blocks(stage, mult * nf);
            s.resample.push_back(t.conv(name, mult * nf * 2, mult * nf, 2 * ratio, mult * nf * 2));
            mult *= 2;
        }
    }
    if (decoder)
        s.out = t.conv(g + ".out", channels, nf, p.last_kernel_size, channels);
    else
        s.out = t.conv(g + ".out", p.dimension, mult * nf, p.last_kernel_size, p.dimension);
    return s;
}

}  // namespace

PocketWeights load_pocket_weights(const std::shared_ptr<const GGUFFile>& file,
                                  const PocketConfig& c) {
    const Tensors t(file);
    PocketWeights w;
    const int64_t D = c.lm.d_model, L = c.latent_dim, Z = c.cond_dim(), W = c.flow_dim;
    const int64_t R = c.text_rank;

    w.text_embd = t.matrix("text.embd.weight", c.n_bins + 1, R ? R : D);
    if (R) {
        w.has_text_proj = true;
        w.text_proj = t.matrix("text.proj.weight", D, R);
    }
    w.bos = t.vec("lm.bos.weight", L);
    if (c.insert_bos_before_voice) w.bos_voice = t.vec("lm.bos_voice.weight", D);
    w.latent_mean = t.vec("lm.latent_mean", L);
    w.latent_std = t.vec("lm.latent_std", L);
    w.input = t.matrix("lm.input.weight", D, L);
    w.lm = load_transformer(t, "lm", c.lm, false);
    w.out_norm = t.norm("lm.out_norm", D);
    if (c.z_dim) {
        w.has_z_proj = true;
        w.z_proj = t.matrix("lm.z_proj.weight", Z, D);
    }
    w.eos_weight = t.floats("lm.eos.weight", {1, Z});
    w.eos_bias = t.vec("lm.eos.bias", 1)[0];

    for (int64_t j = 0; j < c.flow_time_conds; ++j) {
        const std::string b = "flow.time." + std::to_string(j) + ".";
        TimeEmbedWeights te;
        te.freqs = t.vec(b + "freqs", c.flow_freq_dim / 2);
        te.in = t.linear(b + "in", W, c.flow_freq_dim);
        te.out = t.linear(b + "out", W, W);
        te.alpha = t.vec(b + "norm.weight", W);
        w.time.push_back(std::move(te));
    }
    w.cond = t.linear("flow.cond", W, Z);
    w.flow_input = t.linear("flow.input", W, L);
    for (int64_t k = 0; k < c.flow_depth; ++k) {
        const std::string b = "flow.res." + std::to_string(k) + ".";
        FlowBlockWeights fb;
        fb.norm = t.norm(b + "norm", W);
        fb.mlp_in = t.linear(b + "mlp_in", W, W);
        fb.mlp_out = t.linear(b + "mlp_out", W, W);
        fb.ada = t.linear(b + "ada", 3 * W, W);
        w.blocks.push_back(std::move(fb));
    }
    w.final_ada = t.linear("flow.final.ada", 2 * W, W);
    w.final_out = t.linear("flow.final.out", L, W);

    const int64_t u = c.upsample_stride, Co = c.outer_dim;
    w.quant_proj = t.matrix("mimi.quant_proj.weight", Co, L);
    if (u > 1) w.upsample = t.floats("mimi.upsample.weight", {Co, 1, 2 * u});
    w.dec_tf = load_transformer(t, "mimi.dec_tf", c.dec_tf, true);
    w.dec = load_seanet(t, c.dec, true, c.channels);

    // The voice encoder: all of it or none (pocket.voice_cloning says which).
    if (c.voice_cloning) {
        w.has_encoder = true;
        w.has_speaker_proj = true;
        w.speaker_proj = t.matrix("lm.speaker_proj.weight", D, c.inner_dim);
        w.enc_tf = load_transformer(t, "mimi.enc_tf", c.enc_tf, true);
        w.enc = load_seanet(t, c.enc, false, c.channels);
        if (u > 1)
            w.downsample = t.conv("mimi.downsample", c.inner_dim, c.enc.dimension, 2 * u, 0);
    }
    return w;
}

}  // namespace dasllama::pocket

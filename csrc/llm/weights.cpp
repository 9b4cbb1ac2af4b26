#include "llm/weights.h"

#include <string>

#include "core/errors.h"
#include "core/formats.h"
#include "core/gguf.h"

namespace dasllama {

namespace {

std::string shape_text(const std::vector<int64_t>& numpy_shape) {
    std::string s = "(";
    for (size_t i = 0; i < numpy_shape.size(); ++i)
        s += (i ? ", " : "") + std::to_string(numpy_shape[i]);
    return s + (numpy_shape.size() == 1 ? ",)" : ")");
}

class TensorFinder {
public:
    TensorFinder(const std::shared_ptr<const GGUFFile>& f) : f_(f) {}

    const GGUFTensor* find(const std::string& name) const { return f_->find_tensor(name); }

    // The tensor `name` with the given NumPy-order shape.
    const GGUFTensor& get(const std::string& name, const std::vector<int64_t>& shape) const {
        const GGUFTensor* t = f_->find_tensor(name);
        if (!t) throw GGUFError(f_->path() + ": missing tensor '" + name + "'");
        std::vector<int64_t> have;
        for (uint32_t d = t->n_dims; d-- > 0;) have.push_back(t->ne[d]);
        if (have != shape)
            throw ShapeError(f_->path() + ": tensor '" + name + "' has shape " +
                             shape_text(have) + ", expected " + shape_text(shape));
        return *t;
    }

    std::vector<float> vector(const std::string& name, int64_t n) const {
        const GGUFTensor& t = get(name, {n});
        std::vector<float> out(static_cast<size_t>(n));
        if (t.traits->dequantize == nullptr || n % t.traits->block_size)
            throw FormatError(f_->path() + ": tensor '" + name + "' of type " + t.traits->name +
                              " cannot be read as float");
        dequantize(*t.traits, f_->tensor_data(t), out.data(), n);
        return out;
    }

    cpu::WeightMatrix matrix(const std::string& name, int64_t rows, int64_t cols) const {
        const GGUFTensor& t = get(name, {rows, cols});
        return prepare(name, t, f_->tensor_data(t), rows, cols);
    }

    // One [rows, cols] slice per expert of a [n_expert, rows, cols] tensor.
    std::vector<cpu::WeightMatrix> experts(const std::string& name, int64_t n_expert,
                                           int64_t rows, int64_t cols) const {
        const GGUFTensor& t = get(name, {n_expert, rows, cols});
        const int64_t slice_bytes = rows * row_bytes_of(name, t, cols);
        std::vector<cpu::WeightMatrix> out;
        for (int64_t e = 0; e < n_expert; ++e)
            out.push_back(prepare(name, t, f_->tensor_data(t) + e * slice_bytes, rows, cols));
        return out;
    }

private:
    int64_t row_bytes_of(const std::string& name, const GGUFTensor& t, int64_t cols) const {
        if (cols % t.traits->block_size)
            throw ShapeError(f_->path() + ": tensor '" + name + "' rows of " +
                             std::to_string(cols) + " are not a multiple of " + t.traits->name +
                             "'s block of " + std::to_string(t.traits->block_size));
        return row_bytes(*t.traits, cols);
    }

    cpu::WeightMatrix prepare(const std::string& name, const GGUFTensor& t, const uint8_t* data,
                              int64_t rows, int64_t cols) const {
        row_bytes_of(name, t, cols);
        try {
            // A repacked matrix is read from its copy; the file's pages need not stay resident
            // (row lookups and the f32 parity path fault back in the few they touch).
            const ByteSource& src = *f_->source(t.file);
            return cpu::prepare_weight(*t.traits, rows, cols, data, f_,
                                       [&src](const uint8_t* p, uint64_t n) { src.release(p, n); });
        } catch (const FormatError& e) {
            throw FormatError(f_->path() + ": tensor '" + name + "': " + e.what());
        }
    }

    std::shared_ptr<const GGUFFile> f_;
};

}  // namespace

ModelWeights load_weights(const std::shared_ptr<const GGUFFile>& file, const ModelConfig& c) {
    const TensorFinder tf(file);
    ModelWeights w;
    const int64_t E = c.n_embd;
    w.token_embd = tf.matrix("token_embd.weight", c.n_vocab, E);
    w.output_norm = tf.vector("output_norm.weight", E);
    w.tied_output = tf.find("output.weight") == nullptr;
    w.output = w.tied_output ? w.token_embd : tf.matrix("output.weight", c.n_vocab, E);
    // llama.cpp applies frequency factors to llama only; other architectures do not use them.
    if (c.arch == Arch::Llama && tf.find("rope_freqs.weight"))
        w.rope_freqs = tf.vector("rope_freqs.weight", c.n_rot / 2);

    for (int64_t il = 0; il < c.n_layer; ++il) {
        const std::string b = "blk." + std::to_string(il) + ".";
        LayerWeights l;
        l.attn_norm = tf.vector(b + "attn_norm.weight", E);
        l.wq = tf.matrix(b + "attn_q.weight", c.q_dim(), E);
        l.wk = tf.matrix(b + "attn_k.weight", c.k_dim(), E);
        l.wv = tf.matrix(b + "attn_v.weight", c.v_dim(), E);
        l.wo = tf.matrix(b + "attn_output.weight", E, c.n_head * c.head_dim_v);
        if (c.qkv_bias) {
            l.bq = tf.vector(b + "attn_q.bias", c.q_dim());
            l.bk = tf.vector(b + "attn_k.bias", c.k_dim());
            l.bv = tf.vector(b + "attn_v.bias", c.v_dim());
        }
        if (c.qk_norm) {
            l.q_norm = tf.vector(b + "attn_q_norm.weight", c.head_dim);
            l.k_norm = tf.vector(b + "attn_k_norm.weight", c.head_dim);
        }
        if (c.post_norms) {
            l.post_attn_norm = tf.vector(b + "post_attention_norm.weight", E);
            l.post_ffn_norm = tf.vector(b + "post_ffw_norm.weight", E);
        }
        l.ffn_norm = tf.vector(b + "ffn_norm.weight", E);
        if (c.moe) {
            l.router = tf.matrix(b + "ffn_gate_inp.weight", c.n_expert, E);
            l.gate_exps = tf.experts(b + "ffn_gate_exps.weight", c.n_expert, c.n_ff_exp, E);
            l.up_exps = tf.experts(b + "ffn_up_exps.weight", c.n_expert, c.n_ff_exp, E);
            l.down_exps = tf.experts(b + "ffn_down_exps.weight", c.n_expert, E, c.n_ff_exp);
        } else {
            l.ffn_gate = tf.matrix(b + "ffn_gate.weight", c.n_ff, E);
            l.ffn_up = tf.matrix(b + "ffn_up.weight", c.n_ff, E);
            l.ffn_down = tf.matrix(b + "ffn_down.weight", E, c.n_ff);
        }
        w.layers.push_back(std::move(l));
    }
    return w;
}

}  // namespace dasllama

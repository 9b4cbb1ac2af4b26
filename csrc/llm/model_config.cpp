#include "llm/model_config.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "core/errors.h"
#include "core/gguf.h"

namespace dasllama {

namespace {

// Architecture facts that are not stored in the file (llama.cpp src/llama-model.cpp).
constexpr int kGemma3SlidingPeriod = 6;            // layers with il % 6 < 5 are sliding
constexpr double kGemma3LocalRopeBase = 10000.0;   // rope base of the sliding layers

struct ArchInfo {
    const char* name;
    Arch arch;
};
constexpr ArchInfo kArchs[] = {
    {"llama", Arch::Llama}, {"qwen2", Arch::Qwen2}, {"qwen3", Arch::Qwen3},
    {"qwen3moe", Arch::Qwen3Moe}, {"gemma3", Arch::Gemma3},
};

// Reads keys under one prefix and says which key is at fault when a value is wrong.
class KeyReader {
public:
    KeyReader(const GGUFFile& f, std::string prefix) : f_(f), prefix_(std::move(prefix)) {}

    std::string key(const char* name) const { return prefix_ + name; }

    const GGUFValue* find(const char* name) const {
        const GGUFEntry* e = f_.find(key(name));
        return e ? &e->value : nullptr;
    }

    int64_t int_or(const char* name, int64_t fallback) const {
        const GGUFValue* v = find(name);
        return v ? f_.as_int(*v) : fallback;
    }

    int64_t required_int(const char* name) const {
        const GGUFValue* v = find(name);
        if (!v) throw GGUFError(f_.path() + ": missing metadata key '" + key(name) + "'");
        return f_.as_int(*v);
    }

    double required_float(const char* name) const {
        const GGUFValue* v = find(name);
        if (!v) throw GGUFError(f_.path() + ": missing metadata key '" + key(name) + "'");
        return f_.as_float(*v);
    }

    double float_or(const char* name, double fallback) const {
        const GGUFValue* v = find(name);
        return v ? f_.as_float(*v) : fallback;
    }

    std::string string_or(const char* name, const std::string& fallback) const {
        const GGUFValue* v = find(name);
        return v ? std::string(f_.as_string(*v)) : fallback;
    }

    // Throws naming the key and its value when `ok` is false.
    void check(bool ok, const char* name, double value, const std::string& rule) const {
        if (ok) return;
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.10g", value);
        throw GGUFError(f_.path() + ": metadata key '" + key(name) + "' = " + buf + ": " + rule);
    }

private:
    const GGUFFile& f_;
    std::string prefix_;
};

}  // namespace

const char* supported_architectures() { return "llama, qwen2, qwen3, qwen3moe, gemma3"; }

ModelConfig ModelConfig::from_gguf(const GGUFFile& f) {
    ModelConfig c;
    const GGUFEntry* arch_entry = f.find("general.architecture");
    if (!arch_entry)
        throw GGUFError(f.path() + ": missing metadata key 'general.architecture'");
    c.arch_name = std::string(f.as_string(arch_entry->value));
    bool known = false;
    for (const ArchInfo& a : kArchs)
        if (c.arch_name == a.name) c.arch = a.arch, known = true;
    if (!known)
        throw Error(f.path() + ": unsupported architecture '" + c.arch_name +
                    "' (supported: " + supported_architectures() + ")");

    const KeyReader k(f, c.arch_name + ".");
    c.n_embd = k.required_int("embedding_length");
    c.n_layer = k.required_int("block_count");
    c.n_head = k.required_int("attention.head_count");
    c.n_head_kv = k.int_or("attention.head_count_kv", c.n_head);
    c.n_ctx_train = k.int_or("context_length", 0);
    c.n_ff = k.int_or("feed_forward_length", 0);
    c.rms_eps = k.required_float("attention.layer_norm_rms_epsilon");

    k.check(c.n_embd > 0 && c.n_embd <= (1 << 20), "embedding_length", double(c.n_embd),
            "must be in [1, 2^20]");
    k.check(c.n_layer > 0 && c.n_layer <= 4096, "block_count", double(c.n_layer),
            "must be in [1, 4096]");
    k.check(c.n_head > 0 && c.n_head <= 4096, "attention.head_count", double(c.n_head),
            "must be in [1, 4096]");
    k.check(c.n_head_kv > 0 && c.n_head % c.n_head_kv == 0, "attention.head_count_kv",
            double(c.n_head_kv), "must be positive and divide attention.head_count = " +
            std::to_string(c.n_head));
    k.check(c.rms_eps > 0.0 && c.rms_eps < 1.0, "attention.layer_norm_rms_epsilon", c.rms_eps,
            "must be in (0, 1)");
    k.check(c.n_ctx_train >= 0, "context_length", double(c.n_ctx_train), "must be >= 0");

    const int64_t default_head = c.n_embd % c.n_head == 0 ? c.n_embd / c.n_head : 0;
    c.head_dim = k.int_or("attention.key_length", default_head);
    c.head_dim_v = k.int_or("attention.value_length", default_head);  // llama.cpp's default
    k.check(c.head_dim > 0 && c.head_dim <= 4096, "attention.key_length", double(c.head_dim),
            "must be in [1, 4096] (absent: embedding_length / head_count must be whole)");
    k.check(c.head_dim_v > 0 && c.head_dim_v <= 4096, "attention.value_length",
            double(c.head_dim_v), "must be in [1, 4096]");
    c.n_rot = k.int_or("rope.dimension_count", c.head_dim);
    k.check(c.n_rot > 0 && c.n_rot <= c.head_dim && c.n_rot % 2 == 0, "rope.dimension_count",
            double(c.n_rot), "must be even and in [2, head_dim = " + std::to_string(c.head_dim) +
            "]");

    // The vocabulary size is what the embedding holds; the tokenizer is checked against it.
    const GGUFTensor* embd = f.find_tensor("token_embd.weight");
    if (!embd) throw GGUFError(f.path() + ": missing tensor 'token_embd.weight'");
    c.n_vocab = embd->ne[1];
    k.check(c.n_vocab > 0 && c.n_vocab <= (int64_t(1) << 31) - 1, "vocab_size (token_embd rows)",
            double(c.n_vocab), "must be in [1, 2^31)");

    // --- rope ----------------------------------------------------------------------------
    const double rope_base = k.float_or("rope.freq_base", 10000.0);
    k.check(rope_base > 1.0 && std::isfinite(rope_base), "rope.freq_base", rope_base,
            "must be finite and > 1");
    double rope_scale = 1.0;
    const std::string scaling = k.string_or("rope.scaling.type", "none");
    if (scaling == "linear") {
        // Older files give the factor as rope.scale_linear; 0 or 1 means no scaling.
        double factor = k.float_or("rope.scaling.factor", 0.0);
        if (factor == 0.0) factor = k.float_or("rope.scale_linear", 0.0);
        k.check(factor >= 0.0 && std::isfinite(factor), "rope.scaling.factor", factor,
                "must be finite and >= 0");
        if (factor != 0.0) rope_scale = 1.0 / factor;
    } else if (scaling != "none") {
        throw GGUFError(f.path() + ": metadata key '" + k.key("rope.scaling.type") + "' = '" +
                        scaling + "' is not supported (supported: none, linear)");
    }
    c.rope_layout = c.arch == Arch::Llama ? RopeLayout::Norm : RopeLayout::Neox;

    // --- architecture parts --------------------------------------------------------------
    c.qkv_bias = c.arch == Arch::Qwen2;
    c.qk_norm = c.arch == Arch::Qwen3 || c.arch == Arch::Qwen3Moe || c.arch == Arch::Gemma3;
    c.post_norms = c.arch == Arch::Gemma3;
    c.gelu_ffn = c.arch == Arch::Gemma3;
    c.moe = c.arch == Arch::Qwen3Moe;
    c.attn_scale = float(1.0 / std::sqrt(double(c.head_dim)));
    if (c.arch == Arch::Gemma3) {
        c.embd_scale = float(std::sqrt(double(c.n_embd)));
        // Gemma 3 27B (62 layers) scales by the model width per head instead of head_dim.
        if (c.n_layer == 62) c.attn_scale = float(1.0 / std::sqrt(double(c.n_embd / c.n_head)));
        c.sliding_window = k.int_or("attention.sliding_window", 0);
        k.check(c.sliding_window >= 0, "attention.sliding_window", double(c.sliding_window),
                "must be >= 0");
        c.final_logit_softcap = k.float_or("final_logit_softcapping", 0.0);
        k.check(c.final_logit_softcap >= 0.0 && std::isfinite(c.final_logit_softcap),
                "final_logit_softcapping", c.final_logit_softcap, "must be finite and >= 0");
    }

    if (c.moe) {
        c.n_expert = k.required_int("expert_count");
        c.n_expert_used = k.required_int("expert_used_count");
        k.check(c.n_expert > 0 && c.n_expert <= kMaxExperts, "expert_count", double(c.n_expert),
                "must be in [1, " + std::to_string(kMaxExperts) + "]");
        k.check(c.n_expert_used > 0 && c.n_expert_used <= c.n_expert, "expert_used_count",
                double(c.n_expert_used),
                "must be in [1, expert_count = " + std::to_string(c.n_expert) + "]");
        c.n_ff_exp = k.int_or("expert_feed_forward_length", c.n_ff / c.n_expert_used);
        k.check(c.n_ff_exp > 0 && c.n_ff_exp <= (1 << 20), "expert_feed_forward_length",
                double(c.n_ff_exp), "must be in [1, 2^20]");
    } else {
        k.check(c.n_ff > 0 && c.n_ff <= (1 << 20), "feed_forward_length", double(c.n_ff),
                "must be in [1, 2^20]");
    }

    c.layers.resize(size_t(c.n_layer));
    for (int64_t il = 0; il < c.n_layer; ++il) {
        LayerConfig& l = c.layers[size_t(il)];
        l.rope_base = rope_base;
        l.rope_scale = rope_scale;
        if (c.arch == Arch::Gemma3 && c.sliding_window > 0 &&
            il % kGemma3SlidingPeriod < kGemma3SlidingPeriod - 1) {
            l.sliding = true;
            l.rope_base = kGemma3LocalRopeBase;  // the local layers keep the short-range base
            l.rope_scale = 1.0;
        }
    }
    return c;
}

}  // namespace dasllama

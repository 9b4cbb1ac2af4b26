// The hyperparameters of a GGUF text model, read from its metadata and validated.
//
// Keys follow llama.cpp's naming: `<arch>.embedding_length`, `<arch>.attention.head_count`,
// ... Facts an architecture fixes rather than stores (gemma3's sliding-window pattern and
// local rope base, which rope layout each architecture uses) live here too, so the forward
// pass reads one struct and never asks "which architecture?" outside of it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dasllama {

class GGUFFile;

enum class Arch { Llama, Qwen2, Qwen3, Qwen3Moe, Gemma3 };

// How rope pairs the dimensions of a head: NORM rotates (2i, 2i+1) (llama); NEOX rotates
// (i, i + n_rot/2) (qwen2, qwen3, gemma3).
enum class RopeLayout { Norm, Neox };

// Per-layer facts that differ between layers of one model (gemma3 interleaves local and
// global attention).
struct LayerConfig {
    bool sliding = false;     // attends to the last `sliding_window` positions only
    double rope_base = 0.0;   // theta base of this layer's rope
    double rope_scale = 1.0;  // positions are multiplied by this (linear rope scaling)
};

// The most experts a mixture-of-experts layer may have: bounds the router's per-token scratch.
constexpr int64_t kMaxExperts = 4096;

struct ModelConfig {
    Arch arch = Arch::Llama;
    std::string arch_name;    // the general.architecture string

    int64_t n_vocab = 0;
    int64_t n_embd = 0;
    int64_t n_layer = 0;
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    int64_t head_dim = 0;     // per-head size of Q and K
    int64_t head_dim_v = 0;   // per-head size of V
    int64_t n_rot = 0;        // leading dimensions of a head that rope rotates
    int64_t n_ff = 0;         // dense feed-forward width
    int64_t n_ctx_train = 0;
    double rms_eps = 0.0;

    RopeLayout rope_layout = RopeLayout::Norm;
    float attn_scale = 0.0f;  // multiplies q.k
    float embd_scale = 1.0f;  // multiplies the token embedding (gemma: sqrt(n_embd))
    double final_logit_softcap = 0.0;  // > 0: logits = cap * tanh(logits / cap) (gemma3, when
                                       // the file asks for it)

    // Which parts the architecture has.
    bool qkv_bias = false;    // qwen2
    bool qk_norm = false;     // qwen3, qwen3moe, gemma3: RMSNorm of each q and k head
    bool post_norms = false;  // gemma3: norms after attention and after the feed-forward
    bool gelu_ffn = false;    // gemma3: gelu(tanh) gate; the others silu
    bool moe = false;         // qwen3moe

    int64_t n_expert = 0;
    int64_t n_expert_used = 0;
    int64_t n_ff_exp = 0;

    int64_t sliding_window = 0;  // 0: no sliding layers
    std::vector<LayerConfig> layers;

    int64_t q_dim() const { return n_head * head_dim; }
    int64_t k_dim() const { return n_head_kv * head_dim; }
    int64_t v_dim() const { return n_head_kv * head_dim_v; }

    // Reads and validates the metadata. Throws GGUFError naming the key (missing, wrong type)
    // or the key and value (out of range, inconsistent), and Error listing the supported
    // architectures for an unknown one.
    static ModelConfig from_gguf(const GGUFFile& f);
};

// "llama, qwen2, qwen3, qwen3moe, gemma3"
const char* supported_architectures();

}  // namespace dasllama

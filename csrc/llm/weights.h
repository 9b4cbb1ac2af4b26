// The weights of a text model, found by their llama.cpp tensor names and checked against the
// config's shapes before anything reads them.
//
// Matrices become cpu::WeightMatrix (a view of the mapping, or the kernels' repacked copy);
// norms and biases become float vectors (they are small and read every token). Shapes in
// messages are NumPy order (outermost first), as dasllama.gguf shows them.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cpu/matmul.h"
#include "llm/model_config.h"

namespace dasllama {

class GGUFFile;

struct LayerWeights {
    std::vector<float> attn_norm;               // [n_embd]
    cpu::WeightMatrix wq, wk, wv, wo;           // [q_dim, n_embd] [k_dim, n_embd] [v_dim, n_embd]
                                                // [n_embd, n_head * head_dim_v]
    std::vector<float> bq, bk, bv;              // qwen2 biases (empty otherwise)
    std::vector<float> q_norm, k_norm;          // [head_dim] (qk_norm architectures)
    std::vector<float> post_attn_norm;          // [n_embd] (gemma3)
    std::vector<float> ffn_norm;                // [n_embd]
    std::vector<float> post_ffn_norm;           // [n_embd] (gemma3)

    cpu::WeightMatrix ffn_gate, ffn_up, ffn_down;  // dense: [n_ff, n_embd] x2, [n_embd, n_ff]

    cpu::WeightMatrix router;                   // moe: [n_expert, n_embd]
    std::vector<cpu::WeightMatrix> gate_exps;   // moe, per expert: [n_ff_exp, n_embd]
    std::vector<cpu::WeightMatrix> up_exps;     //                  [n_ff_exp, n_embd]
    std::vector<cpu::WeightMatrix> down_exps;   //                  [n_embd, n_ff_exp]
};

struct ModelWeights {
    cpu::WeightMatrix token_embd;    // [n_vocab, n_embd]
    cpu::WeightMatrix output;        // [n_vocab, n_embd]; the embedding itself when tied
    bool tied_output = false;        // no output.weight in the file
    std::vector<float> output_norm;  // [n_embd]
    std::vector<float> rope_freqs;   // [n_rot / 2] divisors of the rope frequencies (llama 3.1
                                     // style); empty when the file has none
    std::vector<LayerWeights> layers;
};

// Finds, checks and prepares every tensor the config's architecture needs. Throws GGUFError
// for a missing tensor and ShapeError naming the tensor, its shape and the expected one.
// The weights keep `file` (the mapping) alive.
ModelWeights load_weights(const std::shared_ptr<const GGUFFile>& file, const ModelConfig& cfg);

}  // namespace dasllama

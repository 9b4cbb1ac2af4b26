// Pocket TTS weights: every tensor of the GGUF (dasllama.convert.pocket's layout), checked by
// shape against the config at load. Transformer linears stay in their GGUF type (viewed in the
// mapping, repacked where the matmul kernels prefer); everything else is read as float32.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cpu/matmul.h"
#include "tts/pocket/config.h"

namespace dasllama {
class GGUFFile;
}

namespace dasllama::pocket {

// y = x W^T (+ bias when present). W (out, in).
struct Linear {
    cpu::WeightMatrix w;
    std::vector<float> bias;   // empty: no bias
};

struct Norm {
    std::vector<float> weight, bias;
};

struct TransformerLayer {
    Norm norm1, norm2;
    // The fused in_proj (q; k; v) viewed as three matrices: the prompt's last layer computes
    // only k and v.
    cpu::WeightMatrix wq, wk, wv, wo, up, down;
    std::vector<float> attn_scale, ffn_scale;  // Mimi's layer scales (empty: none)
};

struct TransformerWeights {
    TransformerConfig cfg;
    std::vector<TransformerLayer> layers;
    bool has_in_proj = false, has_out_proj = false;
    cpu::WeightMatrix in_proj, out_proj;
};

// A convolution in PyTorch's layout: Conv1d (out, in, k); ConvTranspose1d (in, out, k).
struct ConvWeights {
    std::vector<float> weight, bias;  // bias empty: none
    int64_t d0 = 0, d1 = 0, k = 0;
};

struct SeanetWeights {
    ConvWeights in, out;
    std::vector<ConvWeights> resample;              // per stage: decoder up / encoder down
    std::vector<std::vector<ConvWeights>> conv1, conv2;  // per stage, per residual block
};

struct TimeEmbedWeights {
    std::vector<float> freqs;
    Linear in, out;
    std::vector<float> alpha;
};

struct FlowBlockWeights {
    Norm norm;
    Linear mlp_in, mlp_out, ada;   // ada rows: shift; scale; gate
};

struct PocketWeights {
    // text and prompt rows
    cpu::WeightMatrix text_embd;                  // (n_bins + 1, rank or D)
    bool has_text_proj = false;
    cpu::WeightMatrix text_proj;                  // (D, rank)
    std::vector<float> bos;                       // (L,) the first frame's input
    std::vector<float> bos_voice;                 // (D,) empty: not inserted
    bool has_speaker_proj = false;
    cpu::WeightMatrix speaker_proj;               // (D, Ci)
    std::vector<float> latent_mean, latent_std;   // (L,)
    // backbone
    cpu::WeightMatrix input;                      // (D, L)
    TransformerWeights lm;
    Norm out_norm;
    bool has_z_proj = false;
    cpu::WeightMatrix z_proj;                     // (Z, D)
    std::vector<float> eos_weight;                // (Z,)
    float eos_bias = 0.0f;
    // flow head
    std::vector<TimeEmbedWeights> time;
    Linear cond, flow_input;
    std::vector<FlowBlockWeights> blocks;
    Linear final_ada, final_out;
    // Mimi
    cpu::WeightMatrix quant_proj;                 // (Co, L)
    std::vector<float> upsample;                  // (Co, 1, 2u) depthwise; empty when u == 1
    TransformerWeights dec_tf, enc_tf;
    SeanetWeights dec, enc;
    ConvWeights downsample;                       // (Ci, Ce, 2u) [voice, u > 1]
    bool has_encoder = false;
};

// Loads every tensor; throws GGUFError (missing tensor) or ShapeError (wrong shape), naming
// the file, the tensor, its shape and the expected one.
PocketWeights load_pocket_weights(const std::shared_ptr<const GGUFFile>& file,
                                  const PocketConfig& c);

}  // namespace dasllama::pocket

// Pocket TTS hyperparameters: the pocket.* metadata of a GGUF written by
// dasllama.convert.pocket (its module docstring is the layout contract).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dasllama {
class GGUFFile;
}

namespace dasllama::pocket {

// A StreamingTransformer: the FlowLM backbone or one of Mimi's (windowed) transformers.
struct TransformerConfig {
    int64_t d_model = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0, num_layers = 0;
    int64_t ffn_dim = 0;
    int64_t context = 0;          // > 0: a query sees the last `context` positions only
    int64_t input_dim = 0, output_dim = 0;  // Mimi's projections (equal to d_model: none)
    double rope_max_period = 10000.0;
    double norm_eps = 1e-5;
    bool layer_scale = false;     // Mimi's per-channel scales of each residual branch
};

// A SEANet encoder or decoder (convolutions and residual blocks).
struct SeanetConfig {
    int64_t dimension = 0, n_filters = 0, n_residual_layers = 0, kernel_size = 0;
    int64_t residual_kernel_size = 0, last_kernel_size = 0, dilation_base = 0, compress = 0;
    std::vector<int64_t> ratios;  // as in the config: decoder order
    bool replicate_pad = false;   // pad_mode "replicate" (else "constant": zeros)
};

enum class FlowType { kLSD, kFlowMatching, kDrifting, kPointwise };

struct PocketConfig {
    int64_t sample_rate = 0;
    double frame_rate = 0;
    int64_t frame_size = 0;       // samples per frame: int(sample_rate / frame_rate)
    int64_t latent_dim = 0;       // L
    double temperature = 0.3;
    int64_t lsd_decode_steps = 1;
    double eos_threshold = -4.0;
    int64_t chunk_tokens = 50;
    int64_t min_frames_before_eos = 6;
    int64_t frames_after_eos = -1;  // -1: the caller's guess from the word count
    double tokens_per_second = 3.0;
    double gen_seconds_padding = 2.0;
    bool voice_cloning = false;

    // text
    int64_t n_bins = 0, text_dim = 0, text_rank = 0;

    // FlowLM
    TransformerConfig lm;
    int64_t z_dim = 0;            // 0: no z_proj, the conditioning is d_model wide
    bool insert_bos_before_voice = false;
    int64_t cond_dim() const { return z_dim ? z_dim : lm.d_model; }

    // flow head
    FlowType flow_type = FlowType::kLSD;
    int64_t flow_dim = 0, flow_depth = 0, flow_time_conds = 0, flow_freq_dim = 0;
    double flow_norm_eps = 1e-6, flow_time_norm_eps = 1e-5;

    // Mimi
    double encoder_frame_rate = 0;
    int64_t channels = 1, inner_dim = 0, outer_dim = 0, upsample_stride = 1;
    SeanetConfig enc, dec;
    TransformerConfig enc_tf, dec_tf;

    // The package's length cap: ceil((tokens / tokens_per_second + padding) * frame_rate).
    int64_t frames_cap(int64_t n_tokens) const;
};

// Reads and checks every pocket.* key; throws GGUFError naming the file and the key.
PocketConfig read_pocket_config(const GGUFFile& f);

}  // namespace dasllama::pocket

// Pocket TTS weights resident on a GPU: the backbone's and Mimi's transformer linears in their
// GGUF formats (the matrix stamps decode them in place), everything else float32: norms,
// biases, the flow head, and Mimi's convolutions repacked for the matrix stamps (Conv1d as
// (Cout, K * Cin), ConvTranspose1d as (K * Cout, Cin), as csrc/tts/pocket/conv.cpp packs them).
// Uploaded once, per part: the frames and prompt seats need the backbone and the flow head,
// the codec seat Mimi's decoder.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "gpu/device.h"
#include "gpu/matrix.h"
#include "tts/pocket/config.h"
#include "tts/pocket/weights.h"

namespace dasllama::pocket {

using DeviceBuffer = std::unique_ptr<gpu::Buffer>;
using gpu::DeviceMatrix;

struct DeviceLinear {
    DeviceMatrix w;
    DeviceBuffer bias;  // null: none
};

struct DeviceTransformerLayer {
    DeviceBuffer norm1_w, norm1_b, norm2_w, norm2_b, attn_scale, ffn_scale;  // scales: may be null
    // [weight | bias] of each norm: the aux buffer of a projection's LayerNorm input stage.
    DeviceBuffer norm1_wb, norm2_wb;
    // wqkv: the rows of q, k and v one after the other (one product makes all three).
    DeviceMatrix wqkv, wo, up, down;
};

struct DeviceTransformer {
    TransformerConfig cfg;
    std::vector<DeviceTransformerLayer> layers;
    bool has_in_proj = false, has_out_proj = false;
    DeviceMatrix in_proj, out_proj;
    DeviceBuffer rope_freqs;  // hi/lo float pairs per rotary frequency (rope_table.gk.h)
};

struct DeviceFlowBlock {
    DeviceLinear mlp_in, mlp_out;
};

// The backbone and the flow head (the frames and prompt seats).
struct DeviceBackbone {
    DeviceMatrix input;  // (D, L)
    DeviceTransformer lm;
    DeviceBuffer out_norm_w, out_norm_b, out_norm_wb;
    bool has_z_proj = false;
    DeviceMatrix z_proj;
    DeviceLinear cond, flow_input, final_out;
    // Every block's adaLN linear, then the final layer's: they all read the conditioning, so
    // one product makes them ([blocks * 3W + 2W] rows: shift, scale, gate per block; shift,
    // scale for the final layer).
    DeviceLinear ada_all;
    // Every block's LayerNorm [weight | bias], 2W each.
    DeviceBuffer flow_norm_wb;
    std::vector<DeviceFlowBlock> blocks;
    uint64_t bytes = 0;
};

// A streaming convolution's weights, packed for the matrix stamps.
struct DeviceConv {
    DeviceMatrix w;
    DeviceBuffer bias;
    int64_t cin = 0, cout = 0, k = 0;
};

struct DeviceSeanetStage {
    DeviceConv up;                          // ConvTranspose1d, packed (K * Cout, Cin)
    std::vector<DeviceConv> conv1, conv2;   // per residual block
};

// Mimi's decoder (the codec seat).
struct DeviceMimi {
    DeviceMatrix quant_proj;   // (Co, L)
    DeviceBuffer upsample;     // (Co, 2u) depthwise; null when u == 1
    DeviceTransformer tf;
    DeviceConv in, out;
    std::vector<DeviceSeanetStage> stages;
    uint64_t bytes = 0;
};

// Why these weights cannot live on a GPU ("" when they can): a matrix format the stamps do not
// read, names the tensor.
std::string pocket_weights_unsupported(const PocketWeights& w);

// Upload. Throw DeviceError (out of memory included).
DeviceBackbone upload_backbone(gpu::Device& dev, const PocketConfig& c, const PocketWeights& w);
DeviceMimi upload_mimi(gpu::Device& dev, const PocketConfig& c, const PocketWeights& w);

}  // namespace dasllama::pocket

// A text model's weights resident on a GPU: matrices as their raw GGUF blocks (gpu/matrix.h),
// norms and biases as float32 vectors. Uploaded once at load.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpu/device.h"
#include "gpu/matrix.h"
#include "llm/weights.h"

namespace dasllama {

using gpu::DeviceMatrix;

struct DeviceLayer {
    std::unique_ptr<gpu::Buffer> attn_norm, q_norm, k_norm, post_attn_norm, ffn_norm,
        post_ffn_norm;
    std::unique_ptr<gpu::Buffer> bqkv;  // qwen2: the q, k and v biases end to end
    // wq, wk and wv stacked by rows when their formats agree (then wq/wk/wv are empty); else
    // two neighbours that agree stacked in the first one's place (wq holds [q | k] with wk
    // empty, or wk holds [k | v] with wv empty), else each alone: either way they write one
    // packed [q | k | v] row per token. Gate and up likewise, into one [gate | up] row.
    DeviceMatrix wqkv, wq, wk, wv, wo, ffn_gate_up, ffn_gate, ffn_up, ffn_down;
};

struct DeviceWeights {
    DeviceMatrix token_embd, output;
    std::unique_ptr<gpu::Buffer> output_norm;
    std::vector<DeviceLayer> layers;
    uint64_t bytes = 0;
};

// Why these weights cannot live on `device` ("" when they can): a matrix format the kernels do
// not read, names the tensor kind and format.
std::string device_weights_unsupported(const ModelConfig& cfg, const ModelWeights& w);

// Uploads every tensor. Throws DeviceError (out of memory included).
DeviceWeights upload_weights(gpu::Device& device, const ModelConfig& cfg, const ModelWeights& w);

}  // namespace dasllama

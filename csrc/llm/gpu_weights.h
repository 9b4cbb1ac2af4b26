// A text model's weights resident on a GPU: matrices as their raw GGUF blocks (the kernels
// decode them in place), norms and biases as float32 vectors. Uploaded once at load.
//
// A matrix larger than one storage binding can address is split by rows into several buffers
// (lavapipe stops at 128 MiB; a 262k-token embedding is larger); kernels run once per split.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpu/device.h"
#include "llm/weights.h"

namespace dasllama {

struct DeviceMatrix {
    struct Split {
        std::unique_ptr<gpu::Buffer> buffer;
        int64_t row0 = 0, rows = 0;
    };
    std::string format;  // stamp suffix: "q4_0", "q6_k", "f16", ...
    int64_t rows = 0, cols = 0, row_bytes = 0;
    std::vector<Split> splits;
};

struct DeviceLayer {
    std::unique_ptr<gpu::Buffer> attn_norm, q_norm, k_norm, post_attn_norm, ffn_norm,
        post_ffn_norm;
    std::unique_ptr<gpu::Buffer> bqkv;  // qwen2: the q, k and v biases end to end
    // wq, wk and wv stacked by rows when their formats agree (then wq/wk/wv are empty), else
    // each alone: either way they write one packed [q | k | v] row per token. Gate and up
    // likewise, into one [gate | up] row.
    DeviceMatrix wqkv, wq, wk, wv, wo, ffn_gate_up, ffn_gate, ffn_up, ffn_down;
};

struct DeviceWeights {
    DeviceMatrix token_embd, output;
    std::unique_ptr<gpu::Buffer> output_norm;
    std::vector<DeviceLayer> layers;
    uint64_t bytes = 0;
};

// The stamp suffix of a GGUF type the GPU kernels read, or "" when they cannot.
std::string device_format(const TypeTraits& type);

// Why these weights cannot live on `device` ("" when they can): a matrix format the kernels do
// not read, names the tensor kind and format.
std::string device_weights_unsupported(const ModelConfig& cfg, const ModelWeights& w);

// Uploads every tensor. Throws DeviceError (out of memory included).
DeviceWeights upload_weights(gpu::Device& device, const ModelConfig& cfg, const ModelWeights& w);

}  // namespace dasllama

// The Pocket TTS stages' building blocks on a GPU, recorded into an encoder: linear layers
// (the matrix stamps, plus a bias), LayerNorm (with adaLN), row copies and activations,
// add-and-scale, rotary tables and rotation, causal attention over a float32 cache, and the
// transposed convolution's overlap-add; and GpuTransformer, a StreamingTransformer whose K/V
// cache lives on the device. Every kernel is a stamp of shaders/kernels.
//
// Callers own the barriers between dependent dispatches (each helper that records two
// dependent dispatches puts its own barrier between them).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpu/device.h"
#include "tts/pocket/gpu_weights.h"

namespace dasllama::pocket {

// Largest head_dim and keys per query of attention_f32 (shaders/kernels/attention_f32.gk.h).
constexpr int64_t kGpuAttnMaxHeadDim = 128;
constexpr int64_t kGpuAttnMaxKeys = 4096;

const gpu::StampInfo& pocket_stamp(const std::string& name);

class GpuOps {
public:
    explicit GpuOps(std::shared_ptr<gpu::Device> device);
    gpu::Device& device() { return *device_; }
    const std::shared_ptr<gpu::Device>& device_ptr() const { return device_; }
    gpu::Buffer& dummy() { return *dummy_; }

    // y[y_off + t y_stride + r] (+)= sum_k W[r, k] x[x_off + t x_stride + k] (+ bias[r]), t < n.
    void linear(gpu::Encoder& e, const DeviceMatrix& m, gpu::Buffer* bias, gpu::Buffer& x,
                uint32_t x_off, uint32_t x_stride, gpu::Buffer& y, uint32_t y_off,
                uint32_t y_stride, int64_t n, bool accumulate = false);
    // LayerNorm of rows [rows, width] (w, b null: no affine part; mod non-null: adaLN from
    // mod[mod_off ...] = shift; scale).
    void layernorm(gpu::Encoder& e, gpu::Buffer& x, uint32_t x_off, gpu::Buffer* w,
                   gpu::Buffer* b, int64_t rows, int64_t width, double eps, gpu::Buffer& y,
                   uint32_t y_off, gpu::Buffer* mod = nullptr, uint32_t mod_off = 0);
    // op: "copy", "elu", "gelu", "silu".
    void rows(gpu::Encoder& e, const char* op, gpu::Buffer& src, uint32_t src_off,
              uint32_t src_stride, gpu::Buffer& dst, uint32_t dst_off, uint32_t dst_stride,
              int64_t width, int64_t n_rows);
    // y[t, i] += x[t, i] (* s[s_off + i]) / div.
    void add_scale(gpu::Encoder& e, gpu::Buffer& y, uint32_t y_off, uint32_t y_stride,
                   gpu::Buffer& x, uint32_t x_off, uint32_t x_stride, int64_t width,
                   int64_t n_rows, gpu::Buffer* s = nullptr, uint32_t s_off = 0,
                   float div = 1.0f);
    void rope_table(gpu::Encoder& e, gpu::Buffer& freqs, gpu::Buffer& tab, int64_t half,
                    int64_t n_tok, int64_t pos0);
    void rope(gpu::Encoder& e, gpu::Buffer& x, uint32_t x_stride, int64_t n_tok, int64_t n_head,
              int64_t head_dim, gpu::Buffer& tab);
    void attention(gpu::Encoder& e, gpu::Buffer& q, uint32_t q_stride, gpu::Buffer& kc,
                   gpu::Buffer& vc, uint32_t kv_stride, gpu::Buffer& out, uint32_t out_stride,
                   int64_t n_tok, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                   int64_t pos0, int64_t window, float scale);

private:
    std::shared_ptr<gpu::Device> device_;
    std::unique_ptr<gpu::Buffer> dummy_, zero_base_;
    bool coopmat_ = false;
};

// A StreamingTransformer (pocket::TransformerRunner) on the device. The K/V cache is float32,
// [capacity][num_kv_heads * head_dim] per layer, rows as kv_cache_append_rows takes them.
class GpuTransformer {
public:
    GpuTransformer(GpuOps& ops, const DeviceTransformer& w);

    // Buffers for calls of up to n rows and a cache of n_ctx positions. Growing the cache
    // drops its rows (returns true then): the caller uploads again. Call between submissions.
    void reserve_rows(int64_t n);
    bool reserve_cache(int64_t n_ctx);
    int64_t capacity() const { return capacity_; }

    // Records x [n, d_model] (buffer x from element 0) through every layer at positions
    // pos0.., appending each layer's rotated K and V to the device cache. kv_only_last: the
    // last layer stores only its K and V (the prompt stage).
    void record(gpu::Encoder& e, gpu::Buffer& x, int64_t n, int64_t pos0, bool kv_only_last);

    // Rows [pos0, pos0 + n) of one layer, [n][kv_width], moved synchronously.
    void upload_rows(int layer, int64_t pos0, int64_t n, const float* k, const float* v);
    void download_rows(int layer, int64_t pos0, int64_t n, float* k, float* v);
    int64_t kv_width() const { return w_.cfg.num_kv_heads * w_.cfg.head_dim; }
    // The device cache of one layer: keys (which 0) or values (1).
    gpu::Buffer& cache(int layer, int which) {
        return which ? *vc_[size_t(layer)] : *kc_[size_t(layer)];
    }

private:
    GpuOps& ops_;
    const DeviceTransformer& w_;
    int64_t rows_ = 0, capacity_ = 0;
    std::unique_ptr<gpu::Buffer> h_, q_, k_, v_, attn_, out_, ff_, tab_;
    std::vector<std::unique_ptr<gpu::Buffer>> kc_, vc_;
};

}  // namespace dasllama::pocket

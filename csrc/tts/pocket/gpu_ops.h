// The Pocket TTS stages' building blocks on a GPU, recorded into an encoder: linear layers
// (the matrix stamps, plus a bias), LayerNorm (with adaLN), row copies and activations,
// add-and-scale, rotation with the K/V cache store, causal attention over a float32 cache, and the
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
#include "gpu/matrix.h"
#include "tts/pocket/gpu_weights.h"

namespace dasllama::pocket {

// Largest head_dim and keys per query of attention_f32 (shaders/kernels/attention_f32.gk.h).
constexpr int64_t kGpuAttnMaxHeadDim = 128;
constexpr int64_t kGpuAttnMaxKeys = 4096;

const gpu::StampInfo& pocket_stamp(const std::string& name);

// What a seat's submission ran: its command buffer's dispatches, and whether it was an earlier
// recording submitted again (1) or recorded for this call (0).
struct GpuRun {
    uint64_t dispatches = 0;
    uint64_t replays = 0;
};

// The knob vulkan.pocket.replay: whether the frames and codec seats submit again a command
// buffer recorded for an earlier call of the same shape (its positions read from memory).
bool pocket_replay_on();

class GpuOps {
public:
    explicit GpuOps(std::shared_ptr<gpu::Device> device);
    gpu::Device& device() { return *device_; }
    const std::shared_ptr<gpu::Device>& device_ptr() const { return device_; }
    gpu::Buffer& dummy() { return *dummy_; }

    // y[y_off + t y_stride + r] (+)= sum_k W[r, k] in(x)[x_off + t x_stride + k] (+ bias[r]),
    // t < n; `in` the input stage (shaders/kernels/mm_input.h: its LayerNorm modes for n == 1
    // only, where the matrix-vector stamps take the product).
    void linear(gpu::Encoder& e, const DeviceMatrix& m, gpu::Buffer* bias, gpu::Buffer& x,
                uint32_t x_off, uint32_t x_stride, gpu::Buffer& y, uint32_t y_off,
                uint32_t y_stride, int64_t n, bool accumulate = false,
                const gpu::ProjectionInput& in = gpu::ProjectionInput());
    // One row's gated residual (the flow blocks'): y[y_off + r] += gate_r (sum_k W[r, k] in(x)[k]
    // + bias_r), bias_r at aux[bias_off + r], gate_r at aux[gate_off + r] (offsets below 2^16),
    // in_mode one that reads no aux (0, 4 SiLU, 5 GELU): the matrix-vector stamp's gated
    // output stage (shaders/kernels/mm_input.h, GK_MM_STORE).
    void linear_gated(gpu::Encoder& e, const DeviceMatrix& m, gpu::Buffer& x, uint32_t x_off,
                      uint32_t in_mode, gpu::Buffer& y, uint32_t y_off, gpu::Buffer& aux,
                      uint32_t bias_off, uint32_t gate_off);
    // LayerNorm of rows [rows, width] (w, b null: no affine part; mod non-null: adaLN from
    // mod[mod_off ...] = shift; scale).
    void layernorm(gpu::Encoder& e, gpu::Buffer& x, uint32_t x_off, gpu::Buffer* w,
                   gpu::Buffer* b, int64_t rows, int64_t width, double eps, gpu::Buffer& y,
                   uint32_t y_off, gpu::Buffer* mod = nullptr, uint32_t mod_off = 0);
    // op: "copy", "elu", "gelu", "silu"; bias non-null: f(src + bias[j]).
    void rows(gpu::Encoder& e, const char* op, gpu::Buffer& src, uint32_t src_off,
              uint32_t src_stride, gpu::Buffer& dst, uint32_t dst_off, uint32_t dst_stride,
              int64_t width, int64_t n_rows, gpu::Buffer* bias = nullptr);
    // y[t, i] += (x[t, i] (+ bias[i])) (* s[s_off + i]) / div.
    void add_scale(gpu::Encoder& e, gpu::Buffer& y, uint32_t y_off, uint32_t y_stride,
                   gpu::Buffer& x, uint32_t x_off, uint32_t x_stride, int64_t width,
                   int64_t n_rows, gpu::Buffer* s = nullptr, uint32_t s_off = 0,
                   float div = 1.0f, gpu::Buffer* bias = nullptr);
    // Positions pos_base[0] + pos0 + t (pos_base null: 0).
    void attention(gpu::Encoder& e, gpu::Buffer& q, uint32_t q_stride, gpu::Buffer& kc,
                   gpu::Buffer& vc, uint32_t kv_stride, gpu::Buffer& out, uint32_t out_stride,
                   int64_t n_tok, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                   int64_t pos0, int64_t window, float scale, gpu::Buffer* pos_base = nullptr);
    // The rotary embedding and K/V cache store of n rows [q | k | v] (stride qkv_stride) at
    // positions pos_base[0] + pos0 + t (shaders/kernels/rope_store_f32.gk.h); rows non-null
    // also gets each row's k at rows_off + t * kv_width and v at + rows_v_off.
    void rope_store(gpu::Encoder& e, gpu::Buffer& qkv, uint32_t qkv_stride, int64_t n,
                    int64_t n_head, int64_t n_head_kv, int64_t head_dim, gpu::Buffer& freqs,
                    gpu::Buffer& kc, gpu::Buffer& vc, int64_t pos0, gpu::Buffer* pos_base,
                    gpu::Buffer* rows, uint32_t rows_off, uint32_t rows_v_off);

    // One row's rope_store and attention in one dispatch (shaders/kernels/attention_step_f32.gk.h:
    // the same results bit for bit): the row [q | k | v] at qkv[0 ...], position
    // pos_base[0] + pos0; rows as rope_store's.
    void attention_step(gpu::Encoder& e, gpu::Buffer& qkv, gpu::Buffer& freqs, gpu::Buffer& kc,
                        gpu::Buffer& vc, gpu::Buffer& out, int64_t n_head, int64_t n_head_kv,
                        int64_t head_dim, int64_t pos0, int64_t window, float scale,
                        gpu::Buffer* pos_base, gpu::Buffer* rows, uint32_t rows_off,
                        uint32_t rows_v_off);
    // A buffer holding the position base 0.
    gpu::Buffer& zero_base() { return *zero_base_; }

private:
    std::shared_ptr<gpu::Device> device_;
    std::unique_ptr<gpu::Buffer> dummy_, zero_base_;
    bool coopmat_ = false;

public:
    // Whether many-row products may take the cooperative-matrix stamps on this device.
    bool coopmat() const { return coopmat_; }
};

// Where a recorded transformer call finds its positions and leaves its K/V rows.
struct TransformerRecordOptions {
    gpu::Buffer* pos_base = nullptr;  // positions pos_base[0] + pos0 + t (null: pos0 + t)
    // Non-null: layer l's rotated K rows also go to rows[rows_off + (2 l) * rows_stride ...],
    // its V rows to rows[rows_off + (2 l + 1) * rows_stride ...], kv_width apart.
    gpu::Buffer* rows = nullptr;
    uint32_t rows_off = 0, rows_stride = 0;
};

// A StreamingTransformer (pocket::TransformerRunner) on the device. The K/V cache is float32,
// [capacity][num_kv_heads * head_dim] per layer, rows as kv_cache_append_rows takes them.
// One product makes a layer's q, k and v; a single row (n == 1) also has its LayerNorms done
// by the input stage of the projection that follows them, and every call its GELU by the
// down projection's.
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
    void record(gpu::Encoder& e, gpu::Buffer& x, int64_t n, int64_t pos0, bool kv_only_last,
                const TransformerRecordOptions& opt = TransformerRecordOptions());
    // Moves on whenever reserve_rows or reserve_cache replaces a buffer (recordings that bind
    // them are stale then).
    uint64_t buffers_generation() const { return generation_; }

    // Rows [pos0, pos0 + n) of one layer, [n][kv_width], moved synchronously.
    void upload_rows(int layer, int64_t pos0, int64_t n, const float* k, const float* v);
    void download_rows(int layer, int64_t pos0, int64_t n, float* k, float* v);
    int64_t kv_width() const { return w_.cfg.num_kv_heads * w_.cfg.head_dim; }
    // The device cache of one layer: keys (which 0) or values (1).
    gpu::Buffer& cache(int layer, int which) {
        return which ? *vc_[size_t(layer)] : *kc_[size_t(layer)];
    }

private:
    // A many-row product from a staged float16 panel (gpu/matrix.h: stage_input, then
    // project_staged): the input stage (LayerNorm, GELU or none) formed once per token row,
    // the product on the tile the shape picks. False, recording nothing, where staged_panel
    // says no (few rows, no cooperative matrices, F32 weights, the knob).
    bool staged(gpu::Encoder& e, const DeviceMatrix& m, gpu::Buffer& x, uint32_t x_stride,
                int64_t n, const gpu::ProjectionInput& in, gpu::Buffer& y, uint32_t y_stride,
                bool accumulate);

    GpuOps& ops_;
    const DeviceTransformer& w_;
    int64_t rows_ = 0, capacity_ = 0;
    uint64_t generation_ = 0;
    std::unique_ptr<gpu::Buffer> h_, qkv_, attn_, out_, ff_;
    std::unique_ptr<gpu::Buffer> panel_;  // staged input rows (halves), the widest input
    std::vector<std::unique_ptr<gpu::Buffer>> kc_, vc_;
};

}  // namespace dasllama::pocket

// The element-wise and attention ops of a transformer forward pass, on float32 rows.
//
// Shapes are NumPy order in comments: [n_tokens, n_embd] is n_tokens rows of n_embd floats,
// row after row. Every op works on the caller's buffers and allocates nothing; attention
// takes its per-thread scratch from an AttentionScratch made once per model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dasllama {
class ThreadPool;
}

namespace dasllama::cpu {

// --- normalization and activations ------------------------------------------------------

// out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w for each of n_rows rows of n floats. The sum
// of squares is accumulated in double. out may equal x.
void rmsnorm(const float* x, const float* w, int64_t n_rows, int64_t n, double eps, float* out);

// x[i] += y[i]
void add(float* x, const float* y, int64_t n);

// x[r] += y[r] + bias for each of n_rows rows of n floats (bias: n floats). For adding a bias
// alone pass y = nullptr.
void add_rows(float* x, const float* y, const float* bias, int64_t n_rows, int64_t n);

// Gated activations of a feed-forward layer: gate[i] = act(gate[i]) * up[i].
// silu(x) = x / (1 + exp(-x)); gelu_tanh(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void swiglu(float* gate, const float* up, int64_t n);
void geglu_tanh(float* gate, const float* up, int64_t n);

// In place: x = exp(x - max) / sum.
void softmax(float* x, int64_t n);

// --- conversions and vector kernels (dispatched: generic, avx2 with F16C and FMA) ---------

// IEEE half <-> float32 rows; to-half rounds to nearest even (as core/formats.h).
void f16_to_f32_row(const uint16_t* src, float* dst, int64_t n);
void f32_to_f16_row(const float* src, uint16_t* dst, int64_t n);
// y[i] += a * x[i]
void axpy(float* y, float a, const float* x, int64_t n);
// ELU with alpha 1: out[i] = x[i] > 0 ? x[i] : expm1(x[i]). out may equal x.
void elu(const float* x, float* out, int64_t n);
// GELU, tanh form, in place: x = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void gelu_tanh(float* x, int64_t n);

namespace ops {
// One variant of the dispatched kernels above (cpu/dispatch.h). The generic activations call
// the C library (expm1, tanh); the vector ones use a polynomial exp (within a few float
// roundings of them: tests/cpp/test_ops.cpp holds the bar).
struct Kernels {
    const char* isa;
    void (*f16_to_f32)(const uint16_t* src, float* dst, int64_t n);
    void (*f32_to_f16)(const float* src, uint16_t* dst, int64_t n);
    void (*axpy)(float* y, float a, const float* x, int64_t n);
    void (*elu)(const float* x, float* out, int64_t n);
    void (*gelu_tanh)(float* x, int64_t n);
};
std::vector<std::string> available_variants();  // best first, ends with "generic"
const Kernels& variant(std::string_view isa);   // throws Error when not available
const Kernels& active();
const Kernels* kernels_avx2();  // ops_avx2.cpp (x86-64 builds only)
}  // namespace ops

// --- rope --------------------------------------------------------------------------------

// cos/sin of the rotation angles of positions pos0..pos0+n_tokens-1: angle(p, i) =
// p * scale * base^(-2i / n_rot) / factors[i] for i < n_rot / 2 (factors: optional, n_rot/2
// divisors), computed in double. cos and sin are [n_tokens, n_rot / 2].
void rope_table(double base, double scale, int64_t n_rot, int64_t pos0, int64_t n_tokens,
                float* cos, float* sin, const float* factors = nullptr);

// Rotates the first n_rot dimensions of each head of x [n_tokens, n_heads, head_dim] by the
// table. neox = false pairs (2i, 2i+1) (llama's NORM layout); neox = true pairs
// (i, i + n_rot/2). Dimensions from n_rot on are left as they are.
void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t n_rot,
          bool neox, const float* cos, const float* sin);

// --- attention ---------------------------------------------------------------------------

// Where attention reads keys and values: rows of one kv head over a run of positions, as
// float32. A source may return a pointer into its own storage or convert into `scratch`
// (room for n rows of the head's size). Attention asks only for positions that some query of
// the call sees (a sliding-window ring holds no others).
class KVSource {
public:
    virtual ~KVSource() = default;
    virtual const float* keys(int64_t kv_head, int64_t pos0, int64_t n, float* scratch) const = 0;
    virtual const float* values(int64_t kv_head, int64_t pos0, int64_t n, float* scratch) const = 0;
};

struct AttentionShape {
    int64_t n_head = 0, n_head_kv = 0;   // query heads share kv head h / (n_head / n_head_kv)
    int64_t head_dim = 0;                // size of q and k heads
    int64_t head_dim_v = 0;              // size of v heads (and of the output heads)
    float scale = 1.0f;                  // multiplies q.k
    int64_t window = 0;                  // > 0: a query at p sees keys p - window < k <= p
};

// Per-thread working memory of attention, sized once.
class AttentionScratch {
public:
    AttentionScratch() = default;
    AttentionScratch(int n_threads, int64_t head_dim, int64_t head_dim_v);
    float* thread_area(int thread) { return data_.data() + size_t(thread) * per_thread_; }
    int n_threads() const { return n_threads_; }
    int64_t head_dim() const { return head_dim_; }
    int64_t head_dim_v() const { return head_dim_v_; }

private:
    std::vector<float> data_;
    size_t per_thread_ = 0;
    int n_threads_ = 0;
    int64_t head_dim_ = 0, head_dim_v_ = 0;
};

// Causal multi-head attention of n_tokens queries at positions pos0..pos0+n_tokens-1 over the
// keys and values in `kv` (which must already hold positions up to pos0 + n_tokens - 1):
//   out[t, h] = sum_k softmax_k(scale * q[t, h] . K[k, h/g]) V[k, h/g]
// over the keys k the query sees (k <= p, and p - k < window when window > 0).
// q: [n_tokens, n_head, head_dim]; out: [n_tokens, n_head, head_dim_v]. Single pass with a
// running maximum (online softmax), split over the pool by (block of queries, heads of one kv
// group): the heads that share a kv head share each conversion of its keys and values.
void attention(const AttentionShape& s, const float* q, int64_t n_tokens, int64_t pos0,
               const KVSource& kv, float* out, ThreadPool& pool, AttentionScratch& scratch);

// attention() of several independent query runs (the sequences of a batched step, each over its
// own cache) as one job on the pool: a decode step's single queries are too small to be worth a
// pool round each.
struct AttentionJob {
    const float* q;
    int64_t n_tokens;
    int64_t pos0;
    const KVSource* kv;
    float* out;
};
void attention_batch(const AttentionShape& s, const AttentionJob* jobs, int n_jobs,
                     ThreadPool& pool, AttentionScratch& scratch);

}  // namespace dasllama::cpu

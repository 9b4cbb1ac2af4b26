// Element-wise ops, rope and attention. Generic C++: the work here is small next to the
// matrix products (cpu/matmul.h); the attention's inner products go through the dispatched
// dot kernel (cpu/dot.h).
#include "cpu/ops.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <string>

#include "core/errors.h"
#include "core/formats.h"
#include "core/thread_pool.h"
#include "cpu/dispatch.h"
#include "cpu/dot.h"

namespace dasllama::cpu {

// --- normalization and activations ------------------------------------------------------

void rmsnorm(const float* x, const float* w, int64_t n_rows, int64_t n, double eps, float* out) {
    for (int64_t r = 0; r < n_rows; ++r, x += n, out += n) {
        double ss = 0.0;
        for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * double(x[i]);
        const float inv = float(1.0 / std::sqrt(ss / double(n) + eps));
        for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv * w[i];
    }
}

void add(float* x, const float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void add_rows(float* x, const float* y, const float* bias, int64_t n_rows, int64_t n) {
    for (int64_t r = 0; r < n_rows; ++r, x += n) {
        if (y) {
            add(x, y, n);
            y += n;
        }
        if (bias) add(x, bias, n);
    }
}

void swiglu(float* gate, const float* up, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i];
        gate[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
}

void geglu_tanh(float* gate, const float* up, int64_t n) {
    // 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)): one exp instead of a tanh (several times slower).
    const float k2 = 2.0f * 0.7978845608028654f;  // 2 sqrt(2 / pi)
    for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i];
        gate[i] = g / (1.0f + std::exp(-k2 * (g + 0.044715f * g * g * g))) * up[i];
    }
}

void softmax(float* x, int64_t n) {
    if (n <= 0) return;
    const float mx = *std::max_element(x, x + n);
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        x[i] = std::exp(x[i] - mx);
        sum += x[i];
    }
    const float inv = float(1.0 / sum);
    for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

// --- conversions and vector kernels ---------------------------------------------------------

namespace ops {
namespace {

void f16_to_f32_generic(const uint16_t* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

void f32_to_f16_generic(const float* src, uint16_t* dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

void axpy_generic(float* y, float a, const float* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void elu_generic(const float* x, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0.0f ? x[i] : std::expm1(x[i]);
}

void gelu_tanh_generic(float* x, int64_t n) {
    const float c = 0.7978845608028654f;  // sqrt(2 / pi)
    for (int64_t i = 0; i < n; ++i) {
        const float v = x[i];
        x[i] = 0.5f * v * (1.0f + std::tanh(c * (v + 0.044715f * v * v * v)));
    }
}

const Kernels generic{"generic", f16_to_f32_generic, f32_to_f16_generic, axpy_generic,
                      elu_generic, gelu_tanh_generic};

const Variants<Kernels>& variants() {
    static const Variants<Kernels> list{
#if defined(DASLLAMA_X86)
        kernels_avx2(),
#endif
        &generic};
    return list;
}

}  // namespace

DASLLAMA_VARIANT_ENTRY_POINTS(Kernels)

}  // namespace ops

void f16_to_f32_row(const uint16_t* src, float* dst, int64_t n) { ops::active().f16_to_f32(src, dst, n); }
void f32_to_f16_row(const float* src, uint16_t* dst, int64_t n) { ops::active().f32_to_f16(src, dst, n); }
void axpy(float* y, float a, const float* x, int64_t n) { ops::active().axpy(y, a, x, n); }
void elu(const float* x, float* out, int64_t n) { ops::active().elu(x, out, n); }
void gelu_tanh(float* x, int64_t n) { ops::active().gelu_tanh(x, n); }

// --- rope --------------------------------------------------------------------------------

void rope_table(double base, double scale, int64_t n_rot, int64_t pos0, int64_t n_tokens,
                float* cos, float* sin, const float* factors) {
    const int64_t half = n_rot / 2;
    for (int64_t i = 0; i < half; ++i) {
        double freq = std::pow(base, -2.0 * double(i) / double(n_rot));
        if (factors) freq /= double(factors[i]);
        for (int64_t t = 0; t < n_tokens; ++t) {
            // In double: a float angle loses ~1e-7 relative, i.e. 1e-4 rad at position 1000.
            const double angle = double(pos0 + t) * scale * freq;
            cos[t * half + i] = float(std::cos(angle));
            sin[t * half + i] = float(std::sin(angle));
        }
    }
}

void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t n_rot,
          bool neox, const float* cos, const float* sin) {
    const int64_t half = n_rot / 2;
    // NORM pairs neighbours; NEOX pairs the two halves of the rotated part.
    const int64_t stride = neox ? 1 : 2, other = neox ? half : 1;
    for (int64_t t = 0; t < n_tokens; ++t) {
        const float* c = cos + t * half;
        const float* s = sin + t * half;
        for (int64_t h = 0; h < n_heads; ++h) {
            float* v = x + (t * n_heads + h) * head_dim;
            for (int64_t i = 0; i < half; ++i) {
                float* a = v + i * stride;
                float* b = a + other;
                const float x0 = *a, x1 = *b;
                *a = x0 * c[i] - x1 * s[i];
                *b = x0 * s[i] + x1 * c[i];
            }
        }
    }
}

// --- attention ---------------------------------------------------------------------------

namespace {

// Query vectors (a query row under one head) that share one pass over the keys: the heads of
// one kv group and consecutive rows, so each block of keys is converted once for all of them.
constexpr int64_t kQueryBlock = 16;
constexpr int64_t kKeyBlock = 64;    // keys converted and scored at a time
// A step's work items per thread below which the heads of a kv group are split over items
// (a lone decode row of a one-kv-head model would otherwise leave every thread but one idle).
constexpr int64_t kItemsPerThread = 2;

// Offsets of one thread's area, in floats.
struct ScratchLayout {
    int64_t k, v, acc, max, sum, scores, total;
    ScratchLayout(int64_t hd, int64_t hdv) {
        k = 0;
        v = k + kKeyBlock * hd;
        acc = v + kKeyBlock * hdv;
        max = acc + kQueryBlock * hdv;
        sum = max + kQueryBlock;
        scores = sum + kQueryBlock;
        total = scores + kKeyBlock;
        total = (total + 15) / 16 * 16;  // threads' areas on separate cache lines
    }
};

}  // namespace

AttentionScratch::AttentionScratch(int n_threads, int64_t head_dim, int64_t head_dim_v)
    : n_threads_(n_threads), head_dim_(head_dim), head_dim_v_(head_dim_v) {
    per_thread_ = size_t(ScratchLayout(head_dim, head_dim_v).total);
    data_.assign(per_thread_ * size_t(n_threads), 0.0f);
}

namespace {

// One work item: query rows [t0, t1) under heads [h0, h1) of one kv group, with the online
// softmax of Milakov & Gimelshein (2018): a running maximum, sum and weighted sum per query
// vector. Key blocks lie on a fixed grid of kKeyBlock positions, so a query's result does not
// depend on which rows or heads share its item.
void attend_block(const AttentionShape& s, const float* q, int64_t h0, int64_t h1, int64_t t0,
                  int64_t t1, int64_t pos0, const KVSource& kv, float* out, float* area,
                  float (*dot)(const float*, const float*, int64_t),
                  void (*axpy_fn)(float*, float, const float*, int64_t)) {
    const ScratchLayout L(s.head_dim, s.head_dim_v);
    const int64_t hd = s.head_dim, hdv = s.head_dim_v;
    const int64_t kv_head = h0 / (s.n_head / s.n_head_kv);
    const int64_t nh = h1 - h0, nv = (t1 - t0) * nh;  // query vectors: row-major over heads
    float* acc = area + L.acc;
    float* mx = area + L.max;
    float* sum = area + L.sum;
    float* scores = area + L.scores;
    std::fill(acc, acc + nv * hdv, 0.0f);
    std::fill(mx, mx + nv, -std::numeric_limits<float>::infinity());
    std::fill(sum, sum + nv, 0.0f);

    const int64_t first_pos = pos0 + t0, last_pos = pos0 + t1 - 1;
    const int64_t lo = s.window > 0 ? std::max<int64_t>(0, first_pos - s.window + 1) : 0;
    for (int64_t kb = lo / kKeyBlock * kKeyBlock; kb <= last_pos; kb += kKeyBlock) {
        // Only the block's keys some query of the item sees are read: a sliding-window ring
        // holds no more positions than that.
        const int64_t k0 = std::max(kb, lo), nk = std::min(kb + kKeyBlock, last_pos + 1) - k0;
        const float* K = kv.keys(kv_head, k0, nk, area + L.k);  // rows of keys k0 ...
        const float* V = kv.values(kv_head, k0, nk, area + L.v);
        for (int64_t j = 0; j < nv; ++j) {
            const int64_t i = j / nh, h = h0 + j % nh;
            const int64_t p = first_pos + i;
            const int64_t k_lo = s.window > 0 ? std::max(k0, p - s.window + 1) : k0;
            const int64_t k_hi = std::min(k0 + nk - 1, p);
            if (k_lo > k_hi) continue;
            const float* qi = q + ((t0 + i) * s.n_head + h) * hd;
            float block_max = -std::numeric_limits<float>::infinity();
            for (int64_t k = k_lo; k <= k_hi; ++k) {
                const float sc = dot(qi, K + (k - k0) * hd, hd) * s.scale;
                scores[k - kb] = sc;
                block_max = std::max(block_max, sc);
            }
            const float new_max = std::max(mx[j], block_max);
            const float rescale = std::exp(mx[j] - new_max);  // 0 on the first block
            float* a = acc + j * hdv;
            float l = sum[j] * rescale;
            for (int64_t d = 0; d < hdv; ++d) a[d] *= rescale;
            for (int64_t k = k_lo; k <= k_hi; ++k) {
                const float w = std::exp(scores[k - kb] - new_max);
                l += w;
                axpy_fn(a, w, V + (k - k0) * hdv, hdv);
            }
            sum[j] = l;
            mx[j] = new_max;
        }
    }
    for (int64_t j = 0; j < nv; ++j) {
        // Every query sees at least its own key, so sum > 0.
        const float inv = 1.0f / sum[j];
        float* o = out + ((t0 + j / nh) * s.n_head + h0 + j % nh) * hdv;
        for (int64_t d = 0; d < hdv; ++d) o[d] = acc[j * hdv + d] * inv;
    }
}

// How the query vectors of a call are cut into items: `heads` of one kv group and `rows`
// consecutive query rows each (heads x rows <= kQueryBlock).
struct ItemShape {
    int64_t heads, rows, head_parts;  // head_parts: items across one kv group's heads
    int64_t items(int64_t n_tokens, int64_t n_head_kv) const {
        return (n_tokens + rows - 1) / rows * n_head_kv * head_parts;
    }
};

ItemShape item_shape(const AttentionShape& s, const AttentionJob* jobs, int n_jobs,
                     int n_threads) {
    const int64_t group = s.n_head / s.n_head_kv;
    for (int64_t heads = std::min(group, kQueryBlock);; heads = (heads + 1) / 2) {
        const ItemShape shape{heads, kQueryBlock / heads, (group + heads - 1) / heads};
        int64_t n = 0;
        for (int j = 0; j < n_jobs; ++j) n += shape.items(jobs[j].n_tokens, s.n_head_kv);
        if (heads == 1 || n >= kItemsPerThread * n_threads) return shape;
    }
}

}  // namespace

void attention(const AttentionShape& s, const float* q, int64_t n_tokens, int64_t pos0,
               const KVSource& kv, float* out, ThreadPool& pool, AttentionScratch& scratch) {
    const AttentionJob job{q, n_tokens, pos0, &kv, out};
    attention_batch(s, &job, 1, pool, scratch);
}

void attention_batch(const AttentionShape& s, const AttentionJob* jobs, int n_jobs,
                     ThreadPool& pool, AttentionScratch& scratch) {
    if (pool.size() > scratch.n_threads() || scratch.head_dim() != s.head_dim ||
        scratch.head_dim_v() != s.head_dim_v)
        throw ShapeError("attention: scratch made for " + std::to_string(scratch.n_threads()) +
                         " threads and heads of " + std::to_string(scratch.head_dim()) + "/" +
                         std::to_string(scratch.head_dim_v()) + ", used with " +
                         std::to_string(pool.size()) + " threads and heads of " +
                         std::to_string(s.head_dim) + "/" + std::to_string(s.head_dim_v));
    if (s.n_head_kv <= 0 || s.n_head % s.n_head_kv)
        throw ShapeError("attention: " + std::to_string(s.n_head) + " query heads cannot share " +
                         std::to_string(s.n_head_kv) + " kv heads");
    const ItemShape shape = item_shape(s, jobs, n_jobs, pool.size());
    const int64_t group = s.n_head / s.n_head_kv, per_block = s.n_head_kv * shape.head_parts;
    // Work items, job after job: (block of rows, kv group, part of its heads), a job's later
    // row blocks (which see more keys) first, handed out one at a time.
    std::vector<int64_t> first_item(size_t(n_jobs) + 1, 0);
    for (int j = 0; j < n_jobs; ++j)
        first_item[size_t(j) + 1] =
            first_item[size_t(j)] + shape.items(jobs[j].n_tokens, s.n_head_kv);
    const int64_t n_items = first_item[size_t(n_jobs)];
    if (n_items == 0) return;
    auto* dot = dot::active().f32;
    auto* axpy_fn = ops::active().axpy;
    std::atomic<int64_t> next{0};
    pool.run([&](int thread, int) {
        float* area = scratch.thread_area(thread);
        int j = 0;
        for (int64_t item = next++; item < n_items; item = next++) {
            while (item >= first_item[size_t(j) + 1]) ++j;  // items are taken in order
            const AttentionJob& job = jobs[j];
            const int64_t local = item - first_item[size_t(j)];
            const int64_t n_blocks = (job.n_tokens + shape.rows - 1) / shape.rows;
            const int64_t rb = n_blocks - 1 - local / per_block;
            const int64_t part = local % per_block;
            const int64_t kv = part / shape.head_parts;  // the item's kv group
            const int64_t h0 = kv * group + part % shape.head_parts * shape.heads;
            const int64_t h1 = std::min(h0 + shape.heads, (kv + 1) * group);
            const int64_t t0 = rb * shape.rows;
            attend_block(s, job.q, h0, h1, t0, std::min(t0 + shape.rows, job.n_tokens), job.pos0,
                         *job.kv, job.out, area, dot, axpy_fn);
        }
    });
}

}  // namespace dasllama::cpu

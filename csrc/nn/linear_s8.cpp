#include "nn/linear_s8.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>

#include "core/cpu_features.h"
#include "core/errors.h"
#include "core/thread_pool.h"

namespace dasllama::nn {

namespace {

constexpr int64_t kBlock = 16;     // weight rows per packed block (one VNNI lane each)
constexpr int64_t kRowPad = 32;    // rows pad to pairs of blocks (the kernels take two)
constexpr int64_t kColPad = 64;    // columns pad to one AMX tile line of u8 values
// Work units of linear_s8: weight blocks per task (8 blocks: 128 rows, their packed bytes
// stay in L2 while the task's tokens stream through) and tokens per task on the VNNI path.
constexpr int64_t kBlocksPerTask = 8;
constexpr int64_t kTokensPerTask = 48;

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// Byte offset of q_w[n, k] in the packed layout.
int64_t packed_at(const S8Matrix& w, int64_t n, int64_t k) {
    return (n / kBlock) * w.cols_pad * kBlock + (k / 4) * (kBlock * 4) + (n % kBlock) * 4 + k % 4;
}

float row_scale(float amax) { return amax != 0.f ? 127.f / amax : 1.f; }

float amax_of(const float* x, int64_t n) {
    float m = 0.f;
    for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
    return m;
}

// ---------------------------------------------------------------------------- generic kernels

void quantize_rows_generic(const float* x, int64_t t0, int64_t t1, int64_t cols,
                           int64_t cols_pad, uint8_t* u, float* inv) {
    for (int64_t t = t0; t < t1; ++t) {
        const float* r = x + t * cols;
        const float s = row_scale(amax_of(r, cols));
        inv[t] = 1.f / s;
        uint8_t* o = u + t * cols_pad;
        for (int64_t k = 0; k < cols; ++k) {
            const float v = std::nearbyint(std::fma(r[k], s, 128.f));
            o[k] = uint8_t(std::min(255.f, std::max(0.f, v)));
        }
        std::fill(o + cols, o + cols_pad, uint8_t(0));
    }
}

void gemm_generic(const uint8_t* u, const float* inv, int64_t t0, int64_t t1, const S8Matrix& w,
                  int64_t b0, int64_t b1, const float* bias, float* y, int64_t ldy) {
    const int64_t n_k4 = w.cols_pad / 4;
    for (int64_t b = b0; b < b1; ++b) {
        const int8_t* blk = w.packed.data() + b * w.cols_pad * kBlock;
        for (int64_t t = t0; t < t1; ++t) {
            const uint8_t* a = u + t * w.cols_pad;
            int32_t acc[kBlock] = {};
            for (int64_t g = 0; g < n_k4; ++g)
                for (int64_t j = 0; j < kBlock; ++j)
                    for (int64_t i = 0; i < 4; ++i)
                        acc[j] += int32_t(a[g * 4 + i]) * int32_t(blk[(g * kBlock + j) * 4 + i]);
            for (int64_t j = 0; j < kBlock; ++j) {
                const int64_t n = b * kBlock + j;
                if (n >= w.rows) break;
                float v = float(acc[j] + w.comp[size_t(n)]) * inv[t];
                v = v / w.scale[size_t(n)];
                if (bias) v = v + bias[n];
                y[t * ldy + n] = v;
            }
        }
    }
}

const s8_kernels::Kernels kGeneric{quantize_rows_generic, gemm_generic};

// The best kernels below the AMX tiles: AVX-512 VNNI, then AVX2, then the generic loops.
const s8_kernels::Kernels& vector_kernels() {
#if defined(DASLLAMA_X86)
    static const s8_kernels::Kernels* k =
        cpu_features().allows("avx512") ? s8_kernels::avx512()
        : cpu_features().allows("avx2") ? s8_kernels::avx2() : nullptr;
    if (k) return *k;
#endif
    return kGeneric;
}

const s8_kernels::Kernels* amx_kernels() {
#if defined(DASLLAMA_X86)
    static const s8_kernels::Kernels* k =
        cpu_features().allows("amx") ? s8_kernels::amx() : nullptr;
    return k;
#else
    return nullptr;
#endif
}

S8Matrix empty_matrix(int64_t rows, int64_t cols, const char* what) {
    if (rows <= 0 || cols <= 0)
        throw ShapeError(std::string(what) + ": a matrix of " + std::to_string(rows) + " x " +
                         std::to_string(cols) + " (both must be positive)");
    S8Matrix m;
    m.rows = rows;
    m.cols = cols;
    m.rows_pad = round_up(rows, kRowPad);
    m.cols_pad = round_up(cols, kColPad);
    m.packed.assign(size_t(m.rows_pad * m.cols_pad), int8_t(0));
    m.scale.assign(size_t(m.rows_pad), 1.f);
    m.comp.assign(size_t(m.rows_pad), 0);
    return m;
}

void put_row(S8Matrix& m, int64_t n, const int8_t* q, float s) {
    int32_t sum = 0;
    for (int64_t k = 0; k < m.cols; ++k) {
        m.packed[size_t(packed_at(m, n, k))] = q[k];
        sum += q[k];
    }
    m.scale[size_t(n)] = s;
    m.comp[size_t(n)] = -128 * sum;
}

}  // namespace

float quantize_row_s8(const float* x, int64_t n, int8_t* q) {
    const float s = row_scale(amax_of(x, n));
    for (int64_t k = 0; k < n; ++k) {
        const float v = std::nearbyint(x[k] * s);
        q[k] = int8_t(std::min(127.f, std::max(-128.f, v)));
    }
    return s;
}

S8Matrix quantize_s8(const float* w, int64_t rows, int64_t cols) {
    S8Matrix m = empty_matrix(rows, cols, "quantize_s8");
    std::vector<int8_t> q(static_cast<size_t>(cols));
    for (int64_t n = 0; n < rows; ++n) {
        const float s = quantize_row_s8(w + n * cols, cols, q.data());
        put_row(m, n, q.data(), s);
    }
    return m;
}

S8Matrix pack_s8(const int8_t* q, const float* scale, int64_t rows, int64_t cols) {
    S8Matrix m = empty_matrix(rows, cols, "pack_s8");
    for (int64_t n = 0; n < rows; ++n) {
        if (!(scale[n] > 0.f) || !std::isfinite(scale[n]))
            throw ShapeError("pack_s8: the scale of row " + std::to_string(n) + " is " +
                             std::to_string(scale[n]) + " (must be positive and finite)");
        put_row(m, n, q + n * cols, scale[n]);
    }
    return m;
}

void s8_row(const S8Matrix& w, int64_t row, int8_t* out) {
    if (row < 0 || row >= w.rows)
        throw ShapeError("s8_row: row " + std::to_string(row) + " of " + std::to_string(w.rows));
    for (int64_t k = 0; k < w.cols; ++k) out[k] = w.packed[size_t(packed_at(w, row, k))];
}

void s8_dequantize_row(const S8Matrix& w, int64_t row, float* out) {
    if (row < 0 || row >= w.rows)
        throw ShapeError("s8_dequantize_row: row " + std::to_string(row) + " of " +
                         std::to_string(w.rows));
    const float r = 1.f / w.scale[size_t(row)];
    for (int64_t k = 0; k < w.cols; ++k)
        out[k] = float(w.packed[size_t(packed_at(w, row, k))]) * r;
}

void quantize_activations_u8(const float* x, int64_t n, int64_t cols, uint8_t* u, float* inv) {
    vector_kernels().quantize_rows(x, 0, n, cols, cols, u, inv);
}

const char* linear_s8_kernel(int64_t n) {
    if (n >= s8_kernels::kAmxMinRows && amx_kernels()) return "amx";
    const s8_kernels::Kernels* k = &vector_kernels();
    if (k == &kGeneric) return "generic";
#if defined(DASLLAMA_X86)
    if (k == s8_kernels::avx2()) return "avx2";
#endif
    return "avx512";
}

void linear_s8(const S8Matrix& w, const float* bias, const float* x, int64_t n, float* y,
               ThreadPool& pool, S8Scratch& scratch) {
    if (n < 0) throw ShapeError("linear_s8: " + std::to_string(n) + " rows");
    if (n == 0) return;
    const s8_kernels::Kernels& k = vector_kernels();
    const s8_kernels::Kernels* tiles = n >= s8_kernels::kAmxMinRows ? amx_kernels() : nullptr;
    const int64_t n_pad = round_up(n, s8_kernels::kAmxTokens);
    scratch.x.resize(size_t(n_pad * w.cols_pad));
    scratch.inv.resize(size_t(n_pad));
    uint8_t* u = scratch.x.data();
    float* inv = scratch.inv.data();
    const int n_threads = pool.size();
    // 1. the activations, rows shared out; padding rows (read by the AMX tiles) zero
    pool.run([&](int t, int nt) {
        const int64_t per = (n + nt - 1) / nt, r0 = std::min(n, t * per),
                      r1 = std::min(n, r0 + per);
        if (r0 < r1) k.quantize_rows(x, r0, r1, w.cols, w.cols_pad, u, inv);
    });
    std::fill(u + n * w.cols_pad, u + n_pad * w.cols_pad, uint8_t(0));
    std::fill(inv + n, inv + n_pad, 1.f);
    // 2. the product: tasks of (tokens x weight blocks), claimed from a counter
    const int64_t n_blocks = w.rows_pad / kBlock;
    const int64_t per_tokens = tiles ? s8_kernels::kAmxTokens : kTokensPerTask;
    const int64_t n_tok_tasks = (n + per_tokens - 1) / per_tokens;
    const int64_t n_blk_tasks = (n_blocks + kBlocksPerTask - 1) / kBlocksPerTask;
    const int64_t n_tasks = n_tok_tasks * n_blk_tasks;
    std::atomic<int64_t> next{0};
    auto body = [&](int, int) {
        for (int64_t task = next.fetch_add(1); task < n_tasks; task = next.fetch_add(1)) {
            const int64_t tt = task % n_tok_tasks, bt = task / n_tok_tasks;
            const int64_t t0 = tt * per_tokens, t1 = std::min(n, t0 + per_tokens);
            const int64_t b0 = bt * kBlocksPerTask, b1 = std::min(n_blocks, b0 + kBlocksPerTask);
            (tiles ? tiles : &k)->gemm(u, inv, t0, t1, w, b0, b1, bias, y, w.rows);
        }
    };
    if (n_threads <= 1 || n_tasks == 1)
        body(0, 1);
    else
        pool.run(body);
}

}  // namespace dasllama::nn

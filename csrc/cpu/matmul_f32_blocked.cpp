// matmul_f32_blocked: the weight panels packed once per call, the (row chunk, token block)
// tasks split over the pool, and the generic kernel (std::fma in the summation order of
// matmul_f32_blocked.h: the reference the vector kernel is tested against bit for bit).
#include "cpu/matmul_f32_blocked.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/errors.h"
#include "core/formats.h"
#include "core/thread_pool.h"
#include "cpu/dispatch.h"

namespace dasllama::cpu {

namespace blocked {
namespace {

// exp(x) as simd_x86.h's exp_avx2 computes it, one lane: the same operations in the same
// order (this file is built without FMA contraction, so every product rounds where the
// vector code's does).
float exp_lane(float x) {
    x = std::min(std::max(x, -87.3f), 88.3f);
    const float n = std::nearbyint(x * 1.44269504088896341f);
    float r = std::fma(-n, 0.693359375f, x);
    r = std::fma(-n, -2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = std::fma(p, r, 1.3981999507e-3f);
    p = std::fma(p, r, 8.3334519073e-3f);
    p = std::fma(p, r, 4.1665795894e-2f);
    p = std::fma(p, r, 1.6666665459e-1f);
    p = std::fma(p, r, 5.0000001201e-1f);
    p = std::fma(p, r * r, r + 1.0f);
    const uint32_t bits = uint32_t(int32_t(n) + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

// simd_x86.h's gelu_erf_avx512, one lane.
float gelu_lane(float x) {
    const float a = std::fabs(x) * 0.70710678118654752f;
    const float t = 1.0f / std::fma(0.5f, a, 1.0f);
    float p = 0.17087277f;
    p = std::fma(p, t, -0.82215223f);
    p = std::fma(p, t, 1.48851587f);
    p = std::fma(p, t, -1.13520398f);
    p = std::fma(p, t, 0.27886807f);
    p = std::fma(p, t, -0.18628806f);
    p = std::fma(p, t, 0.09678418f);
    p = std::fma(p, t, 0.37409196f);
    p = std::fma(p, t, 1.00002368f);
    p = std::fma(p, t, -1.26551223f);
    const float e = t * exp_lane(std::fma(-a, a, p));
    const float c = x >= 0.0f ? 2.0f - e : e;
    return (0.5f * x) * c;
}

void panels_generic(const float* packed, int64_t cols, int64_t n_panels, int64_t n_rows,
                    const float* x, int64_t ldx, int64_t n_tokens, float* y, int64_t ldy,
                    const float* bias, F32Activation act) {
    const int64_t rows = std::min<int64_t>(n_rows, n_panels * kPanelRows);
    for (int64_t t = 0; t < n_tokens; ++t)
        for (int64_t r = 0; r < rows; ++r) {
            const float* pw = packed + (r / kPanelRows) * cols * kPanelRows + r % kPanelRows;
            const float* xt = x + t * ldx;
            float total = 0.0f;
            for (int64_t c0 = 0; c0 < cols; c0 += kBlockCols) {
                float s = 0.0f;
                for (int64_t c = c0; c < std::min(cols, c0 + kBlockCols); ++c)
                    s = std::fma(pw[c * kPanelRows], xt[c], s);
                total = c0 == 0 ? s : total + s;
            }
            if (bias) total += bias[r];
            if (act == F32Activation::kGeluErf) total = gelu_lane(total);
            y[t * ldy + r] = total;
        }
}

const Kernels generic{"generic", panels_generic};

const Variants<Kernels>& variants() {
    static const Variants<Kernels> list{
#if defined(DASLLAMA_X86)
        kernels_avx512(),
        kernels_avx2(),
#endif
        &generic};
    return list;
}

// Panels per task and tokens per task: a task's panels (4 x 32 rows) and token rows stay in
// L2 while its column blocks pass; 48 tokens are 4 tiles of 12, and a 1500-frame product
// makes 32 token blocks per row chunk to share between threads. (96 or 192 tokens, 2 panels:
// within the noise of a shared box, none faster at Whisper's shapes.)
constexpr int64_t kTaskPanels = 4;
constexpr int64_t kTaskTokens = 48;

// Rows [32 p0, 32 p1) of w (F32 or F16 rows, the latter widened exactly) into panels (zero
// rows past the matrix).
template <typename Elem, typename Widen>
void pack_panels(const Elem* w, int64_t rows, int64_t cols, int64_t p0, int64_t p1,
                 float* packed, Widen widen) {
    for (int64_t p = p0; p < p1; ++p) {
        float* dst = packed + p * cols * kPanelRows;
        for (int64_t i = 0; i < kPanelRows; ++i) {
            const int64_t r = p * kPanelRows + i;
            if (r >= rows) {
                for (int64_t c = 0; c < cols; ++c) dst[c * kPanelRows + i] = 0.0f;
                continue;
            }
            const Elem* src = w + r * cols;
            for (int64_t c = 0; c < cols; ++c) dst[c * kPanelRows + i] = widen(src[c]);
        }
    }
}

void run_blocked(const Kernels& k, const WeightMatrix& w, const float* x, int64_t ldx,
                 int64_t n_tokens, float* y, int64_t ldy, ThreadPool& pool, const float* bias,
                 F32Activation act) {
    if (!w.type || !w.data) throw ShapeError("matmul_f32_blocked: the weight matrix was not prepared");
    const bool f16 = w.type->type == GgmlType::F16;
    if ((w.type->type != GgmlType::F32 && !f16) ||
        reinterpret_cast<uintptr_t>(w.data) % (f16 ? alignof(uint16_t) : alignof(float)))
        throw FormatError(std::string("matmul_f32_blocked: weights must be aligned F32 or F16 "
                                      "rows, not ") + w.type->name);
    if (n_tokens < 0 || ldx < 0 || ldy < w.rows)
        throw ShapeError("matmul_f32_blocked: n_tokens " + std::to_string(n_tokens) + ", ldx " +
                         std::to_string(ldx) + ", ldy " + std::to_string(ldy) + " for " +
                         std::to_string(w.rows) + " rows");
    if (n_tokens == 0 || w.rows == 0) return;
    const int64_t rows = w.rows, cols = w.cols;
    const int64_t n_panels = (rows + kPanelRows - 1) / kPanelRows;
    // The calling thread's panels, grow-only, on a cache line (a panel column is 128 bytes).
    thread_local std::vector<float> buf;
    const size_t need = size_t(n_panels * kPanelRows * cols) + 16;
    if (buf.size() < need) buf.resize(need);
    float* packed = buf.data();
    packed += (64 - reinterpret_cast<uintptr_t>(packed) % 64) % 64 / sizeof(float);
    pool.run([&](int t, int nt) {
        const int64_t per = (n_panels + nt - 1) / nt;
        const int64_t p0 = std::min(n_panels, t * per), p1 = std::min(n_panels, (t + 1) * per);
        if (f16)
            pack_panels(reinterpret_cast<const uint16_t*>(w.data), rows, cols, p0, p1, packed,
                        [](uint16_t h) { return f16_to_f32(h); });
        else
            pack_panels(reinterpret_cast<const float*>(w.data), rows, cols, p0, p1, packed,
                        [](float v) { return v; });
    });
    const int64_t n_chunks = (n_panels + kTaskPanels - 1) / kTaskPanels;
    const int64_t n_blocks = (n_tokens + kTaskTokens - 1) / kTaskTokens;
    const int64_t n_tasks = n_chunks * n_blocks;
    std::atomic<int64_t> next{0};
    pool.run([&](int, int) {
        for (int64_t task; (task = next.fetch_add(1, std::memory_order_relaxed)) < n_tasks;) {
            const int64_t tb = task / n_chunks, pc = task % n_chunks;
            const int64_t p0 = pc * kTaskPanels, np = std::min(n_panels - p0, kTaskPanels);
            const int64_t r0 = p0 * kPanelRows, t0 = tb * kTaskTokens;
            k.panels(packed + p0 * kPanelRows * cols, cols, np, rows - r0, x + t0 * ldx, ldx,
                     std::min(n_tokens - t0, kTaskTokens), y + t0 * ldy + r0, ldy,
                     bias ? bias + r0 : nullptr, act);
        }
    });
}

}  // namespace
}  // namespace blocked

bool matmul_f32_blocked_fast() {
    return std::string(blocked::variants().active().isa) != "generic";
}

void matmul_f32_blocked(const WeightMatrix& w, const float* x, int64_t ldx, int64_t n_tokens,
                        float* y, int64_t ldy, ThreadPool& pool, const float* bias,
                        F32Activation act) {
    blocked::run_blocked(blocked::variants().active(), w, x, ldx, n_tokens, y, ldy, pool, bias,
                         act);
}

std::vector<std::string> matmul_f32_blocked_variants() { return blocked::variants().names(); }

void matmul_f32_blocked_with(std::string_view variant, const WeightMatrix& w, const float* x,
                             int64_t ldx, int64_t n_tokens, float* y, int64_t ldy,
                             ThreadPool& pool, const float* bias, F32Activation act) {
    blocked::run_blocked(blocked::variants().get(variant), w, x, ldx, n_tokens, y, ldy, pool,
                         bias, act);
}

}  // namespace dasllama::cpu

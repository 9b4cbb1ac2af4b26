#include "nn/gemm_bf16.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

#include "core/cpu_features.h"
#include "core/errors.h"
#include "core/thread_pool.h"
#include "cpu/amx_x86.h"

namespace dasllama::nn {

namespace {

constexpr int64_t kTile = 16;        // rows of a tile
constexpr int64_t kPair = 32;        // bfloat16 values in a tile line (64 bytes)
constexpr int64_t kTokenBlock = 32;  // tokens per task: two token tiles

using cpu::amx_x86::to_bf16;

const gemm_amx::Kernels* chosen() {
#if defined(DASLLAMA_X86)
    static const gemm_amx::Kernels* k =
        cpu_features().allows("amx") ? gemm_amx::kernels() : nullptr;
    return k;
#else
    return nullptr;
#endif
}

}  // namespace

bool gemm_bf16_available() { return chosen() != nullptr; }

Bf16Matrix pack_bf16(const float* w, int64_t rows, int64_t cols) {
    if (rows <= 0 || cols <= 0 || rows % kPair || cols % kPair)
        throw ShapeError("pack_bf16: a matrix of " + std::to_string(rows) + " x " +
                         std::to_string(cols) + " (both must be positive multiples of 32)");
    Bf16Matrix m;
    m.rows = rows;
    m.cols = cols;
    m.packed.resize(size_t(rows * cols));
    const int64_t n_kc = cols / kPair;
    for (int64_t rb = 0; rb < rows / kTile; ++rb)
        for (int64_t kc = 0; kc < n_kc; ++kc) {
            uint16_t* tile = m.packed.data() + (rb * n_kc + kc) * kTile * kPair;
            for (int64_t line = 0; line < kTile; ++line)      // column pair 2 line, 2 line + 1
                for (int64_t r = 0; r < kTile; ++r)
                    for (int64_t e = 0; e < 2; ++e)
                        tile[line * kPair + 2 * r + e] =
                            to_bf16(w[(rb * kTile + r) * cols + kc * kPair + 2 * line + e]);
        }
    return m;
}

void gemm_bf16(const Bf16Matrix& w, const float* x, int64_t n, float* y, ThreadPool& pool,
               Bf16GemmScratch& sc) {
    const gemm_amx::Kernels* k = chosen();
    if (!k) throw Error("gemm_bf16: no AMX bfloat16 kernels on this CPU or build");
    if (n < 0) throw ShapeError("gemm_bf16: " + std::to_string(n) + " rows");
    if (n == 0) return;
    const int64_t n_blocks = (n + kTokenBlock - 1) / kTokenBlock, n_pad = n_blocks * kTokenBlock;
    sc.x.resize(size_t(n_pad * w.cols));
    pool.run([&](int t, int nt) {
        const int64_t per = (n_blocks + nt - 1) / nt;
        const int64_t b0 = std::min(n_blocks, t * per), b1 = std::min(n_blocks, (t + 1) * per);
        if (b0 >= b1) return;
        const int64_t r0 = b0 * kTokenBlock, r1 = b1 * kTokenBlock;
        k->round_rows(x + r0 * w.cols, std::max<int64_t>(0, std::min(n, r1) - r0), r1 - r0,
                      w.cols, sc.x.data() + r0 * w.cols);
    });
    const int64_t n_groups = (w.rows + gemm_amx::kRowGroup - 1) / gemm_amx::kRowGroup;
    const int64_t n_tasks = n_blocks * n_groups;
    std::atomic<int64_t> next{0};
    pool.run([&](int, int) {
        for (int64_t task; (task = next.fetch_add(1, std::memory_order_relaxed)) < n_tasks;) {
            // row group outer: threads share a group's packed rows in L2 at a time
            const int64_t g = task / n_blocks, b = task % n_blocks;
            const int64_t r0 = g * gemm_amx::kRowGroup;
            const int64_t r1 = std::min(w.rows, r0 + gemm_amx::kRowGroup);
            const int64_t t0 = b * kTokenBlock;
            k->tile_block(sc.x.data() + t0 * w.cols, w.cols, w.packed.data(), r0, r1,
                          std::min(kTokenBlock, n - t0), y + t0 * w.rows, w.rows);
        }
    });
}

}  // namespace dasllama::nn

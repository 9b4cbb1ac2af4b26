// gemm_bf16's kernels (built with DASLLAMA_ISA_FLAGS_amx): rounding rows to bfloat16 with
// AVX-512, the 2 x 2 tile product on AMX (tmm0-3 outputs, tmm4/5 token tiles, tmm6/7 weight
// tiles; every tile 16 lines of 64 bytes, palette 1).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "cpu/amx_x86.h"
#include "nn/gemm_bf16.h"

// GCC 12 reports the _mm512_undefined_* placeholders inside its own AVX-512 intrinsics as
// "may be used uninitialized" once inlined here (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace dasllama::nn::gemm_amx {

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512F__)
namespace {

using cpu::amx_x86::kTileElems;
using cpu::amx_x86::load_config;
using cpu::amx_x86::to_bf16x16;

void round_rows_amx(const float* x, int64_t n, int64_t n_pad, int64_t cols, uint16_t* out) {
    for (int64_t t = 0; t < n; ++t)
        for (int64_t c = 0; c < cols; c += 16)   // cols % 32 == 0
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + t * cols + c),
                                to_bf16x16(_mm512_loadu_ps(x + t * cols + c)));
    std::fill(out + n * cols, out + n_pad * cols, uint16_t(0));
}

void tile_block_amx(const uint16_t* xb, int64_t cols, const uint16_t* packed, int64_t r0,
                    int64_t r1, int64_t rows_left, float* y, int64_t ldy) {
    load_config();
    const int64_t n_kc = cols / 32, ldx = cols * 2;
    alignas(64) float part[32 * 32];
    for (int64_t rb = r0; rb < r1; rb += 32) {
        const uint16_t* b0 = packed + (rb / 16) * n_kc * kTileElems;
        const uint16_t* b1 = b0 + n_kc * kTileElems;
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int64_t kc = 0; kc < n_kc; ++kc) {
            _tile_loadd(4, xb + kc * 32, ldx);
            _tile_loadd(5, xb + 16 * cols + kc * 32, ldx);
            _tile_loadd(6, b0 + kc * kTileElems, 64);
            _tile_loadd(7, b1 + kc * kTileElems, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
        if (rows_left == 32) {
            _tile_stored(0, y + rb, ldy * 4);
            _tile_stored(1, y + rb + 16, ldy * 4);
            _tile_stored(2, y + 16 * ldy + rb, ldy * 4);
            _tile_stored(3, y + 16 * ldy + rb + 16, ldy * 4);
        } else {   // the last token block: only its real rows go out
            _tile_stored(0, part, 128);
            _tile_stored(1, part + 16, 128);
            _tile_stored(2, part + 16 * 32, 128);
            _tile_stored(3, part + 16 * 32 + 16, 128);
            for (int64_t t = 0; t < rows_left; ++t)
                std::memcpy(y + t * ldy + rb, part + t * 32, 32 * sizeof(float));
        }
    }
    _tile_release();
}

const Kernels amx{round_rows_amx, tile_block_amx};

}  // namespace

const Kernels* kernels() { return &amx; }
#else
const Kernels* kernels() { return nullptr; }
#endif

}  // namespace dasllama::nn::gemm_amx

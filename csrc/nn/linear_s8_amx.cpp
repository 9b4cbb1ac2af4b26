// linear_s8's product on the AMX tile unit (built with DASLLAMA_ISA_FLAGS_amx): 32 token rows
// against two packed blocks of 16 weight rows per step, 2 x 2 int32 tiles in tmm0-3 (tdpbusd:
// u8 activations in tmm4/5, s8 weight tiles in tmm6/7, 64 columns a step), then the same
// dequantization as the VNNI kernel. The packed blocks are already B tiles (linear_s8.h).
#include <immintrin.h>

#include <algorithm>

#include "cpu/amx_x86.h"
#include "nn/linear_s8.h"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace dasllama::nn::s8_kernels {

#if defined(__AMX_TILE__) && defined(__AMX_INT8__) && defined(__AMX_BF16__) && defined(__AVX512F__)
namespace {

constexpr int64_t kBlock = 16;

__mmask16 mask_of(int64_t n) {
    return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

void gemm(const uint8_t* u, const float* inv, int64_t t0, int64_t t1, const S8Matrix& w,
          int64_t b0, int64_t b1, const float* bias, float* y, int64_t ldy) {
    cpu::amx_x86::load_config();
    const int64_t ldu = w.cols_pad, n_kc = w.cols_pad / 64;
    const uint8_t* a = u + t0 * ldu;
    alignas(64) int32_t part[32 * 32];
    for (int64_t b = b0; b < b1; b += 2) {
        const int8_t* blk0 = w.packed.data() + b * w.cols_pad * kBlock;
        const int8_t* blk1 = blk0 + w.cols_pad * kBlock;
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int64_t kc = 0; kc < n_kc; ++kc) {
            _tile_loadd(4, a + kc * 64, ldu);
            _tile_loadd(5, a + 16 * ldu + kc * 64, ldu);
            _tile_loadd(6, blk0 + kc * 1024, 64);
            _tile_loadd(7, blk1 + kc * 1024, 64);
            _tile_dpbusd(0, 4, 6);
            _tile_dpbusd(1, 4, 7);
            _tile_dpbusd(2, 5, 6);
            _tile_dpbusd(3, 5, 7);
        }
        _tile_stored(0, part, 128);
        _tile_stored(1, part + 16, 128);
        _tile_stored(2, part + 16 * 32, 128);
        _tile_stored(3, part + 16 * 32 + 16, 128);
        for (int j = 0; j < 2; ++j) {
            const int64_t n = (b + j) * kBlock;
            if (n >= w.rows) break;
            const __mmask16 live = mask_of(w.rows - n);
            const __m512i comp = _mm512_loadu_si512(w.comp.data() + n);
            const __m512 scale = _mm512_loadu_ps(w.scale.data() + n);
            const __m512 bv = bias ? _mm512_maskz_loadu_ps(live, bias + n) : _mm512_setzero_ps();
            for (int64_t t = t0; t < t1; ++t) {
                const __m512i c = _mm512_load_si512(part + (t - t0) * 32 + j * 16);
                __m512 v = _mm512_cvtepi32_ps(_mm512_add_epi32(c, comp));
                v = _mm512_mul_ps(v, _mm512_set1_ps(inv[t]));
                v = _mm512_div_ps(v, scale);
                if (bias) v = _mm512_add_ps(v, bv);
                _mm512_mask_storeu_ps(y + t * ldy + n, live, v);
            }
        }
    }
    _tile_release();
}

const Kernels kAmx{nullptr, gemm};

}  // namespace

const Kernels* amx() { return &kAmx; }
#else
const Kernels* amx() { return nullptr; }
#endif

}  // namespace dasllama::nn::s8_kernels

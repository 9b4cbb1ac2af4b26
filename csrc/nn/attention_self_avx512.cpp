// attend_self's kernels for AVX-512 F (built with DASLLAMA_ISA_FLAGS_avx512).
//
// Both are register tiles of 6 queries x 4 vectors of 16 floats (24 accumulators): per step,
// 4 vector loads and 6 broadcasts feed 24 fused multiply-adds. scores: 64 keys per tile, the
// step runs over the head's dimensions (kt row c holds dimension c of every key). weighted
// sum: head_dim <= 64 values per tile (head_dim a multiple of 16), the step runs over the keys.
#include <immintrin.h>

#include "nn/attention_self.h"

namespace dasllama::nn::self_attn {

#if defined(__AVX512F__)
namespace {

constexpr int kQ = 6;  // queries per register tile

template <int Q>
void scores_tile(const float* qs, int64_t hd, const float* kt, int64_t ld_kt, float* s,
                 int64_t ld_s) {
    __m512 acc[Q][4];
#pragma GCC unroll 6
    for (int i = 0; i < Q; ++i)
        for (int u = 0; u < 4; ++u) acc[i][u] = _mm512_setzero_ps();
    for (int64_t c = 0; c < hd; ++c) {
        const float* kc = kt + c * ld_kt;
        const __m512 k0 = _mm512_loadu_ps(kc), k1 = _mm512_loadu_ps(kc + 16),
                     k2 = _mm512_loadu_ps(kc + 32), k3 = _mm512_loadu_ps(kc + 48);
#pragma GCC unroll 6
        for (int i = 0; i < Q; ++i) {
            const __m512 a = _mm512_set1_ps(qs[i * hd + c]);
            acc[i][0] = _mm512_fmadd_ps(a, k0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(a, k1, acc[i][1]);
            acc[i][2] = _mm512_fmadd_ps(a, k2, acc[i][2]);
            acc[i][3] = _mm512_fmadd_ps(a, k3, acc[i][3]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < Q; ++i)
        for (int u = 0; u < 4; ++u) _mm512_storeu_ps(s + i * ld_s + 16 * u, acc[i][u]);
}

// Key tile by key tile, every query of the call against it: the tile's kt columns (hd x 64
// floats) are read from L2 once per call instead of once per query tile.
void scores_avx512(const float* qs, int64_t nq, int64_t hd, const float* kt, int64_t ld_kt,
                   int64_t n_kt, float* s, int64_t ld_s) {
    if (n_kt % kKeyPad != 0) {
        scores_generic(qs, nq, hd, kt, ld_kt, n_kt, s, ld_s);
        return;
    }
    for (int64_t j = 0; j < n_kt; j += kKeyPad) {
        int64_t i = 0;
        for (; i + kQ <= nq; i += kQ)
            scores_tile<kQ>(qs + i * hd, hd, kt + j, ld_kt, s + i * ld_s + j, ld_s);
        const float* qr = qs + i * hd;
        float* sr = s + i * ld_s + j;
        switch (nq - i) {
            case 5: scores_tile<5>(qr, hd, kt + j, ld_kt, sr, ld_s); break;
            case 4: scores_tile<4>(qr, hd, kt + j, ld_kt, sr, ld_s); break;
            case 3: scores_tile<3>(qr, hd, kt + j, ld_kt, sr, ld_s); break;
            case 2: scores_tile<2>(qr, hd, kt + j, ld_kt, sr, ld_s); break;
            case 1: scores_tile<1>(qr, hd, kt + j, ld_kt, sr, ld_s); break;
            default: break;
        }
    }
}

// Q queries x V vectors of values.
template <int Q, int V>
void wsum_tile(const float* p, int64_t ld_p, const float* v, int64_t ld_v, int64_t nk,
               int64_t hd, float* tot) {
    __m512 acc[Q][V];
#pragma GCC unroll 6
    for (int i = 0; i < Q; ++i)
#pragma GCC unroll 4
        for (int u = 0; u < V; ++u) acc[i][u] = _mm512_setzero_ps();
    for (int64_t j = 0; j < nk; ++j) {
        __m512 vv[V];
#pragma GCC unroll 4
        for (int u = 0; u < V; ++u) vv[u] = _mm512_loadu_ps(v + j * ld_v + 16 * u);
#pragma GCC unroll 6
        for (int i = 0; i < Q; ++i) {
            const __m512 w = _mm512_set1_ps(p[i * ld_p + j]);
#pragma GCC unroll 4
            for (int u = 0; u < V; ++u) acc[i][u] = _mm512_fmadd_ps(w, vv[u], acc[i][u]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < Q; ++i)
#pragma GCC unroll 4
        for (int u = 0; u < V; ++u) {
            float* t = tot + i * hd + 16 * u;
            _mm512_storeu_ps(t, _mm512_add_ps(_mm512_loadu_ps(t), acc[i][u]));
        }
}

template <int V>
void wsum_rows(const float* p, int64_t ld_p, int64_t nq, const float* v, int64_t ld_v,
               int64_t nk, int64_t hd, float* tot) {
    int64_t i = 0;
    for (; i + kQ <= nq; i += kQ)
        wsum_tile<kQ, V>(p + i * ld_p, ld_p, v, ld_v, nk, hd, tot + i * hd);
    const float* pr = p + i * ld_p;
    float* tr = tot + i * hd;
    switch (nq - i) {
        case 5: wsum_tile<5, V>(pr, ld_p, v, ld_v, nk, hd, tr); break;
        case 4: wsum_tile<4, V>(pr, ld_p, v, ld_v, nk, hd, tr); break;
        case 3: wsum_tile<3, V>(pr, ld_p, v, ld_v, nk, hd, tr); break;
        case 2: wsum_tile<2, V>(pr, ld_p, v, ld_v, nk, hd, tr); break;
        case 1: wsum_tile<1, V>(pr, ld_p, v, ld_v, nk, hd, tr); break;
        default: break;
    }
}

void weighted_sum_avx512(const float* p, int64_t ld_p, int64_t nq, const float* v, int64_t ld_v,
                         int64_t nk, int64_t hd, float* tot) {
    switch (hd) {
        case 64: wsum_rows<4>(p, ld_p, nq, v, ld_v, nk, hd, tot); break;
        case 48: wsum_rows<3>(p, ld_p, nq, v, ld_v, nk, hd, tot); break;
        case 32: wsum_rows<2>(p, ld_p, nq, v, ld_v, nk, hd, tot); break;
        case 16: wsum_rows<1>(p, ld_p, nq, v, ld_v, nk, hd, tot); break;
        default: weighted_sum_generic(p, ld_p, nq, v, ld_v, nk, hd, tot); break;
    }
}

const Kernels avx512{"avx512", scores_avx512, weighted_sum_avx512};

}  // namespace

const Kernels* kernels_avx512() { return &avx512; }
#else
const Kernels* kernels_avx512() { return nullptr; }
#endif

}  // namespace dasllama::nn::self_attn

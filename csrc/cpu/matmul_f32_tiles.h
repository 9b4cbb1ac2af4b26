// The row and token walk of the float matmul kernels (matmul_f32_avx2.cpp, _avx512.cpp), once:
// one token runs a row at a time; more tokens run R x T register tiles, the token remainder
// one token at a time, then the row remainder. An ISA file supplies a kernel set K:
//
//   using Vec = ...;                          // the accumulator vector
//   static void store_sums(const Vec (&v)[4], int n, float* y);   // y[i] = lanes' sum of v[i]
//   static Vec f32_row(const float* w, const float* x, int64_t cols);      // unreduced
//   static Vec q8_row(const uint8_t* w, int64_t nb, const float* x);
//   template <int R, int T> static void f32_tile(w, ldw, cols, x, ldx, y, ldy);
//   template <int R, int T> static void q8_tile(w, wrb, nb, x, ldx, y, ldy);
//   static constexpr int kF32Rows, kF32Tokens, kQ8Rows, kQ8Tokens;        // tile shapes (R <= 4)
//   static void q8_prefetch(const uint8_t* begin, const uint8_t* end);    // may do nothing
//
// K is a type of the includer's anonymous namespace, so every instantiation here has internal
// linkage: the ISA files are built with different flags and must not share a symbol (as
// simd_x86.h's static functions).
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace dasllama::cpu::mm::f32_tiles {

// One token: rows one at a time (one sequential stream a row), reduced four at a time.
template <class K, class Row>
inline void rows_one_token(int64_t n_rows, float* y, const Row& row) {
    for (int64_t r = 0; r < n_rows; r += 4) {
        const int n = int(std::min<int64_t>(4, n_rows - r));
        typename K::Vec v[4] = {};
        for (int i = 0; i < n; ++i) v[i] = row(r + i);
        K::store_sums(v, n, y + r);
    }
}

// rows(integral_constant<int, left>, r) for the last `left` (< RR + 1) rows.
template <int RR, class Rows>
inline void row_remainder(int64_t left, int64_t r, const Rows& rows) {
    if constexpr (RR > 0) {
        if (left == RR)
            rows(std::integral_constant<int, RR>{}, r);
        else
            row_remainder<RR - 1>(left, r, rows);
    }
}

// tile.run<R', T'>(r, t) over the rows and tokens: R x T tiles, the token remainder one token
// at a time, then the rows left over.
template <int R, int T, class Tile>
inline void over_tiles(int64_t n_rows, int64_t n_tokens, const Tile& tile) {
    static_assert(R >= 1 && R <= 4 && T >= 1, "a tile of 1..4 rows and at least one token");
    auto rows = [&](auto rc, int64_t r) {
        constexpr int RR = decltype(rc)::value;
        int64_t t = 0;
        for (; t + T <= n_tokens; t += T) tile.template run<RR, T>(r, t);
        for (; t < n_tokens; ++t) tile.template run<RR, 1>(r, t);
    };
    int64_t r = 0;
    for (; r + R <= n_rows; r += R) rows(std::integral_constant<int, R>{}, r);
    row_remainder<R - 1>(n_rows - r, r, rows);
}

template <class K>
struct F32Tile {
    const float* w;
    int64_t ldw, cols;
    const float* x;
    int64_t ldx;
    float* y;
    int64_t ldy;
    template <int R, int T>
    void run(int64_t r, int64_t t) const {
        K::template f32_tile<R, T>(w + r * ldw, ldw, cols, x + t * ldx, ldx, y + t * ldy + r,
                                   ldy);
    }
};

template <class K>
struct Q8Tile {
    const uint8_t* w;
    int64_t wrb, nb;
    const float* x;
    int64_t ldx;
    float* y;
    int64_t ldy;
    const uint8_t* end;  // the last row's end: prefetches stay inside the matrix
    template <int R, int T>
    void run(int64_t r, int64_t t) const {
        const uint8_t* wr = w + r * wrb;
        if (t == 0) {  // the next row tile, while this one is computed
            const uint8_t* next = std::min(wr + R * wrb, end);
            K::q8_prefetch(next, std::min(next + R * wrb, end));
        }
        K::template q8_tile<R, T>(wr, wrb, nb, x + t * ldx, ldx, y + t * ldy + r, ldy);
    }
};

// Float32 rows w (ldw floats apart) times tokens x into y (kernels_matmul.h's gemm_f32).
template <class K>
inline void gemm_f32(const float* w, int64_t ldw, int64_t n_rows, int64_t cols, const float* x,
                     int64_t ldx, int64_t n_tokens, float* y, int64_t ldy) {
    if (n_tokens == 1) {
        rows_one_token<K>(n_rows, y, [&](int64_t r) { return K::f32_row(w + r * ldw, x, cols); });
        return;
    }
    over_tiles<K::kF32Rows, K::kF32Tokens>(n_rows, n_tokens,
                                           F32Tile<K>{w, ldw, cols, x, ldx, y, ldy});
}

// Q8_0 rows (wrb bytes apart) widened in registers, times tokens x (gemm_q8_0_f32).
template <class K>
inline void gemm_q8_0_f32(const uint8_t* w, int64_t wrb, int64_t n_rows, int64_t cols,
                          const float* x, int64_t ldx, int64_t n_tokens, float* y, int64_t ldy) {
    const int64_t nb = cols / 32;
    if (n_tokens == 1) {
        rows_one_token<K>(n_rows, y, [&](int64_t r) { return K::q8_row(w + r * wrb, nb, x); });
        return;
    }
    const uint8_t* end = w + n_rows * wrb;
    K::q8_prefetch(w, std::min(w + 2 * wrb, end));
    over_tiles<K::kQ8Rows, K::kQ8Tokens>(n_rows, n_tokens,
                                         Q8Tile<K>{w, wrb, nb, x, ldx, y, ldy, end});
}

}  // namespace dasllama::cpu::mm::f32_tiles

// The u8 x s8 -> i32 product of int8_ops.h with AMX tiles (tdpbusd). The weights use the
// AVX-512 level's packing: 16 rows at a time as kp / 4 groups of [16 rows x 4 bytes], which is
// AMX's B layout (a tile row is 4 values of k for 16 outputs), so 16 consecutive groups of a
// block are one B tile of 64 values of k, loaded with a stride of 64 bytes. An A tile is 16
// activation rows of 64 bytes, straight from the rows. tdpbusd adds each group of four u8 x s8
// products into its 32-bit lane without saturating, so the sums are exact (the same integers as
// every other level). A step covers 32 activation rows x 32 weight rows (four C tiles); a
// remainder under 16 rows goes to the AVX-512 kernel.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "tts/kokoro/int8_ops.h"

namespace dasllama::kokoro {

#if defined(__AMX_TILE__) && defined(__AMX_INT8__)
namespace {

constexpr int64_t kBlock = 16;        // weight rows per packed block: a tile's columns
constexpr int64_t kTileRows = 16;     // activation rows per A (and C) tile
constexpr int64_t kTileK = 64;        // bytes of k per tile row
constexpr int64_t kTileBytes = kBlock * kTileK;   // one B tile in the packed rows

void pack_tiles(const int8_t* rows, int64_t n, int64_t kp, int8_t* out) {
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    std::memset(out, 0, size_t(blocks * kBlock * kp));
    for (int64_t r = 0; r < n; ++r) {
        int8_t* blk = out + (r / kBlock) * kBlock * kp;
        const int64_t lane = r % kBlock;
        for (int64_t k = 0; k < kp; ++k)
            blk[(k / 4) * (kBlock * 4) + lane * 4 + (k % 4)] = rows[r * kp + k];
    }
}

struct alignas(64) TileConfig {
    uint8_t palette = 1;
    uint8_t start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};

void load_config() {
    TileConfig cfg;
    for (int t = 0; t < 8; ++t) {   // C 0-3, A 4-5, B 6-7: all 16 rows of 64 bytes
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    _tile_loadconfig(&cfg);
}

// Where 64 bytes of k start in a row of a: at k itself (plain rows), or at an offset of a
// table (gathered rows, Int8Kernels::gemm_gather).
struct PlainK {
    int64_t operator()(int64_t k) const { return k; }
};
struct GatheredK {
    const int64_t* koff;
    int64_t operator()(int64_t k) const { return koff[k / kTileK]; }
};

// C tiles (0, 1 | 2, 3) for 32 rows of a times blocks jb and jb + 1 (`pair`: both).
template <bool kPair, class K = PlainK>
void step(const uint8_t* a, int64_t lda, const int8_t* b0, int64_t kp, K at = K{}) {
    _tile_zero(0);
    _tile_zero(2);
    if (kPair) {
        _tile_zero(1);
        _tile_zero(3);
    }
    const int8_t* b1 = b0 + kBlock * kp;
    for (int64_t k = 0; k < kp; k += kTileK) {
        const uint8_t* ak = a + at(k);
        _tile_loadd(4, ak, lda);
        _tile_loadd(5, ak + kTileRows * lda, lda);
        _tile_loadd(6, b0 + (k / kTileK) * kTileBytes, 64);
        _tile_dpbusd(0, 4, 6);
        _tile_dpbusd(2, 5, 6);
        if (kPair) {
            _tile_loadd(7, b1 + (k / kTileK) * kTileBytes, 64);
            _tile_dpbusd(1, 4, 7);
            _tile_dpbusd(3, 5, 7);
        }
    }
}

void gemm_amx(const uint8_t* a, int64_t lda, const int8_t* b, int64_t m, int64_t n, int64_t kp,
              int32_t* c, int64_t ldc) {
    // Fewer than a tile's rows left: the padding would be most of the work, and the AVX-512
    // level reads the same packing.
    const int64_t step_rows = 2 * kTileRows;
    const int64_t amx_rows = m % step_rows >= kTileRows ? m : m / step_rows * step_rows;
    if (amx_rows < m) {
        int8_kernels_avx512()->gemm(a + amx_rows * lda, lda, b, m - amx_rows, n, kp,
                                    c + amx_rows * ldc, ldc);
        m = amx_rows;
        if (m == 0) return;
    }
    load_config();
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    alignas(64) int32_t part[2 * kTileRows * 2 * kBlock];   // a partial step's 32 x 32
    std::vector<uint8_t> tail;                               // the last rows, zero padded
    for (int64_t i0 = 0; i0 < m; i0 += 2 * kTileRows) {
        const int64_t rows = std::min<int64_t>(2 * kTileRows, m - i0);
        const uint8_t* ai = a + i0 * lda;
        int64_t la = lda;
        if (rows < 2 * kTileRows) {
            tail.assign(size_t(2 * kTileRows * kp), 0);
            for (int64_t r = 0; r < rows; ++r)
                std::memcpy(&tail[size_t(r * kp)], ai + r * lda, size_t(kp));
            ai = tail.data();
            la = kp;
        }
        for (int64_t jb = 0; jb < blocks; jb += 2) {
            const bool pair = jb + 1 < blocks;
            const int8_t* bj = b + jb * kBlock * kp;
            if (pair) step<true>(ai, la, bj, kp);
            else step<false>(ai, la, bj, kp);
            const int64_t j0 = jb * kBlock;
            const int64_t cols = std::min<int64_t>((pair ? 2 : 1) * kBlock, n - j0);
            int32_t* cij = c + i0 * ldc + j0;
            if (rows == 2 * kTileRows && cols == 2 * kBlock) {
                _tile_stored(0, cij, ldc * 4);
                _tile_stored(1, cij + kBlock, ldc * 4);
                _tile_stored(2, cij + kTileRows * ldc, ldc * 4);
                _tile_stored(3, cij + kTileRows * ldc + kBlock, ldc * 4);
                continue;
            }
            constexpr int64_t ld = 2 * kBlock;   // part's row stride
            _tile_stored(0, part, ld * 4);
            _tile_stored(2, part + kTileRows * ld, ld * 4);
            if (pair) {
                _tile_stored(1, part + kBlock, ld * 4);
                _tile_stored(3, part + kTileRows * ld + kBlock, ld * 4);
            }
            for (int64_t r = 0; r < rows; ++r)
                std::memcpy(cij + r * ldc, part + r * ld, size_t(cols) * sizeof(int32_t));
        }
    }
    _tile_release();
}

// gemm_amx over gathered rows, m a multiple of 32: whole steps only, so no tail copy.
void gemm_gather_amx(const uint8_t* a, int64_t lda, const int64_t* koff, const int8_t* b,
                     int64_t m, int64_t n, int64_t kp, int32_t* c, int64_t ldc) {
    load_config();
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    alignas(64) int32_t part[2 * kTileRows * 2 * kBlock];
    constexpr int64_t ld = 2 * kBlock;
    const GatheredK at{koff};
    for (int64_t i0 = 0; i0 + 2 * kTileRows <= m; i0 += 2 * kTileRows) {
        const uint8_t* ai = a + i0 * lda;
        for (int64_t jb = 0; jb < blocks; jb += 2) {
            const bool pair = jb + 1 < blocks;
            const int8_t* bj = b + jb * kBlock * kp;
            if (pair) step<true>(ai, lda, bj, kp, at);
            else step<false>(ai, lda, bj, kp, at);
            const int64_t j0 = jb * kBlock;
            const int64_t cols = std::min<int64_t>((pair ? 2 : 1) * kBlock, n - j0);
            int32_t* cij = c + i0 * ldc + j0;
            if (cols == 2 * kBlock) {
                _tile_stored(0, cij, ldc * 4);
                _tile_stored(1, cij + kBlock, ldc * 4);
                _tile_stored(2, cij + kTileRows * ldc, ldc * 4);
                _tile_stored(3, cij + kTileRows * ldc + kBlock, ldc * 4);
                continue;
            }
            _tile_stored(0, part, ld * 4);
            _tile_stored(2, part + kTileRows * ld, ld * 4);
            if (pair) {
                _tile_stored(1, part + kBlock, ld * 4);
                _tile_stored(3, part + kTileRows * ld + kBlock, ld * 4);
            }
            for (int64_t r = 0; r < 2 * kTileRows; ++r)
                std::memcpy(cij + r * ldc, part + r * ld, size_t(cols) * sizeof(int32_t));
        }
    }
    _tile_release();
}

const Int8Kernels kAmx{"amx", kBlock, pack_tiles, gemm_amx, gemm_gather_amx};

}  // namespace
#endif

const Int8Kernels* int8_kernels_amx() {
#if defined(__AMX_TILE__) && defined(__AMX_INT8__)
    return &kAmx;
#else
    return nullptr;
#endif
}

}  // namespace dasllama::kokoro

// Prefill-time matrix product against a GGUF weight matrix, for many token rows:
//   y[y_off + t*y_stride + r] (= or +=) sum_k W[r, k] * x[x_off + t*x_stride + k]
// for r < rows, t < n_tok; the same buffers, arguments and meaning as matvec (in_mode
// included: mm_input.h), any n_tok.
// One stamp per format (GK_FMT_<NAME>, see gk/formats.h).
//
// Dispatch: gx = ceil(rows / GK_MATMUL_TILE_ROWS), gy = ceil(n_tok / GK_MATMUL_TILE_TOKS), gz = 1.
// Portable tiled path (no cooperative matrices): a workgroup computes a 64 x 64 tile of y. Per
// step of GK_MATMUL_BK columns, each thread decodes one 16-element unit of one weight row into
// workgroup memory (w_s[k][row]) and copies sixteen x values (x_s[k][tok], rows padded by one
// word so the column-wise stores do not collide in banks); then each thread accumulates a 4 x 8
// register block: rows tr + 16a (a < 4), tokens tt + 8b (b < 8), so the threads of a subgroup
// read distinct consecutive words of w_s and broadcast words of x_s. (Measured on an H200: this
// scalar layout ran faster than float4 tiles, and 64 tokens per tile faster than 32.)
// Workgroup memory: (32*64 + 32*65) * 4 = 16.1 KiB.
#include "../gk/gk.h"
#include "mm_input.h"

// Tile sizes: the host mirrors them (kMatmulTileRows, kMatmulTileToks) to size the dispatch.
#define GK_MATMUL_TILE_ROWS 64u
#define GK_MATMUL_TILE_TOKS 64u
#define GK_MATMUL_BK 32u
#define GK_MATMUL_XS_STRIDE (GK_MATMUL_TILE_TOKS + 1u)
// Tokens per thread (tt + 8b, b < GK_MATMUL_TOK_BLOCK).
#define GK_MATMUL_TOK_BLOCK (GK_MATMUL_TILE_TOKS / 8u)
#define GK_WG 128

#define GK_BUFFERS(B) B(0, ro, uint, w) B(1, ro, float, x) B(2, rw, float, y) B(3, ro, float, aux)
#define GK_ARGS(A) A(uint, rows) A(uint, cols) A(uint, n_tok) A(uint, x_off) A(uint, x_stride) \
                   A(uint, y_off) A(uint, y_stride) A(uint, accumulate) A(uint, in_mode) \
                   A(uint, aux_off) A(float, eps)
#define GK_SHARED(S) S(float, w_s, GK_MATMUL_BK * GK_MATMUL_TILE_ROWS) \
                     S(float, x_s, GK_MATMUL_BK * GK_MATMUL_XS_STRIDE) \
                     S(float, tok_inv, GK_MATMUL_TILE_TOKS)

#ifdef GK_BODY
GK_KERNEL(matmul, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint tid = GK_LOCAL_ID;
    uint row0 = GK_GROUP_ID.x * GK_MATMUL_TILE_ROWS;
    uint tok0 = GK_GROUP_ID.y * GK_MATMUL_TILE_TOKS;
    uint row_bytes = GK_FMT_ROW_BYTES(args.cols);
    uint n_units = GK_FMT_UNITS(args.cols);
    // The unit this thread decodes per step: row lr of the tile, unit lu of the step.
    uint lr = tid % GK_MATMUL_TILE_ROWS;
    uint lu = tid / GK_MATMUL_TILE_ROWS;
    bool row_ok = row0 + lr < args.rows;
    uint lrow_b = (row0 + lr) * row_bytes;
    // The register block this thread accumulates: acc[a * TOK_BLOCK + b] is row tr + 16a,
    // token tt + 8b.
    uint tr = tid % 16u;
    uint tt = tid / 16u;
    float acc[4u * GK_MATMUL_TOK_BLOCK];
    GK_UNROLL for (uint i = 0u; i < 4u * GK_MATMUL_TOK_BLOCK; ++i) acc[i] = 0.0f;
    // The RMSNorm scale of each token row of the tile.
    GK_MM_TILE_RMS_INV(tok_inv, tok0, GK_MATMUL_TILE_TOKS)

    for (uint kb = 0u; kb < args.cols; kb += GK_MATMUL_BK) {
        uint u = kb / GK_UNIT + lu;
        uint p = GK_FMT_UNIT_PART(u);
        float wv[16];
        if (row_ok && u < n_units) {
            uint n_valid = args.cols - u * GK_UNIT;
            GK_DECODE16(wv, w, GK_FMT_UNIT_BLOCK_BYTE(lrow_b, u), p, n_valid)
        } else {
            GK_UNROLL for (uint i = 0u; i < 16u; ++i) wv[i] = 0.0f;
        }
        // Output i is column lu * 16 - 16p + GK_FMT_ELEM(p, i) of the step.
        uint ub = lu * GK_UNIT - GK_UNIT * p;
        GK_UNROLL for (uint i = 0u; i < 16u; ++i)
            w_s[(ub + GK_FMT_ELEM(p, i)) * GK_MATMUL_TILE_ROWS + lr] = wv[i];
        // x: BK x TILE_TOKS values, consecutive threads on consecutive columns of one token.
        GK_UNROLL for (uint j = 0u; j < (GK_MATMUL_BK * GK_MATMUL_TILE_TOKS) / GK_WG; ++j) {
            uint idx = tid + j * GK_WG;
            uint kk = idx % GK_MATMUL_BK;
            uint t = idx / GK_MATMUL_BK;
            float xv = 0.0f;
            if (tok0 + t < args.n_tok && kb + kk < args.cols) {
                float inv = args.in_mode == GK_MM_IN_RMSNORM ? tok_inv[t] : 1.0f;
                GK_MM_INPUT(xv, args.x_off + (tok0 + t) * args.x_stride, kb + kk, inv)
            }
            x_s[kk * GK_MATMUL_XS_STRIDE + t] = xv;
        }
        GK_BARRIER();
        for (uint kk = 0u; kk < GK_MATMUL_BK; ++kk) {
            float a[4];
            GK_UNROLL for (uint i = 0u; i < 4u; ++i)
                a[i] = w_s[kk * GK_MATMUL_TILE_ROWS + tr + 16u * i];
            GK_UNROLL for (uint b = 0u; b < GK_MATMUL_TOK_BLOCK; ++b) {
                float xb = x_s[kk * GK_MATMUL_XS_STRIDE + tt + 8u * b];
                GK_UNROLL for (uint i = 0u; i < 4u; ++i) {
                    uint o = i * GK_MATMUL_TOK_BLOCK + b;
                    acc[o] = gk_fma(a[i], xb, acc[o]);
                }
            }
        }
        GK_BARRIER();
    }

    GK_UNROLL for (uint a = 0u; a < 4u; ++a) {
        uint r = row0 + tr + 16u * a;
        GK_UNROLL for (uint b = 0u; b < GK_MATMUL_TOK_BLOCK; ++b) {
            uint t = tok0 + tt + 8u * b;
            if (r < args.rows && t < args.n_tok) {
                uint yi = args.y_off + t * args.y_stride + r;
                float v = acc[a * GK_MATMUL_TOK_BLOCK + b];
                y[yi] = args.accumulate != 0u ? y[yi] + v : v;
            }
        }
    }
}
GK_KERNEL_END
#endif

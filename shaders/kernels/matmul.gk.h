// Prefill-time matrix product against a GGUF weight matrix, for many token rows:
//   y[y_off + t*y_stride + r] (= or +=) sum_k W[r, k] * x[x_off + t*x_stride + k]
// for r < rows, t < n_tok; the same buffers, arguments and meaning as matvec, any n_tok.
// One stamp per format (GK_FMT_<NAME>, see gk/formats.h).
//
// Dispatch: gx = ceil(rows / GK_MATMUL_TILE_ROWS), gy = ceil(n_tok / GK_MATMUL_TILE_TOKS), gz = 1.
// Portable tiled path (no cooperative matrices): a workgroup computes a 64 x 32 tile of y. Per
// step of GK_MATMUL_BK columns, each thread decodes one 16-element unit of one weight row into
// workgroup memory and copies eight x values; then each thread accumulates a 4 x 4 register
// block, rows 4*tr .. 4*tr+3 and tokens 4*tt .. 4*tt+3, reading one float4 of weights and one of
// x per column. Both tiles are stored column by column (w_s[k][row], x_s[k][tok]) as float4 so
// that these reads are single 16-byte loads, and both are written with consecutive threads on
// consecutive words (no bank conflicts).
// Workgroup memory: (32*64 + 32*32) * 4 = 12 KiB.
#include "../gk/gk.h"

// Tile sizes: the host mirrors them (kMatmulTileRows, kMatmulTileToks) to size the dispatch.
#define GK_MATMUL_TILE_ROWS 64u
#define GK_MATMUL_TILE_TOKS 32u
#define GK_MATMUL_BK 32u
#define GK_WG 128

#define GK_BUFFERS(B) B(0, ro, uint, w) B(1, ro, float, x) B(2, rw, float, y)
#define GK_ARGS(A) A(uint, rows) A(uint, cols) A(uint, n_tok) A(uint, x_off) A(uint, x_stride) \
                   A(uint, y_off) A(uint, y_stride) A(uint, accumulate)
#define GK_SHARED(S) S(float4, w_s, GK_MATMUL_BK * GK_MATMUL_TILE_ROWS / 4u) \
                     S(float4, x_s, GK_MATMUL_BK * GK_MATMUL_TILE_TOKS / 4u)

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
    // The register block this thread accumulates: rows 4 tr + a, tokens 4 tt + b.
    uint tr = tid % (GK_MATMUL_TILE_ROWS / 4u);
    uint tt = tid / (GK_MATMUL_TILE_ROWS / 4u);
    float4 acc0 = gk_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float4 acc1 = acc0;
    float4 acc2 = acc0;
    float4 acc3 = acc0;

    for (uint kb = 0u; kb < args.cols; kb += GK_MATMUL_BK) {
        uint u = kb / GK_UNIT + lu;
        float wv[16];
        if (row_ok && u < n_units) {
            uint n_valid = args.cols - u * GK_UNIT;
            GK_DECODE16(wv, w, GK_FMT_UNIT_BLOCK_BYTE(lrow_b, u), GK_FMT_UNIT_PART(u), n_valid)
        } else {
            GK_UNROLL for (uint i = 0u; i < 16u; ++i) wv[i] = 0.0f;
        }
        GK_UNROLL for (uint i = 0u; i < 16u; ++i)
            w_s[(lu * GK_UNIT + i) * (GK_MATMUL_TILE_ROWS / 4u) + lr / 4u][lr % 4u] = wv[i];
        // x: consecutive threads on consecutive tokens of one column (conflict-free stores).
        GK_UNROLL for (uint j = 0u; j < (GK_MATMUL_BK * GK_MATMUL_TILE_TOKS) / GK_WG; ++j) {
            uint idx = tid + j * GK_WG;
            uint t = idx % GK_MATMUL_TILE_TOKS;
            uint kk = idx / GK_MATMUL_TILE_TOKS;
            float xv = 0.0f;
            if (tok0 + t < args.n_tok && kb + kk < args.cols)
                xv = x[args.x_off + (tok0 + t) * args.x_stride + kb + kk];
            x_s[kk * (GK_MATMUL_TILE_TOKS / 4u) + t / 4u][t % 4u] = xv;
        }
        GK_BARRIER();
        for (uint kk = 0u; kk < GK_MATMUL_BK; ++kk) {
            float4 a = w_s[kk * (GK_MATMUL_TILE_ROWS / 4u) + tr];
            float4 b = x_s[kk * (GK_MATMUL_TILE_TOKS / 4u) + tt];
            acc0 = gk_fma(gk_float4(a.x, a.x, a.x, a.x), b, acc0);
            acc1 = gk_fma(gk_float4(a.y, a.y, a.y, a.y), b, acc1);
            acc2 = gk_fma(gk_float4(a.z, a.z, a.z, a.z), b, acc2);
            acc3 = gk_fma(gk_float4(a.w, a.w, a.w, a.w), b, acc3);
        }
        GK_BARRIER();
    }

    // acc_a holds row 4 tr + a for tokens 4 tt + (0..3).
    GK_UNROLL for (uint a = 0u; a < 4u; ++a) {
        float4 v = a == 0u ? acc0 : (a == 1u ? acc1 : (a == 2u ? acc2 : acc3));
        uint r = row0 + 4u * tr + a;
        GK_UNROLL for (uint b = 0u; b < 4u; ++b) {
            uint t = tok0 + 4u * tt + b;
            if (r < args.rows && t < args.n_tok) {
                uint yi = args.y_off + t * args.y_stride + r;
                y[yi] = args.accumulate != 0u ? y[yi] + v[b] : v[b];
            }
        }
    }
}
GK_KERNEL_END
#endif

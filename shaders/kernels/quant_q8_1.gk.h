// A decode projection's input quantized once to 8-bit blocks (q8_1: 32 values, a float16 scale
// and a float16 scaled sum), for the integer-dot products (matvec_q8.gk.h) that read it instead
// of float32 x: for t < n_tok and blocks b < cols / 32 of v = in(x)[x_off + t * x_stride + ...],
//   d = max|v| / 127,  q[i] = floor(v[i] / d + 0.5) (0 where d = 0),  s = d * sum(q)
//   codes: bytes 32 b .. 32 b + 31 of token row t at y[t * cols / 4 ...] (4 codes a word,
//          little-endian, two's complement)
//   y[ds_off + t * cols / 32 + b] = packHalf2x16(d, s)
// with in() the input stage of mm_input.h picked by in_mode (plain, RMSNorm, the gated and plain
// activations; not the LayerNorm modes), formed in float32 as the other templates form it, so
// the norm or the gate is formed once per token row for every product that reads it (q, k and v
// read one quantized row). The product folds d back in, and s serves the formats whose weights
// carry an offset (Q4_K's minimum) or a bias (Q6_K's -32): their sum over x is d * sum(q).
// cols must be a multiple of 32. Dispatch: gx = ceil(cols / (32 GK_Q8_WG_BLOCKS)), gy = n_tok:
// a workgroup quantizes GK_Q8_WG_BLOCKS blocks of one token row, GK_Q8_LANES threads a block
// (8 values each, the block's largest value and sum of codes met through shared memory), so that
// every thread of the workgroup loads and rounds and a decode step's row (4096-14336 values)
// spreads over several SMs; with the RMSNorm stage every workgroup forms the row's scale itself
// (a workgroup sum over the row, read from cache, four independent sums a thread so that the
// loads overlap).
#include "../gk/gk.h"
#include "mm_input.h"

#define GK_WG 128
// Values a block holds (and a product's integer dot runs over at one scale).
#define GK_Q8_BLOCK 32u
// Threads sharing one block (the block's max and sum below read four lanes), and the values
// each of them rounds.
#define GK_Q8_LANES 4u
#define GK_Q8_PER_LANE (GK_Q8_BLOCK / GK_Q8_LANES)
// Blocks a workgroup quantizes.
#define GK_Q8_WG_BLOCKS (GK_WG / GK_Q8_LANES)

#define GK_BUFFERS(B) B(0, ro, float, x) B(1, wo, uint, y) B(2, ro, float, aux)
#define GK_ARGS(A) A(uint, cols) A(uint, n_tok) A(uint, x_off) A(uint, x_stride) A(uint, ds_off) \
                   A(uint, in_mode) A(uint, aux_off) A(float, eps)
#define GK_SHARED(S) S(float, part, GK_REDUCE_PARTS(GK_WG)) S(float, lane_max, GK_WG) \
                     S(int, lane_sum, GK_WG)

#ifdef GK_BODY
GK_KERNEL(quant_q8_1, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint tid = GK_LOCAL_ID;
    uint t = GK_GROUP_ID.y;
    uint xt = args.x_off + t * args.x_stride;
    float inv = 1.0f;
    if (args.in_mode == GK_MM_IN_RMSNORM) {
        float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
        for (uint k = tid; k < args.cols; k += 4u * GK_WG) {
            s0 = gk_fma(x[xt + k], x[xt + k], s0);
            uint k1 = k + GK_WG, k2 = k + 2u * GK_WG, k3 = k + 3u * GK_WG;
            if (k1 < args.cols) s1 = gk_fma(x[xt + k1], x[xt + k1], s1);
            if (k2 < args.cols) s2 = gk_fma(x[xt + k2], x[xt + k2], s2);
            if (k3 < args.cols) s3 = gk_fma(x[xt + k3], x[xt + k3], s3);
        }
        float total;
        GK_WG_SUM_INTO(total, (s0 + s1) + (s2 + s3), part, 0u)
        inv = gk_rms_inv(total, args.cols, args.eps);
    }
    uint n_blocks = args.cols / GK_Q8_BLOCK;
    uint qt = t * (args.cols / 4u);
    uint dt = args.ds_off + t * n_blocks;
    uint lane = tid % GK_Q8_LANES;
    uint b = GK_GROUP_ID.x * GK_Q8_WG_BLOCKS + tid / GK_Q8_LANES;
    bool live = b < n_blocks;
    uint c0 = b * GK_Q8_BLOCK + lane * GK_Q8_PER_LANE;
    float v[GK_Q8_PER_LANE];
    float amax = 0.0f;
    GK_UNROLL for (uint i = 0u; i < GK_Q8_PER_LANE; ++i) {
        v[i] = 0.0f;
        if (live) GK_MM_INPUT(v[i], xt, c0 + i, inv)
        amax = gk_max(amax, abs(v[i]));
    }
    lane_max[tid] = amax;
    GK_BARRIER();
    uint first = tid - lane;
    amax = gk_max(gk_max(lane_max[first], lane_max[first + 1u]),
                  gk_max(lane_max[first + 2u], lane_max[first + 3u]));
    float d = amax / 127.0f;
    float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    GK_UNROLL for (uint w = 0u; w < GK_Q8_PER_LANE / 4u; ++w) {
        uint word = 0u;
        GK_UNROLL for (uint i = 0u; i < 4u; ++i) {
            int q = int(floor(v[4u * w + i] * id + 0.5f));
            q = gk_min(gk_max(q, -127), 127);
            sum += q;
            word |= (uint(q) & 0xFFu) << (8u * i);
        }
        if (live) y[qt + c0 / 4u + w] = word;
    }
    lane_sum[tid] = sum;
    GK_BARRIER();
    if (live && lane == 0u) {
        int total = (lane_sum[tid] + lane_sum[tid + 1u]) +
                    (lane_sum[tid + 2u] + lane_sum[tid + 3u]);
        y[dt + b] = gk_pack_half2(d, d * float(total));
    }
}
GK_KERNEL_END
#endif

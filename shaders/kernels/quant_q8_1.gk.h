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
// a workgroup quantizes GK_Q8_WG_BLOCKS blocks of one token row, a thread a whole block, so that
// a decode step's row (4096-14336 values) spreads over several SMs instead of waiting on one;
// with the RMSNorm stage every workgroup forms the row's scale itself (a workgroup sum over the
// row, read from cache).
#include "../gk/gk.h"
#include "mm_input.h"

#define GK_WG 128
// Values a block holds (and a product's integer dot runs over at one scale).
#define GK_Q8_BLOCK 32u
// Blocks a workgroup quantizes (its first threads; all of them form the RMSNorm sum).
#define GK_Q8_WG_BLOCKS 32u

#define GK_BUFFERS(B) B(0, ro, float, x) B(1, wo, uint, y) B(2, ro, float, aux)
#define GK_ARGS(A) A(uint, cols) A(uint, n_tok) A(uint, x_off) A(uint, x_stride) A(uint, ds_off) \
                   A(uint, in_mode) A(uint, aux_off) A(float, eps)
#define GK_SHARED(S) S(float, part, GK_REDUCE_PARTS(GK_WG))

#ifdef GK_BODY
GK_KERNEL(quant_q8_1, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint tid = GK_LOCAL_ID;
    uint t = GK_GROUP_ID.y;
    uint xt = args.x_off + t * args.x_stride;
    float inv = 1.0f;
    if (args.in_mode == GK_MM_IN_RMSNORM) {
        float ss = 0.0f;
        for (uint k = tid; k < args.cols; k += GK_WG) ss = gk_fma(x[xt + k], x[xt + k], ss);
        float total;
        GK_WG_SUM_INTO(total, ss, part, 0u)
        inv = gk_rms_inv(total, args.cols, args.eps);
    }
    uint n_blocks = args.cols / GK_Q8_BLOCK;
    uint qt = t * (args.cols / 4u);
    uint dt = args.ds_off + t * n_blocks;
    uint b = GK_GROUP_ID.x * GK_Q8_WG_BLOCKS + tid;
    if (tid < GK_Q8_WG_BLOCKS && b < n_blocks) {
        float v[32];
        float amax = 0.0f;
        GK_UNROLL for (uint i = 0u; i < 32u; ++i) {
            GK_MM_INPUT(v[i], xt, b * GK_Q8_BLOCK + i, inv)
            amax = gk_max(amax, abs(v[i]));
        }
        float d = amax / 127.0f;
        float id = amax > 0.0f ? 127.0f / amax : 0.0f;
        int sum = 0;
        GK_UNROLL for (uint w = 0u; w < 8u; ++w) {
            uint word = 0u;
            GK_UNROLL for (uint i = 0u; i < 4u; ++i) {
                int q = int(floor(v[4u * w + i] * id + 0.5f));
                q = gk_min(gk_max(q, -127), 127);
                sum += q;
                word |= (uint(q) & 0xFFu) << (8u * i);
            }
            y[qt + b * 8u + w] = word;
        }
        y[dt + b] = gk_pack_half2(d, d * float(sum));
    }
}
GK_KERNEL_END
#endif

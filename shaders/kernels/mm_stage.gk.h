// A projection's input staged once as a float16 panel, for the products that read it as such
// (matmul_<fmt>_coopmat_xh): for t < n_tok and k < cols,
//   y[(y_off + t * y_stride + k) halves] = half(in(x)[x_off + t * x_stride + k])
// with in() the input stage of mm_input.h picked by in_mode (plain, RMSNorm, the gated and plain
// activations, the LayerNorm modes), so the norm or the gate is formed once per token row rather
// than once per row tile of every product that reads it (q, k and v read one staged panel).
// y is bound as uint4 (eight halves): cols, y_off and y_stride must be multiples of eight.
// Rounding: the input stage in float32 as the other templates form it, then float16 with
// round to nearest even (the conversion the coopmat stamps apply to their own x).
// Dispatch: gx = n_tok, one workgroup per token row (the row statistics are a workgroup sum).
#include "../gk/gk.h"
#include "mm_input.h"

#define GK_WG 128

#define GK_BUFFERS(B) B(0, ro, float, x) B(1, wo, uint4, y) B(2, ro, float, aux)
#define GK_ARGS(A) A(uint, cols) A(uint, n_tok) A(uint, x_off) A(uint, x_stride) A(uint, y_off) \
                   A(uint, y_stride) A(uint, in_mode) A(uint, aux_off) A(float, eps)
#define GK_SHARED(S) S(float, part, GK_REDUCE_PARTS(GK_WG))

#ifdef GK_BODY
GK_KERNEL(mm_stage, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint tid = GK_LOCAL_ID;
    uint t = GK_GROUP_ID.x;
    uint xt = args.x_off + t * args.x_stride;
    float mean = 0.0f;
    float inv = 1.0f;
    if (args.in_mode == GK_MM_IN_RMSNORM) {
        float ss = 0.0f;
        for (uint k = tid; k < args.cols; k += GK_WG) ss = gk_fma(x[xt + k], x[xt + k], ss);
        float total;
        GK_WG_SUM_INTO(total, ss, part, 0u)
        inv = gk_rms_inv(total, args.cols, args.eps);
    } else if (GK_MM_LAYERNORM(args.in_mode)) {
        GK_MM_LAYERNORM_STATS_WG(mean, inv, xt, tid, part)
    }
    uint yt = (args.y_off + t * args.y_stride) / 8u;
    for (uint k8 = tid; k8 < args.cols / 8u; k8 += GK_WG) {
        float v[8];
        GK_UNROLL for (uint c = 0u; c < 8u; ++c) {
            GK_MM_INPUT_STATS(v[c], xt, 8u * k8 + c, mean, inv)
        }
        y[yt + k8] = gk_uint4(gk_pack_half2(v[0], v[1]), gk_pack_half2(v[2], v[3]),
                              gk_pack_half2(v[4], v[5]), gk_pack_half2(v[6], v[7]));
    }
}
GK_KERNEL_END
#endif

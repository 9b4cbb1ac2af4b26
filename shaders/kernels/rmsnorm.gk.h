// RMSNorm of `rows` rows of width n, one workgroup per row (gx = rows):
//   y[y_off + r*n + i] = x[x_off + r*n + i] * inv_r * w[w_off + i],
//   inv_r = 1 / sqrt(mean_i(x^2) + eps).
// y may be x itself (bound to both slots): each thread reads its elements before writing them.
// GK_RMSNORM_ADD=1 (stamp rmsnorm_add) adds the normed row to y instead: the post-norm and the
// residual add of gemma3's blocks in one pass.
// As cpu::rmsnorm: x * inv first, then * w. The sum of squares is float32 (per-thread strided
// sums, then the workgroup reduce), so it differs from the CPU's double sum by a few ulp.
#include "../gk/gk.h"

#ifndef GK_RMSNORM_ADD
#define GK_RMSNORM_ADD 0
#endif

#define GK_BUFFERS(B) B(0, ro, float, x) B(1, ro, float, w) B(2, rw, float, y)
#define GK_ARGS(A) A(uint, n) A(uint, rows) A(uint, x_off) A(uint, y_off) A(uint, w_off) \
    A(float, eps)
#define GK_SHARED(S) S(float, part, GK_REDUCE_PARTS(GK_WG))
#define GK_WG 128

#ifdef GK_BODY
GK_KERNEL(rmsnorm, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint row = GK_GROUP_ID.x;
    uint xb = args.x_off + row * args.n;
    uint yb = args.y_off + row * args.n;
    float ss = 0.0f;
    for (uint i = GK_LOCAL_ID; i < args.n; i += GK_WG) ss = gk_fma(x[xb + i], x[xb + i], ss);
    float total;
    GK_WG_SUM_INTO(total, ss, part, 0u)
    float inv = gk_rms_inv(total, args.n, args.eps);
    for (uint i = GK_LOCAL_ID; i < args.n; i += GK_WG) {
        GK_PRECISE float xi = x[xb + i] * inv;
#if GK_RMSNORM_ADD
        y[yb + i] += xi * w[args.w_off + i];
#else
        y[yb + i] = xi * w[args.w_off + i];
#endif
    }
}
GK_KERNEL_END
#endif

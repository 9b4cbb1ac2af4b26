// LayerNorm of `rows` rows of width n, one workgroup per row (gx = rows), as
// pocket::layer_norm: y = (x - mean) * inv (* w + b when affine), inv = 1 / sqrt(var + eps),
// the biased variance. modulate != 0 then applies adaLN (the Pocket flow head):
//   y = y * (1 + scale[i]) + shift[i], shift at mod[mod_off + i], scale at mod[mod_off + n + i].
// Row r reads x[x_off + r * n ...] and writes y[y_off + r * n ...]; y may be x itself.
// The CPU sums in double; here the mean and the centred sum of squares are float32 (strided
// per thread, then the workgroup reduce), so results differ from it by a few ulp.
#include "../gk/gk.h"

#define GK_BUFFERS(B) B(0, ro, float, x) B(1, ro, float, w) B(2, ro, float, b) \
    B(3, ro, float, mod) B(4, wo, float, y)
#define GK_ARGS(A) A(uint, n) A(uint, rows) A(uint, x_off) A(uint, y_off) A(uint, w_off) \
    A(uint, b_off) A(uint, mod_off) A(uint, affine) A(uint, modulate) A(float, eps)
#define GK_SHARED(S) S(float, part, GK_REDUCE_PARTS(GK_WG))
#define GK_WG 256

#ifdef GK_BODY
GK_KERNEL(layernorm, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint row = GK_GROUP_ID.x;
    uint xb = args.x_off + row * args.n;
    uint yb = args.y_off + row * args.n;
    float s = 0.0f;
    for (uint i = GK_LOCAL_ID; i < args.n; i += GK_WG) s += x[xb + i];
    float total;
    GK_WG_SUM_INTO(total, s, part, 0u)
    GK_PRECISE float mean = gk_div(total, float(args.n));
    float sq = 0.0f;
    for (uint i = GK_LOCAL_ID; i < args.n; i += GK_WG) {
        GK_PRECISE float d = x[xb + i] - mean;
        sq = gk_fma(d, d, sq);
    }
    float sq_total;
    GK_WG_SUM_INTO(sq_total, sq, part, 1u)
    GK_PRECISE float v = gk_div(sq_total, float(args.n)) + args.eps;
    // One Newton step on the native reciprocal square root (allowed 2 ulp) leaves ~1 ulp.
    GK_PRECISE float r = gk_rsqrt(v);
    GK_PRECISE float h = 0.5f * r;
    GK_PRECISE float inv = h * (3.0f - v * r * r);
    for (uint i = GK_LOCAL_ID; i < args.n; i += GK_WG) {
        GK_PRECISE float o = (x[xb + i] - mean) * inv;
        if (args.affine != 0u) o = o * w[args.w_off + i] + b[args.b_off + i];
        if (args.modulate != 0u) {
            GK_PRECISE float scaled = o * (1.0f + mod[args.mod_off + args.n + i]);
            o = scaled + mod[args.mod_off + i];
        }
        y[yb + i] = o;
    }
}
GK_KERNEL_END
#endif

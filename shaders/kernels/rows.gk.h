// Row copies with an optional activation, picked by GK_ROWS_OP:
//   dst[dst_off + t * dst_stride + j] = f(src[src_off + t * src_stride + j] (+ bias[j])),
// j < width, t < rows; has_bias != 0 adds bias[bias_off + j] first (a convolution's bias, so the
// product before needs no pass of its own: rounded as that pass would).
//   0 copy   f(v) = v                 (src_stride 0 repeats one row: a replicate pad)
//   1 elu    f(v) = v > 0 ? v : expm1(v)
//   2 gelu   f(v) = 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3)))      (pocket::gelu_tanh)
//   3 silu   f(v) = v / (1 + exp(-v))
// dst may be src itself (in place) when the two windows are the same or do not overlap.
// Dispatch: a grid-stride loop over rows * width, so any gx >= 1 is correct;
// gx = min(ceil(rows * width / 256), 65535) covers it in one sweep.
#include "../gk/gk.h"

#ifndef GK_ROWS_OP
#define GK_ROWS_OP 0
#endif

#define GK_BUFFERS(B) B(0, ro, float, src) B(1, wo, float, dst) B(2, ro, float, bias)
#define GK_ARGS(A) A(uint, width) A(uint, rows) A(uint, src_off) A(uint, src_stride) \
    A(uint, dst_off) A(uint, dst_stride) A(uint, bias_off) A(uint, has_bias)
#define GK_SHARED(S)
#define GK_WG 256

#ifdef GK_BODY
// expm1 to a few ulp: exp(v) - 1 cancels near 0, so below |v| < 0.35 a Taylor polynomial
// (the next term is under 2^-26 of the result).
GK_INLINE float gk_expm1(float v) {
    GK_PRECISE float p = 1.0f / 40320.0f;
    p = p * v + 1.0f / 5040.0f;
    p = p * v + 1.0f / 720.0f;
    p = p * v + 1.0f / 120.0f;
    p = p * v + 1.0f / 24.0f;
    p = p * v + 1.0f / 6.0f;
    p = p * v + 0.5f;
    GK_PRECISE float small = v + (v * v) * p;
    GK_PRECISE float big = exp(gk_max(v, -88.0f)) - 1.0f;
    return abs(v) < 0.35f ? small : big;
}

GK_KERNEL(rows, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint total = args.rows * args.width;
    uint step = GK_NUM_GROUPS.x * GK_WG;
    for (uint idx = GK_GROUP_ID.x * GK_WG + GK_LOCAL_ID; idx < total; idx += step) {
        uint t = idx / args.width;
        uint j = idx - t * args.width;
        GK_PRECISE float v = src[args.src_off + t * args.src_stride + j];
        if (args.has_bias != 0u) v = v + bias[args.bias_off + j];
#if GK_ROWS_OP == 1
        v = v > 0.0f ? v : gk_expm1(v);
#elif GK_ROWS_OP == 2
        // As the CPU writes it: c * (v + ((0.044715 * v) * v) * v), then 0.5 * v * (1 + tanh).
        GK_PRECISE float cube = 0.044715f * v * v * v;
        GK_PRECISE float th = gk_tanh(0.7978845608028654f * (v + cube));
        v = 0.5f * v * (1.0f + th);
#elif GK_ROWS_OP == 3
        // Past 80 the true value is below 1e-33 of v; the clamp keeps exp() finite and normal.
        GK_PRECISE float den = 1.0f + exp(gk_min(-v, 80.0f));
        v = gk_div(v, den);
#elif GK_ROWS_OP != 0
#error "GK_ROWS_OP must be 0..3"
#endif
        dst[args.dst_off + t * args.dst_stride + j] = v;
    }
}
GK_KERNEL_END
#endif

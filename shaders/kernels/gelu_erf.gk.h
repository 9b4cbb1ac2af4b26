// The exact (erf) GELU of Whisper's encoder stem and MLPs, g(v) = 0.5 v (1 + erf(v / sqrt 2)),
// over a [rows, cols] block of x, with an optional transpose and an optional added operand:
//   transpose 0: y[y_off + i] = f(x[x_off + i]) (+ a[a_off + i]),             i < rows * cols
//   transpose 1: y[y_off + j * rows + t] = f(x[x_off + t * cols + j]) (+ a[a_off + j * rows + t])
// f = g when act != 0, else the value as read; add != 0 adds a. Transpose 1 turns the stem's
// channel-major convolution output [d, frames] into the time-major rows [frames, d] of the
// transformer with its positions added in the same pass. y may be x itself for transpose 0.
// erf through erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z / 2) (a Chebyshev fit, fractional
// error below 1.2e-7 for every z >= 0), so both tails keep their relative accuracy:
// g(v) = 0.5 v (2 - erfc(v / sqrt 2)) for v >= 0, 0.5 v erfc(-v / sqrt 2) below.
// Dispatch: a grid-stride loop over rows * cols, so any gx >= 1 is correct.
#include "../gk/gk.h"

#define GK_BUFFERS(B) B(0, ro, float, x) B(1, wo, float, y) B(2, ro, float, a)
#define GK_ARGS(A) A(uint, rows) A(uint, cols) A(uint, x_off) A(uint, y_off) A(uint, a_off) \
    A(uint, transpose) A(uint, act) A(uint, add)
#define GK_SHARED(S)
#define GK_WG 256

#ifdef GK_BODY
GK_INLINE float gk_erfc_pos(float z) {
    GK_PRECISE float t = gk_div(1.0f, 1.0f + 0.5f * z);
    GK_PRECISE float p = 0.17087277f;
    p = p * t - 0.82215223f;
    p = p * t + 1.48851587f;
    p = p * t - 1.13520398f;
    p = p * t + 0.27886807f;
    p = p * t - 0.18628806f;
    p = p * t + 0.09678418f;
    p = p * t + 0.37409196f;
    p = p * t + 1.00002368f;
    p = p * t - 1.26551223f;
    return t * exp(p - z * z);
}

GK_INLINE float gk_gelu_erf(float v) {
    GK_PRECISE float z = abs(v) * 0.70710678118654752f;
    GK_PRECISE float c = gk_erfc_pos(gk_min(z, 10.0f));   // erfc(10) < 1e-44: 0 in float32
    GK_PRECISE float pos = 0.5f * v * (2.0f - c);
    GK_PRECISE float neg = 0.5f * v * c;
    return v >= 0.0f ? pos : neg;
}

GK_KERNEL(gelu_erf, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint total = args.rows * args.cols;
    uint step = GK_NUM_GROUPS.x * GK_WG;
    for (uint idx = GK_GROUP_ID.x * GK_WG + GK_LOCAL_ID; idx < total; idx += step) {
        uint o = idx;
        if (args.transpose != 0u) {
            uint t = idx / args.cols;
            uint j = idx - t * args.cols;
            o = j * args.rows + t;
        }
        GK_PRECISE float v = x[args.x_off + idx];
        if (args.act != 0u) v = gk_gelu_erf(v);
        if (args.add != 0u) v = v + a[args.a_off + o];
        y[args.y_off + o] = v;
    }
}
GK_KERNEL_END
#endif

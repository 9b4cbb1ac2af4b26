// AdaIN1d with its style projection (StyleTTS2's decoder and the generator's residual blocks):
// for channel c of x [C, L] (L = cols; row c at x[x_off + c * L ...]),
//   h_j   = fcb[j] + sum_k style[style_off + k] fcw[k * 2C + j]       (j = c and C + c)
//   y     = (1 + h_c) InstanceNorm(x_c) + h_{C+c},   InstanceNorm over the row, biased variance
// then an activation picked by the argument act:
//   0 none   1 LeakyReLU(slope)   2 Snake with alpha[alpha_off + c] (vocoder_math.h)
// fcw is the fc's weight [S, 2C] (input-major, the file's MatMul layout) as float32. One
// workgroup per channel (gx = C); y may be x itself. The CPU quantizes the style row to int8 and
// sums in double; here the fc is a float32 dot product and the mean and variance float32 sums
// (strided per thread, then the workgroup reduce): the bars of tests/test_gpu_kokoro_ops.py say
// how far apart that leaves them.
#include "../gk/gk.h"
#include "vocoder_math.h"

#define GK_BUFFERS(B) B(0, ro, float, x) B(1, wo, float, y) B(2, ro, float, fcw) \
    B(3, ro, float, fcb) B(4, ro, float, style) B(5, ro, float, alpha)
#define GK_ARGS(A) A(uint, channels) A(uint, cols) A(uint, x_off) A(uint, y_off) \
    A(uint, style_width) A(uint, style_off) A(uint, act) A(uint, alpha_off) A(float, eps) \
    A(float, slope)
#define GK_SHARED(S) S(float, part, GK_REDUCE_PARTS(GK_WG))
#define GK_WG 256

#ifdef GK_BODY
GK_KERNEL(adain, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint c = GK_GROUP_ID.x;
    uint C = args.channels;
    uint L = args.cols;
    uint xb = args.x_off + c * L;
    uint yb = args.y_off + c * L;
    float pg = 0.0f;
    float pb = 0.0f;
    for (uint k = GK_LOCAL_ID; k < args.style_width; k += GK_WG) {
        float s = style[args.style_off + k];
        pg = gk_fma(s, fcw[k * 2u * C + c], pg);
        pb = gk_fma(s, fcw[k * 2u * C + C + c], pb);
    }
    float gsum;
    GK_WG_SUM_INTO(gsum, pg, part, 0u)
    float bsum;
    GK_WG_SUM_INTO(bsum, pb, part, 1u)
    GK_PRECISE float gain = (gsum + fcb[c]) + 1.0f;
    GK_PRECISE float shift = bsum + fcb[C + c];
    float s = 0.0f;
    for (uint i = GK_LOCAL_ID; i < L; i += GK_WG) s += x[xb + i];
    float total;
    GK_WG_SUM_INTO(total, s, part, 0u)
    GK_PRECISE float mean = gk_div(total, float(L));
    float sq = 0.0f;
    for (uint i = GK_LOCAL_ID; i < L; i += GK_WG) {
        GK_PRECISE float d = x[xb + i] - mean;
        sq = gk_fma(d, d, sq);
    }
    float sq_total;
    GK_WG_SUM_INTO(sq_total, sq, part, 1u)
    GK_PRECISE float den = sqrt(gk_div(sq_total, float(L)) + args.eps);
    float a = args.act == 2u ? alpha[args.alpha_off + c] : 1.0f;
    GK_PRECISE float inv_a = args.act == 2u ? gk_div(1.0f, a) : 1.0f;
    for (uint i = GK_LOCAL_ID; i < L; i += GK_WG) {
        GK_PRECISE float o = gk_div(x[xb + i] - mean, den);
        o = gain * o + shift;
        if (args.act == 1u) o = gk_leaky(o, args.slope);
        else if (args.act == 2u) o = gk_snake(o, a, inv_a);
        y[yb + i] = o;
    }
}
GK_KERNEL_END
#endif

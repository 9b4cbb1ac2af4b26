// A 1-D convolution over channel-major rows (ONNX Conv / ConvInteger with the weights
// dequantized; dense, grouped and depthwise alike): for output channel o of group
// g = o / (C_out / groups) and output column t < l_out,
//   v = sum_{i < C_in / groups} sum_{k < taps} w[(o * C_in / groups + i) * taps + k]
//         * act(xin(g * C_in / groups + i, t * stride + k * dilation - pad_left))   (+ bias[o])
// xin(c, p) = x[x_off + c * l_in + p / in_up] for 0 <= p < l_in * in_up, else 0: in_up 2 reads
// the input repeated twice along time (the nearest x2 upsampling of a residual block's shortcut)
// without a pass of its own. act: in_act 0 none, 1 LeakyReLU(slope) on the input as read (the
// activation before a convolution, fused). The bias is added after the taps, as a pass of its
// own would. Then y[y_off + o * l_out + t] =
//   out_mode 0: v     1: v + y (a residual sum, t + x as the CPU writes it)
//   2: (v + y) / div  (a residual block's (residual + shortcut) / sqrt(2))
// Dispatch: a grid-stride loop over C_out * l_out. Sums run in float32 in tap order; the CPU's
// integer sums over int8 activations differ by the activations' quantization (the bars of the
// tests say how much).
#include "../gk/gk.h"
#include "vocoder_math.h"

#define GK_BUFFERS(B) B(0, ro, float, x) B(1, ro, float, w) B(2, ro, float, bias) \
    B(3, rw, float, y)
#define GK_ARGS(A) A(uint, c_in) A(uint, c_out) A(uint, l_in) A(uint, l_out) A(uint, taps) \
    A(uint, stride) A(uint, dilation) A(uint, pad_left) A(uint, groups) A(uint, x_off) \
    A(uint, y_off) A(uint, has_bias) A(uint, in_act) A(float, slope) A(uint, out_mode) \
    A(float, div) A(uint, in_up)
#define GK_SHARED(S)
#define GK_WG 256

#ifdef GK_BODY
GK_KERNEL(conv1d, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint total = args.c_out * args.l_out;
    uint step = GK_NUM_GROUPS.x * GK_WG;
    uint cig = args.c_in / args.groups;
    uint cog = args.c_out / args.groups;
    uint K = args.taps;
    uint span = args.l_in * args.in_up;
    for (uint idx = GK_GROUP_ID.x * GK_WG + GK_LOCAL_ID; idx < total; idx += step) {
        uint o = idx / args.l_out;
        uint t = idx - o * args.l_out;
        uint g = o / cog;
        int p0 = int(t * args.stride) - int(args.pad_left);
        float v = 0.0f;
        for (uint i = 0u; i < cig; ++i) {
            uint xrow = args.x_off + (g * cig + i) * args.l_in;
            uint wrow = (o * cig + i) * K;
            for (uint k = 0u; k < K; ++k) {
                int p = p0 + int(k * args.dilation);
                if (p < 0 || uint(p) >= span) continue;
                float xv = x[xrow + uint(p) / args.in_up];
                if (args.in_act == 1u) xv = gk_leaky(xv, args.slope);
                v = gk_fma(w[wrow + k], xv, v);
            }
        }
        GK_PRECISE float r = v;
        if (args.has_bias != 0u) r = r + bias[o];
        uint yi = args.y_off + idx;
        if (args.out_mode == 1u) r = r + y[yi];
        else if (args.out_mode == 2u) r = gk_div(r + y[yi], args.div);
        y[yi] = r;
    }
}
GK_KERNEL_END
#endif

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
// Two stamps:
//   GK_CONV_TILED 0  one thread per output, a grid-stride loop over C_out * l_out (any groups).
//   GK_CONV_TILED 1  dense only (groups 1): a workgroup computes a tile of GK_CONV_TO output
//                    channels x GK_CONV_TT columns (gx = ceil(l_out / TT), gy = ceil(C_out / TO)),
//                    reading the input window and the weights of GK_CONV_CI input channels at a
//                    time into workgroup memory; each thread keeps GK_CONV_RPT outputs of one
//                    column. It takes taps <= GK_CONV_KMAX and windows (TT - 1) stride +
//                    (taps - 1) dilation + 1 <= GK_CONV_WMAX (conv1d_tiled_fits on the host).
// Sums run in float32 (tap order per input channel); the CPU's integer sums over int8 activations
// differ by the activations' quantization (the bars of the tests say how much).
#include "../gk/gk.h"
#include "vocoder_math.h"

#ifndef GK_CONV_TILED
#define GK_CONV_TILED 0
#endif
#define GK_CONV_TO 32u
#define GK_CONV_TT 64u
#define GK_CONV_CI 8u
#define GK_CONV_RPT 8u      // GK_CONV_TO * GK_CONV_TT / GK_WG
#define GK_CONV_KMAX 12u
#define GK_CONV_WMAX 512u

#define GK_BUFFERS(B) B(0, ro, float, x) B(1, ro, float, w) B(2, ro, float, bias) \
    B(3, rw, float, y)
#define GK_ARGS(A) A(uint, c_in) A(uint, c_out) A(uint, l_in) A(uint, l_out) A(uint, taps) \
    A(uint, stride) A(uint, dilation) A(uint, pad_left) A(uint, groups) A(uint, x_off) \
    A(uint, y_off) A(uint, has_bias) A(uint, in_act) A(float, slope) A(uint, out_mode) \
    A(float, div) A(uint, in_up)
#if GK_CONV_TILED
#define GK_SHARED(S) S(float, xs, 4096) S(float, ws, 3072)
#else
#define GK_SHARED(S)
#endif
#define GK_WG 256

#ifdef GK_BODY
GK_KERNEL(conv1d, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
#if GK_CONV_TILED
    // xs: GK_CONV_CI rows of the input window (CI * WMAX = 4096); ws: TO x CI x KMAX (3072).
    uint tid = GK_LOCAL_ID;
    uint col = tid % GK_CONV_TT;
    uint og = tid / GK_CONV_TT;
    uint t0 = GK_GROUP_ID.x * GK_CONV_TT;
    uint o0 = GK_GROUP_ID.y * GK_CONV_TO;
    uint K = args.taps;
    uint S = args.stride;
    uint D = args.dilation;
    uint W = (GK_CONV_TT - 1u) * S + (K - 1u) * D + 1u;
    int span = int(args.l_in * args.in_up);
    int p0 = int(t0 * S) - int(args.pad_left);
    float acc[GK_CONV_RPT];
    for (uint r = 0u; r < GK_CONV_RPT; ++r) acc[r] = 0.0f;
    for (uint c0 = 0u; c0 < args.c_in; c0 += GK_CONV_CI) {
        for (uint i = tid; i < GK_CONV_CI * W; i += GK_WG) {
            uint ci = i / W;
            uint j = i - ci * W;
            int p = p0 + int(j);
            float xv = 0.0f;
            if (c0 + ci < args.c_in && p >= 0 && p < span) {
                xv = x[args.x_off + (c0 + ci) * args.l_in + uint(p) / args.in_up];
                if (args.in_act == 1u) xv = gk_leaky(xv, args.slope);
            }
            xs[ci * GK_CONV_WMAX + j] = xv;
        }
        for (uint i = tid; i < GK_CONV_TO * GK_CONV_CI * K; i += GK_WG) {
            uint o = i / (GK_CONV_CI * K);
            uint rem = i - o * (GK_CONV_CI * K);
            uint ci = rem / K;
            uint k = rem - ci * K;
            float wv = 0.0f;
            if (o0 + o < args.c_out && c0 + ci < args.c_in)
                wv = w[((o0 + o) * args.c_in + c0 + ci) * K + k];
            ws[(o * GK_CONV_CI + ci) * GK_CONV_KMAX + k] = wv;
        }
        GK_BARRIER();
        for (uint ci = 0u; ci < GK_CONV_CI; ++ci) {
            for (uint k = 0u; k < K; ++k) {
                float xv = xs[ci * GK_CONV_WMAX + col * S + k * D];
                for (uint r = 0u; r < GK_CONV_RPT; ++r)
                    acc[r] = gk_fma(ws[((og * GK_CONV_RPT + r) * GK_CONV_CI + ci) * GK_CONV_KMAX + k],
                                    xv, acc[r]);
            }
        }
        GK_BARRIER();
    }
    uint t = t0 + col;
    for (uint r = 0u; r < GK_CONV_RPT; ++r) {
        uint o = o0 + og * GK_CONV_RPT + r;
        if (o >= args.c_out || t >= args.l_out) continue;
        GK_PRECISE float v = acc[r];
        if (args.has_bias != 0u) v = v + bias[o];
        uint yi = args.y_off + o * args.l_out + t;
        if (args.out_mode == 1u) v = v + y[yi];
        else if (args.out_mode == 2u) v = gk_div(v + y[yi], args.div);
        y[yi] = v;
    }
#else
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
#endif
}
GK_KERNEL_END
#endif

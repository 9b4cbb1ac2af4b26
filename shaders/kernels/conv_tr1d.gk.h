// A 1-D transposed convolution over channel-major rows (nn::ConvTranspose1d: dense, grouped and
// depthwise), gathered per output: for output channel o (group g, o_g = o - g * C_out / groups)
// and output column p < l_out,
//   v = sum_{i < C_in / groups} sum_{k < taps, q = p + pad_left - k dilation, q = n stride,
//         0 <= n < n_in} w[((g * C_in / groups + i) * C_out / groups + o_g) * taps + k]
//         * act(x[x_off + (g * C_in / groups + i) * n_in + n])                (+ bias[o])
// w in torch's layout [C_in, C_out / groups, taps]; act as conv1d's (in_act 1: LeakyReLU on the
// input as read); the bias added after the taps. The output row of channel o holds
// l_out + shift columns: column j reads v at p = j - shift, and p = -1 (shift 1) mirrors p = 1
// (the generator's ReflectionPad1d((1, 0)) after its last upsampling). Then
//   y[y_off + o * (l_out + shift) + j] = v (out_mode 0)  or  v + y (out_mode 1: the noise
//   branch already there, u + n as the CPU adds them).
// Dispatch: a grid-stride loop over C_out * (l_out + shift). Sums in float32 in tap order (the
// CPU's matmul sums in its own order: a few ulp apart).
#include "../gk/gk.h"
#include "vocoder_math.h"

#define GK_BUFFERS(B) B(0, ro, float, x) B(1, ro, float, w) B(2, ro, float, bias) \
    B(3, rw, float, y)
#define GK_ARGS(A) A(uint, c_in) A(uint, c_out) A(uint, n_in) A(uint, l_out) A(uint, taps) \
    A(uint, stride) A(uint, dilation) A(uint, pad_left) A(uint, groups) A(uint, x_off) \
    A(uint, y_off) A(uint, has_bias) A(uint, in_act) A(float, slope) A(uint, out_mode) \
    A(uint, shift)
#define GK_SHARED(S)
#define GK_WG 256

#ifdef GK_BODY
GK_KERNEL(conv_tr1d, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint row = args.l_out + args.shift;
    uint total = args.c_out * row;
    uint step = GK_NUM_GROUPS.x * GK_WG;
    uint cig = args.c_in / args.groups;
    uint cog = args.c_out / args.groups;
    uint K = args.taps;
    int S = int(args.stride);
    for (uint idx = GK_GROUP_ID.x * GK_WG + GK_LOCAL_ID; idx < total; idx += step) {
        uint o = idx / row;
        uint j = idx - o * row;
        int p = int(j) - int(args.shift);
        if (p < 0) p = 1;
        uint g = o / cog;
        uint og = o - g * cog;
        float v = 0.0f;
        for (uint i = 0u; i < cig; ++i) {
            uint ci = g * cig + i;
            uint xrow = args.x_off + ci * args.n_in;
            uint wrow = (ci * cog + og) * K;
            for (uint k = 0u; k < K; ++k) {
                int q = p + int(args.pad_left) - int(k * args.dilation);
                if (q < 0) break;
                if (q % S != 0) continue;
                uint n = uint(q / S);
                if (n >= args.n_in) continue;
                float xv = x[xrow + n];
                if (args.in_act == 1u) xv = gk_leaky(xv, args.slope);
                v = gk_fma(w[wrow + k], xv, v);
            }
        }
        GK_PRECISE float r = v;
        if (args.has_bias != 0u) r = r + bias[o];
        uint yi = args.y_off + idx;
        if (args.out_mode == 1u) r = r + y[yi];
        y[yi] = r;
    }
}
GK_KERNEL_END
#endif

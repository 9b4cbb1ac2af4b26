// Add-and-scale over rows: for t < rows, i < n,
//   y[y_off + t * y_stride + i] += ((x[x_off + t * x_stride + i] + b_i) * s_i) / div,
// b_i = bias[i] when has_bias != 0 (a convolution's bias: rounded as its own pass), else none;
// s_i = s[s_off + i] when use_s != 0, else 1; div 1 leaves the product as it is. Uses: a bias
// (x_stride 0), a residual with a per-channel layer scale, the flow head's gated residual
// (s = the gate), and the Euler step latent += v / steps (divided, as the CPU does, not
// multiplied by a reciprocal; gk_div rounds as the CPU's divide).
// Dispatch: a grid-stride loop over rows * n, so any gx >= 1 is correct.
#include "../gk/gk.h"

#define GK_BUFFERS(B) B(0, rw, float, y) B(1, ro, float, x) B(2, ro, float, s) \
    B(3, ro, float, bias)
#define GK_ARGS(A) A(uint, n) A(uint, rows) A(uint, y_off) A(uint, y_stride) A(uint, x_off) \
    A(uint, x_stride) A(uint, s_off) A(uint, use_s) A(float, div) A(uint, has_bias)
#define GK_SHARED(S)
#define GK_WG 256

#ifdef GK_BODY
GK_KERNEL(add_scale, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint total = args.rows * args.n;
    uint step = GK_NUM_GROUPS.x * GK_WG;
    for (uint idx = GK_GROUP_ID.x * GK_WG + GK_LOCAL_ID; idx < total; idx += step) {
        uint t = idx / args.n;
        uint i = idx - t * args.n;
        GK_PRECISE float v = x[args.x_off + t * args.x_stride + i];
        if (args.has_bias != 0u) v = v + bias[i];
        if (args.use_s != 0u) v = v * s[args.s_off + i];
        if (args.div != 1.0f) v = gk_div(v, args.div);
        uint yi = args.y_off + t * args.y_stride + i;
        GK_PRECISE float sum = y[yi] + v;
        y[yi] = sum;
    }
}
GK_KERNEL_END
#endif

// Snake over channel-major rows x [C, L] in place (nn::snake): x + (1 / alpha_c) sin(alpha_c x)^2,
// alpha_c = alpha[alpha_off + c], row c at x[x_off + c * cols ...] (vocoder_math.h's gk_snake; the
// AdaIN stamp applies the same after its norm). Dispatch: a grid-stride loop over C * L.
#include "../gk/gk.h"
#include "vocoder_math.h"

#define GK_BUFFERS(B) B(0, rw, float, x) B(1, ro, float, alpha)
#define GK_ARGS(A) A(uint, channels) A(uint, cols) A(uint, x_off) A(uint, alpha_off)
#define GK_SHARED(S)
#define GK_WG 256

#ifdef GK_BODY
GK_KERNEL(snake, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint total = args.channels * args.cols;
    uint step = GK_NUM_GROUPS.x * GK_WG;
    for (uint idx = GK_GROUP_ID.x * GK_WG + GK_LOCAL_ID; idx < total; idx += step) {
        uint c = idx / args.cols;
        float a = alpha[args.alpha_off + c];
        GK_PRECISE float inv_a = gk_div(1.0f, a);
        x[args.x_off + idx] = gk_snake(x[args.x_off + idx], a, inv_a);
    }
}
GK_KERNEL_END
#endif

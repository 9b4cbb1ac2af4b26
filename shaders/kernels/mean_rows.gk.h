// The mean of up to four same-shaped blocks (the generator's resblocks of one stage):
// y[y_off + i] = (((a[i] + b[i]) + c[i]) + d[i]) / count for the first `count` of a, b, c, d
// (a[a_off + i] and so on, i < n), added in block order and divided as the CPU does (gk_div).
// Unused operands may be bound to any buffer. Dispatch: a grid-stride loop over n.
#include "../gk/gk.h"

#define GK_BUFFERS(B) B(0, ro, float, a) B(1, ro, float, b) B(2, ro, float, c) \
    B(3, ro, float, d) B(4, wo, float, y)
#define GK_ARGS(A) A(uint, n) A(uint, count) A(uint, a_off) A(uint, b_off) A(uint, c_off) \
    A(uint, d_off) A(uint, y_off)
#define GK_SHARED(S)
#define GK_WG 256

#ifdef GK_BODY
GK_KERNEL(mean_rows, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint step = GK_NUM_GROUPS.x * GK_WG;
    for (uint i = GK_GROUP_ID.x * GK_WG + GK_LOCAL_ID; i < args.n; i += step) {
        GK_PRECISE float acc = a[args.a_off + i];
        if (args.count > 1u) acc = acc + b[args.b_off + i];
        if (args.count > 2u) acc = acc + c[args.c_off + i];
        if (args.count > 3u) acc = acc + d[args.d_off + i];
        y[args.y_off + i] = gk_div(acc, float(args.count));
    }
}
GK_KERNEL_END
#endif

// Self-test of a home: y[y_off + i] = a * x[x_off + i] + y[y_off + i].
#include "../gk/gk.h"

#define GK_BUFFERS(B) B(0, ro, float, x) B(1, rw, float, y)
#define GK_ARGS(A) A(uint, n) A(float, a) A(uint, x_off) A(uint, y_off)
#define GK_SHARED(S)
#define GK_WG 64

#ifdef GK_BODY
GK_KERNEL(selftest_axpy, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint i = GK_GROUP_ID.x * GK_WG + GK_LOCAL_ID;
    if (i < args.n) y[args.y_off + i] = gk_fma(args.a, x[args.x_off + i], y[args.y_off + i]);
}
GK_KERNEL_END
#endif

// Self-test of gk_div: q[i] = num[i] / den[i], which must equal the host's IEEE division.
#include "../gk/gk.h"

#define GK_BUFFERS(B) B(0, ro, float, num) B(1, ro, float, den) B(2, wo, float, q)
#define GK_ARGS(A) A(uint, n)
#define GK_SHARED(S)
#define GK_WG 64

#ifdef GK_BODY
GK_KERNEL(selftest_divide, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint i = GK_GROUP_ID.x * GK_WG + GK_LOCAL_ID;
    if (i < args.n) q[i] = gk_div(num[i], den[i]);
}
GK_KERNEL_END
#endif

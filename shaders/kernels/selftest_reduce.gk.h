// Self-test of the workgroup reductions: the sum and the max of each row of x (width n), written
// by every thread, so a test can check that all threads of a group hold identical values.
#include "../gk/gk.h"

#define GK_BUFFERS(B) B(0, ro, float, x) B(1, wo, float, sums) B(2, wo, float, maxes)
#define GK_ARGS(A) A(uint, n)
#define GK_SHARED(S) S(float, part, GK_REDUCE_PARTS(GK_WG))
#define GK_WG 128

#ifdef GK_BODY
GK_KERNEL(selftest_reduce, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint row = GK_GROUP_ID.x;
    float s = 0.0f;
    float m = -3.0e38f;
    for (uint i = GK_LOCAL_ID; i < args.n; i += GK_WG) {
        s += x[row * args.n + i];
        m = gk_max(m, x[row * args.n + i]);
    }
    float total;
    float top;
    GK_WG_SUM_INTO(total, s, part, 0u)
    GK_WG_MAX_INTO(top, m, part, 1u)
    sums[row * GK_WG + GK_LOCAL_ID] = total;
    maxes[row * GK_WG + GK_LOCAL_ID] = top;
}
GK_KERNEL_END
#endif

// Element-wise ops on y[y_off + i], i < n (x[x_off + i] the second operand), picked by
// GK_ELT_OP:
//   0 add       y = y + x
//   1 scale     y = y * s                         (x unused: bind any buffer)
//   2 glu_silu  y = y / (1 + exp(-y)) * x         (y the gate, x up: cpu::swiglu)
//   3 glu_gelu  y = y / (1 + exp(-2 sqrt(2/pi) (y + 0.044715 y^3))) * x   (cpu::geglu_tanh)
//   4 softcap   y = s * tanh(y / s)
// Divisions go through gk_div and tanh through gk_tanh, so both homes round alike and near the
// CPU. Dispatch: a grid-stride loop, so any gx >= 1 is correct; gx = min(ceil(n / 256), 65535).
#include "../gk/gk.h"

#ifndef GK_ELT_OP
#define GK_ELT_OP 0
#endif

#define GK_BUFFERS(B) B(0, rw, float, y) B(1, ro, float, x)
#define GK_ARGS(A) A(uint, n) A(uint, y_off) A(uint, x_off) A(float, s)
#define GK_SHARED(S)
#define GK_WG 256

#ifdef GK_BODY
GK_KERNEL(eltwise, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    for (uint i = GK_GROUP_ID.x * GK_WG + GK_LOCAL_ID; i < args.n; i += GK_NUM_GROUPS.x * GK_WG) {
        GK_PRECISE float v = y[args.y_off + i];
#if GK_ELT_OP == 0
        v = v + x[args.x_off + i];
#elif GK_ELT_OP == 1
        v = v * args.s;
#elif GK_ELT_OP == 2 || GK_ELT_OP == 3
        v = gk_gate_act(v, GK_ELT_OP == 3 ? 1u : 0u) * x[args.x_off + i];
#elif GK_ELT_OP == 4
        v = args.s * gk_tanh(gk_div(v, args.s));
#else
#error "GK_ELT_OP must be 0..4"
#endif
        y[args.y_off + i] = v;
    }
}
GK_KERNEL_END
#endif

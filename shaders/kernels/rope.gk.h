// Rotary position embedding, in place, of the first n_rot dims of every head of n_tok token
// rows (cpu::rope): token t's heads start at x_off + t * x_stride, head h at + h * head_dim.
// Pair i (< n_rot / 2) is (2i, 2i + 1) for NORM (llama) or (i, i + n_rot / 2) for NEOX
// (GK_ROPE_NEOX=1: qwen2, qwen3, gemma3), rotated by the table of rope_table.gk.h at
// tab_off + t * half * 2 (cos, sin interleaved). Dims past n_rot stay.
// Dispatch: one thread per (token, head, pair), a grid-stride loop over n_tok * n_head * half,
// so any gx >= 1 is correct; gx = min(ceil(total / 256), 65535) covers it in one sweep.
#include "../gk/gk.h"

#ifndef GK_ROPE_NEOX
#define GK_ROPE_NEOX 0
#endif

#define GK_BUFFERS(B) B(0, rw, float, x) B(1, ro, float, tab)
#define GK_ARGS(A) A(uint, n_tok) A(uint, n_head) A(uint, head_dim) A(uint, n_rot) \
    A(uint, x_off) A(uint, x_stride) A(uint, tab_off)
#define GK_SHARED(S)
#define GK_WG 256

#ifdef GK_BODY
GK_KERNEL(rope, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint half_rot = args.n_rot / 2u;
    uint total = args.n_tok * args.n_head * half_rot;
    uint step = GK_NUM_GROUPS.x * GK_WG;
    for (uint idx = GK_GROUP_ID.x * GK_WG + GK_LOCAL_ID; idx < total; idx += step) {
        uint i = idx % half_rot;
        uint th = idx / half_rot;
        uint h = th % args.n_head;
        uint t = th / args.n_head;
        uint base = args.x_off + t * args.x_stride + h * args.head_dim;
#if GK_ROPE_NEOX
        uint a = base + i;
        uint b = a + half_rot;
#else
        uint a = base + 2u * i;
        uint b = a + 1u;
#endif
        uint ti = args.tab_off + (t * half_rot + i) * 2u;
        float c = tab[ti];
        float s = tab[ti + 1u];
        float x0 = x[a];
        float x1 = x[b];
        GK_PRECISE float ya = x0 * c - x1 * s;
        GK_PRECISE float yb = x0 * s + x1 * c;
        x[a] = ya;
        x[b] = yb;
    }
}
GK_KERNEL_END
#endif

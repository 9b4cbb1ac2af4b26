// The rotary-embedding table of n_tok consecutive positions: for pair i < n_half and token t,
//   tab[((row0 + t) * n_half + i) * 2 + 0] = cos((p0 + t) * f_i),  [... + 1] = sin(...),
// p0 = pos_base[0] + pos0: the base is read from memory so that one recorded command buffer
// serves every decode step (the host writes the step's position there before each submit).
// row0 places the rows: a batched call fills one table with the rows of several sequences.
// The host computes each frequency f_i in double (base^(-2i / n_rot) * scale / factor_i) and
// passes it as a float pair: freqs[2i] = float(f_i), freqs[2i + 1] = float(f_i - float(f_i)).
// The angle is an exact product pair (position times the pair's high part, plus the low part's
// product) reduced modulo pi/2 in extended precision, so positions near 128k keep an absolute
// error near 1e-7 rad; native sin/cos would be allowed 2^-11 (see gk_cos_sin in gk/math.h).
// Dispatch: gx = ceil(n_tok * n_half / 64), one thread per (token, pair). (The pair count is
// n_half: `half` is a reserved word in GLSL and a type in MSL.)
#include "../gk/gk.h"

#define GK_BUFFERS(B) B(0, ro, float, freqs) B(1, wo, float, tab) B(2, ro, uint, pos_base)
#define GK_ARGS(A) A(uint, n_half) A(uint, n_tok) A(uint, pos0) A(uint, row0)
#define GK_SHARED(S)
#define GK_WG 64

#ifdef GK_BODY
GK_KERNEL(rope_table, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint idx = GK_GROUP_ID.x * GK_WG + GK_LOCAL_ID;
    if (idx < args.n_tok * args.n_half) {
        uint t = idx / args.n_half;
        uint i = idx - t * args.n_half;
        // Positions stay below 2^24, so the float holds them exactly.
        float pos = float(pos_base[0] + args.pos0 + t);
        float f_hi = freqs[2u * i];
        float f_lo = freqs[2u * i + 1u];
        GK_PRECISE float a_hi = pos * f_hi;
        GK_PRECISE float a_lo = gk_two_prod_err(pos, f_hi, a_hi) + pos * f_lo;
        float2 cs = gk_cos_sin(a_hi, a_lo);
        uint at = 2u * (args.row0 * args.n_half + idx);
        tab[at] = cs.x;
        tab[at + 1u] = cs.y;
    }
}
GK_KERNEL_END
#endif

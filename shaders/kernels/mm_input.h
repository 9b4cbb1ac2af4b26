// The input stage shared by matvec.gk.h and matmul.gk.h: what the product reads as x, so the
// step before a projection needs no pass of its own. Picked by args.in_mode:
//   0  x as it is
//   1  RMSNorm: (x * inv_t) * aux[aux_off + k], inv_t the row's gk_rms_inv over `cols` (eps)
//   2  SiLU-gated: gk_gate_act(x[k], 0) * x[k + aux_off]   (gate and up halves of one row)
//   3  GELU-gated: gk_gate_act(x[k], 1) * x[k + aux_off]
// Rounding as the separate kernels (rmsnorm, eltwise_glu_*) do it. Both templates name their
// buffers x and aux and their arguments in_mode, aux_off and eps.

#define GK_MM_IN_PLAIN 0u
#define GK_MM_IN_RMSNORM 1u

// out = input value k (a column index) of the token row starting at x[xt]; inv is the row's
// RMSNorm scale (read only in mode 1).
#define GK_MM_INPUT(out, xt, k, inv) \
    { \
        float gk_in_ = x[(xt) + (k)]; \
        if (args.in_mode == GK_MM_IN_RMSNORM) \
            gk_in_ = (gk_in_ * (inv)) * aux[args.aux_off + (k)]; \
        else if (args.in_mode > GK_MM_IN_RMSNORM) \
            gk_in_ = gk_gate_act(gk_in_, args.in_mode - 2u) * x[(xt) + (k) + args.aux_off]; \
        out = gk_in_; \
    }

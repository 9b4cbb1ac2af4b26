// The input stage shared by matvec.gk.h and matmul.gk.h: what the product reads as x, so the
// step before a projection needs no pass of its own. Picked by args.in_mode:
//   0  x as it is
//   1  RMSNorm: (x * inv_t) * aux[aux_off + k], inv_t the row's gk_rms_inv over `cols` (eps)
//   2  SiLU-gated: gk_gate_act(x[k], 0) * x[k + aux_off]   (gate and up halves of one row)
//   3  GELU-gated: gk_gate_act(x[k], 1) * x[k + aux_off]
//   4  SiLU: x / (1 + exp(-x))                           (as rows.gk.h's silu)
//   5  GELU, tanh form: 0.5 x (1 + tanh(...))             (as rows.gk.h's gelu)
//   6  SiLU of a sum: silu(x[k] + aux[aux_off + k])       (Pocket's flow conditioning plus a
//      time embedding)
//   8..11  LayerNorm (x - mean_t) * inv_t, the row's mean and biased variance over `cols` (eps),
//      as layernorm.gk.h; + 1: affine (* aux[wb + k] + aux[wb + cols + k]); + 2: adaLN
//      modulation (* (1 + aux[md + cols + k]) + aux[md + k]). aux_off packs the two element
//      offsets: wb = aux_off & 0xffff, md = aux_off >> 16.
// Rounding as the separate kernels (rmsnorm, eltwise_glu_*, rows, layernorm) do it; the row
// statistics are sums in another order than the separate kernels' (a few ulp). Both templates
// name their buffers x and aux and their arguments in_mode, aux_off and eps.
// The LayerNorm modes need the row's mean as well as inv_t: matvec.gk.h computes both; the tiled
// stamps compute only the RMSNorm scale (the host uses modes 8..11 for single rows only).

#define GK_MM_IN_PLAIN 0u
#define GK_MM_IN_RMSNORM 1u
#define GK_MM_IN_SILU 4u
#define GK_MM_IN_GELU 5u
#define GK_MM_IN_SILU_SUM 6u
#define GK_MM_IN_LAYERNORM 8u

#define GK_MM_GATED(mode) ((mode) == 2u || (mode) == 3u)
#define GK_MM_LAYERNORM(mode) ((mode) >= GK_MM_IN_LAYERNORM)

#ifdef GK_BODY
// pocket::gelu_tanh as the CPU writes it: c * (v + ((0.044715 * v) * v) * v), then
// 0.5 * v * (1 + tanh).
GK_INLINE float gk_gelu_tanh(float v) {
    GK_PRECISE float cube = 0.044715f * v * v * v;
    GK_PRECISE float th = gk_tanh(0.7978845608028654f * (v + cube));
    GK_PRECISE float r = 0.5f * v * (1.0f + th);
    return r;
}
#endif

// v = the activation stage (modes 2..6) of value v, column k of the token row at x[xt]; other
// modes leave v as it is.
#define GK_MM_ACTIVATE(v, xt, k) \
    { \
        if (GK_MM_GATED(args.in_mode)) \
            v = gk_gate_act(v, args.in_mode - 2u) * x[(xt) + (k) + args.aux_off]; \
        else if (args.in_mode == GK_MM_IN_SILU) \
            v = gk_gate_act(v, 0u); \
        else if (args.in_mode == GK_MM_IN_GELU) \
            v = gk_gelu_tanh(v); \
        else if (args.in_mode == GK_MM_IN_SILU_SUM) { \
            GK_PRECISE float gk_sum_ = v + aux[args.aux_off + (k)]; \
            v = gk_gate_act(gk_sum_, 0u); \
        } \
    }

// v = the LayerNorm stage (modes 8..11) of value v at column k, given the row's mean and inv.
#define GK_MM_LAYERNORM_APPLY(v, k, mean, inv) \
    { \
        GK_PRECISE float gk_o_ = (v - (mean)) * (inv); \
        if ((args.in_mode & 1u) != 0u) { \
            uint gk_wb_ = args.aux_off & 0xffffu; \
            gk_o_ = gk_o_ * aux[gk_wb_ + (k)] + aux[gk_wb_ + args.cols + (k)]; \
        } \
        if ((args.in_mode & 2u) != 0u) { \
            uint gk_md_ = args.aux_off >> 16u; \
            GK_PRECISE float gk_sc_ = gk_o_ * (1.0f + aux[gk_md_ + args.cols + (k)]); \
            gk_o_ = gk_sc_ + aux[gk_md_ + (k)]; \
        } \
        v = gk_o_; \
    }

// out = input value k (a column index) of the token row starting at x[xt]; mean and inv are the
// row's statistics (inv read in modes 1 and 8..11, mean in 8..11).
#define GK_MM_INPUT_STATS(out, xt, k, mean, inv) \
    { \
        float gk_in_ = x[(xt) + (k)]; \
        if (args.in_mode == GK_MM_IN_RMSNORM) \
            gk_in_ = (gk_in_ * (inv)) * aux[args.aux_off + (k)]; \
        else if (GK_MM_LAYERNORM(args.in_mode)) \
            GK_MM_LAYERNORM_APPLY(gk_in_, k, mean, inv) \
        else \
            GK_MM_ACTIVATE(gk_in_, xt, k) \
        out = gk_in_; \
    }
// The stage without a mean: every mode but 8..11.
#define GK_MM_INPUT(out, xt, k, inv) GK_MM_INPUT_STATS(out, xt, k, 0.0f, inv)

// mean and inv of the LayerNorm modes for the token row at x[xt], over a workgroup of GK_WG
// threads (thread `tid` takes columns tid, tid + WG, ...) through the shared array `part`
// (GK_REDUCE_PARTS(GK_WG) floats, both slots), as layernorm.gk.h: the mean, then the centred
// sum of squares.
#define GK_MM_LAYERNORM_STATS_WG(mean, inv, xt, tid, part) \
    { \
        float gk_s_ = 0.0f; \
        for (uint gk_k_ = (tid); gk_k_ < args.cols; gk_k_ += GK_WG) gk_s_ += x[(xt) + gk_k_]; \
        float gk_tot_; \
        GK_WG_SUM_INTO(gk_tot_, gk_s_, part, 0u) \
        GK_PRECISE float gk_mean_ = gk_div(gk_tot_, float(args.cols)); \
        float gk_q_ = 0.0f; \
        for (uint gk_k_ = (tid); gk_k_ < args.cols; gk_k_ += GK_WG) { \
            GK_PRECISE float gk_d_ = x[(xt) + gk_k_] - gk_mean_; \
            gk_q_ = gk_fma(gk_d_, gk_d_, gk_q_); \
        } \
        float gk_qt_; \
        GK_WG_SUM_INTO(gk_qt_, gk_q_, part, 1u) \
        mean = gk_mean_; \
        inv = gk_rms_inv(gk_qt_, args.cols, args.eps); \
    }

// The output stage of matvec.gk.h, by args.accumulate:
//   0  y = s;  1  y += s
//   2  the gated residual of Pocket's flow blocks: y += gate_r * (s + bias_r), bias_r at
//      aux[(aux_off & 0xffff) + r], gate_r at aux[(aux_off >> 16) + r], r the row within the
//      dispatch's split; rounded as a bias add and then add_scale.gk.h. It reads aux_off, so it
//      goes with the input modes that do not (0, 4, 5). The tiled stamps know 0 and 1 only.
#define GK_MM_ACCUMULATE_GATED 2u
#define GK_MM_STORE(yi, r, s) \
    { \
        if (args.accumulate == GK_MM_ACCUMULATE_GATED) { \
            GK_PRECISE float gk_h_ = (s) + aux[(args.aux_off & 0xffffu) + (r)]; \
            GK_PRECISE float gk_v_ = gk_h_ * aux[(args.aux_off >> 16u) + (r)]; \
            GK_PRECISE float gk_y_ = y[yi] + gk_v_; \
            y[yi] = gk_y_; \
        } else { \
            y[yi] = args.accumulate != 0u ? y[yi] + (s) : (s); \
        } \
    }

// tok_inv[t] = the RMSNorm scale of token row tok0 + t, t < n_tile (mode 1 only; zero-sum rows
// past n_tok): subgroup g takes rows g, g + n_sg, ..., its lanes reading consecutive columns
// (coalesced) and reducing in registers. Ends with a barrier. For the tiled templates.
#define GK_MM_TILE_RMS_INV(tok_inv, tok0, n_tile) \
    { \
        if (args.in_mode == GK_MM_IN_RMSNORM) { \
            for (uint gk_t_ = GK_SUBGROUP_ID; gk_t_ < (n_tile); gk_t_ += GK_NUM_SUBGROUPS) { \
                float gk_ss_ = 0.0f; \
                if ((tok0) + gk_t_ < args.n_tok) { \
                    uint gk_xt_ = args.x_off + ((tok0) + gk_t_) * args.x_stride; \
                    for (uint gk_k_ = GK_LANE; gk_k_ < args.cols; gk_k_ += GK_SUBGROUP_SIZE) \
                        gk_ss_ = gk_fma(x[gk_xt_ + gk_k_], x[gk_xt_ + gk_k_], gk_ss_); \
                } \
                float gk_total_ = gk_subgroup_add(gk_ss_); \
                if (GK_LANE == 0u) tok_inv[gk_t_] = gk_rms_inv(gk_total_, args.cols, args.eps); \
            } \
            GK_BARRIER(); \
        } \
    }

// Dense 1-D convolutions (groups 1) on cooperative matrices (VK_KHR_cooperative_matrix), plain
// and transposed, as implicit GEMMs with their operands rounded to float16 and summed in float32.
//
// phases 1, a plain convolution (what conv1d.gk.h computes): for output column t < l_out,
//   v[o, t] = sum_{k < taps} sum_{i < c_in} W[o, k, i] * act(xin(i, t * stride + k * dilation
//                                                                     - pad_left))   (+ bias[o])
// with xin, act (in_act 0 none, 1 LeakyReLU(slope)) and in_up as conv1d.gk.h defines them.
// phases S > 1, a transposed convolution of stride S, pad_left P and S * taps taps (what
// conv_tr1d.gk.h computes, dense, dilation 1): its output position p = m S + r - P (0 <= p <
// l_out) sums only the taps r + S j of its phase r, v[o, p] = sum_{j < taps} sum_i
// Wt[i, o, r + S j] * act(x(i, m - j)), a plain convolution over x with taps reversed. Phase r
// is workgroup row z = r, with its own panel; outputs of one phase are S columns apart.
// The row of channel o holds y_row columns (l_out, or l_out + shift), column j = p + shift, and
// with shift 1 (and l_out of 2 or more) column 0 takes p = 1 as well (p = -1 mirrored: the generator's
// ReflectionPad1d((1, 0)), as conv_tr1d.gk.h). Then y[y_off + o * y_row + j] =
//   out_mode 0: v     1: v + y (a residual sum)     2: (v + y) / div (a residual block's shortcut)
//
// Rows of the GEMM are output channels, columns output positions, and its K axis is (tap, input
// channel): each phase's weights are one float16 panel [c_out][taps][ci_pad] (input channels
// padded with zeros to ci_pad, a multiple of GK_CCM_BK; the phases' panels one after another),
// written once at load (gpu/conv.h). A step of GK_CCM_BK columns is one tap over GK_CCM_BK
// input channels, and its B tile is that tap's input window read straight from the
// channel-major float32 rows (no im2col buffer).
//
// Dispatch: gx = ceil(columns of a phase / GK_CCM_TILE_T), gy = ceil(c_out / GK_CCM_TILE_O),
// gz = phases. A workgroup of four subgroups computes a 64-channel x 64-column tile as a 2 x 2
// grid of 32 x 32 parts, each two by two 16 x 16 accumulators. Per step every thread reads two
// 16-byte runs of weights and four runs of four inputs into registers; the next step's reads
// are issued before this step's products, as in matmul_coopmat.gk.h. Tiles past the last channel
// or column are zero-filled. The accumulators leave through a 16 x 16 float staging area per
// subgroup, row-major, so sixteen lanes write sixteen columns of one channel.
// Workgroup memory: 64 * 40 * 2 + 32 * 72 * 2 + 4 * 256 * 4 bytes = 13.5 KiB.
// Vulkan only (shaders/stamp.py compiles it with the cooperative-matrix glslang); devices
// without cooperative matrices, and Metal, run conv1d_tiled and conv_tr1d.
#include "../gk/gk.h"
#include "vocoder_math.h"

#define GK_CCM_TILE_O 64u   // output channels a workgroup (the host mirrors it: gpu/conv.cpp)
#define GK_CCM_TILE_T 64u   // output columns a workgroup
#define GK_CCM_BK 32u       // K columns a step: ci_pad is a multiple of it
// Row strides of w_s and x_s in half4 units: the row and eight halves of padding, so that the
// matrix loads of consecutive rows fall in distinct banks.
#define GK_CCM_WS4 ((GK_CCM_BK + 8u) / 4u)
#define GK_CCM_XS4 ((GK_CCM_TILE_T + 8u) / 4u)
#define GK_CCM_WRUNS (GK_CCM_TILE_O * GK_CCM_BK / 8u / GK_WG)   // uint4 weight runs a thread
#define GK_CCM_XRUNS (GK_CCM_BK * GK_CCM_TILE_T / 4u / GK_WG)   // runs of four inputs a thread
#define GK_WG 128

#define GK_BUFFERS(B) B(0, ro, float, x) B(1, ro, uint4, w) B(2, ro, float, bias) \
    B(3, rw, float, y)
#define GK_ARGS(A) A(uint, c_in) A(uint, c_out) A(uint, l_in) A(uint, l_out) A(uint, taps) \
    A(uint, stride) A(uint, dilation) A(uint, pad_left) A(uint, ci_pad) A(uint, x_off) \
    A(uint, y_off) A(uint, has_bias) A(uint, in_act) A(float, slope) A(uint, out_mode) \
    A(float, div) A(uint, in_up) A(uint, phases) A(uint, y_row) A(uint, shift)
#define GK_SHARED(S) S(half4, w_s, GK_CCM_TILE_O * GK_CCM_WS4) \
                     S(half4, x_s, GK_CCM_BK * GK_CCM_XS4) \
                     S(float, st_s, 4u * 256u)

#ifdef GK_BODY
// The step at K column kb (tap kb / ci_pad, input channels i0 = kb % ci_pad ..) into registers:
// wr[v] eight weights of one channel, xr[j] four consecutive columns of one input channel.
#define GK_CCM_FETCH(kb) \
    { \
        uint tap_ = (kb) / args.ci_pad; \
        uint i0_ = (kb) - tap_ * args.ci_pad; \
        GK_UNROLL for (uint v_ = 0u; v_ < GK_CCM_WRUNS; ++v_) { \
            uint s_ = tid + v_ * GK_WG; \
            uint o_ = o0 + s_ / (GK_CCM_BK / 8u); \
            wr[v_] = o_ < args.c_out \
                ? w[(w_base + o_ * k_cols + (kb)) / 8u + s_ % (GK_CCM_BK / 8u)] \
                : uint4(0u, 0u, 0u, 0u); \
        } \
        int tap_off_ = int(tap_ * dil) - pad_eff; \
        GK_UNROLL for (uint j_ = 0u; j_ < GK_CCM_XRUNS; ++j_) { \
            uint q_ = tid + j_ * GK_WG; \
            uint ci_ = i0_ + q_ / (GK_CCM_TILE_T / 4u); \
            uint tc_ = t0 + 4u * (q_ % (GK_CCM_TILE_T / 4u)); \
            float xv_[4]; \
            GK_UNROLL for (uint c_ = 0u; c_ < 4u; ++c_) { \
                int p_ = int((tc_ + c_) * step_in) + tap_off_; \
                float v_ = 0.0f; \
                if (ci_ < args.c_in && tc_ + c_ < n_out && p_ >= 0 && p_ < span) { \
                    v_ = x[args.x_off + ci_ * args.l_in + uint(p_) / args.in_up]; \
                    if (args.in_act == 1u) v_ = gk_leaky(v_, args.slope); \
                } \
                xv_[c_] = v_; \
            } \
            xr[j_] = gk_half4(gk_float4(xv_[0], xv_[1], xv_[2], xv_[3])); \
        } \
    }

#define GK_CCM_STORE() \
    { \
        GK_UNROLL for (uint v_ = 0u; v_ < GK_CCM_WRUNS; ++v_) { \
            uint s_ = tid + v_ * GK_WG; \
            uint b_ = (s_ / (GK_CCM_BK / 8u)) * GK_CCM_WS4 + 2u * (s_ % (GK_CCM_BK / 8u)); \
            w_s[b_] = half4(unpackFloat2x16(wr[v_].x), unpackFloat2x16(wr[v_].y)); \
            w_s[b_ + 1u] = half4(unpackFloat2x16(wr[v_].z), unpackFloat2x16(wr[v_].w)); \
        } \
        GK_UNROLL for (uint j_ = 0u; j_ < GK_CCM_XRUNS; ++j_) { \
            uint q_ = tid + j_ * GK_WG; \
            x_s[(q_ / (GK_CCM_TILE_T / 4u)) * GK_CCM_XS4 + q_ % (GK_CCM_TILE_T / 4u)] = xr[j_]; \
        } \
    }

// y[yi] (out_mode) v.
#define GK_CCM_PUT(yi, v) \
    { \
        uint i_ = (yi); \
        GK_PRECISE float r_ = (v); \
        if (args.out_mode == 1u) r_ = r_ + y[i_]; \
        else if (args.out_mode == 2u) r_ = gk_div(r_ + y[i_], args.div); \
        y[i_] = r_; \
    }

GK_KERNEL(conv1d_coopmat, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint tid = GK_LOCAL_ID;
    uint t0 = GK_GROUP_ID.x * GK_CCM_TILE_T;
    uint o0 = GK_GROUP_ID.y * GK_CCM_TILE_O;
    uint k_cols = args.taps * args.ci_pad;
    int span = int(args.l_in * args.in_up);
    uint sg = GK_SUBGROUP_ID;
    uint sg_o = (sg % 2u) * 32u;
    uint sg_t = (sg / 2u) * 32u;

    // This workgroup's phase: its columns (n_out), where column t's taps read (t step_in +
    // tap dil - pad_eff), where its outputs go (col0 + t col_step) and its panel (w_base).
    uint n_out = args.l_out, step_in = args.stride, dil = args.dilation;
    int pad_eff = int(args.pad_left);
    uint col0 = 0u, col_step = 1u;
    uint w_base = 0u;
    if (args.phases > 1u) {
        uint S = args.phases;
        uint r = GK_GROUP_ID.z;
        uint m0 = r <= args.pad_left ? (args.pad_left - r + S - 1u) / S : 0u;
        uint m_end = (args.l_out + args.pad_left - r + S - 1u) / S;
        n_out = m_end > m0 ? m_end - m0 : 0u;
        step_in = 1u;
        dil = 1u;
        pad_eff = int(args.taps) - 1 - int(m0);
        col0 = m0 * S + r - args.pad_left + args.shift;
        col_step = S;
        w_base = r * args.c_out * k_cols;
    }
    if (t0 >= n_out) return;   // the whole workgroup: a phase with fewer columns than the grid

    // acc[2a + b]: channels sg_o + 16a, columns sg_t + 16b.
    GK_CM_ACC acc[4];
    GK_UNROLL for (uint i = 0u; i < 4u; ++i) acc[i] = gk_cm_zero();
    uint4 wr[GK_CCM_WRUNS];
    half4 xr[GK_CCM_XRUNS];
    GK_CCM_FETCH(0u)
    for (uint kb = 0u; kb < k_cols; kb += GK_CCM_BK) {
        GK_CCM_STORE()
        GK_BARRIER();
        if (kb + GK_CCM_BK < k_cols) GK_CCM_FETCH(kb + GK_CCM_BK)
        GK_UNROLL for (uint kk = 0u; kk < GK_CCM_BK / 16u; ++kk) {
            GK_CM_A a[2];
            GK_CM_B b[2];
            GK_UNROLL for (uint i = 0u; i < 2u; ++i)
                gk_cm_load_row_major(a[i], w_s, (sg_o + 16u * i) * GK_CCM_WS4 + 4u * kk,
                                     GK_CCM_WS4);
            GK_UNROLL for (uint j = 0u; j < 2u; ++j)
                gk_cm_load_row_major(b[j], x_s, 16u * kk * GK_CCM_XS4 + (sg_t + 16u * j) / 4u,
                                     GK_CCM_XS4);
            GK_UNROLL for (uint i = 0u; i < 2u; ++i)
                GK_UNROLL for (uint j = 0u; j < 2u; ++j)
                    acc[2u * i + j] = gk_cm_mul_add(a[i], b[j], acc[2u * i + j]);
        }
        GK_BARRIER();
    }

    uint st0 = sg * 256u;
    GK_UNROLL for (uint i = 0u; i < 4u; ++i) {
        gk_cm_store_row_major(acc[i], st_s, st0, 16u);
        GK_SUBGROUP_BARRIER();
        uint ob = o0 + sg_o + 16u * (i / 2u);
        uint tb = t0 + sg_t + 16u * (i % 2u);
        for (uint e = GK_LANE; e < 256u; e += GK_SUBGROUP_SIZE) {
            uint o = ob + e / 16u;
            uint t = tb + e % 16u;
            if (o < args.c_out && t < n_out) {
                GK_PRECISE float v = st_s[st0 + e];
                if (args.has_bias != 0u) v = v + bias[o];
                uint col = col0 + t * col_step;
                uint row = args.y_off + o * args.y_row;
                GK_CCM_PUT(row + col, v)
                if (args.shift == 1u && col == 2u) GK_CCM_PUT(row, v)   // p = -1 mirrors p = 1
            }
        }
        GK_SUBGROUP_BARRIER();
    }
}
GK_KERNEL_END
#endif

// Decode-time matrix-vector product against a GGUF weight matrix, for a few token rows:
//   y[y_off + t*y_stride + r] (= or +=) sum_k W[r, k] * x[x_off + t*x_stride + k]
// for r < rows, t < n_tok (at most GK_MATVEC_MAX_TOK). W is `rows` rows of `cols` columns in
// raw GGUF blocks (row r at byte r * row_bytes); accumulate != 0 adds to y (the residual add;
// mm_input.h's GK_MM_STORE: 2 a gated one).
// One stamp per format (GK_FMT_<NAME>, see gk/formats.h). in_mode transforms x as it is read
// (mm_input.h: an RMSNorm or a gated activation fused in front of the product).
//
// Dispatch: gx = ceil(rows / GK_MATVEC_ROWS) (tall stamps: GK_MATVEC_TALL_ROWS), gy = gz = 1.
// A workgroup owns GK_MATVEC_ROWS rows and walks them in chunks of GK_MATVEC_CHUNK columns. Per
// chunk it first copies x into workgroup memory (consecutive threads, consecutive words: one
// coalesced read), then each thread decodes its 16-element unit of each row in registers and
// multiplies it with x from workgroup memory. Block formats give thread i unit i of the chunk
// (a unit's bytes are contiguous, and neighbouring threads read neighbouring bytes); Q4_K and
// Q5_K read their units with 16-byte loads (GK_DECODE16_WIDE), the others in words. F32 and F16
// rows that start 16-byte aligned give thread i the 16-byte pieces i, i + WG, ... of the chunk,
// other widths the elements i, i + WG, ...: every load instruction reads consecutive memory.
// 16-byte loads matter on GPUs such as the H200 (F16 rows streamed 2.5x faster than with word
// loads in the same run). Partial sums are reduced per subgroup, then across subgroups through
// workgroup memory. Token rows are taken one after the other: decode (n_tok = 1) is memory bound
// and reads each weight byte once; a further token row reads the workgroup's rows again, mostly
// from cache. (Holding all tokens' sums at once, 4 x 8 registers, made lavapipe's compile of each
// stamp several seconds long.)
//
// The subgroup stamps (GK_MATVEC_SUB=R, R = 1, 2 or 4 rows a subgroup, block formats; dispatch
// gx = ceil(rows / GK_MATVEC_SUB_ROWS) for R = 1, ceil(rows / GK_MATVEC_SUB2_ROWS) for R = 2,
// ceil(rows / GK_MATVEC_SUB4_ROWS) for R = 4, at most 65535: workgroups stride over the rest) use no workgroup memory and no barrier: each
// subgroup owns R whole rows at a time, its lanes take the units lane, lane + SG, ...
// of a row, read the token row straight from memory with 16-byte loads (it is small and stays in
// cache), form the RMSNorm scale themselves with one subgroup sum, and finish a row with another.
// A decode step's matrices are small (a 576 x 576 Q4_1 matrix is 207 kB, 50 ns of the H200's
// bandwidth), so what a dispatch costs is its chain of dependent steps: this form's chain is the
// weight loads (issued first, before the token row is read), one reduction for the norm and one
// for the row. The host takes it for input modes 0-6 when the token row, its stride and the
// offsets the input stage reads are multiples of 4 elements.
#include "../gk/gk.h"
#include "mm_input.h"

#ifndef GK_MATVEC_TALL
#define GK_MATVEC_TALL 0
#endif
// Rows per workgroup (the host sizes the dispatch with them): GK_MATVEC_ROWS, or for the tall
// stamps (GK_MATVEC_TALL=1: matrices with many narrow rows, such as an output projection over
// a large vocabulary) GK_MATVEC_TALL_ROWS.
#define GK_MATVEC_ROWS 4u
#define GK_MATVEC_TALL_ROWS 64u
// Rows a subgroup of the tall stamps sums at once, so that many weight loads are in flight: one
// row at a time left Gemma-3's 262144-row Q8_0 head at 0.9 TB/s on an H200 (four: 1.1 TB/s in
// a decode step).
#define GK_MATVEC_TALL_ILP 4u
#ifndef GK_MATVEC_SUB
#define GK_MATVEC_SUB 0
#endif
// Rows per workgroup of the subgroup stamps (GK_MATVEC_SUB=R: R rows a subgroup): 4 R, so that on
// 32-wide subgroups (the H200) each subgroup has its R rows and a decode step's small matrices
// spread over many workgroups.
#define GK_MATVEC_SUB_ROWS 4u
#define GK_MATVEC_SUB2_ROWS 8u
// Four rows a subgroup (GK_MATVEC_SUB=4) for wide rows: each input value a lane forms (16-byte
// loads of x and of the norm weight, strided across the lanes) serves four rows' weights, so the
// loads of the token row no longer outnumber the weights' (one row a subgroup left a 1B model's
// 2048-wide Q8_0 products at 0.3-0.5 TB/s on an H200). Only the first unit of each row is
// decoded ahead of the token row.
#define GK_MATVEC_SUB4_ROWS 16u
// Rows per workgroup of the split stamps (matvec_split4_<fmt>: GK_MATVEC_SUB=4,
// GK_MATVEC_SPLIT=1): the workgroup's four rows.
#define GK_MATVEC_SPLIT4_ROWS 4u
// GK_MATVEC_SPLIT=1 (with GK_MATVEC_SUB=R: the split stamps): the workgroup's subgroups share
// its R rows and split their units (thread i of the workgroup takes units i, i + WG, ...); the
// RMSNorm sum and each row's sum then cross the subgroups through workgroup memory. Wide rows
// of few rows need it: with one subgroup a row group, a 3072 x 2048 Q8_0 product made 4-8
// subgroups an SM on an H200, each walking whole rows alone (0.33 TB/s).
#ifndef GK_MATVEC_SPLIT
#define GK_MATVEC_SPLIT 0
#endif
#if GK_MATVEC_SUB
#define GK_SUB_R GK_MATVEC_SUB
#define GK_MATVEC_SUB_PREFETCH (4u / GK_SUB_R)
#if GK_MATVEC_SPLIT
#define GK_SUB_WG_ROWS GK_SUB_R
#define GK_SUB_UNIT0 (GK_SUBGROUP_ID * GK_SUBGROUP_SIZE + GK_LANE)
#define GK_SUB_UNIT_STEP (GK_NUM_SUBGROUPS * GK_SUBGROUP_SIZE)
#else
#define GK_SUB_WG_ROWS (GK_MATVEC_SUB_ROWS * GK_SUB_R)
#define GK_SUB_UNIT0 GK_LANE
#define GK_SUB_UNIT_STEP GK_SUBGROUP_SIZE
#endif
#endif
// Units a lane of the subgroup stamps decodes, for each of its rows, before reading the token
// row: all of a row up to 2048 columns (one row a subgroup) or 1024 (two) on 32-wide subgroups,
// so the weights' memory latency hides behind the token row's. Further units are decoded as
// the row is summed. (64 floats of registers either way.) The host takes two rows a subgroup
// only for rows up to GK_MATVEC_SUB_PREFETCH_COLS_2 columns.
#define GK_MATVEC_SUB_PREFETCH_COLS_2 1024u
#define GK_MATVEC_MAX_TOK 8u
#define GK_WG 128
// Columns staged at once: GK_WG threads x GK_UNIT (a literal, for the host's use too).
#define GK_MATVEC_CHUNK 2048u
// Narrow rows have fewer than WG units, so their ROWS * units pairs take at most ROWS passes.
#define GK_MATVEC_NARROW_PASSES GK_MATVEC_ROWS
// x in workgroup memory, one pad word after every 16 so that a thread reading its own unit's 16
// values (stride 17 between threads) hits distinct banks.
#define GK_XS(e) ((e) + ((e) >> 4u))

#define GK_BUFFERS(B) B(0, ro, uint, w) B(1, ro, float, x) B(2, rw, float, y) B(3, ro, float, aux)
#define GK_ARGS(A) A(uint, rows) A(uint, cols) A(uint, n_tok) A(uint, x_off) A(uint, x_stride) \
                   A(uint, y_off) A(uint, y_stride) A(uint, accumulate) A(uint, in_mode) \
                   A(uint, aux_off) A(float, eps)
#if GK_MATVEC_SUB && GK_MATVEC_SPLIT
#define GK_SHARED(S) S(float, part, GK_REDUCE_PARTS(GK_WG)) \
                     S(float, rsum, (GK_WG / GK_MIN_SUBGROUP) * GK_MATVEC_SUB)
#elif GK_MATVEC_SUB
#define GK_SHARED(S)
#else
#define GK_SHARED(S) S(float, xs, GK_MATVEC_CHUNK + GK_MATVEC_CHUNK / 16u) \
                     S(float, part, (GK_WG / GK_MIN_SUBGROUP) * GK_MATVEC_ROWS)
#endif

// Elements per 16-byte load of F32 / F16 rows.
#if defined(GK_FMT_F32)
#define GK_WIDE_ELEMS 4u
#else
#define GK_WIDE_ELEMS 8u
#endif

#ifdef GK_BODY
#if GK_WG * 16 != 2048
#error "GK_MATVEC_CHUNK must equal GK_WG * GK_UNIT"
#endif
// s = the dot of unit u (part p) of weight row `row` with xv[16] (the matching x values).
#if defined(GK_FMT_HAS_WIDE)
#define GK_MATVEC_DECODE(wv, blk_b, p) GK_DECODE16_WIDE(wv, w4, blk_b, p)
#else
// Blocks whose fields are not 16-byte aligned are read in words, in place. (Staging them
// through workgroup memory with 16-byte loads measured slower on an H200.)
#define GK_MATVEC_DECODE(wv, blk_b, p) GK_DECODE16(wv, w, blk_b, p, 16u)
#endif
#define GK_MATVEC_UNIT_DOT(s, row, u, p, xv) \
    { \
        float wv[16]; \
        uint blk_b_ = GK_FMT_UNIT_BLOCK_BYTE((row) * row_bytes, u); \
        GK_MATVEC_DECODE(wv, blk_b_, p) \
        s = 0.0f; \
        GK_UNROLL for (uint i_ = 0u; i_ < 16u; ++i_) s = gk_fma(wv[i_], xv[i_], s); \
    }
// The LayerNorm modes on the token row's values xr (elements tid + j * WG, zero past cols):
// the mean, then the centred sum of squares (padding left out), both reduced over the
// workgroup, as GK_MM_LAYERNORM_STATS_WG.
#define GK_MATVEC_LAYERNORM_REGS(xr) \
    { \
        float s1 = 0.0f; \
        GK_UNROLL for (uint j = 0u; j < GK_UNIT; ++j) s1 += xr[j]; \
        float total; \
        GK_WG_SUM_INTO(total, s1, part, 0u) \
        GK_PRECISE float mean = gk_div(total, float(args.cols)); \
        float q = 0.0f; \
        GK_UNROLL for (uint j = 0u; j < GK_UNIT; ++j) { \
            GK_PRECISE float d = tid + j * GK_WG < args.cols ? xr[j] - mean : 0.0f; \
            q = gk_fma(d, d, q); \
        } \
        float q_total; \
        GK_WG_SUM_INTO(q_total, q, part, 1u) \
        float li = gk_rms_inv(q_total, args.cols, args.eps); \
        GK_UNROLL for (uint j = 0u; j < GK_UNIT; ++j) { \
            uint e = tid + j * GK_WG; \
            uint ec = gk_min(e, args.cols - 1u); \
            float v = xr[j]; \
            GK_MM_LAYERNORM_APPLY(v, ec, mean, li) \
            xr[j] = e < args.cols ? v : 0.0f; \
        } \
    }
// The token row in one round of loads (elements tid + j * WG, clamped), its norm
// from registers (the same sum order as the wide path's), then into xs.
#define GK_MATVEC_STAGE_NARROW(xt) \
    { \
        float xr[GK_UNIT]; \
        float nw[GK_UNIT]; \
        float ss = 0.0f; \
        GK_UNROLL for (uint j = 0u; j < GK_UNIT; ++j) { \
            uint e = tid + j * GK_WG; \
            uint ec = gk_min(e, args.cols - 1u); \
            float v = x[xt + ec]; \
            GK_MM_ACTIVATE(v, xt, ec) \
            xr[j] = e < args.cols ? v : 0.0f; \
            ss = gk_fma(xr[j], xr[j], ss); \
        } \
        float inv = 1.0f; \
        if (args.in_mode == GK_MM_IN_RMSNORM) { \
            GK_UNROLL for (uint j = 0u; j < GK_UNIT; ++j) \
                nw[j] = aux[args.aux_off + gk_min(tid + j * GK_WG, args.cols - 1u)]; \
            float total; \
            GK_WG_SUM_INTO(total, ss, part, 0u) \
            inv = gk_rms_inv(total, args.cols, args.eps); \
            GK_UNROLL for (uint j = 0u; j < GK_UNIT; ++j) { \
                GK_PRECISE float xn = xr[j] * inv; \
                xr[j] = xn * nw[j]; \
            } \
        } else if (GK_MM_LAYERNORM(args.in_mode)) { \
            GK_MATVEC_LAYERNORM_REGS(xr) \
        } \
        GK_UNROLL for (uint j = 0u; j < GK_UNIT; ++j) xs[GK_XS(tid + j * GK_WG)] = xr[j]; \
        GK_BARRIER(); \
    }
#if GK_MATVEC_SUB
// Four floats from a 16-byte view at element e (a multiple of 4) into v[o..o+3].
#define GK_SUB_LOAD4(v, o, view, e) \
    { \
        uint4 gk_q_ = view[(e) >> 2u]; \
        v[(o)] = gk_bits_to_float(gk_q_.x); \
        v[(o) + 1u] = gk_bits_to_float(gk_q_.y); \
        v[(o) + 2u] = gk_bits_to_float(gk_q_.z); \
        v[(o) + 3u] = gk_bits_to_float(gk_q_.w); \
    }
// The first elements of the two runs of 8 that unit u's 16 values are (GK_FMT_ELEM keeps its
// outputs 0-7 and 8-15 consecutive): elements e0 + i and e1 + i - 8.
#define GK_SUB_RUNS(e0, e1, u) \
    uint e0 = ((u) / GK_FMT_UPB) * GK_FMT_BS + GK_FMT_ELEM(GK_FMT_UNIT_PART(u), 0u); \
    uint e1 = ((u) / GK_FMT_UPB) * GK_FMT_BS + GK_FMT_ELEM(GK_FMT_UNIT_PART(u), 8u);
// v[0..15] = the input values of unit u of the token row at x[xt] after the activation stage
// (modes 2-6), before any norm.
#define GK_SUB_UNIT_INPUT(v, xt, u) \
    { \
        GK_SUB_RUNS(gk_e0_, gk_e1_, u) \
        GK_SUB_LOAD4(v, 0u, x4, (xt) + gk_e0_) \
        GK_SUB_LOAD4(v, 4u, x4, (xt) + gk_e0_ + 4u) \
        GK_SUB_LOAD4(v, 8u, x4, (xt) + gk_e1_) \
        GK_SUB_LOAD4(v, 12u, x4, (xt) + gk_e1_ + 4u) \
        if (GK_MM_GATED(args.in_mode)) { \
            float gk_up_[16]; \
            GK_SUB_LOAD4(gk_up_, 0u, x4, (xt) + args.aux_off + gk_e0_) \
            GK_SUB_LOAD4(gk_up_, 4u, x4, (xt) + args.aux_off + gk_e0_ + 4u) \
            GK_SUB_LOAD4(gk_up_, 8u, x4, (xt) + args.aux_off + gk_e1_) \
            GK_SUB_LOAD4(gk_up_, 12u, x4, (xt) + args.aux_off + gk_e1_ + 4u) \
            GK_UNROLL for (uint gk_i_ = 0u; gk_i_ < 16u; ++gk_i_) \
                v[gk_i_] = gk_gate_act(v[gk_i_], args.in_mode - 2u) * gk_up_[gk_i_]; \
        } else if (args.in_mode != GK_MM_IN_PLAIN && args.in_mode != GK_MM_IN_RMSNORM) { \
            GK_UNROLL for (uint gk_i_ = 0u; gk_i_ < 16u; ++gk_i_) { \
                uint gk_k_ = gk_i_ < 8u ? gk_e0_ + gk_i_ : gk_e1_ + gk_i_ - 8u; \
                GK_MM_ACTIVATE(v[gk_i_], xt, gk_k_) \
            } \
        } \
    }
// xv[0..15] = unit u's input values as the product reads them: GK_SUB_UNIT_INPUT, then the
// RMSNorm with the row's scale inv, rounded as the other paths ((x * inv) * weight).
#define GK_SUB_UNIT_XIN(xv, xt, u, inv) \
    { \
        GK_SUB_UNIT_INPUT(xv, xt, u) \
        if (args.in_mode == GK_MM_IN_RMSNORM) { \
            GK_SUB_RUNS(gk_n0_, gk_n1_, u) \
            float gk_g_[16]; \
            GK_SUB_LOAD4(gk_g_, 0u, aux4, args.aux_off + gk_n0_) \
            GK_SUB_LOAD4(gk_g_, 4u, aux4, args.aux_off + gk_n0_ + 4u) \
            GK_SUB_LOAD4(gk_g_, 8u, aux4, args.aux_off + gk_n1_) \
            GK_SUB_LOAD4(gk_g_, 12u, aux4, args.aux_off + gk_n1_ + 4u) \
            GK_UNROLL for (uint gk_i_ = 0u; gk_i_ < 16u; ++gk_i_) { \
                GK_PRECISE float gk_xn_ = xv[gk_i_] * (inv); \
                xv[gk_i_] = gk_xn_ * gk_g_[gk_i_]; \
            } \
        } \
    }
// s += the dot of one unit's decoded weights wv[16] and input values xv[16].
#define GK_SUB_DOT16(s, wv, xv) \
    { \
        float gk_d_ = 0.0f; \
        GK_UNROLL for (uint gk_i_ = 0u; gk_i_ < 16u; ++gk_i_) \
            gk_d_ = gk_fma(wv[gk_i_], xv[gk_i_], gk_d_); \
        s += gk_d_; \
    }
GK_WIDE_VIEW_DECL(1, x4)
GK_WIDE_VIEW_DECL(3, aux4)
#endif
GK_WIDE_VIEW_DECL(0, w4)
GK_KERNEL(matvec, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    GK_WIDE_VIEW_OPEN(w4, w)
    uint tid = GK_LOCAL_ID;
    uint n_tok = gk_min(args.n_tok, GK_MATVEC_MAX_TOK);
    uint row_bytes = GK_FMT_ROW_BYTES(args.cols);
    uint n_units = GK_FMT_UNITS(args.cols);
#if GK_MATVEC_SUB
    GK_WIDE_VIEW_OPEN(x4, x)
    GK_WIDE_VIEW_OPEN(aux4, aux)
    // Workgroups stride over the row groups (a dispatch has at most 65535 of them); subgroup g
    // takes rows R g .. R g + R - 1, then R (g + n_sg) .., of a group (uniform over the
    // subgroup), so each input value it forms serves R rows.
    for (uint rb = GK_GROUP_ID.x * GK_SUB_WG_ROWS; rb < args.rows;
         rb += GK_NUM_GROUPS.x * GK_SUB_WG_ROWS) {
#if GK_MATVEC_SPLIT
        {   // every subgroup on the group's R rows (uniform over the workgroup: barriers below)
            uint row0 = rb;
#else
        for (uint rr = GK_SUBGROUP_ID * GK_SUB_R; rr < GK_SUB_WG_ROWS && rb + rr < args.rows;
             rr += GK_NUM_SUBGROUPS * GK_SUB_R) {
            uint row0 = rb + rr;
#endif
            // The first units' weights of the R rows, branch-free (indices clamped), before
            // anything else: their loads are in flight while the token row is read and normed.
            float wv[GK_SUB_R][GK_MATVEC_SUB_PREFETCH][16];
            GK_UNROLL for (uint j = 0u; j < GK_SUB_R; ++j) {
                uint row_b = gk_min(row0 + j, args.rows - 1u) * row_bytes;
                GK_UNROLL for (uint k = 0u; k < GK_MATVEC_SUB_PREFETCH; ++k) {
                    uint uc = gk_min(GK_SUB_UNIT0 + k * GK_SUB_UNIT_STEP, n_units - 1u);
                    GK_MATVEC_DECODE(wv[j][k], GK_FMT_UNIT_BLOCK_BYTE(row_b, uc),
                                     GK_FMT_UNIT_PART(uc))
                }
            }
            for (uint t = 0u; t < n_tok; ++t) {
                uint xt = args.x_off + t * args.x_stride;
                float inv = 1.0f;
                if (args.in_mode == GK_MM_IN_RMSNORM) {
                    float ss = 0.0f;
                    for (uint u = GK_SUB_UNIT0; u < n_units; u += GK_SUB_UNIT_STEP) {
                        float v[16];
                        GK_SUB_UNIT_INPUT(v, xt, u)
                        GK_UNROLL for (uint i = 0u; i < 16u; ++i) ss = gk_fma(v[i], v[i], ss);
                    }
#if GK_MATVEC_SPLIT
                    float ss_all;
                    GK_WG_SUM_INTO(ss_all, ss, part, 0u)
                    inv = gk_rms_inv(ss_all, args.cols, args.eps);
#else
                    inv = gk_rms_inv(gk_subgroup_add(ss), args.cols, args.eps);
#endif
                }
                float s[GK_SUB_R];
                GK_UNROLL for (uint j = 0u; j < GK_SUB_R; ++j) s[j] = 0.0f;
                GK_UNROLL for (uint k = 0u; k < GK_MATVEC_SUB_PREFETCH; ++k) {
                    uint u = GK_SUB_UNIT0 + k * GK_SUB_UNIT_STEP;
                    if (u < n_units) {
                        float xv[16];
                        GK_SUB_UNIT_XIN(xv, xt, u, inv)
                        GK_UNROLL for (uint j = 0u; j < GK_SUB_R; ++j)
                            GK_SUB_DOT16(s[j], wv[j][k], xv)
                    }
                }
                for (uint u = GK_SUB_UNIT0 + GK_MATVEC_SUB_PREFETCH * GK_SUB_UNIT_STEP; u < n_units;
                     u += GK_SUB_UNIT_STEP) {
                    float xv[16];
                    GK_SUB_UNIT_XIN(xv, xt, u, inv)
                    GK_UNROLL for (uint j = 0u; j < GK_SUB_R; ++j) {
                        float wr[16];
                        uint row_b = gk_min(row0 + j, args.rows - 1u) * row_bytes;
                        GK_MATVEC_DECODE(wr, GK_FMT_UNIT_BLOCK_BYTE(row_b, u), GK_FMT_UNIT_PART(u))
                        GK_SUB_DOT16(s[j], wr, xv)
                    }
                }
#if GK_MATVEC_SPLIT
                // Subgroup sums into rsum[subgroup * R + j], then thread j adds the subgroups
                // in order; the second barrier keeps rsum (and part) until all have read them.
                GK_UNROLL for (uint j = 0u; j < GK_SUB_R; ++j) {
                    float v = gk_subgroup_add(s[j]);
                    if (GK_LANE == 0u) rsum[GK_SUBGROUP_ID * GK_SUB_R + j] = v;
                }
                GK_BARRIER();
                uint tid_ = GK_SUB_UNIT0;
                if (tid_ < GK_SUB_R && row0 + tid_ < args.rows) {
                    float total = 0.0f;
                    for (uint sg = 0u; sg < GK_NUM_SUBGROUPS; ++sg) total += rsum[sg * GK_SUB_R + tid_];
                    uint yi = args.y_off + t * args.y_stride + row0 + tid_;
                    GK_MM_STORE(yi, row0 + tid_, total)
                }
                GK_BARRIER();
#else
                GK_UNROLL for (uint j = 0u; j < GK_SUB_R; ++j) {
                    float total = gk_subgroup_add(s[j]);
                    if (GK_LANE == 0u && row0 + j < args.rows) {
                        uint yi = args.y_off + t * args.y_stride + row0 + j;
                        GK_MM_STORE(yi, row0 + j, total)
                    }
                }
#endif
            }
        }
    }
#elif GK_MATVEC_TALL
    // Many rows: the token row is staged once for GK_MATVEC_TALL_ROWS rows, and subgroup g
    // takes rows g R .. g R + R - 1, then (g + n_sg) R .., R = GK_MATVEC_TALL_ILP: its lanes
    // share the rows' units, the R rows' weight loads are in flight together, and one subgroup
    // sum finishes each row (no barrier per row). Narrow rows only (cols < GK_MATVEC_CHUNK).
    uint row0 = GK_GROUP_ID.x * GK_MATVEC_TALL_ROWS;
    for (uint t = 0u; t < n_tok; ++t) {
        uint xt = args.x_off + t * args.x_stride;
        GK_MATVEC_STAGE_NARROW(xt)
        for (uint rr = GK_SUBGROUP_ID * GK_MATVEC_TALL_ILP;
             rr < GK_MATVEC_TALL_ROWS && row0 + rr < args.rows;  // uniform over the subgroup
             rr += GK_NUM_SUBGROUPS * GK_MATVEC_TALL_ILP) {
            float s[GK_MATVEC_TALL_ILP];
            GK_UNROLL for (uint j = 0u; j < GK_MATVEC_TALL_ILP; ++j) s[j] = 0.0f;
            for (uint u = GK_LANE; u < n_units; u += GK_SUBGROUP_SIZE) {
                uint p = GK_FMT_UNIT_PART(u);
                uint ub = u * GK_UNIT - GK_UNIT * p;
                float xv[16];
                GK_UNROLL for (uint i = 0u; i < 16u; ++i)
                    xv[i] = xs[GK_XS(ub + GK_FMT_ELEM(p, i))];
                GK_UNROLL for (uint j = 0u; j < GK_MATVEC_TALL_ILP; ++j) {
                    float d;
                    GK_MATVEC_UNIT_DOT(d, gk_min(row0 + rr + j, args.rows - 1u), u, p, xv)
                    s[j] += d;
                }
            }
            GK_UNROLL for (uint j = 0u; j < GK_MATVEC_TALL_ILP; ++j) {
                float total = gk_subgroup_add(s[j]);
                uint row = row0 + rr + j;
                if (GK_LANE == 0u && row < args.rows) {
                    uint yi = args.y_off + t * args.y_stride + row;
                    GK_MM_STORE(yi, row, total)
                }
            }
        }
        // xs is written again by the next token row.
        GK_BARRIER();
    }
#else
    uint row0 = GK_GROUP_ID.x * GK_MATVEC_ROWS;
#if !defined(GK_FMT_F32) && !defined(GK_FMT_F16)
    // Narrow rows (fewer units than threads, e.g. a 576-wide model) are latency bound: the
    // workgroup's threads share the (row, unit) pairs q = tid + k * WG of all its rows, and
    // decode them before anything else, in unrolled branch-free passes (indices clamped, unused
    // pairs marked with row GK_MATVEC_ROWS), so every weight load of a thread is in flight
    // while the token row is read. The weights stay in registers for every token row.
    bool narrow = args.cols < GK_MATVEC_CHUNK;
    float wv[GK_MATVEC_NARROW_PASSES][16];
    uint pair_row[GK_MATVEC_NARROW_PASSES];
    uint pair_unit[GK_MATVEC_NARROW_PASSES];
    if (narrow) {
        uint n_pairs = GK_MATVEC_ROWS * n_units;
        GK_UNROLL for (uint k = 0u; k < GK_MATVEC_NARROW_PASSES; ++k) {
            uint q = tid + k * GK_WG;
            uint qc = gk_min(q, n_pairs - 1u);
            uint r = qc / n_units;
            uint uu = qc - r * n_units;
            uint row = gk_min(row0 + r, args.rows - 1u);
            uint blk_b = GK_FMT_UNIT_BLOCK_BYTE(row * row_bytes, uu);
            GK_MATVEC_DECODE(wv[k], blk_b, GK_FMT_UNIT_PART(uu))
            pair_row[k] = (q < n_pairs && row0 + r < args.rows) ? r : GK_MATVEC_ROWS;
            pair_unit[k] = uu;
        }
    }
#endif

    for (uint t = 0u; t < n_tok; ++t) {
        uint xt = args.x_off + t * args.x_stride;
        float acc[GK_MATVEC_ROWS];
        GK_UNROLL for (uint r = 0u; r < GK_MATVEC_ROWS; ++r) acc[r] = 0.0f;
#if !defined(GK_FMT_F32) && !defined(GK_FMT_F16)
        if (narrow) {
            GK_MATVEC_STAGE_NARROW(xt)
            GK_UNROLL for (uint k = 0u; k < GK_MATVEC_NARROW_PASSES; ++k) {
                uint p = GK_FMT_UNIT_PART(pair_unit[k]);
                uint ub = pair_unit[k] * GK_UNIT - GK_UNIT * p;
                float s = 0.0f;
                GK_UNROLL for (uint i = 0u; i < 16u; ++i)
                    s = gk_fma(wv[k][i], xs[GK_XS(ub + GK_FMT_ELEM(p, i))], s);
                GK_UNROLL for (uint r = 0u; r < GK_MATVEC_ROWS; ++r)
                    acc[r] += pair_row[k] == r ? s : 0.0f;
            }
            // xs is written again only after the reduction's barriers below.
        } else
#endif
        {
            float inv = 1.0f;
            float mean = 0.0f;
            if (GK_MM_LAYERNORM(args.in_mode)) GK_MM_LAYERNORM_STATS_WG(mean, inv, xt, tid, part)
            if (args.in_mode == GK_MM_IN_RMSNORM) {
                float ss = 0.0f;
                for (uint k = tid; k < args.cols; k += GK_WG)
                    ss = gk_fma(x[xt + k], x[xt + k], ss);
                float total;
                GK_WG_SUM_INTO(total, ss, part, 0u)
                inv = gk_rms_inv(total, args.cols, args.eps);
            }
            for (uint c0 = 0u; c0 < args.cols; c0 += GK_MATVEC_CHUNK) {
                GK_UNROLL for (uint j = 0u; j < GK_UNIT; ++j) {
                    uint e = tid + j * GK_WG;
                    float xv = 0.0f;
                    if (c0 + e < args.cols) GK_MM_INPUT_STATS(xv, xt, c0 + e, mean, inv)
                    xs[GK_XS(e)] = xv;
                }
                GK_BARRIER();
#if defined(GK_FMT_F32) || defined(GK_FMT_F16)
                GK_UNROLL for (uint r = 0u; r < GK_MATVEC_ROWS; ++r) {
                    if (row0 + r < args.rows) {
                        float s = 0.0f;
                        uint re = (row0 + r) * args.cols + c0;   // the chunk's first element
                        if ((args.cols & (GK_WIDE_ELEMS - 1u)) == 0u) {
                            // Rows start 16-byte aligned: a 16-byte load per GK_WIDE_ELEMS columns.
                            GK_UNROLL for (uint j = 0u; j < GK_UNIT / GK_WIDE_ELEMS; ++j) {
                                uint g = tid + j * GK_WG;
                                uint e = g * GK_WIDE_ELEMS;
                                if (c0 + e < args.cols) {
                                    uint4 q = w4[re / GK_WIDE_ELEMS + g];
#if defined(GK_FMT_F32)
                                    s = gk_fma(gk_bits_to_float(q.x), xs[GK_XS(e)], s);
                                    s = gk_fma(gk_bits_to_float(q.y), xs[GK_XS(e + 1u)], s);
                                    s = gk_fma(gk_bits_to_float(q.z), xs[GK_XS(e + 2u)], s);
                                    s = gk_fma(gk_bits_to_float(q.w), xs[GK_XS(e + 3u)], s);
#else
                                    float2 h0 = gk_unpack_half2(q.x);
                                    float2 h1 = gk_unpack_half2(q.y);
                                    float2 h2 = gk_unpack_half2(q.z);
                                    float2 h3 = gk_unpack_half2(q.w);
                                    s = gk_fma(h0.x, xs[GK_XS(e)], s);
                                    s = gk_fma(h0.y, xs[GK_XS(e + 1u)], s);
                                    s = gk_fma(h1.x, xs[GK_XS(e + 2u)], s);
                                    s = gk_fma(h1.y, xs[GK_XS(e + 3u)], s);
                                    s = gk_fma(h2.x, xs[GK_XS(e + 4u)], s);
                                    s = gk_fma(h2.y, xs[GK_XS(e + 5u)], s);
                                    s = gk_fma(h3.x, xs[GK_XS(e + 6u)], s);
                                    s = gk_fma(h3.y, xs[GK_XS(e + 7u)], s);
#endif
                                }
                            }
                        } else {
                            // Any width: one element per load, consecutive threads on consecutive
                            // columns.
                            GK_UNROLL for (uint j = 0u; j < GK_UNIT; ++j) {
                                uint e = tid + j * GK_WG;
                                if (c0 + e < args.cols) {
#if defined(GK_FMT_F32)
                                    s = gk_fma(gk_bits_to_float(w[re + e]), xs[GK_XS(e)], s);
#else
                                    s = gk_fma(GK_F16_A2(w, (re + e) * 2u), xs[GK_XS(e)], s);
#endif
                                }
                            }
                        }
                        acc[r] += s;
                    }
                }
#else
                // Wide rows: thread i takes unit i of the chunk in all GK_MATVEC_ROWS rows.
                uint u = c0 / GK_UNIT + tid;
                if (u < n_units) {
                    uint p = GK_FMT_UNIT_PART(u);
                    uint ub = tid * GK_UNIT - GK_UNIT * p;
                    float xv[16];
                    GK_UNROLL for (uint i = 0u; i < 16u; ++i)
                        xv[i] = xs[GK_XS(ub + GK_FMT_ELEM(p, i))];
                    GK_UNROLL for (uint r = 0u; r < GK_MATVEC_ROWS; ++r) {
                        if (row0 + r < args.rows) {
                            float s;
                            GK_MATVEC_UNIT_DOT(s, row0 + r, u, p, xv)
                            acc[r] += s;
                        }
                    }
                }
#endif
                // xs is written again by the next chunk.
                GK_BARRIER();
            }
        }
        // Per-subgroup sums into part[subgroup * ROWS + r], then thread r adds the subgroups
        // in order. Rows past `rows` hold zeros and are reduced anyway: the code stays uniform.
        GK_UNROLL for (uint r = 0u; r < GK_MATVEC_ROWS; ++r) {
            float v = gk_subgroup_add(acc[r]);
            if (GK_LANE == 0u) part[GK_SUBGROUP_ID * GK_MATVEC_ROWS + r] = v;
        }
        GK_BARRIER();
        if (tid < GK_MATVEC_ROWS && row0 + tid < args.rows) {
            float sum = 0.0f;
            for (uint sg = 0u; sg < GK_NUM_SUBGROUPS; ++sg) sum += part[sg * GK_MATVEC_ROWS + tid];
            uint yi = args.y_off + t * args.y_stride + row0 + tid;
            GK_MM_STORE(yi, row0 + tid, sum)
        }
        // part is written again by the next token row.
        GK_BARRIER();
    }
#endif
}
GK_KERNEL_END
#endif

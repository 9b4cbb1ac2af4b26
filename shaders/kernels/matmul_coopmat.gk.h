// Prefill-time matrix product on cooperative matrices (VK_KHR_cooperative_matrix): the same
// product, buffers and arguments as matmul.gk.h,
//   y[y_off + t*y_stride + r] (= or +=) sum_k W[r, k] * in(x)[x_off + t*x_stride + k]
// for r < rows, t < n_tok (in_mode included: mm_input.h), with its operands rounded to float16
// and summed in float32. One stamp per format (GK_FMT_<NAME>, see gk/formats.h), each defining
// GK_COOPMAT. Vulkan only: shaders/stamp.py compiles these with a glslang that knows the
// extension, and the host picks them (matmul_<fmt>_coopmat) on devices that list 16 x 16 x 16
// float16 products on subgroups of 32. Metal's simdgroup matrices would be a stamp of their own.
//
// Dispatch: gx = ceil(rows / GK_MMC_TILE_ROWS), gy = ceil(n_tok / GK_MMC_TILE_TOKS), gz = 1.
// A workgroup of four subgroups computes a 64-row x 32-token tile of y; subgroup s owns rows
// 16s .. 16s + 15 of it, as two 16 x 16 accumulators (tokens 0-15 and 16-31).
// Per step of GK_MMC_BK = 32 columns every thread decodes one 16-element unit of one weight row
// and two runs of four x values (after the input stage), rounds them to float16 and keeps them
// in registers; after the barrier that ends the previous step they go to workgroup memory
// (w_s[row][k] and x_s[tok][k], rows padded by eight halves so that the matrix loads of
// consecutive rows fall in distinct banks), and the next step's global reads are issued before
// this step's products, so their latency overlaps the matrix work. Tiles past the last row,
// token or column are zero-filled, never read. The accumulators leave through a 16 x 16 float
// staging area per subgroup, written to y with bounds checks (the residual added when
// accumulating).
// Measured on an H200 (pp512 of SmolLM2-135M and Gemma-3-270M): 64 x 32 tiles ran faster than
// 64 x 64, 32 x 32 and 128 x 64 ones (prefill matrices are narrow: more workgroups beat larger
// tiles), K steps of 32 faster than 64, and a second set of tiles (one barrier a step instead
// of two) slower. Long rows with many of them (an 8B's 4096-14336 columns, 4096-28672 rows)
// turn that round: the _t128 stamps (128 x 128 on eight subgroups, K steps of 64) ran the 8B's
// products 1.6-2.4x faster than 64 x 64 (csrc/gpu/matrix.cpp, coopmat_large_min_cols).
// Workgroup memory: (64 + 32) * 40 * 2 + 32 * 4 + 4 * 256 * 4 bytes = 11.6 KiB.
//
// GK_MMC_XH=1 (stamps matmul_<fmt>_coopmat_xh): x is a float16 panel that mm_stage.gk.h wrote
// once for every projection of the same input (in_mode 0 only: the input stage already ran
// there), bound as uint4 (eight halves). x_off and x_stride count halves and must be multiples
// of eight, and so must cols: each thread then reads eight values of a token row with one
// 16-byte load instead of forming them one by one from float32 x (with the norm or the gate)
// in every row tile. GK_MMC_TILE_ROWS / _TOKS / _WARPS_R / _BK may be set by a stamp to race
// other tile shapes; the host sizes dispatches by the defaults below (the first stamp's).
#include "../gk/gk.h"
#include "mm_input.h"

#ifndef GK_MMC_XH
#define GK_MMC_XH 0
#endif
// Tile sizes: the host mirrors them to size the dispatch (csrc/gpu/matrix.cpp).
#ifndef GK_MMC_TILE_ROWS
#define GK_MMC_TILE_ROWS 64u
#endif
#ifndef GK_MMC_TILE_TOKS
#define GK_MMC_TILE_TOKS 32u
#endif
#ifndef GK_MMC_BK
#define GK_MMC_BK 32u
#endif
// The workgroup's subgroups (GK_MMC_WARPS of 32: four, or eight with GK_MMC_WG=256) as a
// WARPS_R x (WARPS / WARPS_R) grid over the tile; each holds ACC_R x ACC_T accumulators of
// 16 x 16.
#ifndef GK_MMC_WARPS
#define GK_MMC_WARPS 4u
#endif
#ifndef GK_MMC_WARPS_R
#define GK_MMC_WARPS_R 4u
#endif
#define GK_MMC_WARPS_T (GK_MMC_WARPS / GK_MMC_WARPS_R)
#define GK_MMC_ACC_R (GK_MMC_TILE_ROWS / GK_MMC_WARPS_R / 16u)
#define GK_MMC_ACC_T (GK_MMC_TILE_TOKS / GK_MMC_WARPS_T / 16u)
// Row stride of w_s and x_s in half4 units: BK halves and eight of padding.
#define GK_MMC_S4 ((GK_MMC_BK + 8u) / 4u)
// Weight units (16 elements) per row and step, and per thread and step.
#define GK_MMC_UNITS_ROW (GK_MMC_BK / 16u)
#define GK_MMC_UNITS_THREAD (GK_MMC_TILE_ROWS * GK_MMC_UNITS_ROW / GK_WG)
// Runs of four x values per thread and step (float32 x), or of eight (the float16 panel).
#define GK_MMC_XRUNS (GK_MMC_TILE_TOKS * GK_MMC_BK / 4u / GK_WG)
#define GK_MMC_XRUNS8 (GK_MMC_TILE_TOKS * GK_MMC_BK / 8u / GK_WG)
// Threads a workgroup: 32 GK_MMC_WARPS (a stamp of eight subgroups sets both).
#ifndef GK_MMC_WG
#define GK_MMC_WG 128
#endif
#define GK_WG GK_MMC_WG
#if GK_MMC_XH
#define GK_MMC_X_TYPE uint4
#else
#define GK_MMC_X_TYPE float
#endif

#define GK_BUFFERS(B) B(0, ro, uint, w) B(1, ro, GK_MMC_X_TYPE, x) B(2, rw, float, y) \
                      B(3, ro, float, aux)
#define GK_ARGS(A) A(uint, rows) A(uint, cols) A(uint, n_tok) A(uint, x_off) A(uint, x_stride) \
                   A(uint, y_off) A(uint, y_stride) A(uint, accumulate) A(uint, in_mode) \
                   A(uint, aux_off) A(float, eps)
#define GK_SHARED(S) S(half4, w_s, GK_MMC_TILE_ROWS * GK_MMC_S4) \
                     S(half4, x_s, GK_MMC_TILE_TOKS * GK_MMC_S4) \
                     S(float, tok_inv, GK_MMC_TILE_TOKS) \
                     S(float, st_s, GK_MMC_WARPS * 256u)

#ifdef GK_BODY
// The step at column kb into registers: wr[4v + j] holds elements 4j.. of this thread's unit v
// (zero past the last row or unit), xr[j] four x values of run j (zero past n_tok or cols).
#define GK_MMC_FETCH(kb) \
    { \
        GK_UNROLL for (uint v_ = 0u; v_ < GK_MMC_UNITS_THREAD; ++v_) { \
            uint s_ = tid + v_ * GK_WG; \
            uint lr_ = s_ / GK_MMC_UNITS_ROW; \
            uint u_ = (kb) / GK_UNIT + s_ % GK_MMC_UNITS_ROW; \
            float wv_[16]; \
            if (row0 + lr_ < args.rows && u_ < n_units) { \
                uint p_ = GK_FMT_UNIT_PART(u_); \
                uint n_valid_ = args.cols - u_ * GK_UNIT; \
                GK_DECODE16(wv_, w, GK_FMT_UNIT_BLOCK_BYTE((row0 + lr_) * row_bytes, u_), p_, \
                            n_valid_) \
            } else { \
                GK_UNROLL for (uint i_ = 0u; i_ < 16u; ++i_) wv_[i_] = 0.0f; \
            } \
            GK_UNROLL for (uint j_ = 0u; j_ < 4u; ++j_) \
                wr[4u * v_ + j_] = gk_half4(gk_float4(wv_[4u * j_], wv_[4u * j_ + 1u], \
                                                      wv_[4u * j_ + 2u], wv_[4u * j_ + 3u])); \
        } \
        GK_MMC_FETCH_X(kb) \
    }

#if GK_MMC_XH
// Run j of eight halves: token q / (BK / 8), columns kb + 8 (q % (BK / 8)) .. + 7 (zero past
// n_tok or cols; cols is a multiple of eight).
#define GK_MMC_FETCH_X(kb) \
    { \
        GK_UNROLL for (uint j_ = 0u; j_ < GK_MMC_XRUNS8; ++j_) { \
            uint q_ = tid + j_ * GK_WG; \
            uint t_ = q_ / (GK_MMC_BK / 8u); \
            uint k_ = (kb) + 8u * (q_ % (GK_MMC_BK / 8u)); \
            uint4 v_ = uint4(0u, 0u, 0u, 0u); \
            if (tok0 + t_ < args.n_tok && k_ < args.cols) \
                v_ = x[(args.x_off + (tok0 + t_) * args.x_stride + k_) / 8u]; \
            xr[j_] = v_; \
        } \
    }
#else
#define GK_MMC_FETCH_X(kb) \
    { \
        GK_UNROLL for (uint j_ = 0u; j_ < GK_MMC_XRUNS; ++j_) { \
            uint q_ = tid + j_ * GK_WG; \
            uint t_ = q_ / (GK_MMC_BK / 4u); \
            uint k_ = (kb) + 4u * (q_ % (GK_MMC_BK / 4u)); \
            float xv_[4]; \
            GK_UNROLL for (uint c_ = 0u; c_ < 4u; ++c_) { \
                xv_[c_] = 0.0f; \
                if (tok0 + t_ < args.n_tok && k_ + c_ < args.cols) { \
                    float inv_ = args.in_mode == GK_MM_IN_RMSNORM ? tok_inv[t_] : 1.0f; \
                    GK_MM_INPUT(xv_[c_], args.x_off + (tok0 + t_) * args.x_stride, k_ + c_, inv_) \
                } \
            } \
            xr[j_] = gk_half4(gk_float4(xv_[0], xv_[1], xv_[2], xv_[3])); \
        } \
    }
#endif

// The registers of the step at column kb into w_s and x_s. Unit v's element i is column
// GK_FMT_ELEM(p, i) of its block: runs of four consecutive columns for every format.
#define GK_MMC_STORE(kb) \
    { \
        GK_UNROLL for (uint v_ = 0u; v_ < GK_MMC_UNITS_THREAD; ++v_) { \
            uint s_ = tid + v_ * GK_WG; \
            uint lr_ = s_ / GK_MMC_UNITS_ROW; \
            uint lu_ = s_ % GK_MMC_UNITS_ROW; \
            uint p_ = GK_FMT_UNIT_PART((kb) / GK_UNIT + lu_); \
            uint ub_ = lu_ * GK_UNIT - GK_UNIT * p_; \
            uint wb_ = lr_ * GK_MMC_S4; \
            GK_UNROLL for (uint j_ = 0u; j_ < 4u; ++j_) \
                w_s[wb_ + (ub_ + GK_FMT_ELEM(p_, 4u * j_)) / 4u] = wr[4u * v_ + j_]; \
        } \
        GK_MMC_STORE_X() \
    }

#if GK_MMC_XH
#define GK_MMC_STORE_X() \
    { \
        GK_UNROLL for (uint j_ = 0u; j_ < GK_MMC_XRUNS8; ++j_) { \
            uint q_ = tid + j_ * GK_WG; \
            uint xb_ = (q_ / (GK_MMC_BK / 8u)) * GK_MMC_S4 + 2u * (q_ % (GK_MMC_BK / 8u)); \
            x_s[xb_] = half4(unpackFloat2x16(xr[j_].x), unpackFloat2x16(xr[j_].y)); \
            x_s[xb_ + 1u] = half4(unpackFloat2x16(xr[j_].z), unpackFloat2x16(xr[j_].w)); \
        } \
    }
#else
#define GK_MMC_STORE_X() \
    { \
        GK_UNROLL for (uint j_ = 0u; j_ < GK_MMC_XRUNS; ++j_) { \
            uint q_ = tid + j_ * GK_WG; \
            x_s[(q_ / (GK_MMC_BK / 4u)) * GK_MMC_S4 + q_ % (GK_MMC_BK / 4u)] = xr[j_]; \
        } \
    }
#endif

// This subgroup's products of one step: A from w_s (16 rows x 16 k, row-major), B from x_s
// (16 k x 16 tokens, column-major: each token's k values are contiguous).
#define GK_MMC_PRODUCTS() \
    { \
        GK_UNROLL for (uint kk_ = 0u; kk_ < GK_MMC_BK / 16u; ++kk_) { \
            GK_CM_A a_[GK_MMC_ACC_R]; \
            GK_CM_B b_[GK_MMC_ACC_T]; \
            GK_UNROLL for (uint i_ = 0u; i_ < GK_MMC_ACC_R; ++i_) \
                gk_cm_load_row_major(a_[i_], w_s, (sg_row + 16u * i_) * GK_MMC_S4 + 4u * kk_, \
                                     GK_MMC_S4); \
            GK_UNROLL for (uint j_ = 0u; j_ < GK_MMC_ACC_T; ++j_) \
                gk_cm_load_col_major(b_[j_], x_s, (sg_tok + 16u * j_) * GK_MMC_S4 + 4u * kk_, \
                                     GK_MMC_S4); \
            GK_UNROLL for (uint i_ = 0u; i_ < GK_MMC_ACC_R; ++i_) \
                GK_UNROLL for (uint j_ = 0u; j_ < GK_MMC_ACC_T; ++j_) \
                    acc[GK_MMC_ACC_T * i_ + j_] = \
                        gk_cm_mul_add(a_[i_], b_[j_], acc[GK_MMC_ACC_T * i_ + j_]); \
        } \
    }

GK_KERNEL(matmul_coopmat, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint tid = GK_LOCAL_ID;
    uint row0 = GK_GROUP_ID.x * GK_MMC_TILE_ROWS;
    uint tok0 = GK_GROUP_ID.y * GK_MMC_TILE_TOKS;
    uint row_bytes = GK_FMT_ROW_BYTES(args.cols);
    uint n_units = GK_FMT_UNITS(args.cols);
    // This subgroup's part of the tile (the kernel assumes GK_MMC_WARPS subgroups of 32).
    uint sg = GK_SUBGROUP_ID;
    uint sg_row = (sg % GK_MMC_WARPS_R) * (16u * GK_MMC_ACC_R);
    uint sg_tok = (sg / GK_MMC_WARPS_R) * (16u * GK_MMC_ACC_T);

#if !GK_MMC_XH
    // The RMSNorm scale of each token row of the tile, as matmul.gk.h computes it.
    GK_MM_TILE_RMS_INV(tok_inv, tok0, GK_MMC_TILE_TOKS)
#endif

    // acc[ACC_T * a + b]: rows sg_row + 16a, tokens sg_tok + 16b.
    GK_CM_ACC acc[GK_MMC_ACC_R * GK_MMC_ACC_T];
    GK_UNROLL for (uint i = 0u; i < GK_MMC_ACC_R * GK_MMC_ACC_T; ++i) acc[i] = gk_cm_zero();
    half4 wr[4u * GK_MMC_UNITS_THREAD];
#if GK_MMC_XH
    uint4 xr[GK_MMC_XRUNS8];
#else
    half4 xr[GK_MMC_XRUNS];
#endif
    GK_MMC_FETCH(0u)
    for (uint kb = 0u; kb < args.cols; kb += GK_MMC_BK) {
        GK_MMC_STORE(kb)
        GK_BARRIER();
        if (kb + GK_MMC_BK < args.cols) GK_MMC_FETCH(kb + GK_MMC_BK)
        GK_MMC_PRODUCTS()
        GK_BARRIER();
    }

    // Each accumulator through this subgroup's staging area (column-major: element (m, n) at
    // 16n + m, so sixteen lanes write sixteen consecutive rows of one token).
    uint st0 = sg * 256u;
    GK_UNROLL for (uint i = 0u; i < GK_MMC_ACC_R * GK_MMC_ACC_T; ++i) {
        gk_cm_store_col_major(acc[i], st_s, st0, 16u);
        GK_SUBGROUP_BARRIER();
        uint rb = row0 + sg_row + 16u * (i / GK_MMC_ACC_T);
        uint tb = tok0 + sg_tok + 16u * (i % GK_MMC_ACC_T);
        for (uint e = GK_LANE; e < 256u; e += GK_SUBGROUP_SIZE) {
            uint r = rb + e % 16u;
            uint t = tb + e / 16u;
            if (r < args.rows && t < args.n_tok) {
                uint yi = args.y_off + t * args.y_stride + r;
                float v = st_s[st0 + e];
                y[yi] = args.accumulate != 0u ? y[yi] + v : v;
            }
        }
        GK_SUBGROUP_BARRIER();
    }
}
GK_KERNEL_END
#endif

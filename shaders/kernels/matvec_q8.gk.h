// Decode-time matrix-vector product of K-quant weights (Q4_K, Q6_K) against an input quantized
// to q8_1 blocks by quant_q8_1.gk.h, in integer arithmetic:
//   y[y_off + t*y_stride + r] (= or +=) sum_k W[r, k] * xd[t, k]
// for r < rows, t < n_tok (at most GK_Q8_MAX_TOK), with xd[t, k] = d_b * q[t, k] the
// quantized input (codes at xq[t * cols / 4 ...], four a word; block b's packHalf2x16(d, s) at
// xq[ds_off + t * cols / 32 + b]). accumulate: 0 stores, 1 adds to y.
//
// Why: the float forms (matvec.gk.h) read float32 x for every weight they decode, 4 bytes of
// cached input per half byte of Q4_K weight, and convert every weight to float; here a weight
// nibble meets an 8-bit code in an integer multiply-add, and the block scales are applied once
// per 16 weights. Q4_K: y = d sc q - dmin m with one (sc, m) per 32 weights, so
//   sum W x = d sc_j d_x (sum q qx) - dmin m_j s_x
// per sub-block j (s_x = d_x sum qx, the block's scaled sum); Q6_K: y = d sc (q - 32) with one
// sc per 16 weights, so sum W x = d sc d_x (sum q qx - 32 sum qx).
//
// Work item: 16 bytes of a block's quants, 32 weights of one row (Q4_K: a 16-byte piece of qs,
// its low nibbles 16 weights of sub-block 2c, its high nibbles the same 16 columns of sub-block
// 2c + 1; Q6_K: a 16-byte piece of ql with its 16 bytes of qh, its nibbles the same 16 columns of
// two of the four 32-wide quarters), eight items a 256-weight block. The lanes of a subgroup
// take items lane, lane + SG, ... of each row; GK_Q8_U items a lane are loaded together
// (indices clamped, the surplus weighted zero) so that their loads are in flight at once.
// Each subgroup owns GK_Q8_R rows (the input codes it unpacks serve all of them) and finishes
// each with one subgroup sum; workgroups stride over row groups of GK_Q8_WG_ROWS (4 R: four
// subgroups of 32 lanes, the H200's; smaller subgroups walk the group's rows in turn).
// Dispatch: gx = min(ceil(rows / GK_Q8_WG_ROWS), 65535).
// Rounding: the integer dots are exact; the float sums run in a different order than the
// float forms', and the input carries its 8-bit quantization error (about 0.3-0.5% rel-l2 over a
// product on normal inputs; tests/test_gpu_matvec_q8.py measures it).
#include "../gk/gk.h"

#ifndef GK_Q8_R
#define GK_Q8_R 2u
#endif
#ifndef GK_Q8_U
#define GK_Q8_U 2u
#endif
#define GK_Q8_WG_ROWS (4u * GK_Q8_R)
#define GK_Q8_MAX_TOK 8u
#define GK_WG 128

#define GK_BUFFERS(B) B(0, ro, uint, w) B(1, ro, uint, xq) B(2, rw, float, y)
#define GK_ARGS(A) A(uint, rows) A(uint, cols) A(uint, n_tok) A(uint, ds_off) A(uint, y_off) \
                   A(uint, y_stride) A(uint, accumulate)
#define GK_SHARED(S)

#ifdef GK_BODY
// Byte i (0..3) of the word v as a signed 8-bit value.
#define GK_Q8_SBYTE(v, i) (int((v) << (24u - 8u * (i))) >> 24)
// xi[o + 4 k + i] = the signed codes of the 16 bytes q (a uint4 variable: read once).
#define GK_Q8_UNPACK16(xi, o, q) \
    { \
        GK_UNROLL for (uint gk_i_ = 0u; gk_i_ < 4u; ++gk_i_) { \
            xi[(o) + gk_i_] = GK_Q8_SBYTE((q).x, gk_i_); \
            xi[(o) + 4u + gk_i_] = GK_Q8_SBYTE((q).y, gk_i_); \
            xi[(o) + 8u + gk_i_] = GK_Q8_SBYTE((q).z, gk_i_); \
            xi[(o) + 12u + gk_i_] = GK_Q8_SBYTE((q).w, gk_i_); \
        } \
    }
// lo += the 16 values (qw >> sh) & mask of the words q[0..3] (one a byte) times xi[o ..]
#define GK_Q8_DOT16(acc, q, sh, mask, xi, o) \
    { \
        GK_UNROLL for (uint gk_k_ = 0u; gk_k_ < 4u; ++gk_k_) { \
            uint gk_qw_ = q[gk_k_] >> (sh); \
            GK_UNROLL for (uint gk_i_ = 0u; gk_i_ < 4u; ++gk_i_) \
                acc += int((gk_qw_ >> (8u * gk_i_)) & (mask)) * xi[(o) + 4u * gk_k_ + gk_i_]; \
        } \
    }
GK_WIDE_VIEW_DECL(1, xq4)
#if defined(GK_FMT_Q4_K)
GK_WIDE_VIEW_DECL(0, w4)
#endif
GK_KERNEL(matvec_q8, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    GK_WIDE_VIEW_OPEN(xq4, xq)
#if defined(GK_FMT_Q4_K)
    GK_WIDE_VIEW_OPEN(w4, w)
#endif
    uint n_tok = gk_min(args.n_tok, GK_Q8_MAX_TOK);
    uint row_bytes = args.cols / 256u * GK_FMT_BYTES;
    uint items = args.cols / 32u;
    uint xblocks = args.cols / 32u;
    for (uint rb = GK_GROUP_ID.x * GK_Q8_WG_ROWS; rb < args.rows;
         rb += GK_NUM_GROUPS.x * GK_Q8_WG_ROWS) {
        for (uint rr = GK_SUBGROUP_ID * GK_Q8_R; rr < GK_Q8_WG_ROWS && rb + rr < args.rows;
             rr += GK_NUM_SUBGROUPS * GK_Q8_R) {   // uniform over the subgroup
            uint row0 = rb + rr;
            for (uint t = 0u; t < n_tok; ++t) {
                uint xt16 = t * (args.cols / 16u);      // token row t's codes, in uint4s
                uint dt = args.ds_off + t * xblocks;    // its blocks' (d, s)
                float acc[GK_Q8_R];
                GK_UNROLL for (uint j = 0u; j < GK_Q8_R; ++j) acc[j] = 0.0f;
                for (uint it0 = GK_LANE; it0 < items; it0 += GK_Q8_U * GK_SUBGROUP_SIZE) {
                    GK_UNROLL for (uint u = 0u; u < GK_Q8_U; ++u) {
                        uint it_ = it0 + u * GK_SUBGROUP_SIZE;
                        float live = it_ < items ? 1.0f : 0.0f;
                        uint it = gk_min(it_, items - 1u);
                        uint b = it >> 3u;
#if defined(GK_FMT_Q4_K)
                        uint c = (it >> 1u) & 3u;
                        uint h = it & 1u;
                        // Columns 256 b + 64 c + 16 h + i (sub-block 2c) and + 32 (2c + 1).
                        uint xe16 = 16u * b + 4u * c + h;
                        uint4 xa = xq4[xt16 + xe16];
                        uint4 xb = xq4[xt16 + xe16 + 2u];
                        int xi[32];
                        GK_Q8_UNPACK16(xi, 0u, xa)
                        GK_Q8_UNPACK16(xi, 16u, xb)
                        float2 da = gk_unpack_half2(xq[dt + 8u * b + 2u * c]);
                        float2 db = gk_unpack_half2(xq[dt + 8u * b + 2u * c + 1u]);
                        GK_UNROLL for (uint j = 0u; j < GK_Q8_R; ++j) {
                            uint blk = gk_min(row0 + j, args.rows - 1u) * row_bytes +
                                       b * GK_FMT_BYTES;
                            uint4 hd = w4[blk >> 4u];
                            uint4 q4 = w4[(blk + 16u + 32u * c + 16u * h) >> 4u];
                            uint q[4];
                            q[0] = q4.x; q[1] = q4.y; q[2] = q4.z; q[3] = q4.w;
                            int lo = 0;
                            int hi = 0;
                            GK_Q8_DOT16(lo, q, 0u, 0xFu, xi, 0u)
                            GK_Q8_DOT16(hi, q, 4u, 0xFu, xi, 16u)
                            // Scales and mins of sub-blocks 2c and 2c + 1 (bytes 2c, 2c + 1 of
                            // each scale word), as formats.h's GK_K4_SCALE_MIN.
                            uint sh = 16u * (c & 1u);
                            uint sa = hd.y >> sh;
                            uint sb = hd.z >> sh;
                            uint sc4 = hd.w >> sh;
                            bool lo_half = c < 2u;
                            uint sc0 = lo_half ? (sa & 63u) : ((sc4 & 0xFu) | (((sa >> 6u) & 3u) << 4u));
                            uint mn0 = lo_half ? (sb & 63u) : (((sc4 >> 4u) & 0xFu) | (((sb >> 6u) & 3u) << 4u));
                            uint sc1 = lo_half ? ((sa >> 8u) & 63u)
                                               : (((sc4 >> 8u) & 0xFu) | (((sa >> 14u) & 3u) << 4u));
                            uint mn1 = lo_half ? ((sb >> 8u) & 63u)
                                               : (((sc4 >> 12u) & 0xFu) | (((sb >> 14u) & 3u) << 4u));
                            float2 dm = gk_unpack_half2(hd.x);
                            float v = gk_small_uint_to_float(sc0, 0.0f) * da.x * float(lo) +
                                      gk_small_uint_to_float(sc1, 0.0f) * db.x * float(hi);
                            // The minimum terms once a sub-block: by the item of its first half.
                            float m = h == 0u ? gk_small_uint_to_float(mn0, 0.0f) * da.y +
                                                    gk_small_uint_to_float(mn1, 0.0f) * db.y
                                              : 0.0f;
                            acc[j] += live * (dm.x * v - dm.y * m);
                        }
#else   // Q6_K
                        uint c = (it >> 2u) & 1u;
                        uint kk = (it >> 1u) & 1u;
                        uint h = it & 1u;
                        // Columns 256 b + 128 c + 32 kk + 16 h + i (quarter kk) and + 64 (kk + 2).
                        uint xe16 = 16u * b + 8u * c + 2u * kk + h;
                        uint4 xa = xq4[xt16 + xe16];
                        uint4 xb = xq4[xt16 + xe16 + 4u];
                        int xi[32];
                        GK_Q8_UNPACK16(xi, 0u, xa)
                        GK_Q8_UNPACK16(xi, 16u, xb)
                        int suma = 0;
                        int sumb = 0;
                        GK_UNROLL for (uint i = 0u; i < 16u; ++i) {
                            suma += xi[i];
                            sumb += xi[16u + i];
                        }
                        float dxa = gk_unpack_half2(xq[dt + 8u * b + 4u * c + kk]).x;
                        float dxb = gk_unpack_half2(xq[dt + 8u * b + 4u * c + kk + 2u]).x;
                        GK_UNROLL for (uint j = 0u; j < GK_Q8_R; ++j) {
                            uint blk = gk_min(row0 + j, args.rows - 1u) * row_bytes +
                                       b * GK_FMT_BYTES;
                            uint ql[4];
                            uint qh[4];
                            GK_LOAD16_A2(ql, w, blk + 64u * c + 32u * kk + 16u * h)
                            GK_LOAD16_A2(qh, w, blk + 128u + 32u * c + 16u * h)
                            uint q[4];
                            int da_ = 0;
                            int db_ = 0;
                            GK_UNROLL for (uint k = 0u; k < 4u; ++k)
                                q[k] = (ql[k] & 0x0F0F0F0Fu) | (((qh[k] >> (2u * kk)) & 0x03030303u) << 4u);
                            GK_Q8_DOT16(da_, q, 0u, 0xFFu, xi, 0u)
                            GK_UNROLL for (uint k = 0u; k < 4u; ++k)
                                q[k] = ((ql[k] >> 4u) & 0x0F0F0F0Fu) |
                                       (((qh[k] >> (2u * kk + 4u)) & 0x03030303u) << 4u);
                            GK_Q8_DOT16(db_, q, 0u, 0xFFu, xi, 16u)
                            uint sbyte = blk + 192u + 8u * c + 2u * kk + h;
                            int sca = GK_Q8_SBYTE(GK_BYTE(w, sbyte), 0u);
                            int scb = GK_Q8_SBYTE(GK_BYTE(w, sbyte + 4u), 0u);
                            float d = GK_F16_A2(w, blk + 208u);
                            float v = float(sca) * dxa * float(da_ - 32 * suma) +
                                      float(scb) * dxb * float(db_ - 32 * sumb);
                            acc[j] += live * (d * v);
                        }
#endif
                    }
                }
                GK_UNROLL for (uint j = 0u; j < GK_Q8_R; ++j) {
                    float total = gk_subgroup_add(acc[j]);
                    if (GK_LANE == 0u && row0 + j < args.rows) {
                        uint yi = args.y_off + t * args.y_stride + row0 + j;
                        y[yi] = args.accumulate != 0u ? y[yi] + total : total;
                    }
                }
            }
        }
    }
}
GK_KERNEL_END
#endif

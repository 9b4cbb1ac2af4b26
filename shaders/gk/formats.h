// Reading GGUF weight bytes from uint-typed storage buffers. Blocks of most formats are not a
// multiple of four bytes long, so a field may straddle two words.

// Byte `i` of the uint array `buf`.
#define GK_BYTE(buf, i) ((buf[(i) >> 2u] >> (((i) & 3u) * 8u)) & 0xFFu)
// The little-endian 16-bit value at byte offset `i` (any alignment).
#define GK_U16(buf, i) (GK_BYTE(buf, i) | (GK_BYTE(buf, (i) + 1u) << 8u))
// The f16 value at byte offset `i`, widened.
#define GK_F16(buf, i) gk_unpack_half2(GK_U16(buf, i)).x

// Every block of the formats below starts at an even byte (all block sizes are even), so the
// fast readers take 2-aligned byte offsets: one word load for a 16-bit field, and a funnel of
// two words for a 32-bit one. They only ever read words that hold a byte of the field, so a
// field at the very end of a binding never reads past it.
#define GK_U16_A2(buf, b) ((buf[(b) >> 2u] >> (((b) & 2u) * 8u)) & 0xFFFFu)
#define GK_F16_A2(buf, b) gk_unpack_half2(GK_U16_A2(buf, b)).x

// Sixteen bytes at the 2-aligned byte offset `b` into dst[0..3] (a uint[4]): four word loads
// when aligned, five and a funnel shift when not (the fifth index is clamped to a word that
// holds a byte of the field, so an aligned read loads it twice instead of reading past).
#define GK_LOAD16_A2(dst, buf, b) \
    { \
        uint gk_w_ = (b) >> 2u; \
        bool gk_odd_ = ((b) & 2u) != 0u; \
        uint gk_a_ = buf[gk_w_]; \
        uint gk_b_ = buf[gk_w_ + 1u]; \
        uint gk_c_ = buf[gk_w_ + 2u]; \
        uint gk_d_ = buf[gk_w_ + 3u]; \
        uint gk_e_ = buf[gk_w_ + (gk_odd_ ? 4u : 3u)]; \
        dst[0] = gk_odd_ ? ((gk_a_ >> 16u) | (gk_b_ << 16u)) : gk_a_; \
        dst[1] = gk_odd_ ? ((gk_b_ >> 16u) | (gk_c_ << 16u)) : gk_b_; \
        dst[2] = gk_odd_ ? ((gk_c_ >> 16u) | (gk_d_ << 16u)) : gk_c_; \
        dst[3] = gk_odd_ ? ((gk_d_ >> 16u) | (gk_e_ << 16u)) : gk_d_; \
    }

// Sixteen bytes at a 4-aligned byte offset.
#define GK_LOAD16_A4(dst, buf, b) \
    { \
        uint gk_w_ = (b) >> 2u; \
        dst[0] = buf[gk_w_]; \
        dst[1] = buf[gk_w_ + 1u]; \
        dst[2] = buf[gk_w_ + 2u]; \
        dst[3] = buf[gk_w_ + 3u]; \
    }

// A second, read-only view of a bound word buffer as 16-byte vectors: one load instruction per
// 16 bytes instead of four, which on GPUs such as the H200 decides how close a weight-streaming
// kernel comes to memory speed. Declare it at file scope before GK_KERNEL with GK_WIDE_VIEW_DECL
// and open it first thing in the body with GK_WIDE_VIEW_OPEN; read it only at 16-byte-aligned
// byte offsets (index = byte / 16).
#if defined(GK_HOME_VULKAN)
#define GK_WIDE_VIEW_DECL(slot, name) \
    layout(std430, set = 0, binding = slot) readonly buffer GkWide_##name { uint4 name[]; };
#define GK_WIDE_VIEW_OPEN(name, of)
#else
#define GK_WIDE_VIEW_DECL(slot, name)
#define GK_WIDE_VIEW_OPEN(name, of) device const uint4* name = (device const uint4*)(of);
#endif

// A small unsigned integer (< 2^23) as float, exactly, without the integer-to-float convert
// (a quarter-rate instruction on many GPUs): the bits of 2^23 + u, minus 2^23. `bias` folds a
// constant offset into the subtraction, still exact: q - 8 for Q4_0 is
// gk_small_uint_to_float(q, 8.0f).
GK_INLINE float gk_small_uint_to_float(uint u, float bias) {
    return gk_bits_to_float(0x4B000000u | u) - (8388608.0f + bias);
}

// ---------------------------------------------------------------------------------------------
// Per-format decoders. A stamp defines one GK_FMT_<NAME>; kernels then see:
//   GK_FMT_BS      elements per block (F32/F16: a virtual block of 16 elements)
//   GK_FMT_BYTES   bytes per block
//   GK_FMT_RAGGED  1 when a row may end inside a block (F32/F16: any column count)
//   GK_FMT_ROW_BYTES(cols)   bytes of one row
//   GK_FMT_UNITS(cols)       16-element units per row (ceil for ragged formats)
//   GK_DECODE16(w, buf, blk_b, p, n_valid)
//       w[0..15] = the 16 elements of unit p (p < GK_FMT_BS / 16) of the block at byte blk_b
//       (w a float[16] variable): w[i] is element GK_FMT_ELEM(p, i) of the block, which is
//       16p + i except where a format pairs nibbles differently. Ragged formats zero the
//       elements at and past n_valid; the others ignore it. The formulas follow
//       python/dasllama/reference/quants.py, whose banners give each layout; fused
//       multiply-adds may round the last bit differently from it.
// Every decoder reads the whole words that cover its unit's bytes and decodes in registers.
// ---------------------------------------------------------------------------------------------
#define GK_UNIT 16u
#define GK_FMT_UPB (GK_FMT_BS / GK_UNIT)

#if defined(GK_FMT_F32)
#define GK_FMT_BS 16u
#define GK_FMT_BYTES 64u
#define GK_FMT_RAGGED 1
#define GK_FMT_ROW_BYTES(cols) ((cols) * 4u)
#define GK_DECODE16(w, buf, blk_b, p, n_valid) \
    { \
        uint gk_w_ = (blk_b) >> 2u; \
        GK_UNROLL for (uint gk_i_ = 0u; gk_i_ < 16u; ++gk_i_) \
            w[gk_i_] = gk_i_ < (n_valid) ? gk_bits_to_float(buf[gk_w_ + gk_i_]) : 0.0f; \
    }

#elif defined(GK_FMT_F16)
#define GK_FMT_BS 16u
#define GK_FMT_BYTES 32u
#define GK_FMT_RAGGED 1
#define GK_FMT_ROW_BYTES(cols) ((cols) * 2u)
// Rows of an even width start on a word: eight word loads. Otherwise one load per element.
#define GK_DECODE16(w, buf, blk_b, p, n_valid) \
    { \
        uint gk_w_ = (blk_b) >> 2u; \
        if (((blk_b) & 2u) == 0u && (n_valid) >= 16u) { \
            GK_UNROLL for (uint gk_i_ = 0u; gk_i_ < 8u; ++gk_i_) { \
                float2 gk_h_ = gk_unpack_half2(buf[gk_w_ + gk_i_]); \
                w[2u * gk_i_] = gk_h_.x; \
                w[2u * gk_i_ + 1u] = gk_h_.y; \
            } \
        } else { \
            GK_UNROLL for (uint gk_i_ = 0u; gk_i_ < 16u; ++gk_i_) \
                w[gk_i_] = gk_i_ < (n_valid) ? GK_F16_A2(buf, (blk_b) + 2u * gk_i_) : 0.0f; \
        } \
    }

#elif defined(GK_FMT_Q4_0) || defined(GK_FMT_Q4_1) || defined(GK_FMT_Q5_0) || defined(GK_FMT_Q5_1)
// The 32-element blocks with nibble quants. Byte j of qs holds element j (low nibble) and
// element j + 16 (high nibble); Q5 formats add bit e of the 32-bit qh as element e's 5th bit.
//   Q4_0: [0:2] d, [2:18] qs                 y = (q - 8) * d
//   Q4_1: [0:2] d, [2:4] m, [4:20] qs        y = q * d + m
//   Q5_0: [0:2] d, [2:6] qh, [6:22] qs       y = (q - 16) * d
//   Q5_1: [0:2] d, [2:4] m, [4:8] qh, [8:24] qs   y = q * d + m
// Unit p reads qs bytes 8p .. 8p+7 only: its 16 values are elements 8p .. 8p+7 (low nibbles)
// and 16+8p .. 16+8p+7 (high nibbles), so the two units of a block read disjoint bytes.
#define GK_FMT_BS 32u
#define GK_FMT_RAGGED 0
#define GK_FMT_ELEM(p, i) ((i) < 8u ? 8u * (p) + (i) : 8u * (p) + 8u + (i))
#if defined(GK_FMT_Q4_0)
#define GK_FMT_BYTES 18u
#define GK_N_QS 2u
#elif defined(GK_FMT_Q4_1)
#define GK_FMT_BYTES 20u
#define GK_N_QS 4u
#elif defined(GK_FMT_Q5_0)
#define GK_FMT_BYTES 22u
#define GK_N_QS 6u
#else
#define GK_FMT_BYTES 24u
#define GK_N_QS 8u
#endif
// Scale (d) and offset (m: the min, or the -8 / -16 bias times d) of the block at byte b.
#if defined(GK_FMT_Q4_0) || defined(GK_FMT_Q5_0)
#define GK_N_DM(d, m, buf, b) \
    d = GK_F16_A2(buf, b); \
    m = 0.0f;
#else
#define GK_N_DM(d, m, buf, b) \
    { \
        float2 gk_dm2_ = gk_unpack_half2(buf[(b) >> 2u]); \
        d = gk_dm2_.x; \
        m = gk_dm2_.y; \
    }
#endif
// The 5th bits of the unit's 16 values as bits 0..15 (Q4 formats: none).
#if defined(GK_FMT_Q5_0)
#define GK_N_HIGH(hb, buf, b, p) \
    { \
        uint gk_qh_ = GK_U16_A2(buf, (b) + 2u) | (GK_U16_A2(buf, (b) + 4u) << 16u); \
        hb = ((gk_qh_ >> (8u * (p))) & 0xFFu) | (((gk_qh_ >> (16u + 8u * (p))) & 0xFFu) << 8u); \
    }
#elif defined(GK_FMT_Q5_1)
#define GK_N_HIGH(hb, buf, b, p) \
    { \
        uint gk_qh_ = buf[((b) >> 2u) + 1u]; \
        hb = ((gk_qh_ >> (8u * (p))) & 0xFFu) | (((gk_qh_ >> (16u + 8u * (p))) & 0xFFu) << 8u); \
    }
#else
#define GK_N_HIGH(hb, buf, b, p) hb = 0u;
#endif
// Q4_0 and Q5_0 scale q minus a bias (exact), Q4_1 and Q5_1 add the min with a fused
// multiply-add.
#if defined(GK_FMT_Q4_0)
#define GK_N_VALUE(v, d, m) gk_small_uint_to_float(v, 8.0f) * d
#elif defined(GK_FMT_Q5_0)
#define GK_N_VALUE(v, d, m) gk_small_uint_to_float(v, 16.0f) * d
#else
#define GK_N_VALUE(v, d, m) gk_fma(gk_small_uint_to_float(v, 0.0f), d, m)
#endif
#define GK_DECODE16(w, buf, blk_b, p, n_valid) \
    { \
        float gk_d_; \
        float gk_m_; \
        GK_N_DM(gk_d_, gk_m_, buf, blk_b) \
        uint gk_hb_; \
        GK_N_HIGH(gk_hb_, buf, blk_b, p) \
        uint gk_qb_ = (blk_b) + GK_N_QS + 8u * (p); \
        uint gk_wi_ = gk_qb_ >> 2u; \
        bool gk_odd_ = (gk_qb_ & 2u) != 0u; \
        uint gk_a_ = buf[gk_wi_]; \
        uint gk_b_ = buf[gk_wi_ + 1u]; \
        uint gk_c_ = buf[gk_wi_ + (gk_odd_ ? 2u : 1u)]; \
        uint gk_q_[2]; \
        gk_q_[0] = gk_odd_ ? ((gk_a_ >> 16u) | (gk_b_ << 16u)) : gk_a_; \
        gk_q_[1] = gk_odd_ ? ((gk_b_ >> 16u) | (gk_c_ << 16u)) : gk_b_; \
        GK_UNROLL for (uint gk_i_ = 0u; gk_i_ < 16u; ++gk_i_) { \
            uint gk_bi_ = gk_i_ & 7u; \
            uint gk_sh_ = (gk_bi_ & 3u) * 8u + (gk_i_ < 8u ? 0u : 4u); \
            uint gk_v_ = ((gk_q_[gk_bi_ >> 2u] >> gk_sh_) & 0xFu) | \
                         (((gk_hb_ >> gk_i_) & 1u) << 4u); \
            w[gk_i_] = GK_N_VALUE(gk_v_, gk_d_, gk_m_); \
        } \
    }

#elif defined(GK_FMT_Q8_0)
// [0:2] d, [2:34] 32 x int8.  y = q * d   (q ^ 0x80 is q + 128 as an unsigned byte)
// Read in place. Regrouping the blocks on upload so that a unit's quants are one aligned
// 16-byte load (each 8 blocks' scales, then their quants) was measured on an H100 and not
// kept: decode products moved under 5% either way (a 1B's 16384 x 2048 gate/up 30.2 against
// 30.6 us, its four-row split products 3-5% slower, Gemma-3's tall head 151 against 158 us;
// the decode steps level), a 1B pp512 2% faster.
#define GK_FMT_BS 32u
#define GK_FMT_BYTES 34u
#define GK_FMT_RAGGED 0
#define GK_DECODE16(w, buf, blk_b, p, n_valid) \
    { \
        float gk_d_ = GK_F16_A2(buf, blk_b); \
        uint gk_q_[4]; \
        GK_LOAD16_A2(gk_q_, buf, (blk_b) + 2u + 16u * (p)) \
        GK_UNROLL for (uint gk_i_ = 0u; gk_i_ < 16u; ++gk_i_) { \
            uint gk_v_ = ((gk_q_[gk_i_ >> 2u] >> ((gk_i_ & 3u) * 8u)) & 0xFFu) ^ 0x80u; \
            w[gk_i_] = gk_small_uint_to_float(gk_v_, 128.0f) * gk_d_; \
        } \
    }

#elif defined(GK_FMT_Q4_K) || defined(GK_FMT_Q5_K)
// Q4_K: [0:2] d, [2:4] dmin, [4:16] 8 packed 6-bit scales and mins, [16:144] qs.
// Q5_K: the same with [16:48] qh (element e's 5th bit: bit e/32 of qh[e%32]) and qs at 48.
// Element e = 64c + 32h + l is nibble h of qs[32c + l]; sub-block j = e / 32;
// y = (d * sc_j) * q - dmin * m_j.  Unit p covers sub-block p/2, c = p/4, h = (p/2)%2,
// l = 16(p%2) + i.
#define GK_FMT_BS 256u
#define GK_FMT_RAGGED 0
#if defined(GK_FMT_Q4_K)
#define GK_FMT_BYTES 144u
#define GK_K_QS 16u
#else
#define GK_FMT_BYTES 176u
#define GK_K_QS 48u
#endif
// The 6-bit scale (sc) and min (mn) of sub-block j from the 12 bytes at the 4-aligned byte sb:
//   j < 4:  sc = s[j] & 63,                       mn = s[j+4] & 63
//   j >= 4: sc = (s[j+4] & 15) | (s[j-4] >> 6) << 4, mn = (s[j+4] >> 4) | (s[j] >> 6) << 4
// Both cases from the same three bytes (j mod 4 of each word), picked without a branch: the
// 16 units of a block share a subgroup and differ in j.
#define GK_K4_SCALE_MIN(sc, mn, buf, sb, j) \
    { \
        uint gk_sw_ = (sb) >> 2u; \
        uint gk_bit_ = ((j) & 3u) * 8u; \
        uint gk_a_ = (buf[gk_sw_] >> gk_bit_) & 0xFFu; \
        uint gk_b_ = (buf[gk_sw_ + 1u] >> gk_bit_) & 0xFFu; \
        uint gk_c_ = (buf[gk_sw_ + 2u] >> gk_bit_) & 0xFFu; \
        bool gk_lo_ = (j) < 4u; \
        sc = gk_lo_ ? (gk_a_ & 63u) : ((gk_c_ & 0xFu) | ((gk_a_ >> 6u) << 4u)); \
        mn = gk_lo_ ? (gk_b_ & 63u) : ((gk_c_ >> 4u) | ((gk_b_ >> 6u) << 4u)); \
    }
#if defined(GK_FMT_Q4_K)
#define GK_K_HIGH_BITS(qh, buf, blk_b, p) \
    uint qh[4]; \
    qh[0] = 0u; qh[1] = 0u; qh[2] = 0u; qh[3] = 0u;
#else
#define GK_K_HIGH_BITS(qh, buf, blk_b, p) \
    uint qh[4]; \
    GK_LOAD16_A4(qh, buf, (blk_b) + 16u + 16u * ((p) & 1u))
#endif
#define GK_DECODE16(w, buf, blk_b, p, n_valid) \
    { \
        float2 gk_dm_ = gk_unpack_half2(buf[(blk_b) >> 2u]); \
        uint gk_j_ = (p) >> 1u; \
        uint gk_sc_; \
        uint gk_mn_; \
        GK_K4_SCALE_MIN(gk_sc_, gk_mn_, buf, (blk_b) + 4u, gk_j_) \
        float gk_d1_ = gk_dm_.x * gk_small_uint_to_float(gk_sc_, 0.0f); \
        float gk_m1_ = gk_dm_.y * gk_small_uint_to_float(gk_mn_, 0.0f); \
        uint gk_q_[4]; \
        GK_LOAD16_A4(gk_q_, buf, (blk_b) + GK_K_QS + 32u * ((p) >> 2u) + 16u * ((p) & 1u)) \
        GK_K_HIGH_BITS(gk_qh_, buf, blk_b, p) \
        uint gk_sh_ = 4u * (gk_j_ & 1u); \
        GK_UNROLL for (uint gk_i_ = 0u; gk_i_ < 16u; ++gk_i_) { \
            uint gk_bit_ = (gk_i_ & 3u) * 8u; \
            uint gk_v_ = ((gk_q_[gk_i_ >> 2u] >> (gk_bit_ + gk_sh_)) & 0xFu) | \
                         (((gk_qh_[gk_i_ >> 2u] >> (gk_bit_ + gk_j_)) & 1u) << 4u); \
            w[gk_i_] = gk_fma(gk_d1_, gk_small_uint_to_float(gk_v_, 0.0f), -gk_m1_); \
        } \
    }
// The same from a 16-byte view of the buffer (Q4_K and Q5_K blocks, 144 and 176 bytes, keep
// every field 16-byte aligned): the header (d, dmin, scales) and the unit's quants in one load
// each, and the high bits in one more for Q5_K.
#define GK_FMT_HAS_WIDE 1
#if defined(GK_FMT_Q4_K)
#define GK_K_HIGH_BITS_WIDE(qh, buf4, blk_b, p) qh[0] = 0u; qh[1] = 0u; qh[2] = 0u; qh[3] = 0u;
#else
#define GK_K_HIGH_BITS_WIDE(qh, buf4, blk_b, p) \
    { \
        uint4 gk_h4_ = buf4[((blk_b) + 16u + 16u * ((p) & 1u)) >> 4u]; \
        qh[0] = gk_h4_.x; qh[1] = gk_h4_.y; qh[2] = gk_h4_.z; qh[3] = gk_h4_.w; \
    }
#endif
#define GK_DECODE16_WIDE(wout, buf4, blk_b, p) \
    { \
        uint4 gk_hd_ = buf4[(blk_b) >> 4u]; \
        float2 gk_dm_ = gk_unpack_half2(gk_hd_.x); \
        uint gk_j_ = (p) >> 1u; \
        uint gk_bit_ = (gk_j_ & 3u) * 8u; \
        uint gk_a_ = (gk_hd_.y >> gk_bit_) & 0xFFu; \
        uint gk_b_ = (gk_hd_.z >> gk_bit_) & 0xFFu; \
        uint gk_c_ = (gk_hd_.w >> gk_bit_) & 0xFFu; \
        bool gk_lo_ = gk_j_ < 4u; \
        uint gk_sc_ = gk_lo_ ? (gk_a_ & 63u) : ((gk_c_ & 0xFu) | ((gk_a_ >> 6u) << 4u)); \
        uint gk_mn_ = gk_lo_ ? (gk_b_ & 63u) : ((gk_c_ >> 4u) | ((gk_b_ >> 6u) << 4u)); \
        float gk_d1_ = gk_dm_.x * gk_small_uint_to_float(gk_sc_, 0.0f); \
        float gk_m1_ = gk_dm_.y * gk_small_uint_to_float(gk_mn_, 0.0f); \
        uint4 gk_q4_ = buf4[((blk_b) + GK_K_QS + 32u * ((p) >> 2u) + 16u * ((p) & 1u)) >> 4u]; \
        uint gk_q_[4]; \
        uint gk_qh_[4]; \
        gk_q_[0] = gk_q4_.x; gk_q_[1] = gk_q4_.y; gk_q_[2] = gk_q4_.z; gk_q_[3] = gk_q4_.w; \
        GK_K_HIGH_BITS_WIDE(gk_qh_, buf4, blk_b, p) \
        uint gk_sh_ = 4u * (gk_j_ & 1u); \
        GK_UNROLL for (uint gk_i_ = 0u; gk_i_ < 16u; ++gk_i_) { \
            uint gk_ib_ = (gk_i_ & 3u) * 8u; \
            uint gk_v_ = ((gk_q_[gk_i_ >> 2u] >> (gk_ib_ + gk_sh_)) & 0xFu) | \
                         (((gk_qh_[gk_i_ >> 2u] >> (gk_ib_ + gk_j_)) & 1u) << 4u); \
            wout[gk_i_] = gk_fma(gk_d1_, gk_small_uint_to_float(gk_v_, 0.0f), -gk_m1_); \
        } \
    }

#elif defined(GK_FMT_Q6_K)
// [0:128] ql, [128:192] qh, [192:208] 16 int8 scales, [208:210] d.  Element e = 128c + 32k + l:
// low = nibble k/2 of ql[64c + 32(k%2) + l], high = (qh[32c + l] >> 2k) & 3;
// y = (d * scale[e/16]) * ((low | high << 4) - 32).  Unit p: c = p/8, k = (p/2)%4,
// l = 16(p%2) + i, scale p.
#define GK_FMT_BS 256u
#define GK_FMT_BYTES 210u
#define GK_FMT_RAGGED 0
#define GK_DECODE16(w, buf, blk_b, p, n_valid) \
    { \
        uint gk_c_ = (p) >> 3u; \
        uint gk_k_ = ((p) >> 1u) & 3u; \
        uint gk_l_ = 16u * ((p) & 1u); \
        float gk_d_ = GK_F16_A2(buf, (blk_b) + 208u); \
        uint gk_sc_ = GK_BYTE(buf, (blk_b) + 192u + (p)) ^ 0x80u; \
        float gk_ds_ = gk_d_ * gk_small_uint_to_float(gk_sc_, 128.0f); \
        uint gk_ql_[4]; \
        uint gk_qh_[4]; \
        GK_LOAD16_A2(gk_ql_, buf, (blk_b) + 64u * gk_c_ + 32u * (gk_k_ & 1u) + gk_l_) \
        GK_LOAD16_A2(gk_qh_, buf, (blk_b) + 128u + 32u * gk_c_ + gk_l_) \
        uint gk_lsh_ = 4u * (gk_k_ >> 1u); \
        uint gk_hsh_ = 2u * gk_k_; \
        GK_UNROLL for (uint gk_i_ = 0u; gk_i_ < 16u; ++gk_i_) { \
            uint gk_bit_ = (gk_i_ & 3u) * 8u; \
            uint gk_v_ = ((gk_ql_[gk_i_ >> 2u] >> (gk_bit_ + gk_lsh_)) & 0xFu) | \
                         (((gk_qh_[gk_i_ >> 2u] >> (gk_bit_ + gk_hsh_)) & 3u) << 4u); \
            w[gk_i_] = gk_ds_ * gk_small_uint_to_float(gk_v_, 32.0f); \
        } \
    }
#endif

#if defined(GK_FMT_BS)
#if GK_FMT_RAGGED
#define GK_FMT_UNITS(cols) (((cols) + 15u) / 16u)
#else
#define GK_FMT_ROW_BYTES(cols) ((cols) / GK_FMT_BS * GK_FMT_BYTES)
#define GK_FMT_UNITS(cols) ((cols) / GK_UNIT)
#endif
// Output i of a unit p is element GK_FMT_ELEM(p, i) of its block (16p + i unless a format
// says otherwise).
#ifndef GK_FMT_ELEM
#define GK_FMT_ELEM(p, i) (16u * (p) + (i))
#endif
// The byte of unit u's block within a row starting at byte row_b, and u's place in its block.
#define GK_FMT_UNIT_BLOCK_BYTE(row_b, u) ((row_b) + ((u) / GK_FMT_UPB) * GK_FMT_BYTES)
#define GK_FMT_UNIT_PART(u) ((u) % GK_FMT_UPB)
#endif

// Appends n_tok rows of K or V to the device cache as f16: element dst_off + t * width + j of
// the cache's f16 array (two per uint, element e in half e & 1 of uint e >> 1) takes
// src[src_off + t * src_stride + j], j < width. dst_off and width must be even: each thread
// writes one whole uint, so no two threads share a word.
// The conversion rounds to nearest even in integer arithmetic (overflow to infinity, f16
// subnormals rounded alike), as the host's f32_to_f16, because packHalf2x16's rounding mode is
// left to the implementation.
// Dispatch: a grid-stride loop over n_tok * width / 2 pairs, so any gx >= 1 is correct;
// gx = min(ceil(n_tok * width / 512), 65535) covers it in one sweep.
#include "../gk/gk.h"

#define GK_BUFFERS(B) B(0, ro, float, src) B(1, rw, uint, cache)
#define GK_ARGS(A) A(uint, n_tok) A(uint, width) A(uint, src_off) A(uint, src_stride) \
    A(uint, dst_off)
#define GK_SHARED(S)
#define GK_WG 256

#ifdef GK_BODY
// The f16 bits of f, rounded to nearest even.
GK_INLINE uint gk_f32_to_f16_rne(float f) {
    uint u = gk_float_to_bits(f);
    uint sign = (u >> 16u) & 0x8000u;
    uint e = (u >> 23u) & 0xFFu;
    uint m = u & 0x7FFFFFu;
    if (e == 0xFFu) return sign | (m != 0u ? 0x7E00u : 0x7C00u);  // NaN stays NaN, inf stays
    int ex = int(e) - 127;
    if (ex > 15) return sign | 0x7C00u;
    uint h;
    uint rem;
    uint halfway;
    if (ex >= -14) {
        // Normal: keep 10 mantissa bits; a carry out of the mantissa bumps the exponent,
        // and out of exponent 30 gives the infinity 0x7C00.
        h = (uint(ex + 15) << 10u) | (m >> 13u);
        rem = m & 0x1FFFu;
        halfway = 0x1000u;
    } else {
        // Subnormal or zero: the 24-bit significand shifted right by -1 - ex (14..24).
        uint shift = uint(-1 - ex);
        if (shift > 24u) return sign;
        uint sig = m | 0x800000u;
        h = sig >> shift;
        rem = sig & ((1u << shift) - 1u);
        halfway = 1u << (shift - 1u);
    }
    if (rem > halfway || (rem == halfway && (h & 1u) != 0u)) h += 1u;
    return sign | h;
}

GK_KERNEL(kv_store, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint pairs = args.width / 2u;
    uint total = args.n_tok * pairs;
    uint step = GK_NUM_GROUPS.x * GK_WG;
    for (uint idx = GK_GROUP_ID.x * GK_WG + GK_LOCAL_ID; idx < total; idx += step) {
        uint t = idx / pairs;
        uint jp = idx - t * pairs;
        uint s = args.src_off + t * args.src_stride + 2u * jp;
        uint lo = gk_f32_to_f16_rne(src[s]);
        uint hi = gk_f32_to_f16_rne(src[s + 1u]);
        cache[args.dst_off / 2u + t * pairs + jp] = lo | (hi << 16u);
    }
}
GK_KERNEL_END
#endif

// Float32 to float16 bits, rounded to nearest even in integer arithmetic (overflow to infinity,
// f16 subnormals rounded alike), as the host's f32_to_f16: packHalf2x16's rounding mode is left
// to the implementation, and K/V rows written on the device must equal the host cache's.
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

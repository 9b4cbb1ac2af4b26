// Arithmetic that both homes must round alike, written with explicit fused multiply-adds so no
// compiler can contract or reorder it.

// a / b correctly rounded (round to nearest even) for normal-range operands, without the native
// divide (Vulkan allows it 2.5 ulp, Metal's fast path more). A bit-trick seed for 1/b, four
// Newton steps (relative error ~1e-7 -> ~1 ulp), the quotient refined once, then the one of
// {q - ulp, q, q + ulp} whose exact residual a - q*b is smallest.
GK_INLINE float gk_div(float a, float b) {
    // Seed: the reciprocal's exponent mirrored, relative error under 1/8 for normal b.
    GK_PRECISE float r = gk_bits_to_float(0x7EF311C7u - gk_float_to_bits(b));
    r = gk_fma(r, gk_fma(-b, r, 1.0f), r);
    r = gk_fma(r, gk_fma(-b, r, 1.0f), r);
    r = gk_fma(r, gk_fma(-b, r, 1.0f), r);
    r = gk_fma(r, gk_fma(-b, r, 1.0f), r);
    GK_PRECISE float q = a * r;
    q = gk_fma(gk_fma(-q, b, a), r, q);
    // Neighbours by the bit pattern (q is finite and nonzero here for normal-range inputs).
    uint bits = gk_float_to_bits(q);
    GK_PRECISE float lo = gk_bits_to_float(bits - 1u);
    GK_PRECISE float hi = gk_bits_to_float(bits + 1u);
    GK_PRECISE float e_q = abs(gk_fma(-q, b, a));
    GK_PRECISE float e_lo = abs(gk_fma(-lo, b, a));
    GK_PRECISE float e_hi = abs(gk_fma(-hi, b, a));
    GK_PRECISE float best = q;
    GK_PRECISE float e_best = e_q;
    // Ties go to the even significand, as IEEE round-to-nearest does.
    if (e_lo < e_best || (e_lo == e_best && ((bits - 1u) & 1u) == 0u)) { best = lo; e_best = e_lo; }
    if (e_hi < e_best || (e_hi == e_best && ((bits + 1u) & 1u) == 0u)) { best = hi; e_best = e_hi; }
    return a == 0.0f ? a : best;
}

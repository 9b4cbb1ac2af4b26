// Arithmetic that both homes must round alike. Every step is written out (GK_PRECISE: no
// contraction or reassociation), and no result relies on fma() being fused: Vulkan allows it
// to round twice, and lavapipe does.

// --- exact products, angle reduction, sin/cos, tanh ------------------------------------------
// Vulkan lets fma() round like a multiply followed by an add (lavapipe does exactly that), so
// the exact products below split operands into 12-bit halves by masking (Dekker 1971): every
// partial product fits a float's 24 bits and is exact whether or not a compiler fuses it.

// The top 12 significant bits of a (its low 12 mantissa bits cleared); a - gk_split_hi(a) is
// exact and holds the other 12.
GK_INLINE float gk_split_hi(float a) { return gk_bits_to_float(gk_float_to_bits(a) & 0xFFFFF000u); }

// The rounding error of p = fl(a * b): a * b == p + gk_two_prod_err(a, b, p) exactly, for
// normal-range operands and products.
GK_INLINE float gk_two_prod_err(float a, float b, float p) {
    GK_PRECISE float ah = gk_split_hi(a);
    GK_PRECISE float al = a - ah;
    GK_PRECISE float bh = gk_split_hi(b);
    GK_PRECISE float bl = b - bh;
    GK_PRECISE float e = ((ah * bh - p) + ah * bl + al * bh) + al * bl;
    return e;
}

// The exact residual a - q*b, rounded once, without trusting fma to be fused.
GK_INLINE float gk_residual(float a, float q, float b) {
    GK_PRECISE float p = q * b;
    GK_PRECISE float r = (a - p) - gk_two_prod_err(q, b, p);
    return r;
}

// a / b correctly rounded (round to nearest even) for normal-range operands (quotients within
// about 2^+-100: below 2^-114 the residual's split halves are subnormal, and devices that flush
// subnormals lose them), without the native
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
    q = gk_fma(gk_residual(a, q, b), r, q);
    // Neighbours by the bit pattern (q is finite and nonzero here for normal-range inputs).
    uint bits = gk_float_to_bits(q);
    GK_PRECISE float lo = gk_bits_to_float(bits - 1u);
    GK_PRECISE float hi = gk_bits_to_float(bits + 1u);
    GK_PRECISE float e_q = abs(gk_residual(a, q, b));
    GK_PRECISE float e_lo = abs(gk_residual(a, lo, b));
    GK_PRECISE float e_hi = abs(gk_residual(a, hi, b));
    GK_PRECISE float best = q;
    GK_PRECISE float e_best = e_q;
    // Ties go to the even significand, as IEEE round-to-nearest does.
    if (e_lo < e_best || (e_lo == e_best && ((bits - 1u) & 1u) == 0u)) { best = lo; e_best = e_lo; }
    if (e_hi < e_best || (e_hi == e_best && ((bits + 1u) & 1u) == 0u)) { best = hi; e_best = e_hi; }
    return a == 0.0f ? a : best;
}

// sin and cos of a reduced angle |r| <= pi/4 + 0.01: Taylor series, truncated where the next
// term is below 1e-10 at |r| = 0.8 (float rounding, ~6e-8, dominates).
GK_INLINE float gk_sin_reduced(float r) {
    GK_PRECISE float z = r * r;
    GK_PRECISE float p = -2.5052108385441720e-08f;  // -1/11!
    p = p * z + 2.7557319223985893e-06f;             //  1/9!
    p = p * z - 1.9841269841269841e-04f;             // -1/7!
    p = p * z + 8.3333333333333333e-03f;             //  1/5!
    p = p * z - 1.6666666666666667e-01f;             // -1/3!
    GK_PRECISE float s = r + (r * z) * p;
    return s;
}
GK_INLINE float gk_cos_reduced(float r) {
    GK_PRECISE float z = r * r;
    GK_PRECISE float p = -2.7557319223985891e-07f;  // -1/10!
    p = p * z + 2.4801587301587302e-05f;             //  1/8!
    p = p * z - 1.3888888888888889e-03f;             // -1/6!
    p = p * z + 4.1666666666666667e-02f;             //  1/4!
    GK_PRECISE float c = 1.0f - 0.5f * z + (z * z) * p;
    return c;
}

// (cos, sin) of the angle a_hi + a_lo (a_lo below an ulp of a_hi; |angle| < 2^22), with an
// absolute error near 1e-7 however large the angle: the native sin/cos are allowed 2^-11.
// Cody-Waite reduction by k * pi/2 with pi/2 held as three floats: k * C1 is taken as an exact
// product pair p1 + p2, and a_hi - p1 is exact (for k != 0 both exceed 0.5 and their difference
// is below 1, a multiple of the smaller one's ulp), so the reduced angle is rounded only once.
GK_INLINE float2 gk_cos_sin(float a_hi, float a_lo) {
    const float C1 = 1.57079637050628662109375f;          // float(pi / 2)
    const float C2 = -4.37113882867379289e-08f;           // float(pi / 2 - C1)
    const float C3 = -1.71512451000588187e-15f;           // float(pi / 2 - C1 - C2)
    GK_PRECISE float k = floor(a_hi * 0.636619772367581343f + 0.5f);
    GK_PRECISE float p1 = k * C1;
    GK_PRECISE float p2 = gk_two_prod_err(k, C1, p1);
    GK_PRECISE float head = a_hi - p1;
    GK_PRECISE float tail = ((a_lo - p2) - k * C2) - k * C3;
    GK_PRECISE float r = head + tail;
    float s = gk_sin_reduced(r);
    float c = gk_cos_reduced(r);
    // Quadrant k mod 4 (two's complement keeps it right for negative k).
    uint quadrant = uint(int(k)) & 3u;
    float cos_a = quadrant == 0u ? c : (quadrant == 1u ? -s : (quadrant == 2u ? -c : s));
    float sin_a = quadrant == 0u ? s : (quadrant == 1u ? c : (quadrant == 2u ? -s : -c));
    return gk_float2(cos_a, sin_a);
}

// tanh(x) to a few ulp: an odd polynomial (least-squares minimax fit, 1.3 ulp relative in
// float) below 0.75, 1 - 2 / (exp(2|x|) + 1) above, where the cancellation costs under 2 ulp.
// The native tanh may be computed from exponentials with no such care (Vulkan inherits its
// precision from sinh/cosh), losing all relative accuracy near zero.
GK_INLINE float gk_tanh(float x) {
    float ax = abs(x);
    GK_PRECISE float z = x * x;
    GK_PRECISE float p = -6.328165181912482e-04f;
    p = p * z + 2.969730645418167e-03f;
    p = p * z - 8.596677333116531e-03f;
    p = p * z + 2.1804368123412132e-02f;
    p = p * z - 5.395958200097084e-02f;
    p = p * z + 1.333327740430832e-01f;
    p = p * z - 3.333333134651184e-01f;
    GK_PRECISE float small = x + (x * z) * p;
    // tanh(10) rounds to 1 in float; clamping keeps exp() finite.
    GK_PRECISE float e = exp(2.0f * gk_min(ax, 10.0f));
    GK_PRECISE float big = 1.0f - gk_div(2.0f, e + 1.0f);
    return ax < 0.75f ? small : (x < 0.0f ? -big : big);
}

// 1 / sqrt(sum_sq / n + eps), the RMSNorm scale: the native reciprocal square root (allowed 2
// ulp) and one Newton step, which leaves ~1 ulp.
GK_INLINE float gk_rms_inv(float sum_sq, uint n, float eps) {
    GK_PRECISE float v = gk_div(sum_sq, float(n)) + eps;
    GK_PRECISE float r = gk_rsqrt(v);
    GK_PRECISE float inv = (0.5f * r) * (3.0f - v * r * r);
    return inv;
}

// The gate activation of a gated FFN, as cpu::swiglu (gelu == 0: g / (1 + exp(-g))) and
// cpu::geglu_tanh (gelu != 0: g / (1 + exp(-2 sqrt(2/pi) (g + 0.044715 g^3)))), the cube taken
// left to right as the CPU writes it. Past 80 the exp term is below 1e-33 of the gate: the
// clamp keeps the divisor finite and normal, as gk_div needs.
GK_INLINE float gk_gate_act(float g, uint gelu) {
    GK_PRECISE float e_arg = -g;
    if (gelu != 0u) {
        GK_PRECISE float cube = 0.044715f * g * g * g;
        e_arg = -1.5957691669464111f * (g + cube);
    }
    GK_PRECISE float den = 1.0f + exp(gk_min(e_arg, 80.0f));
    return gk_div(g, den);
}

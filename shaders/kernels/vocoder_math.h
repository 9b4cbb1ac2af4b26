// Helpers of the vocoder templates (adain, snake, conv1d, conv_tr1d): the activations of
// StyleTTS2's decoder and the iSTFTNet generator, spelled as their CPU chain rounds them.
#ifndef GK_VOCODER_MATH_H
#define GK_VOCODER_MATH_H
#ifdef GK_BODY

// LeakyReLU as kokoro::leaky_relu: anything not >= 0 (NaN included) times the slope.
GK_INLINE float gk_leaky(float v, float slope) { return v >= 0.0f ? v : v * slope; }

// Snake as nn::snake: x + (1 / alpha) sin(alpha x)^2, rounded in that order. The sine goes
// through gk_cos_sin (Cody-Waite reduction): alpha x reaches the thousands in the generator's
// later blocks, where the native sine is allowed errors of 2^-11 absolute.
GK_INLINE float gk_snake(float v, float alpha, float inv_alpha) {
    GK_PRECISE float ax = alpha * v;
    float s = gk_cos_sin(ax, 0.0f).y;
    GK_PRECISE float sq = s * s;
    GK_PRECISE float scaled = sq * inv_alpha;
    GK_PRECISE float y = v + scaled;
    return y;
}

#endif
#endif

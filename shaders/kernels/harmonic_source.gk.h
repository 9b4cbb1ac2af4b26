// The iSTFTNet harmonic source (kokoro::HarmonicSource, noise off: the exported graph's
// deterministic form), in two stamps over the same buffers:
//   GK_HARM_STAGE 0  phase[h * frames + i] for h < harmonics, i < frames: the running sum over
//                    frames of the downsampled increments rad_f (the float32 cumsum, in order:
//                    one thread per harmonic), times 2, pi and up. gx = ceil(harmonics / 64).
//   GK_HARM_STAGE 1  src[out_off + l], l < frames * up: tanh(sum_h sin(phase_h(l)) amp
//                    [f0 > threshold] w[h] + bias), phase_h(l) the linear (half pixel) resize of
//                    the frame phases back to the sample rate. A grid-stride loop over samples.
// rad(h, l) = frac(f0[f0_off + l / up] (h + 1) / sample_rate); the resize taps are onnxruntime's
// Resize (linear, half_pixel) as harmonic_source.cpp computes them. The phases reach 2 pi times
// the frames' cycles (10^5 rad and more): the sine is gk_cos_sin's (Cody-Waite, ~1e-7 absolute),
// where the CPU's sinf rounds once; phases themselves are the same float32 values.
#include "../gk/gk.h"

#ifndef GK_HARM_STAGE
#define GK_HARM_STAGE 0
#endif

#define GK_BUFFERS(B) B(0, ro, float, f0) B(1, rw, float, phase) B(2, ro, float, w) \
    B(3, wo, float, src)
#define GK_ARGS(A) A(uint, frames) A(uint, up) A(uint, harmonics) A(float, sample_rate) \
    A(float, amp) A(float, threshold) A(float, bias) A(uint, f0_off) A(uint, out_off)
#define GK_SHARED(S)
#if GK_HARM_STAGE == 0
#define GK_WG 64
#else
#define GK_WG 256
#endif

#ifdef GK_BODY
// Resize (linear, half_pixel) source position of output i: (i + 0.5) / scale - 0.5, clamped to
// [0, length - 1]; x = lo tap, y = hi tap, z = weight of hi.
GK_INLINE float4 gk_resize_tap(uint i, float scale, uint length) {
    GK_PRECISE float pos = gk_div(float(i) + 0.5f, scale) - 0.5f;
    pos = gk_min(gk_max(pos, 0.0f), float(length - 1u));
    float lo = floor(pos);
    float hi = gk_min(lo + 1.0f, float(length - 1u));
    GK_PRECISE float frac = pos - lo;
    return gk_float4(lo, hi, frac, 0.0f);
}

GK_INLINE float gk_lerp_graph(float a, float b, float frac) {
    GK_PRECISE float wa = a * (1.0f - frac);
    GK_PRECISE float wb = b * frac;
    GK_PRECISE float s = wa + wb;
    return s;
}

GK_KERNEL(harmonic_source, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint up = args.up;
    uint F = args.frames;
#if GK_HARM_STAGE == 0
    uint h = GK_GROUP_ID.x * GK_WG + GK_LOCAL_ID;
    if (h < args.harmonics) {
        uint L = F * up;
        GK_PRECISE float down = gk_div(1.0f, float(up));
        GK_PRECISE float mult = float(h + 1u);
        GK_PRECISE float acc = 0.0f;
        for (uint i = 0u; i < F; ++i) {
            float4 t = gk_resize_tap(i, down, L);
            uint lo = uint(t.x);
            uint hi = uint(t.y);
            GK_PRECISE float rl = gk_div(f0[args.f0_off + lo / up] * mult, args.sample_rate);
            rl = rl - floor(rl);
            GK_PRECISE float rh = gk_div(f0[args.f0_off + hi / up] * mult, args.sample_rate);
            rh = rh - floor(rh);
            acc = acc + gk_lerp_graph(rl, rh, t.z);
            GK_PRECISE float twice = acc * 2.0f;
            GK_PRECISE float ph = twice * 3.14159265358979323846f;
            phase[h * F + i] = ph * float(up);
        }
    }
#else
    uint L = F * up;
    uint step = GK_NUM_GROUPS.x * GK_WG;
    for (uint l = GK_GROUP_ID.x * GK_WG + GK_LOCAL_ID; l < L; l += step) {
        float4 t = gk_resize_tap(l, float(up), F);
        uint lo = uint(t.x);
        uint hi = uint(t.y);
        bool voiced = f0[args.f0_off + l / up] > args.threshold;
        GK_PRECISE float merged = 0.0f;
        for (uint h = 0u; h < args.harmonics; ++h) {
            float ph = gk_lerp_graph(phase[h * F + lo], phase[h * F + hi], t.z);
            GK_PRECISE float s = voiced ? gk_cos_sin(ph, 0.0f).y * args.amp : 0.0f;
            GK_PRECISE float term = s * w[h];
            merged = merged + term;
        }
        src[args.out_off + l] = gk_tanh(merged + args.bias);
    }
#endif
}
GK_KERNEL_END
#endif

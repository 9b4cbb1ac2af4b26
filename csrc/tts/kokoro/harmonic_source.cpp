#include "tts/kokoro/harmonic_source.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/errors.h"
#include "core/thread_pool.h"

namespace dasllama::kokoro {

namespace {

constexpr float kPi = 3.14159265358979323846f;   // the graph's float32 pi
constexpr double kTwoPi = 6.283185307179586;

// A counter-based generator: the value for (seed, stream, index) does not depend on how the
// samples are split over threads. splitmix64's finalizer over a mixed counter.
uint64_t mix(uint64_t seed, uint64_t stream, uint64_t index) {
    uint64_t z = seed + 0x9e3779b97f4a7c15ull * (stream * 0x100000001b3ull + index + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Uniform in (0, 1) from the top 53 bits.
double uniform(uint64_t bits) { return (double(bits >> 11) + 0.5) * 0x1.0p-53; }

// A standard normal (Box-Muller on two counter draws).
float gaussian(uint64_t seed, uint64_t stream, uint64_t index) {
    const double u1 = uniform(mix(seed, stream, 2 * index));
    const double u2 = uniform(mix(seed, stream, 2 * index + 1));
    return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2));
}

// onnxruntime's Resize (linear, half_pixel) source coordinate for output i, as float32:
// x = (i + 0.5) / scale - 0.5, clamped to [0, length - 1]; the taps lo, hi and weight frac.
struct Tap {
    int64_t lo, hi;
    float frac;
};

Tap resize_tap(int64_t i, float scale, int64_t length) {
    float pos = (float(i) + 0.5f) / scale - 0.5f;
    pos = std::min(std::max(pos, 0.0f), float(length - 1));
    const int64_t lo = int64_t(std::floor(pos));
    return {lo, std::min(lo + 1, length - 1), pos - float(lo)};
}

float lerp(float a, float b, float frac) {
    const float wa = a * (1.0f - frac);
    const float wb = b * frac;
    return wa + wb;
}

}  // namespace

HarmonicSource::HarmonicSource(HarmonicSourceParams p) : p_(std::move(p)) {
    if (p_.harmonics <= 0 || p_.upsample <= 0 || p_.sample_rate <= 0)
        throw ShapeError("harmonic source: harmonics " + std::to_string(p_.harmonics) +
                         ", upsample " + std::to_string(p_.upsample) + ", sample_rate " +
                         std::to_string(p_.sample_rate) + " must be positive");
    if (int64_t(p_.merge_weight.size()) != p_.harmonics)
        throw ShapeError("harmonic source: a merge weight of " +
                         std::to_string(p_.merge_weight.size()) + " values for " +
                         std::to_string(p_.harmonics) + " harmonics");
}

void HarmonicSource::forward(const float* f0, int64_t frames, float* out, ThreadPool& pool,
                             const SourceNoise& noise) const {
    if (frames <= 0)
        throw ShapeError("harmonic source: " + std::to_string(frames) + " F0 frames");
    const int64_t H = p_.harmonics, up = p_.upsample, L = frames * up;
    const float sr = float(p_.sample_rate);
    std::vector<float> init(size_t(H), 0.0f);   // initial phases (cycles), 0 for the fundamental
    if (noise.enabled)
        for (int64_t h = 1; h < H; ++h) init[size_t(h)] = float(uniform(mix(noise.seed, 0, uint64_t(h))));
    // rad at sample l: frac(f0_up[l] * (h + 1) / sr), the initial phase added at sample 0.
    auto rad = [&](int64_t h, int64_t l) {
        const float prod = f0[l / up] * float(h + 1);
        float r = prod / sr;
        r = r - std::floor(r);
        if (l == 0) r = r + init[size_t(h)];
        return r;
    };
    // Frame rate: the downsampled increments, their running sum, times 2 pi and up.
    const float down = 1.0f / float(up);
    std::vector<float> phase_f(size_t(H * frames));
    for (int64_t h = 0; h < H; ++h) {
        float acc = 0.0f;
        for (int64_t i = 0; i < frames; ++i) {
            const Tap t = resize_tap(i, down, L);
            acc = acc + lerp(rad(h, t.lo), rad(h, t.hi), t.frac);
            const float twice = acc * 2.0f;
            const float ph = twice * kPi;
            phase_f[size_t(h * frames + i)] = ph * float(up);
        }
    }
    const float* w = p_.merge_weight.data();
    const float amp = p_.sine_amp, thr = p_.voiced_threshold, bias = p_.merge_bias;
    const float unvoiced_noise = p_.sine_amp / 3.0f;
    pool.run([&](int share, int shares) {
        const int64_t l0 = L * share / shares, l1 = L * (share + 1) / shares;
        for (int64_t l = l0; l < l1; ++l) {
            const Tap t = resize_tap(l, float(up), frames);
            const bool voiced = f0[l / up] > thr;
            float merged = 0.0f;
            for (int64_t h = 0; h < H; ++h) {
                const float ph = lerp(phase_f[size_t(h * frames + t.lo)],
                                      phase_f[size_t(h * frames + t.hi)], t.frac);
                float s = voiced ? std::sin(ph) * amp : 0.0f;
                if (noise.enabled)
                    s = s + (voiced ? noise.noise_std : unvoiced_noise) *
                                gaussian(noise.seed, uint64_t(h + 1), uint64_t(l));
                const float term = s * w[h];
                merged = merged + term;
            }
            out[l] = std::tanh(merged + bias);
        }
    });
}

}  // namespace dasllama::kokoro

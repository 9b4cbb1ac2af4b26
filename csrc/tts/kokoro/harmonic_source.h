// The iSTFTNet generator's harmonic source (SineGen + the merge linear + tanh) as Kokoro's
// exported graph computes it, in float32 step by step (the NumPy reference is
// ReferenceKokoro.harmonic_source):
//
//   f0_up[l]   = f0[l / up]                                    (up samples per F0 frame)
//   rad[h, l]  = frac(f0_up[l] * (h + 1) / sample_rate)        (h < harmonics)
//   rad_f      = linear resize (half pixel) of rad to the F0 frame rate, scale 1 / up
//   phase_f    = cumsum over frames of rad_f (float32, in order) * 2 * pi
//   phase[h,l] = linear resize (half pixel) of phase_f * up back to the sample rate, scale up
//   sines      = sin(phase) * sine_amp * (f0_up > voiced_threshold)
//   source[l]  = tanh(sum_h sines[h, l] w[h] + b)
//
// The exported graph draws no random initial phase and no noise: that deterministic form is
// the parity mode. SourceNoise adds SineGen's training-time randomness from a seeded
// generator (a uniform initial phase per harmonic above the fundamental; Gaussian noise of
// noise_std where voiced and sine_amp / 3 where not) for callers who want it.
#pragma once

#include <cstdint>
#include <vector>

namespace dasllama {
class ThreadPool;
}

namespace dasllama::kokoro {

struct HarmonicSourceParams {
    int64_t harmonics = 9;          // the fundamental and its overtones
    int64_t upsample = 300;         // samples per F0 frame
    int64_t sample_rate = 24000;
    float sine_amp = 0.1f;
    float voiced_threshold = 10.0f; // Hz: F0 above it is voiced
    std::vector<float> merge_weight;   // [harmonics]: m_source.l_linear (9 -> 1)
    float merge_bias = 0.0f;
};

// SineGen's training-time randomness, off by default (the graph's form).
struct SourceNoise {
    bool enabled = false;
    uint64_t seed = 0;
    float noise_std = 0.003f;       // SineGen's noise_std (voiced samples)
};

class HarmonicSource {
public:
    HarmonicSource() = default;
    // ShapeError when the merge weight does not hold `harmonics` values or a size is not
    // positive.
    explicit HarmonicSource(HarmonicSourceParams p);

    const HarmonicSourceParams& params() const { return p_; }
    int64_t samples(int64_t frames) const { return frames * p_.upsample; }
    // f0 [frames] (Hz at the F0 frame rate) -> out [samples(frames)] at the sample rate.
    void forward(const float* f0, int64_t frames, float* out, ThreadPool& pool,
                 const SourceNoise& noise = {}) const;

private:
    HarmonicSourceParams p_;
};

}  // namespace dasllama::kokoro

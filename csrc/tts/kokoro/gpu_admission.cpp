#include "tts/kokoro/gpu_admission.h"

namespace dasllama::kokoro {

namespace {

std::string str(int64_t v) { return std::to_string(v); }

}  // namespace

int64_t gpu_vocoder_largest(const VocoderGpuDims& d, int64_t frames, std::string* name) {
    const int64_t curve = 2 * frames;
    int64_t best = 0;
    auto see = [&](int64_t elems, const char* what) {
        if (elems > best) {
            best = elems;
            if (name) *name = what;
        }
    };
    see(d.decoder_rows * curve, "decoder activations");
    const int64_t samples = curve * d.upsample;
    see(samples, "harmonic source");
    see(d.harmonics * curve, "source phases");
    const int64_t spec_frames = d.hop > 0 ? samples / d.hop + 1 : 0;
    see(2 * d.bins * spec_frames, "source spectrum");
    int64_t l = curve;
    for (size_t i = 0; i < d.stage_channels.size(); ++i) {
        l *= i < d.stage_strides.size() ? d.stage_strides[i] : 1;
        see(d.stage_channels[i] * (l + 1), "generator activations");
    }
    see(2 * d.bins * (l + 1), "generator spectrum");
    see(d.largest_weight, "a weight tensor");
    return best;
}

std::string gpu_vocoder_unfit(const VocoderGpuDims& d, int64_t frames, uint64_t max_binding_bytes) {
    if (frames <= 0) return "a call of " + str(frames) + " frames";
    if (d.stage_channels.empty() || d.stage_channels.size() != d.stage_strides.size())
        return "a generator of " + str(int64_t(d.stage_channels.size())) + " stages and " +
               str(int64_t(d.stage_strides.size())) + " upsampling factors";
    if (d.resblocks < 1 || d.resblocks > kGpuMaxResblocks)
        return str(d.resblocks) + " residual blocks per stage; the mean kernel takes 1 to " +
               str(kGpuMaxResblocks);
    if (d.bins <= 0 || d.hop <= 0 || d.harmonics <= 0 || d.upsample <= 0)
        return "bins " + str(d.bins) + ", hop " + str(d.hop) + ", harmonics " + str(d.harmonics) +
               ", upsample " + str(d.upsample) + " must be positive";
    std::string what;
    const int64_t elems = gpu_vocoder_largest(d, frames, &what);
    if (elems > kGpuMaxElements)
        return "the " + what + " of " + str(elems) + " elements exceed the kernels' 32-bit "
               "positions (" + str(kGpuMaxElements) + ")";
    const uint64_t bytes = uint64_t(elems) * sizeof(float);
    if (bytes > max_binding_bytes)
        return "the " + what + " of " + str(int64_t(bytes)) + " bytes for " + str(frames) +
               " frames exceed the device's storage binding of " +
               str(int64_t(max_binding_bytes)) + " bytes";
    return "";
}

}  // namespace dasllama::kokoro

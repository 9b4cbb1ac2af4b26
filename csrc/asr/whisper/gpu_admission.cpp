#include "asr/whisper/gpu_admission.h"

namespace dasllama::whisper {

int64_t gpu_encoder_largest(const EncoderGpuDims& e, std::string* name) {
    const int64_t frames = 2 * e.n_ctx;
    struct Item {
        const char* what;
        int64_t elems;
    } items[] = {
        {"the mel window", e.n_mels * frames},
        {"conv1's output", e.d * frames},
        {"the q/k/v rows", 3 * e.d * e.n_ctx},
        {"the MLP's hidden rows", e.ff * e.n_ctx},
        {"a convolution's weights", e.d * e.d * 3},
    };
    int64_t best = 0;
    for (const Item& it : items)
        if (it.elems > best) {
            best = it.elems;
            if (name) *name = it.what;
        }
    return best;
}

std::string gpu_encoder_unfit(const EncoderGpuDims& e, uint64_t max_binding_bytes) {
    if (e.n_mels <= 0 || e.n_ctx <= 0 || e.d <= 0 || e.heads <= 0 || e.ff <= 0 || e.layers <= 0)
        return "the encoder's widths must be positive";
    if (e.d % e.heads != 0)
        return "n_audio_state " + std::to_string(e.d) + " is not a multiple of n_audio_head " +
               std::to_string(e.heads);
    const int64_t hd = e.d / e.heads;
    if (hd > kGpuMaxHeadDim)
        return "head dimension " + std::to_string(hd) + " is over attention_f32's " +
               std::to_string(kGpuMaxHeadDim);
    if (e.n_ctx > kGpuMaxKeys)
        return "n_audio_ctx " + std::to_string(e.n_ctx) + " is over attention_f32's " +
               std::to_string(kGpuMaxKeys) + " keys";
    if (e.heads * e.n_ctx > kGpuMaxGroupsX)
        return std::to_string(e.heads) + " heads x " + std::to_string(e.n_ctx) +
               " frames is over the " + std::to_string(kGpuMaxGroupsX) + " workgroups of x";
    std::string what;
    const int64_t elems = gpu_encoder_largest(e, &what);
    if (elems > kGpuMaxElements)
        return what + " (" + std::to_string(elems) + " floats) is over 32-bit offsets";
    const uint64_t bytes = uint64_t(elems) * sizeof(float);
    if (bytes > max_binding_bytes)
        return what + " (" + std::to_string(bytes) + " bytes) is over the device's binding range of " +
               std::to_string(max_binding_bytes) + " bytes";
    return "";
}

}  // namespace dasllama::whisper

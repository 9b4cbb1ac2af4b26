// Kokoro (and Kitten TTS) on the CPU: the weights, a thread pool and the chain's stages.
// This file runs stages 1-5 (ALBERT, duration encoder, durations and alignment, F0 / energy,
// text encoder); the decoder and generator are their own files and take the prediction below.
//
// On a GPU device (device = "vulkan", "vulkan:N", "vulkan:NAME", "metal") the decoder and
// generator are the vocoder seat (gpu_vocoder.h): stages 1-5 stay here on the CPU.
//
// predict(ids, style, speed) adds the boundary id before and after the phonemes, as the
// reference's synthesize does; the stage methods take ids as given. Not thread-safe: one call
// at a time per model (the stages share the pool).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tts/kokoro/albert.h"
#include "tts/kokoro/prosody.h"
#include "tts/kokoro/text_encoder.h"
#include "tts/kokoro/weights.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::kokoro {

constexpr int64_t kBoundaryId = 0;   // the id the model reads before and after the phonemes

// What stages 1-5 give the decoder (shapes NumPy order; T counts the boundary ids).
struct KokoroPrediction {
    std::vector<int64_t> ids;          // [T] with boundaries
    std::vector<int64_t> durations;    // [T] frames per id (the predicted ones)
    int64_t frames = 0;                // F = sum of the durations used
    std::vector<float> d_en;           // [T, 512]  ALBERT's output
    std::vector<float> d;              // [T, 640]  the duration encoder's output
    std::vector<float> asr;            // [512, F]  aligned text features
    std::vector<float> f0, n;          // [2F] each
};

class VocoderGpu;

class KokoroModel {
public:
    // n_threads <= 0: one per physical core. device: "cpu", or a GPU spec for gpu::open_device;
    // an unknown or missing device throws DeviceError naming the devices there are.
    explicit KokoroModel(const std::string& path, int n_threads = 0,
                         const std::string& device = "cpu");
    ~KokoroModel();
    KokoroModel(const KokoroModel&) = delete;
    KokoroModel& operator=(const KokoroModel&) = delete;

    const KokoroWeights& weights() const { return *weights_; }
    std::shared_ptr<const KokoroWeights> shared_weights() const { return weights_; }
    const KokoroConfig& config() const { return weights_->config(); }
    ThreadPool& pool() const { return *pool_; }

    const Albert& albert() const { return albert_; }
    const Prosody& prosody() const { return prosody_; }
    const TextEncoder& text_encoder() const { return text_encoder_; }
    // The vocoder seat, nullptr on the CPU. Calls go one at a time, as for the whole model.
    VocoderGpu* gpu() const { return gpu_.get(); }

    // phoneme ids (no boundaries), style row [style_width], speed > 0 -> stages 1-5.
    // durations (optional, with boundaries): use these frames instead of the predicted ones
    // (a peer's, to compare what follows from the same point); d_en likewise (T x 512).
    KokoroPrediction predict(const std::vector<int64_t>& phoneme_ids, const float* style,
                             float speed, const std::vector<int64_t>* durations = nullptr,
                             const std::vector<float>* d_en = nullptr) const;

private:
    std::shared_ptr<const KokoroWeights> weights_;
    std::unique_ptr<ThreadPool> pool_;
    Albert albert_;
    Prosody prosody_;
    TextEncoder text_encoder_;
    std::unique_ptr<VocoderGpu> gpu_;
};

}  // namespace dasllama::kokoro

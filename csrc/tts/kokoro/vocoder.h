// Kokoro's back half (stages 6-7: decoder and generator) and the whole chain on the CPU.
//
// KokoroVocoder holds the decoder and generator built from a model's weights (their int8
// weights repacked once). vocoder_for(model) hands out the one belonging to a KokoroModel,
// built on first use and kept while that model's weights live (a record keyed by the weights
// object, checked through a weak reference, so a later model at the same address never gets
// a stale one). synthesize runs stages 1-5 (KokoroModel::predict) and then these.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tts/kokoro/decoder.h"
#include "tts/kokoro/generator.h"
#include "tts/kokoro/harmonic_source.h"
#include "tts/kokoro/kokoro_model.h"
#include "tts/kokoro/weights.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::kokoro {

class KokoroVocoder {
public:
    explicit KokoroVocoder(const KokoroWeights& w);
    KokoroVocoder(const KokoroVocoder&) = delete;
    KokoroVocoder& operator=(const KokoroVocoder&) = delete;

    const Decoder& decoder() const { return decoder_; }
    Generator& generator() { return generator_; }
    int64_t style_width() const { return style_decoder_; }

    // asr [asr_channels, frames], f0 and n [2 frames], the decoder's style part ->
    // audio [generator().samples(2 frames)] (resized). har: a peer's source spectrum to use
    // instead of the generator's own; decoded (if given) receives the decoder's output.
    void run(const float* asr, int64_t frames, const float* f0, const float* n,
             const float* style_decoder, std::vector<float>& audio, ThreadPool& pool,
             const float* har = nullptr, const SourceNoise& noise = {},
             std::vector<float>* decoded = nullptr);

private:
    Decoder decoder_;
    Generator generator_;
    int64_t style_decoder_ = 0;
};

// The vocoder of this model (see above). Thread-safe; the vocoder itself runs one call at a time.
std::shared_ptr<KokoroVocoder> vocoder_for(const KokoroModel& model);

struct KokoroAudio {
    std::vector<float> audio;            // [600 F] at the model's sample rate
    std::vector<int64_t> durations;      // [T] the predicted frames per id (boundaries included)
    int64_t frames = 0;                  // F: the frames used (given durations or predicted)
};

// Phoneme ids (no boundaries), a style row [style_width], speed -> audio and durations.
// durations / d_en / har: use these instead of the model's own (a peer's, to compare what
// follows from the same point).
KokoroAudio synthesize(const KokoroModel& model, const std::vector<int64_t>& phoneme_ids,
                       const float* style, float speed,
                       const std::vector<int64_t>* durations = nullptr,
                       const std::vector<float>* d_en = nullptr,
                       const std::vector<float>* har = nullptr,
                       const SourceNoise& noise = {});

}  // namespace dasllama::kokoro

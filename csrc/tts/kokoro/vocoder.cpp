#include "tts/kokoro/vocoder.h"

#include <map>
#include <mutex>
#include <string>

#include "core/errors.h"
#include "core/thread_pool.h"
#include "tts/kokoro/gpu_vocoder.h"

namespace dasllama::kokoro {

KokoroVocoder::KokoroVocoder(const KokoroWeights& w)
    : decoder_(Decoder::load(w)),
      generator_(Generator::load(w)),
      style_decoder_(w.config().style_decoder) {
    if (decoder_.out_channels() != generator_.in_channels())
        throw ShapeError("decoder: " + std::to_string(decoder_.out_channels()) +
                         " output channels, the generator takes " +
                         std::to_string(generator_.in_channels()));
}

void KokoroVocoder::run(const float* asr, int64_t frames, const float* f0, const float* n,
                        const float* style_decoder, std::vector<float>& audio, ThreadPool& pool,
                        const float* har, const SourceNoise& noise, std::vector<float>* decoded) {
    std::vector<float> x;
    const int64_t curve = decoder_.forward(asr, frames, f0, n, style_decoder, x, pool);
    if (curve != 2 * frames)
        throw ShapeError("decoder: " + std::to_string(curve) + " columns out for " +
                         std::to_string(frames) + " frames (expected twice as many)");
    generator_.forward(x.data(), curve, style_decoder, f0, audio, pool, har, noise);
    if (decoded) decoded->swap(x);
}

namespace {

struct Record {
    std::weak_ptr<const KokoroWeights> weights;
    std::shared_ptr<KokoroVocoder> vocoder;
};

std::mutex& records_mutex() {
    static std::mutex m;
    return m;
}

std::map<const KokoroWeights*, Record>& records() {
    static std::map<const KokoroWeights*, Record> r;
    return r;
}

}  // namespace

std::shared_ptr<KokoroVocoder> vocoder_for(const KokoroModel& model) {
    const std::shared_ptr<const KokoroWeights> w = model.shared_weights();
    std::lock_guard<std::mutex> lock(records_mutex());
    auto& all = records();
    for (auto it = all.begin(); it != all.end();)   // models that are gone
        it = it->second.weights.expired() ? all.erase(it) : std::next(it);
    auto it = all.find(w.get());
    if (it != all.end() && it->second.weights.lock() == w) return it->second.vocoder;
    auto v = std::make_shared<KokoroVocoder>(*w);
    all[w.get()] = Record{w, v};
    return v;
}

KokoroAudio synthesize(const KokoroModel& model, const std::vector<int64_t>& phoneme_ids,
                       const float* style, float speed, const std::vector<int64_t>* durations,
                       const std::vector<float>* d_en, const std::vector<float>* har,
                       const SourceNoise& noise) {
    const KokoroPrediction p = model.predict(phoneme_ids, style, speed, durations, d_en);
    const std::shared_ptr<KokoroVocoder> v = vocoder_for(model);
    KokoroAudio out;
    out.durations = p.durations;
    out.frames = p.frames;
    const Generator& g = v->generator();
    const int64_t want = 2 * g.bins() * g.spectrum_frames(2 * p.frames);
    if (har && int64_t(har->size()) != want)
        throw ShapeError("har: " + std::to_string(har->size()) + " values, expected [" +
                         std::to_string(2 * g.bins()) + ", " +
                         std::to_string(g.spectrum_frames(2 * p.frames)) + "] for " +
                         std::to_string(p.frames) + " frames");
    // The vocoder seat first (a GPU model); a decline or a device failure leaves the call to
    // the CPU with nothing lost (the prediction is the CPU's either way).
    if (VocoderGpu* gpu = model.gpu()) {
        if (gpu->admit(p.frames, har == nullptr && !noise.enabled)) {
            try {
                gpu->run(p.asr.data(), p.frames, p.f0.data(), p.n.data(), style, out.audio);
                return out;
            } catch (const DeviceError& e) {
                gpu->decline(gpu::Decline::gpu_error, e.what());
            }
        }
    }
    v->run(p.asr.data(), p.frames, p.f0.data(), p.n.data(), style, out.audio, model.pool(),
           har ? har->data() : nullptr, noise);
    return out;
}

}  // namespace dasllama::kokoro

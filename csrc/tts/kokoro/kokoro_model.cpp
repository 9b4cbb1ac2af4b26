#include "tts/kokoro/kokoro_model.h"
#include "tts/kokoro/no_contract.h"

#include "core/thread_pool.h"
#include "tts/kokoro/gpu_vocoder.h"

namespace dasllama::kokoro {

KokoroModel::KokoroModel(const std::string& path, int n_threads, const std::string& device)
    : weights_(std::make_shared<KokoroWeights>(path)),
      pool_(std::make_unique<ThreadPool>(n_threads)),
      albert_(Albert::load(*weights_)),
      prosody_(Prosody::load(*weights_)),
      text_encoder_(TextEncoder::load(*weights_)) {
    if (device != "cpu") gpu_ = std::make_unique<VocoderGpu>(*weights_, device);
}

KokoroModel::~KokoroModel() = default;

KokoroPrediction KokoroModel::predict(const std::vector<int64_t>& phoneme_ids, const float* style,
                                      float speed, const std::vector<int64_t>* durations,
                                      const std::vector<float>* d_en) const {
    KokoroPrediction p;
    p.ids.reserve(phoneme_ids.size() + 2);
    p.ids.push_back(kBoundaryId);
    p.ids.insert(p.ids.end(), phoneme_ids.begin(), phoneme_ids.end());
    p.ids.push_back(kBoundaryId);
    const int64_t t = int64_t(p.ids.size());
    const float* s_pred = style + config().style_decoder;
    ThreadPool* pool = pool_.get();
    if (d_en) {
        if (int64_t(d_en->size()) != t * albert_.out_width())
            throw ShapeError("predict: d_en holds " + std::to_string(d_en->size()) +
                             " values, expected " + std::to_string(t) + " x " +
                             std::to_string(albert_.out_width()));
        p.d_en = *d_en;
    } else {
        p.d_en = albert_.forward(p.ids.data(), t, pool);
    }
    p.d = prosody_.duration_encoder(p.d_en.data(), t, s_pred, pool);
    p.durations = prosody_.durations(p.d.data(), t, speed, pool);
    const std::vector<int64_t>& dur = durations ? *durations : p.durations;
    if (int64_t(dur.size()) != t)
        throw ShapeError("predict: " + std::to_string(dur.size()) + " durations for " +
                         std::to_string(t) + " ids (boundaries included)");
    const int64_t c = prosody_.d_width();
    const std::vector<float> en = Prosody::align(p.d.data(), t, c, dur);
    p.frames = int64_t(en.size()) / c;
    prosody_.f0_energy(en.data(), p.frames, s_pred, p.f0, p.n, pool);
    const std::vector<float> te = text_encoder_.forward(p.ids.data(), t, pool);
    p.asr = Prosody::align(te.data(), t, text_encoder_.width(), dur);
    return p;
}

}  // namespace dasllama::kokoro

#include "tts/kokoro/prosody.h"
#include "tts/kokoro/no_contract.h"

#include <algorithm>
#include <cmath>

#include "core/thread_pool.h"
#include "tts/kokoro/onnx_math.h"
#include "tts/kokoro/pairwise_sum.h"

namespace dasllama::kokoro {

namespace {

const char* const kRounds = "predictor.text_encoder.lstms.";
constexpr int kBranchBlocks = 3;   // AdainResBlk1d per F0 / N branch

// x [t, c] ++ style per row -> [t, c + s].
std::vector<float> append_style(const float* x, int64_t t, int64_t c, const float* style,
                                int64_t s) {
    std::vector<float> out(size_t(t * (c + s)));
    for (int64_t i = 0; i < t; ++i) {
        std::copy(x + i * c, x + (i + 1) * c, &out[size_t(i * (c + s))]);
        std::copy(style, style + s, &out[size_t(i * (c + s) + c)]);
    }
    return out;
}

}  // namespace

Prosody Prosody::load(const KokoroWeights& w) {
    Prosody p;
    p.style_ = w.config().style_predictor;
    for (int i = 0; w.has(kRounds + std::to_string(2 * i) + ".weight_ih"); ++i) {
        p.lstms_.push_back(BiLstm::load(w, kRounds + std::to_string(2 * i)));
        p.norms_.push_back(AdaLayerNorm::load(w, kRounds + std::to_string(2 * i + 1)));
    }
    if (p.lstms_.empty())
        throw MissingTensor(w.path() + ": tensor '" + std::string(kRounds) +
                            "0.weight_ih' is missing");
    p.lstm_ = BiLstm::load(w, "predictor.lstm");
    p.shared_ = BiLstm::load(w, "predictor.shared");
    p.duration_proj_ = Linear::load(w, "predictor.duration_proj.linear_layer");
    for (int i = 0; i < kBranchBlocks; ++i) {
        p.f0_blocks_.push_back(AdainResBlk1d::load(w, "predictor.F0." + std::to_string(i)));
        p.n_blocks_.push_back(AdainResBlk1d::load(w, "predictor.N." + std::to_string(i)));
    }
    p.f0_proj_ = Conv::load(w, "predictor.F0_proj");
    p.n_proj_ = Conv::load(w, "predictor.N_proj");
    const int64_t d = p.d_width();
    for (const BiLstm* l : {&p.lstm_, &p.shared_})
        if (l->input() != d)
            throw ShapeError(w.path() + ": a predictor LSTM reads " + std::to_string(l->input()) +
                             " values, expected " + std::to_string(d));
    if (p.duration_proj_.in() != 2 * p.lstm_.hidden())
        throw ShapeError(w.path() + ": predictor.duration_proj reads " +
                         std::to_string(p.duration_proj_.in()) + " values");
    return p;
}

std::vector<float> Prosody::duration_encoder(const float* d_en, int64_t t, const float* s_pred,
                                             ThreadPool* pool, int64_t rounds) const {
    const int64_t s = style_;
    const int64_t c0 = lstms_.front().input() - s;
    std::vector<float> x = append_style(d_en, t, c0, s_pred, s);
    const int64_t n = rounds < 0 ? int64_t(lstms_.size()) : std::min<int64_t>(rounds, lstms_.size());
    for (int64_t i = 0; i < n; ++i) {
        const int64_t h2 = 2 * lstms_[size_t(i)].hidden();
        std::vector<float> y(size_t(t * h2));
        lstms_[size_t(i)].forward(x.data(), t, y.data(), pool);
        norms_[size_t(i)].forward(y.data(), t, s_pred, y.data(), pool);
        x = append_style(y.data(), t, h2, s_pred, s);
    }
    return x;
}

std::vector<int64_t> Prosody::durations(const float* d, int64_t t, float speed, ThreadPool* pool,
                                        std::vector<float>* totals) const {
    if (!(speed >= kMinSpeed) || !std::isfinite(speed))
        throw ShapeError("durations: speed " + std::to_string(speed) + " is not a finite number >= " +
                         std::to_string(kMinSpeed));
    const int64_t h2 = 2 * lstm_.hidden(), bins = duration_proj_.out();
    std::vector<float> x(size_t(t * h2));
    lstm_.forward(d, t, x.data(), pool);
    std::vector<float> logits(size_t(t * bins));
    duration_proj_.forward(x.data(), t, logits.data(), pool);
    std::vector<double> row(static_cast<size_t>(bins));
    std::vector<int64_t> out(static_cast<size_t>(t));
    if (totals) totals->resize(size_t(t));
    for (int64_t i = 0; i < t; ++i) {
        for (int64_t j = 0; j < bins; ++j) row[size_t(j)] = mlas_logistic(logits[size_t(i * bins + j)]);
        const float total = static_cast<float>(pairwise_sum(row.data(), bins)) / speed;
        if (totals) (*totals)[size_t(i)] = total;
        if (!std::isfinite(total))
            throw ShapeError("durations: the predicted length of id " + std::to_string(i) +
                             " is not finite (a non-finite style row or input?)");
        const float r = std::nearbyint(total);   // half to even (the default rounding mode)
        out[size_t(i)] = std::max<int64_t>(1, static_cast<int64_t>(r));
    }
    return out;
}

std::vector<float> Prosody::align(const float* d, int64_t t, int64_t c,
                                  const std::vector<int64_t>& durations) {
    if (int64_t(durations.size()) != t)
        throw ShapeError("align: " + std::to_string(durations.size()) + " durations for " +
                         std::to_string(t) + " ids");
    int64_t f = 0;
    for (int64_t v : durations) {
        if (v < 0) throw ShapeError("align: a negative duration " + std::to_string(v));
        f += v;
        if (f > kMaxFrames)
            throw ShapeError("align: the durations add up to more than " +
                             std::to_string(kMaxFrames) + " frames");
    }
    std::vector<float> en(size_t(c * f));
    int64_t j = 0;
    for (int64_t i = 0; i < t; ++i)
        for (int64_t k = 0; k < durations[size_t(i)]; ++k, ++j)
            for (int64_t ch = 0; ch < c; ++ch) en[size_t(ch * f + j)] = d[i * c + ch];
    return en;
}

void Prosody::f0_energy(const float* en, int64_t f, const float* s_pred, std::vector<float>& f0,
                        std::vector<float>& n, ThreadPool* pool, bool swap_lstm) const {
    const int64_t c = d_width(), h2 = 2 * shared_.hidden();
    if (f < 1) throw ShapeError("f0_energy: no frames");
    std::vector<float> xt(size_t(f * c));   // en^T: time-major for the LSTM
    for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t j = 0; j < f; ++j) xt[size_t(j * c + ch)] = en[ch * f + j];
    std::vector<float> y(size_t(f * h2));
    shared_.forward(xt.data(), f, y.data(), pool, swap_lstm);
    std::vector<float> x(size_t(h2 * f));    // back to channel-major [512, F]
    for (int64_t j = 0; j < f; ++j)
        for (int64_t ch = 0; ch < h2; ++ch) x[size_t(ch * f + j)] = y[size_t(j * h2 + ch)];
    for (int branch = 0; branch < 2; ++branch) {
        const std::vector<AdainResBlk1d>& blocks = branch == 0 ? f0_blocks_ : n_blocks_;
        std::vector<float> cur = x, next;
        int64_t len = f;
        for (const AdainResBlk1d& b : blocks) {
            b.forward(cur, len, s_pred, next, pool);
            len = b.out_length(len);
            cur.swap(next);
        }
        std::vector<float>& dst = branch == 0 ? f0 : n;
        (branch == 0 ? f0_proj_ : n_proj_).forward(cur, len, dst, pool);
    }
}

}  // namespace dasllama::kokoro

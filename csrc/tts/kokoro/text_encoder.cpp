#include "tts/kokoro/text_encoder.h"
#include "tts/kokoro/no_contract.h"

#include "tts/kokoro/onnx_math.h"
#include "tts/kokoro/style_blocks.h"

namespace dasllama::kokoro {

TextEncoder TextEncoder::load(const KokoroWeights& w) {
    TextEncoder e;
    e.embedding_ = Embedding::load(w, "text_encoder.embedding");
    for (int i = 0; w.has("text_encoder.cnn." + std::to_string(i) + ".0.weight"); ++i) {
        const std::string p = "text_encoder.cnn." + std::to_string(i);
        Round r;
        r.conv = Conv::load(w, p + ".0");
        r.ln_w = w.f32(p + ".1.weight", {r.conv.c_out()}).f32();
        r.ln_b = w.f32(p + ".1.bias", {r.conv.c_out()}).f32();
        r.eps = w.eps(p + ".1");
        e.rounds_.push_back(std::move(r));
    }
    e.lstm_ = BiLstm::load(w, "text_encoder.lstm");
    int64_t c = e.embedding_.dim();
    for (const Round& r : e.rounds_) {
        if (r.conv.c_in() != c) throw ShapeError(w.path() + ": text_encoder.cnn widths do not chain");
        c = r.conv.c_out();
    }
    if (e.lstm_.input() != c) throw ShapeError(w.path() + ": text_encoder.lstm reads " +
                                               std::to_string(e.lstm_.input()) + " values");
    return e;
}

std::vector<float> TextEncoder::forward(const int64_t* ids, int64_t t, ThreadPool* pool) const {
    if (t < 1) throw ShapeError("text encoder: no ids");
    int64_t c = embedding_.dim();
    std::vector<float> rows(size_t(t * c));
    embedding_.lookup(ids, t, rows.data());
    std::vector<float> x(size_t(c * t));   // [C, T]
    for (int64_t i = 0; i < t; ++i)
        for (int64_t ch = 0; ch < c; ++ch) x[size_t(ch * t + i)] = rows[size_t(i * c + ch)];
    for (const Round& r : rounds_) {
        std::vector<float> y;
        r.conv.forward(x, t, y, pool);
        const int64_t lo = r.conv.out_length(t);
        if (lo != t) throw ShapeError("text encoder: a convolution changed the length");
        c = r.conv.c_out();
        rows.resize(size_t(t * c));
        for (int64_t ch = 0; ch < c; ++ch)
            for (int64_t i = 0; i < t; ++i) rows[size_t(i * c + ch)] = y[size_t(ch * t + i)];
        layer_norm_lanes(rows.data(), r.ln_w, r.ln_b, t, c, r.eps, rows.data());
        leaky_relu(rows.data(), t * c, kBlockSlope);
        x.resize(size_t(c * t));
        for (int64_t i = 0; i < t; ++i)
            for (int64_t ch = 0; ch < c; ++ch) x[size_t(ch * t + i)] = rows[size_t(i * c + ch)];
    }
    std::vector<float> out(size_t(t * width()));
    lstm_.forward(rows.data(), t, out.data(), pool);
    return out;
}

}  // namespace dasllama::kokoro

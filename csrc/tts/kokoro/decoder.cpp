#include "tts/kokoro/decoder.h"

#include <algorithm>
#include <string>

#include "core/errors.h"

namespace dasllama::kokoro {

namespace {

// Rows of several channel-major blocks [c_i, l] stacked along channels.
void stack(std::vector<float>& out, std::initializer_list<std::pair<const float*, int64_t>> parts,
           int64_t l) {
    int64_t rows = 0;
    for (const auto& p : parts) rows += p.second;
    out.resize(size_t(rows * l));
    float* dst = out.data();
    for (const auto& p : parts) {
        std::copy(p.first, p.first + p.second * l, dst);
        dst += p.second * l;
    }
}

}  // namespace

Decoder Decoder::load(const KokoroWeights& w) {
    Decoder d;
    d.f0_conv_ = Conv::load(w, "decoder.F0_conv");
    d.n_conv_ = Conv::load(w, "decoder.N_conv");
    d.asr_res_ = Conv::load(w, "decoder.asr_res.0");
    d.encode_ = AdainResBlk1d::load(w, "decoder.encode");
    for (int i = 0; w.has("decoder.decode." + std::to_string(i) + ".conv1.weight"); ++i)
        d.decode_.push_back(AdainResBlk1d::load(w, "decoder.decode." + std::to_string(i)));
    if (d.decode_.empty())
        throw MissingTensor(w.path() + ": no tensor decoder.decode.0.conv1.weight");
    d.asr_channels_ = d.asr_res_.c_in();
    if (d.f0_conv_.c_in() != 1 || d.n_conv_.c_in() != 1 ||
        d.encode_.c_in() != d.asr_channels_ + d.f0_conv_.c_out() + d.n_conv_.c_out())
        throw ShapeError("decoder.encode: " + std::to_string(d.encode_.c_in()) +
                         " input channels for " + std::to_string(d.asr_channels_) +
                         " text channels, F0 and N");
    int64_t c = d.encode_.c_out();
    for (size_t i = 0; i < d.decode_.size(); ++i) {
        const int64_t want = c + d.asr_res_.c_out() + d.f0_conv_.c_out() + d.n_conv_.c_out();
        if (d.decode_[i].c_in() != want)
            throw ShapeError("decoder.decode." + std::to_string(i) + ": " +
                             std::to_string(d.decode_[i].c_in()) + " input channels, " +
                             std::to_string(want) + " arrive");
        c = d.decode_[i].c_out();
    }
    d.out_channels_ = c;
    return d;
}

int64_t Decoder::forward(const float* asr, int64_t frames, const float* f0, const float* n,
                         const float* style, std::vector<float>& out, ThreadPool& pool) const {
    if (frames <= 0) throw ShapeError("decoder: " + std::to_string(frames) + " frames");
    const int64_t curve = 2 * frames;
    if (f0_conv_.out_length(curve) != frames || n_conv_.out_length(curve) != frames)
        throw ShapeError("decoder.F0_conv: " + std::to_string(curve) +
                         " F0 values do not give " + std::to_string(frames) + " frames");
    std::vector<float> f0d(size_t(f0_conv_.c_out() * frames)), nd(size_t(n_conv_.c_out() * frames));
    f0_conv_.forward(f0, curve, f0d.data(), &pool);
    n_conv_.forward(n, curve, nd.data(), &pool);
    std::vector<float> x, y, res(size_t(asr_res_.c_out() * frames));
    stack(x, {{asr, asr_channels_}, {f0d.data(), f0_conv_.c_out()}, {nd.data(), n_conv_.c_out()}},
          frames);
    encode_.forward(x, frames, style, y, &pool);
    asr_res_.forward(asr, frames, res.data(), &pool);
    int64_t l = encode_.out_length(frames);
    for (const AdainResBlk1d& block : decode_) {
        if (l != frames)
            throw ShapeError("decoder: a block before the last changes the length");
        stack(x, {{y.data(), block.c_in() - asr_res_.c_out() - f0_conv_.c_out() - n_conv_.c_out()},
                  {res.data(), asr_res_.c_out()},
                  {f0d.data(), f0_conv_.c_out()},
                  {nd.data(), n_conv_.c_out()}},
              l);
        block.forward(x, l, style, y, &pool);
        l = block.out_length(l);
    }
    out.swap(y);
    return l;
}

}  // namespace dasllama::kokoro

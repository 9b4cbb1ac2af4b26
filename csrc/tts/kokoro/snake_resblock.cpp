#include "tts/kokoro/snake_resblock.h"

#include <algorithm>

#include "core/errors.h"
#include "core/thread_pool.h"

namespace dasllama::kokoro {

SnakeResBlock SnakeResBlock::load(const KokoroWeights& w, const std::string& module) {
    SnakeResBlock b;
    b.name_ = module;
    for (int j = 0; w.has(module + ".convs1." + std::to_string(j) + ".weight"); ++j) {
        const std::string J = std::to_string(j);
        Round r;
        r.adain1 = AdaIN1d::load(w, module + ".adain1." + J);
        r.adain2 = AdaIN1d::load(w, module + ".adain2." + J);
        r.conv1 = Conv::load(w, module + ".convs1." + J);
        r.conv2 = Conv::load(w, module + ".convs2." + J);
        const int64_t c = r.conv1.c_out();
        r.alpha1 = w.floats(module + ".alpha1." + J, {1, c, 1});
        r.alpha2 = w.floats(module + ".alpha2." + J, {1, c, 1});
        if (j == 0) b.channels_ = c;
        if (r.conv1.c_in() != b.channels_ || c != b.channels_ || r.conv2.c_in() != c ||
            r.conv2.c_out() != c || r.adain1.channels() != c || r.adain2.channels() != c)
            throw ShapeError(module + ": round " + J + " does not keep " +
                             std::to_string(b.channels_) + " channels");
        b.rounds_.push_back(std::move(r));
    }
    if (b.rounds_.empty())
        throw MissingTensor(w.path() + ": no tensor " + module + ".convs1.0.weight");
    return b;
}

int64_t SnakeResBlock::cost() const {
    int64_t taps = 0;
    for (const Round& r : rounds_) taps += r.conv1.kernel() + r.conv2.kernel();
    return taps * channels_ * channels_;
}

void SnakeResBlock::forward(const float* x, int64_t l, const float* style,
                            std::vector<float>& out, Scratch& s, ThreadPool& pool) const {
    const int64_t c = channels_, n = c * l;
    out.assign(x, x + n);
    s.a.resize(size_t(n));
    s.b.resize(size_t(n));
    for (const Round& r : rounds_) {
        if (r.conv1.out_length(l) != l || r.conv2.out_length(l) != l)
            throw ShapeError(name_ + ": a convolution changes the length " + std::to_string(l));
        // AdaIN and Snake in one pass that also takes the range the convolution's
        // quantization needs (AdaIN1d::forward_snake: the same bits as the three passes).
        QuantRange range;
        r.adain1.forward_snake(out.data(), l, style, r.alpha1.data(), s.a.data(), range, &pool);
        r.conv1.forward(s.a.data(), l, s.b.data(), &pool, &range);
        r.adain2.forward_snake(s.b.data(), l, style, r.alpha2.data(), s.b.data(), range, &pool);
        r.conv2.forward(s.b.data(), l, s.a.data(), &pool, &range);
        float* o = out.data();
        const float* t = s.a.data();
        pool.run([&](int share, int shares) {
            const int64_t i0 = n * share / shares, i1 = n * (share + 1) / shares;
            for (int64_t i = i0; i < i1; ++i) o[i] = t[i] + o[i];
        });
    }
}

}  // namespace dasllama::kokoro

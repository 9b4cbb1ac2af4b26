#include "tts/kokoro/bilstm.h"
#include "tts/kokoro/no_contract.h"

#include <algorithm>

#include "core/thread_pool.h"
#include "tts/kokoro/onnx_math.h"

namespace dasllama::kokoro {

BiLstm BiLstm::load(const KokoroWeights& w, const std::string& module) {
    BiLstm l;
    l.name_ = w.path() + ": " + module;
    const Lane lane = lane_of(w, module + ".weight_ih");
    const TensorView wih = lane == Lane::kInt8 ? w.i8(module + ".weight_ih", {2, -1, -1})
                                               : w.f32(module + ".weight_ih", {2, -1, -1});
    const int64_t in = wih.dim(1), gates = wih.dim(2);
    if (gates % 4)
        throw ShapeError(l.name_ + ": weight_ih's last dimension " + std::to_string(gates) +
                         " is not 4 * hidden");
    const int64_t h = gates / 4;
    l.hidden_ = h;
    if (lane_of(w, module + ".weight_hh") != lane)
        throw FormatError(l.name_ + ": weight_ih is " + w.type_of(module + ".weight_ih") +
                          " but weight_hh is " + w.type_of(module + ".weight_hh"));
    const TensorView whh = lane == Lane::kInt8
                               ? w.i8(module + ".weight_hh", {2, h, gates})
                               : w.f32(module + ".weight_hh", {2, h, gates});
    const TensorView bias = w.f32(module + ".bias", {2, 2 * gates});
    for (int d = 0; d < 2; ++d) {
        if (lane == Lane::kInt8) {
            const TensorView is = w.f32(module + ".weight_ih_scale", {2});
            const TensorView iz = w.f32(module + ".weight_ih_zp", {2});
            const TensorView hs = w.f32(module + ".weight_hh_scale", {2});
            const TensorView hz = w.f32(module + ".weight_hh_zp", {2});
            l.ih_[d] = Linear::from_int8(QLinear(wih.i8() + d * in * gates, in, gates,
                                                 iz.f32() + d, is.f32() + d, 1, nullptr,
                                                 l.name_ + ".weight_ih"));
            l.hh_[d] = Linear::from_int8(QLinear(whh.i8() + d * h * gates, h, gates,
                                                 hz.f32() + d, hs.f32() + d, 1, nullptr,
                                                 l.name_ + ".weight_hh"));
        } else {
            l.ih_[d] = Linear::from_floats(wih.f32() + d * in * gates, in, gates, nullptr,
                                           l.name_ + ".weight_ih");
            l.hh_[d] = Linear::from_floats(whh.f32() + d * h * gates, h, gates, nullptr,
                                           l.name_ + ".weight_hh");
        }
        const float* b = bias.f32() + d * 2 * gates;
        l.bias_[d].resize(size_t(gates));
        for (int64_t i = 0; i < gates; ++i) l.bias_[d][size_t(i)] = b[i] + b[gates + i];
    }
    return l;
}

void BiLstm::direction(int d, const float* xw, int64_t t, float* out, int64_t ld,
                      bool reverse) const {
    const int64_t h = hidden_, g4 = 4 * h;
    std::vector<float> hv(size_t(h), 0.0f), c(size_t(h), 0.0f), hr(static_cast<size_t>(g4)), g(static_cast<size_t>(g4));
    std::vector<float> act(static_cast<size_t>(g4)), tc(static_cast<size_t>(h));
    for (int64_t step = 0; step < t; ++step) {
        const int64_t row = reverse ? t - 1 - step : step;
        hh_[d].forward(hv.data(), 1, hr.data(), nullptr);   // int8: h quantized on its own
        const float* x = xw + row * g4;
        const float* b = bias_[d].data();
        for (int64_t i = 0; i < g4; ++i) g[size_t(i)] = (x[i] + hr[size_t(i)]) + b[i];
        logistic(g.data(), 3 * h, act.data());                 // i, o, f
        tanh_mlas(g.data() + 3 * h, h, act.data() + 3 * h);    // c~
        for (int64_t i = 0; i < h; ++i) {
            const float cf = c[size_t(i)] * act[size_t(2 * h + i)];
            const float ic = act[size_t(i)] * act[size_t(3 * h + i)];
            c[size_t(i)] = cf + ic;
        }
        tanh_mlas(c.data(), h, tc.data());
        for (int64_t i = 0; i < h; ++i) hv[size_t(i)] = tc[size_t(i)] * act[size_t(h + i)];
        std::copy(hv.begin(), hv.end(), out + row * ld);
    }
}

void BiLstm::forward(const float* x, int64_t t, float* out, ThreadPool* pool,
                    bool swap_directions) const {
    const int64_t g4 = 4 * hidden_, h = hidden_;
    if (t < 1) throw ShapeError(name_ + ": an empty sequence");
    // The input projections over the whole sequence (the int8 lane quantizes x as one tensor;
    // the backward direction's reversed sequence has the same range, so the same rows).
    std::vector<float> xw[2];
    for (int d = 0; d < 2; ++d) {
        xw[d].resize(size_t(t * g4));
        ih_[d].forward(x, t, xw[d].data(), pool);
    }
    std::vector<float> bwd;
    if (swap_directions) bwd.resize(size_t(t * h));
    auto run = [&](int d) {
        if (d == 0)
            direction(0, xw[0].data(), t, out, 2 * h, false);
        else if (!swap_directions)
            direction(1, xw[1].data(), t, out + h, 2 * h, true);
        else {
            direction(1, xw[1].data(), t, bwd.data(), h, true);
            for (int64_t i = 0; i < t; ++i)   // left in step order, not time order
                std::copy(&bwd[size_t((t - 1 - i) * h)], &bwd[size_t((t - i) * h)],
                          out + i * 2 * h + h);
        }
    };
    if (pool && pool->size() >= 2)
        pool->run([&](int share, int) {
            if (share < 2) run(share);
        });
    else {
        run(0);
        run(1);
    }
}

}  // namespace dasllama::kokoro

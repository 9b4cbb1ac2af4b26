#include "tts/kokoro/generator.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/errors.h"
#include "core/thread_pool.h"
#include "tts/kokoro/onnx_math.h"

namespace dasllama::kokoro {

namespace {

const std::string kG = "decoder.generator";

template <typename Fn>
void parallel_range(ThreadPool& pool, int64_t n, const Fn& fn) {
    pool.run([&](int share, int shares) {
        const int64_t r0 = n * share / shares, r1 = n * (share + 1) / shares;
        if (r0 < r1) fn(r0, r1);
    });
}

nn::ConvTransposeAttrs transpose_attrs(const ConvAttrs& a) {
    nn::ConvTransposeAttrs t;
    t.stride = a.stride;
    t.pad_left = a.pad_left;
    t.pad_right = a.pad_right;
    t.dilation = a.dilation;
    t.groups = a.groups;
    t.output_padding = a.output_padding;
    return t;
}

}  // namespace

Generator Generator::load(const KokoroWeights& w) {
    const KokoroConfig& cfg = w.config();
    Generator g;
    HarmonicSourceParams p;
    p.harmonics = cfg.harmonics;
    p.upsample = cfg.upsample_scale;
    p.sample_rate = cfg.sample_rate;
    p.sine_amp = cfg.sine_amp;
    p.voiced_threshold = cfg.voiced_threshold;
    p.merge_weight = w.floats(kG + ".m_source.l_linear.weight", {cfg.harmonics, 1});
    p.merge_bias = w.floats(kG + ".m_source.l_linear.bias", {1})[0];
    g.source_ = HarmonicSource(std::move(p));
    g.stft_ = nn::NaiveStft(w.floats(kG + ".stft.window", {cfg.n_fft}), cfg.hop);
    const int64_t bins = cfg.n_fft / 2 + 1;
    const TensorView basis = w.f32(kG + ".stft.inverse_basis", {2 * bins, 1, cfg.n_fft});
    const ConvAttrs ia = w.conv(kG + ".stft");
    if (ia.stride != cfg.hop || ia.pad_left != 0 || ia.pad_right != 0 || ia.groups != 1)
        throw ShapeError(kG + ".stft: the inverse's attributes are not a plain stride-" +
                         std::to_string(cfg.hop) + " transposed convolution");
    // The exporter's basis comes with its window sum; a converted checkpoint's exact basis has
    // none and divides by the squared window's overlap-add (reference: ReferenceKokoro.istft).
    if (w.has(kG + ".stft.window_sum"))
        g.istft_ = nn::BasisIstft(basis.f32(), bins, cfg.n_fft, cfg.hop,
                                  w.floats(kG + ".stft.window_sum"));
    else
        g.istft_ = nn::BasisIstft::exact(basis.f32(), bins, cfg.n_fft, cfg.hop,
                                         w.floats(kG + ".stft.window", {cfg.n_fft}));
    int64_t stages = 0, resblocks = 0;
    while (w.has(kG + ".ups." + std::to_string(stages) + ".weight")) ++stages;
    while (w.has(kG + ".resblocks." + std::to_string(resblocks) + ".convs1.0.weight")) ++resblocks;
    if (stages == 0 || resblocks == 0 || resblocks % stages != 0)
        throw ShapeError(kG + ": " + std::to_string(stages) + " upsamplings and " +
                         std::to_string(resblocks) + " resblocks");
    const int64_t per_stage = resblocks / stages;
    for (int64_t i = 0; i < stages; ++i) {
        const std::string I = std::to_string(i);
        const TensorView up = w.f32(kG + ".ups." + I + ".weight", {-1, -1, -1});
        const ConvAttrs ua = w.conv(kG + ".ups." + I);
        Stage s;
        s.up = nn::ConvTranspose1d(up.f32(), up.dim(0), up.dim(1) * ua.groups, up.dim(2),
                                   w.floats(kG + ".ups." + I + ".bias"), transpose_attrs(ua));
        s.noise_conv = Conv::load(w, kG + ".noise_convs." + I);
        s.noise_res = SnakeResBlock::load(w, kG + ".noise_res." + I);
        for (int64_t j = 0; j < per_stage; ++j)
            s.resblocks.push_back(
                SnakeResBlock::load(w, kG + ".resblocks." + std::to_string(i * per_stage + j)));
        const int64_t c = s.up.c_out();
        if (s.noise_conv.c_in() != 2 * bins || s.noise_conv.c_out() != c ||
            s.noise_res.channels() != c || s.resblocks.front().channels() != c)
            throw ShapeError(kG + ": stage " + I + "'s blocks do not all have " +
                             std::to_string(c) + " channels");
        if (i == 0) g.in_channels_ = s.up.c_in();
        else if (s.up.c_in() != g.stages_.back().up.c_out())
            throw ShapeError(kG + ".ups." + I + ": " + std::to_string(s.up.c_in()) +
                             " input channels after " +
                             std::to_string(g.stages_.back().up.c_out()));
        g.stages_.push_back(std::move(s));
    }
    const TensorView post = w.f32(kG + ".conv_post.weight", {2 * bins, -1, -1});
    const ConvAttrs pa = w.conv(kG + ".conv_post");
    if (pa.stride != 1 || pa.pad_left != pa.pad_right || pa.dilation != 1 || pa.groups != 1 ||
        post.dim(1) != g.stages_.back().up.c_out())
        throw ShapeError(kG + ".conv_post: not a same-length convolution over " +
                         std::to_string(g.stages_.back().up.c_out()) + " channels");
    const float* pw = post.f32();
    g.post_ = nn::Conv1d(std::vector<float>(pw, pw + post.numel()),
                         w.floats(kG + ".conv_post.bias", {2 * bins}), post.dim(0), post.dim(1),
                         post.dim(2), 1, pa.pad_left);
    return g;
}

int64_t Generator::spectrum_frames(int64_t curve) const {
    return stft_.frames(source_.samples(curve));
}

int64_t Generator::samples(int64_t curve) const {
    return istft_.samples(spectrum_frames(curve));
}

void Generator::source_spectrum(const float* f0, int64_t curve, std::vector<float>& har,
                                ThreadPool& pool, const SourceNoise& noise) const {
    std::vector<float> src(size_t(source_.samples(curve)));
    source_.forward(f0, curve, src.data(), pool, noise);
    har.resize(size_t(2 * bins() * stft_.frames(int64_t(src.size()))));
    stft_.forward(src.data(), int64_t(src.size()), har.data(), pool);
}

// The resblocks of a stage read the same x and are independent. Their AdaIN norms and the
// int8 convolutions' activation quantization run on one thread, so with as many blocks as
// threads or more, each block runs whole on one thread (a one-thread pool of its own, the
// blocks dealt largest first to the least loaded thread: kernels 11 | 3 + 7 on two threads);
// otherwise they run one after another over the whole pool. Either way every block's result
// is the same bits (integer sums exact, reductions split by rows), and the mean adds them in
// block order.
void Generator::average_resblocks(Stage& s, int64_t l, const float* style, ThreadPool& pool) {
    const size_t nb = s.resblocks.size();
    const int64_t n = s.resblocks.front().channels() * l;
    block_out_.resize(nb);
    block_scratch_.resize(nb);
    const int shares = pool.size();
    if (shares < 2 || size_t(shares) > nb) {
        for (size_t j = 0; j < nb; ++j)
            s.resblocks[j].forward(x_.data(), l, style, block_out_[j], block_scratch_[j], pool);
    } else {
        std::vector<size_t> order(nb);
        for (size_t j = 0; j < nb; ++j) order[j] = j;
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
            return s.resblocks[a].cost() > s.resblocks[b].cost();
        });
        std::vector<int> owner(nb);
        std::vector<int64_t> load(size_t(shares), 0);
        for (size_t j : order) {
            const int t = int(std::min_element(load.begin(), load.end()) - load.begin());
            owner[j] = t;
            load[size_t(t)] += s.resblocks[j].cost();
        }
        while (solo_.size() < size_t(shares)) solo_.push_back(std::make_unique<ThreadPool>(1));
        pool.run([&](int share, int) {
            for (size_t j = 0; j < nb; ++j)
                if (owner[j] == share)
                    s.resblocks[j].forward(x_.data(), l, style, block_out_[j], block_scratch_[j],
                                           *solo_[size_t(share)]);
        });
    }
    const float count = float(nb);
    float* o = x_.data();
    parallel_range(pool, n, [&](int64_t i0, int64_t i1) {
        for (int64_t k = i0; k < i1; ++k) {
            float acc = block_out_[0][size_t(k)];
            for (size_t j = 1; j < nb; ++j) acc = acc + block_out_[j][size_t(k)];
            o[k] = acc / count;
        }
    });
}

void Generator::istft(const float* mag, const float* phase, int64_t frames,
                      std::vector<float>& audio, ThreadPool& pool) {
    if (frames < 2)
        throw ShapeError(kG + ".stft: " + std::to_string(frames) + " frames (at least 2)");
    audio.resize(size_t(istft_.samples(frames)));
    istft_.forward(mag, phase, frames, audio.data(), pool);
}

void Generator::forward(const float* x, int64_t curve, const float* style, const float* f0,
                        std::vector<float>& audio, ThreadPool& pool, const float* har,
                        const SourceNoise& noise) {
    if (curve <= 0) throw ShapeError(kG + ": " + std::to_string(curve) + " input columns");
    const int64_t frames = spectrum_frames(curve);
    if (har == nullptr) {
        source_spectrum(f0, curve, har_, pool, noise);
        har = har_.data();
    }
    x_.assign(x, x + in_channels_ * curve);
    int64_t l = curve;
    for (size_t i = 0; i < stages_.size(); ++i) {
        Stage& s = stages_[i];
        const int64_t c = s.up.c_out();
        leaky_relu(x_.data(), int64_t(x_.size()), kUpsampleSlope);
        const int64_t ln = s.noise_conv.out_length(frames);
        t_.resize(size_t(c * ln));
        s.noise_conv.forward(har, frames, t_.data(), &pool);
        s.noise_res.forward(t_.data(), ln, style, src_, scratch_, pool);
        const int64_t lu = s.up.out_length(l);
        s.up.forward(x_.data(), l, y_, pool);
        const bool last = i + 1 == stages_.size();
        l = last ? lu + 1 : lu;
        if (ln != l)
            throw ShapeError(kG + ": stage " + std::to_string(i) + " upsamples to " +
                             std::to_string(l) + " columns, its noise branch has " +
                             std::to_string(ln));
        x_.resize(size_t(c * l));
        parallel_range(pool, c, [&](int64_t c0, int64_t c1) {
            for (int64_t ch = c0; ch < c1; ++ch) {
                const float* u = y_.data() + ch * lu;
                const float* n = src_.data() + ch * l;
                float* o = x_.data() + ch * l;
                if (last) {   // ReflectionPad1d((1, 0)): column 1 mirrored in front
                    o[0] = u[1] + n[0];
                    for (int64_t j = 0; j < lu; ++j) o[j + 1] = u[j] + n[j + 1];
                } else {
                    for (int64_t j = 0; j < lu; ++j) o[j] = u[j] + n[j];
                }
            }
        });
        average_resblocks(s, l, style, pool);
    }
    // conv_post over time-major rows, then the magnitude (exp) and phase (sin) rows.
    const int64_t c = stages_.back().up.c_out(), nb = bins();
    leaky_relu(x_.data(), int64_t(x_.size()), kPostSlope);
    t_.resize(size_t(c * l));
    parallel_range(pool, l, [&](int64_t j0, int64_t j1) {
        for (int64_t j = j0; j < j1; ++j)
            for (int64_t ch = 0; ch < c; ++ch) t_[size_t(j * c + ch)] = x_[size_t(ch * l + j)];
    });
    post_.forward(t_.data(), l, post_out_, pool);
    mag_.resize(size_t(nb * l));
    phase_.resize(size_t(nb * l));
    parallel_range(pool, l, [&](int64_t j0, int64_t j1) {
        for (int64_t j = j0; j < j1; ++j) {
            const float* row = post_out_.data() + j * 2 * nb;
            for (int64_t k = 0; k < nb; ++k) {
                mag_[size_t(k * l + j)] = std::exp(row[k]);
                phase_[size_t(k * l + j)] = std::sin(row[nb + k]);
            }
        }
    });
    istft(mag_.data(), phase_.data(), l, audio, pool);
}

}  // namespace dasllama::kokoro

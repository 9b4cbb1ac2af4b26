#include "tts/kokoro/gpu_vocoder_weights.h"

#include <algorithm>
#include <cmath>

#include "core/errors.h"
#include "gpu/matrix.h"

namespace dasllama::kokoro {

namespace {

const std::string kG = "decoder.generator";

// Input channels from which a dense convolution (plain or transposed) gets a float16 panel where
// the device has cooperative matrices: narrower ones (the F0 and energy curves, the source
// spectrum) are little work and keep their float32 inputs.
constexpr int64_t kPanelMinInputs = 32;

// onnxruntime's float32 pi in the DFT's angle step (nn/stft.cpp computes its twiddles so).
constexpr float kDftPi = 3.14159265f;

struct Loader {
    gpu::Device& dev;
    const KokoroWeights& w;
    uint64_t& bytes;
    bool panels = gpu::conv_coopmat_usable(dev);
    int64_t largest = 0;

    std::unique_ptr<gpu::Buffer> up(const std::vector<float>& v, const std::string& label) {
        largest = std::max(largest, int64_t(v.size()));
        return gpu::upload_floats(dev, v, label.c_str(), bytes);
    }

    // An int8 tensor dequantized: (q - zp[c]) * scale[c], c = i % groups_of (per-tensor when
    // the file has one zero point).
    std::vector<float> dequantize(const TensorView& q, const std::string& module, int64_t cols) {
        const TensorView zp = w.f32(module + ".weight_zp", {-1});
        const TensorView sc = w.f32(module + ".weight_scale", {zp.dim(0)});
        const int64_t n = q.numel(), per = zp.dim(0);
        if (per != 1 && per != cols)
            throw ShapeError(module + ": " + std::to_string(per) + " zero points for " +
                             std::to_string(cols) + " columns");
        std::vector<float> out(static_cast<size_t>(n));
        const int8_t* d = q.i8();
        for (int64_t i = 0; i < n; ++i) {
            const int64_t c = per == 1 ? 0 : i % cols;
            out[size_t(i)] = (float(d[i]) - zp.f32()[c]) * sc.f32()[c];
        }
        return out;
    }

    DevConv qconv(const std::string& m) {
        DevConv c;
        c.a = w.conv(m);
        const TensorView q = w.i8(m + ".weight", {-1, -1, -1});
        c.c_out = q.dim(0);
        c.c_in = q.dim(1) * c.a.groups;
        c.k = q.dim(2);
        const std::vector<float> f = dequantize(q, m, 1);
        c.w = up(f, m);
        if (panels && c.a.groups == 1 && c.c_in >= kPanelMinInputs)
            c.panel = gpu::upload_conv_panel(dev, f.data(), c.c_out, c.c_in, c.k,
                                             (m + " panel").c_str(), bytes);
        if (w.has(m + ".bias")) c.b = up(w.floats(m + ".bias", {c.c_out}), m + ".bias");
        return c;
    }

    // A float transposed convolution: weight [C_in, C_out / groups, K].
    DevConv fconv_tr(const std::string& m) {
        DevConv c;
        c.a = w.conv(m);
        const TensorView t = w.f32(m + ".weight", {-1, -1, -1});
        c.c_in = t.dim(0);
        c.c_out = t.dim(1) * c.a.groups;
        c.k = t.dim(2);
        c.w = up(std::vector<float>(t.f32(), t.f32() + t.numel()), m);
        if (panels && c.c_in >= kPanelMinInputs &&
            gpu::conv_tr_panel_fits(c.k, c.a.stride, c.a.dilation, c.a.groups))
            c.panel = gpu::upload_conv_tr_panel(dev, t.f32(), c.c_in, c.c_out, c.k, c.a.stride,
                                                (m + " panel").c_str(), bytes);
        if (w.has(m + ".bias")) c.b = up(w.floats(m + ".bias", {c.c_out}), m + ".bias");
        return c;
    }

    DevAdain adain(const std::string& m) {
        DevAdain a;
        const TensorView q = w.i8(m + ".fc.weight", {-1, -1});
        a.style = q.dim(0);
        a.channels = q.dim(1) / 2;
        a.w = up(dequantize(q, m + ".fc", q.dim(1)), m + ".fc");
        a.b = up(w.floats(m + ".fc.bias", {q.dim(1)}), m + ".fc.bias");
        return a;
    }

    DevAdainResBlk resblk(const std::string& m) {
        DevAdainResBlk b;
        b.norm1 = adain(m + ".norm1");
        b.norm2 = adain(m + ".norm2");
        b.conv1 = qconv(m + ".conv1");
        b.conv2 = qconv(m + ".conv2");
        b.upsample = w.has(m + ".pool.weight");
        b.shortcut_conv = w.has(m + ".conv1x1.weight");
        if (b.shortcut_conv) b.conv1x1 = qconv(m + ".conv1x1");
        if (b.upsample) b.pool = fconv_tr(m + ".pool");
        return b;
    }

    DevSnakeBlock snake(const std::string& m) {
        DevSnakeBlock s;
        for (int j = 0; w.has(m + ".convs1." + std::to_string(j) + ".weight"); ++j) {
            const std::string J = std::to_string(j);
            DevSnakeRound r;
            r.adain1 = adain(m + ".adain1." + J);
            r.adain2 = adain(m + ".adain2." + J);
            r.conv1 = qconv(m + ".convs1." + J);
            r.conv2 = qconv(m + ".convs2." + J);
            r.alpha1 = up(w.floats(m + ".alpha1." + J, {1, r.conv1.c_out, 1}), m + ".alpha1");
            r.alpha2 = up(w.floats(m + ".alpha2." + J, {1, r.conv1.c_out, 1}), m + ".alpha2");
            s.channels = r.conv1.c_out;
            s.rounds.push_back(std::move(r));
        }
        return s;
    }
};

}  // namespace

int64_t DevConv::out_length(int64_t n) const {
    const int64_t span = (k - 1) * a.dilation + 1;
    const int64_t padded = n + a.pad_left + a.pad_right;
    return padded < span ? 0 : (padded - span) / a.stride + 1;
}

int64_t DevConv::tr_out_length(int64_t n) const {
    return a.stride * (n - 1) + a.dilation * (k - 1) + 1 + a.output_padding - a.pad_left -
           a.pad_right;
}

std::string vocoder_weights_unfit(const KokoroWeights& w) {
    if (!w.config().quantized)
        return "a float32 file: the seat reads the int8 convolutions of a quantized one";
    for (int i = 0; w.has("decoder.decode." + std::to_string(i) + ".conv1.weight"); ++i) {
        const std::string m = "decoder.decode." + std::to_string(i);
        if (w.has(m + ".pool.weight") && !w.has(m + ".conv1x1.weight"))
            return m + ": an upsampling block without a shortcut convolution has no GPU path";
        if (w.has(m + ".pool.weight")) {
            const ConvAttrs a = w.conv(m + ".pool");
            if (a.stride != 2) return m + ".pool: not an x2 transposed convolution";
        }
    }
    return "";
}

DevVocoder upload_vocoder(gpu::Device& dev, const KokoroWeights& w, uint64_t& bytes) {
    const KokoroConfig& cfg = w.config();
    Loader L{dev, w, bytes};
    DevVocoder v;
    v.f0_conv = L.qconv("decoder.F0_conv");
    v.n_conv = L.qconv("decoder.N_conv");
    v.asr_res = L.qconv("decoder.asr_res.0");
    v.encode = L.resblk("decoder.encode");
    for (int i = 0; w.has("decoder.decode." + std::to_string(i) + ".conv1.weight"); ++i)
        v.decode.push_back(L.resblk("decoder.decode." + std::to_string(i)));
    if (v.decode.empty()) throw ShapeError(w.path() + ": no tensor decoder.decode.0.conv1.weight");
    v.asr_channels = v.asr_res.c_in;
    v.style_width = cfg.style_decoder;

    int64_t stages = 0, resblocks = 0;
    while (w.has(kG + ".ups." + std::to_string(stages) + ".weight")) ++stages;
    while (w.has(kG + ".resblocks." + std::to_string(resblocks) + ".convs1.0.weight")) ++resblocks;
    if (stages == 0 || resblocks == 0 || resblocks % stages != 0)
        throw ShapeError(kG + ": " + std::to_string(stages) + " upsamplings and " +
                         std::to_string(resblocks) + " resblocks");
    const int64_t per = resblocks / stages;
    for (int64_t i = 0; i < stages; ++i) {
        const std::string I = std::to_string(i);
        DevStage s;
        s.up = L.fconv_tr(kG + ".ups." + I);
        s.noise_conv = L.qconv(kG + ".noise_convs." + I);
        s.noise_res = L.snake(kG + ".noise_res." + I);
        for (int64_t j = 0; j < per; ++j)
            s.resblocks.push_back(L.snake(kG + ".resblocks." + std::to_string(i * per + j)));
        v.stages.push_back(std::move(s));
    }
    const TensorView post = w.f32(kG + ".conv_post.weight", {-1, -1, -1});
    v.post.a = w.conv(kG + ".conv_post");
    v.post.c_out = post.dim(0);
    v.post.c_in = post.dim(1);
    v.post.k = post.dim(2);
    v.post.w = L.up(std::vector<float>(post.f32(), post.f32() + post.numel()), "conv_post");
    v.post.b = L.up(w.floats(kG + ".conv_post.bias", {post.dim(0)}), "conv_post.bias");

    v.harmonics = cfg.harmonics;
    v.upsample = cfg.upsample_scale;
    v.sample_rate = cfg.sample_rate;
    v.sine_amp = cfg.sine_amp;
    v.voiced_threshold = cfg.voiced_threshold;
    v.merge_w = L.up(w.floats(kG + ".m_source.l_linear.weight", {cfg.harmonics, 1}), "merge");
    v.merge_bias = w.floats(kG + ".m_source.l_linear.bias", {1})[0];
    v.n_fft = cfg.n_fft;
    v.hop = cfg.hop;
    v.bins = cfg.n_fft / 2 + 1;
    v.window = L.up(w.floats(kG + ".stft.window", {cfg.n_fft}), "stft.window");
    std::vector<float> tw(size_t(2 * v.bins * v.n_fft));
    const float two_pi = 2.0f * kDftPi;
    const float step = (-1.0f * two_pi) / float(v.n_fft);
    for (int64_t k = 0; k < v.bins; ++k)
        for (int64_t j = 0; j < v.n_fft; ++j) {
            const float angle = float(k * j) * step;
            tw[size_t(k * v.n_fft + j)] = float(std::cos(double(angle)));
            tw[size_t((v.bins + k) * v.n_fft + j)] = float(std::sin(double(angle)));
        }
    v.twiddles = L.up(tw, "stft.twiddles");
    const TensorView basis = w.f32(kG + ".stft.inverse_basis", {2 * v.bins, 1, cfg.n_fft});
    v.basis = L.up(std::vector<float>(basis.f32(), basis.f32() + basis.numel()), "istft.basis");
    const std::vector<float> ws = w.floats(kG + ".stft.window_sum");
    v.window_sum_len = int64_t(ws.size());
    v.window_sum = L.up(ws, "istft.window_sum");

    VocoderGpuDims& d = v.dims;
    d.decoder_rows = std::max(v.encode.c_in(), v.encode.c_out());
    for (const DevAdainResBlk& b : v.decode)
        d.decoder_rows = std::max({d.decoder_rows, b.c_in(), b.c_out()});
    d.decoder_out = v.decode.back().c_out();
    for (const DevStage& s : v.stages) {
        d.stage_channels.push_back(s.up.c_out);
        d.stage_strides.push_back(s.up.a.stride);
    }
    d.resblocks = per;
    d.bins = v.bins;
    d.hop = v.hop;
    d.harmonics = v.harmonics;
    d.upsample = v.upsample;
    d.largest_weight = L.largest;
    return v;
}

}  // namespace dasllama::kokoro

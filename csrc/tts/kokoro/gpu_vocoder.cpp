#include "tts/kokoro/gpu_vocoder.h"

#include <algorithm>
#include <cmath>

#include "core/errors.h"
#include "gk_args.h"
#include "gpu/matrix.h"
#include "tts/kokoro/gpu_vocoder_weights.h"

namespace dasllama::kokoro {

namespace {

namespace gk = gpu::gk_args;

constexpr uint32_t kStrideGroup = 256;          // threads of the grid-stride stamps (GK_WG)
constexpr uint32_t kPhaseGroup = 64;            // harmonic_phase's GK_WG
constexpr float kBlockSlope = 0.2f;             // AdainResBlk1d's LeakyReLU (style_blocks.h)
constexpr float kUpsampleSlope = 0.1f;          // before each transposed convolution (generator.h)
constexpr float kPostSlope = 0.01f;             // before conv_post
constexpr float kAdaInEps = 1e-5f;
constexpr float kSqrt2 = 1.4142135381698608f;   // residual blocks divide by this
enum : uint32_t { kStore = 0, kAdd = 1, kAddDivide = 2 };
enum : uint32_t { kActNone = 0, kActLeaky = 1, kActSnake = 2 };

// conv1d_tiled's tile and limits (shaders/kernels/conv1d.gk.h: GK_CONV_TO, _TT, _KMAX, _WMAX).
constexpr int64_t kTileChannels = 32, kTileColumns = 64, kTileMaxTaps = 12, kTileMaxWindow = 512;
// conv1d_coopmat's columns a workgroup (GK_CCM_TILE_T), and the groups every device allows in x.
constexpr int64_t kPanelColumns = 64, kMaxGroupsX = 65535;

// Whether the tiled stamp covers a convolution: dense, its taps and input window in the tile's
// workgroup memory.
bool conv1d_tiled_fits(const DevConv& c) {
    const int64_t window = (kTileColumns - 1) * c.a.stride + (c.k - 1) * c.a.dilation + 1;
    return c.a.groups == 1 && c.k <= kTileMaxTaps && window <= kTileMaxWindow;
}

uint32_t u32(int64_t v) { return uint32_t(v); }
uint32_t grid(int64_t items) { return gpu::stride_groups(items, kStrideGroup); }

}  // namespace

// The call's buffers (grown with the frames) and the recording helpers.
struct VocoderGpu::Impl {
    std::shared_ptr<gpu::Device> dev;
    DevVocoder v;
    std::unique_ptr<gpu::Buffer> dummy;
    int64_t capacity = 0;   // frames the buffers hold
    std::unique_ptr<gpu::Buffer> curves, style, enc, tail, stack[2], r[3], y, phase, src, har,
        xn[2], sa, sb, post, spec, audio;
    std::vector<std::unique_ptr<gpu::Buffer>> blocks;
    uint64_t dispatches = 0;

    gpu::Buffer* bias_of(const DevConv& c) { return c.b ? c.b.get() : dummy.get(); }

    std::unique_ptr<gpu::Buffer> make(int64_t elems, const char* label) {
        return dev->alloc(size_t(std::max<int64_t>(elems, 1)) * sizeof(float), label);
    }

    int64_t tail_rows() const { return v.asr_res.c_out + v.f0_conv.c_out + v.n_conv.c_out; }

    // Room for calls of up to `frames` frames: a power of two of them (64 at least) so that
    // growing calls reallocate rarely, or exactly `frames` where the rounded size would not fit
    // the device's binding range.
    void reserve(int64_t frames) {
        if (frames <= capacity) return;
        int64_t f = 64;
        while (f < frames) f *= 2;
        if (!gpu_vocoder_unfit(v.dims, f, dev->info().max_storage_range).empty()) f = frames;
        capacity = 0;   // until every buffer below is had
        const VocoderGpuDims& d = v.dims;
        const int64_t curve = 2 * f, samples = curve * v.upsample;
        const int64_t sf = samples / v.hop + 1;
        int64_t widest = 0, l = curve;
        for (size_t i = 0; i < d.stage_channels.size(); ++i) {
            l *= d.stage_strides[i];
            widest = std::max(widest, d.stage_channels[i] * (l + 1));
        }
        curves = make(2 * curve, "kokoro f0 and n");
        style = make(v.style_width, "kokoro style");
        enc = make(v.encode.c_in() * f, "kokoro encode input");
        tail = make(tail_rows() * f, "kokoro asr_res, f0, n");
        for (auto& s : stack) s = make(d.decoder_rows * f, "kokoro decoder stack");
        for (auto& b : r) b = make(d.decoder_rows * curve, "kokoro decoder scratch");
        y = make(d.decoder_out * curve, "kokoro decoder output");
        phase = make(v.harmonics * curve, "kokoro source phases");
        src = make(samples, "kokoro source");
        har = make(2 * v.bins * sf, "kokoro source spectrum");
        for (auto& b : xn) b = make(widest, "kokoro generator stage");
        blocks.clear();
        for (int64_t j = 0; j < d.resblocks; ++j) blocks.push_back(make(widest, "kokoro resblock"));
        sa = make(widest, "kokoro snake scratch");
        sb = make(widest, "kokoro snake scratch");
        post = make(2 * v.bins * (l + 1), "kokoro conv_post");
        spec = make(2 * v.bins * (l + 1), "kokoro spectrum");
        audio = make(v.hop * (l + 1) + v.n_fft, "kokoro audio");
        capacity = f;
    }

    void barrier(gpu::Encoder& e) { e.barrier(); }

    // y[y_off ...] (mode) conv(act(x[x_off ...])), x of l_in columns (read in_up times each).
    int64_t conv(gpu::Encoder& e, const DevConv& c, gpu::Buffer& x, int64_t x_off, int64_t l_in,
                 gpu::Buffer& out, int64_t y_off, uint32_t mode, uint32_t act = kActNone,
                 float slope = 1.0f, int64_t in_up = 1) {
        const int64_t l_out = c.out_length(l_in * in_up);
        if (l_out <= 0) throw ShapeError("kokoro GPU: a convolution gets no output from " +
                                         std::to_string(l_in) + " columns");
        gk::conv1d a{};
        a.c_in = u32(c.c_in);
        a.c_out = u32(c.c_out);
        a.l_in = u32(l_in);
        a.l_out = u32(l_out);
        a.taps = u32(c.k);
        a.stride = u32(c.a.stride);
        a.dilation = u32(c.a.dilation);
        a.pad_left = u32(c.a.pad_left);
        a.groups = u32(c.a.groups);
        a.x_off = u32(x_off);
        a.y_off = u32(y_off);
        a.has_bias = c.b ? 1u : 0u;
        a.in_act = act;
        a.slope = slope;
        a.out_mode = mode;
        a.div = kSqrt2;
        a.in_up = u32(in_up);
        if (c.panel && (l_out + kPanelColumns - 1) / kPanelColumns <= kMaxGroupsX)
            gpu::conv1d_coopmat(e, c.panel, a, x, *bias_of(c), out);
        else if (conv1d_tiled_fits(c))
            e.dispatch(gpu::require_stamp("conv1d_tiled"), {&x, c.w.get(), bias_of(c), &out}, a,
                       u32((l_out + kTileColumns - 1) / kTileColumns),
                       u32((c.c_out + kTileChannels - 1) / kTileChannels));
        else
            e.dispatch(gpu::require_stamp("conv1d"), {&x, c.w.get(), bias_of(c), &out}, a,
                       grid(c.c_out * l_out));
        ++dispatches;
        return l_out;
    }

    int64_t conv_tr(gpu::Encoder& e, const DevConv& c, gpu::Buffer& x, int64_t n_in,
                    gpu::Buffer& out, uint32_t mode, uint32_t act, float slope, int64_t shift) {
        const int64_t l_out = c.tr_out_length(n_in);
        gk::conv_tr1d a{};
        a.c_in = u32(c.c_in);
        a.c_out = u32(c.c_out);
        a.n_in = u32(n_in);
        a.l_out = u32(l_out);
        a.taps = u32(c.k);
        a.stride = u32(c.a.stride);
        a.dilation = u32(c.a.dilation);
        a.pad_left = u32(c.a.pad_left);
        a.groups = u32(c.a.groups);
        a.x_off = 0;
        a.y_off = 0;
        a.has_bias = c.b ? 1u : 0u;
        a.in_act = act;
        a.slope = slope;
        a.out_mode = mode;
        a.shift = u32(shift);
        if (c.panel)
            gpu::conv_tr1d_coopmat(e, c.panel, a, x, *bias_of(c), out);
        else
            e.dispatch(gpu::require_stamp("conv_tr1d"), {&x, c.w.get(), bias_of(c), &out}, a,
                       grid(c.c_out * (l_out + shift)));
        ++dispatches;
        return l_out;
    }

    void adain(gpu::Encoder& e, const DevAdain& n, gpu::Buffer& x, gpu::Buffer& out, int64_t l,
               uint32_t act, gpu::Buffer* alpha) {
        gk::adain a{};
        a.channels = u32(n.channels);
        a.cols = u32(l);
        a.style_width = u32(n.style);
        a.act = act;
        a.eps = kAdaInEps;
        a.slope = kBlockSlope;
        e.dispatch(gpu::require_stamp("adain"),
                   {&x, &out, n.w.get(), n.b.get(), style.get(), alpha ? alpha : dummy.get()}, a,
                   u32(n.channels));
        ++dispatches;
    }

    void copy(gpu::Encoder& e, gpu::Buffer& from, int64_t from_off, gpu::Buffer& to,
              int64_t to_off, int64_t n) {
        gk::rows a{};
        a.width = u32(n);
        a.rows = 1;
        a.src_off = u32(from_off);
        a.src_stride = 0;
        a.dst_off = u32(to_off);
        a.dst_stride = 0;
        e.dispatch(gpu::require_stamp("rows_copy"), {&from, &to, dummy.get()}, a, grid(n));
        ++dispatches;
    }

    // AdainResBlk1d: x [C_in, l] -> out [C_out, 2l or l] (style_blocks.cpp).
    int64_t resblk(gpu::Encoder& e, const DevAdainResBlk& b, gpu::Buffer& x, int64_t l,
                   gpu::Buffer& out) {
        const int64_t lo = b.upsample ? 2 * l : l;
        adain(e, b.norm1, x, *r[0], l, kActLeaky, nullptr);
        barrier(e);
        gpu::Buffer* in1 = r[0].get();
        if (b.upsample) {
            conv_tr(e, b.pool, *r[0], l, *r[2], kStore, kActNone, 1.0f, 0);
            barrier(e);
            in1 = r[2].get();
        }
        conv(e, b.conv1, *in1, 0, lo, *r[1], 0, kStore);
        // The shortcut, into out (independent of the residual so far).
        if (b.shortcut_conv) conv(e, b.conv1x1, x, 0, l, out, 0, kStore, kActNone, 1.0f,
                                  b.upsample ? 2 : 1);
        else copy(e, x, 0, out, 0, b.c_in() * l);
        barrier(e);
        adain(e, b.norm2, *r[1], *r[1], lo, kActLeaky, nullptr);
        barrier(e);
        conv(e, b.conv2, *r[1], 0, lo, out, 0, kAddDivide);
        barrier(e);
        return lo;
    }

    // A Snake AdaIN residual block in place on o [C, l] (snake_resblock.cpp).
    void snake_block(gpu::Encoder& e, const DevSnakeBlock& s, gpu::Buffer& o, int64_t l) {
        for (const DevSnakeRound& r_ : s.rounds) {
            adain(e, r_.adain1, o, *sa, l, kActSnake, r_.alpha1.get());
            barrier(e);
            conv(e, r_.conv1, *sa, 0, l, *sb, 0, kStore);
            barrier(e);
            adain(e, r_.adain2, *sb, *sb, l, kActSnake, r_.alpha2.get());
            barrier(e);
            conv(e, r_.conv2, *sb, 0, l, o, 0, kAdd);
            barrier(e);
        }
    }

    // Records the whole call; returns the samples the audio buffer holds.
    int64_t record(gpu::Encoder& e, int64_t frames) {
        const int64_t F = frames, curve = 2 * F;
        // ---- decoder
        const int64_t rc = v.asr_res.c_out, fc = v.f0_conv.c_out;
        conv(e, v.f0_conv, *curves, 0, curve, *tail, rc * F, kStore);
        conv(e, v.n_conv, *curves, curve, curve, *tail, (rc + fc) * F, kStore);
        conv(e, v.asr_res, *enc, 0, F, *tail, 0, kStore);
        barrier(e);
        copy(e, *tail, rc * F, *enc, v.asr_channels * F, (tail_rows() - rc) * F);
        barrier(e);
        int cur = 0;
        int64_t l = resblk(e, v.encode, *enc, F, *stack[cur]);
        int64_t c = v.encode.c_out();
        for (size_t j = 0; j < v.decode.size(); ++j) {
            const DevAdainResBlk& b = v.decode[j];
            copy(e, *tail, 0, *stack[cur], c * l, tail_rows() * l);
            barrier(e);
            const bool last = j + 1 == v.decode.size();
            gpu::Buffer& out = last ? *y : *stack[1 - cur];
            l = resblk(e, b, *stack[cur], l, out);
            c = b.c_out();
            cur = 1 - cur;
        }
        if (l != curve) throw ShapeError("kokoro GPU: the decoder gives " + std::to_string(l) +
                                         " columns for " + std::to_string(F) + " frames");
        // ---- harmonic source and its spectrum
        gk::harmonic_source h{};
        h.frames = u32(curve);
        h.up = u32(v.upsample);
        h.harmonics = u32(v.harmonics);
        h.sample_rate = float(v.sample_rate);
        h.amp = v.sine_amp;
        h.threshold = v.voiced_threshold;
        h.bias = v.merge_bias;
        const std::vector<gpu::Buffer*> hb = {curves.get(), phase.get(), v.merge_w.get(), src.get()};
        e.dispatch(gpu::require_stamp("harmonic_phase"), hb, h,
                   u32((v.harmonics + kPhaseGroup - 1) / kPhaseGroup));
        barrier(e);
        const int64_t samples = curve * v.upsample;
        e.dispatch(gpu::require_stamp("harmonic_source"), hb, h, grid(samples));
        barrier(e);
        const int64_t sf = (samples + 2 * (v.n_fft / 2) - v.n_fft) / v.hop + 1;
        gk::stft st{};
        st.n = u32(samples);
        st.n_fft = u32(v.n_fft);
        st.hop = u32(v.hop);
        st.bins = u32(v.bins);
        st.frames = u32(sf);
        e.dispatch(gpu::require_stamp("stft"),
                   {src.get(), v.window.get(), v.twiddles.get(), har.get()}, st,
                   grid(v.bins * sf));
        barrier(e);
        dispatches += 3;
        // ---- upsampling stages
        gpu::Buffer* x = y.get();
        for (size_t i = 0; i < v.stages.size(); ++i) {
            const DevStage& s = v.stages[i];
            gpu::Buffer& o = *xn[i % 2];
            const bool last = i + 1 == v.stages.size();
            const int64_t ln = conv(e, s.noise_conv, *har, 0, sf, o, 0, kStore);
            barrier(e);
            snake_block(e, s.noise_res, o, ln);
            const int64_t lu = s.up.tr_out_length(l);
            if (lu + (last ? 1 : 0) != ln)
                throw ShapeError("kokoro GPU: stage " + std::to_string(i) + " upsamples to " +
                                 std::to_string(lu) + " columns, its noise branch has " +
                                 std::to_string(ln));
            conv_tr(e, s.up, *x, l, o, kAdd, kActLeaky, kUpsampleSlope, last ? 1 : 0);
            barrier(e);
            l = ln;
            const int64_t n = s.up.c_out * l;
            for (size_t j = 0; j < s.resblocks.size(); ++j) copy(e, o, 0, *blocks[j], 0, n);
            barrier(e);
            for (size_t j = 0; j < s.resblocks.size(); ++j) snake_block(e, s.resblocks[j], *blocks[j], l);
            gk::mean_rows m{};
            m.n = u32(n);
            m.count = u32(s.resblocks.size());
            std::vector<gpu::Buffer*> mb;
            for (size_t j = 0; j < 4; ++j)
                mb.push_back(j < s.resblocks.size() ? blocks[j].get() : dummy.get());
            mb.push_back(&o);
            e.dispatch(gpu::require_stamp("mean_rows"), mb, m, grid(n));
            ++dispatches;
            barrier(e);
            x = &o;
        }
        // ---- conv_post, the spectrum and the inverse STFT
        conv(e, v.post, *x, 0, l, *post, 0, kStore, kActLeaky, kPostSlope);
        barrier(e);
        const int64_t n_out = v.hop * (l - 1) + v.n_fft - 2 * (v.n_fft / 2);
        gk::istft is{};
        is.bins = u32(v.bins);
        is.frames = u32(l);
        is.n_fft = u32(v.n_fft);
        is.hop = u32(v.hop);
        is.samples = u32(n_out);
        is.wsum_len = u32(v.window_sum_len);
        is.scale = float(double(v.n_fft) / double(v.hop));
        const std::vector<gpu::Buffer*> ib = {post.get(), spec.get(), v.basis.get(),
                                              v.window_sum.get(), audio.get()};
        e.dispatch(gpu::require_stamp("istft_spectrum"), ib, is, grid(v.bins * l));
        barrier(e);
        e.dispatch(gpu::require_stamp("istft"), ib, is, grid(n_out));
        dispatches += 2;
        return n_out;
    }
};

VocoderGpu::VocoderGpu(const KokoroWeights& w, const std::string& spec) {
    stats_ = gpu::SeatStats{};
    on_ = gpu::seat_enabled_by_env("vocoder");
    auto dev = gpu::open_device(spec);   // throws DeviceError naming the devices there are
    p_ = std::make_unique<Impl>();
    p_->dev = dev;
    absent_why_ = vocoder_weights_unfit(w);
    if (!absent_why_.empty()) {
        absent_ = gpu::Decline::shape;
        return;
    }
    try {
        p_->dummy = dev->alloc(16, "unused binding");
        p_->v = upload_vocoder(*dev, w, weight_bytes_);
    } catch (const DeviceError& e) {
        p_->v = DevVocoder{};
        absent_ = gpu::Decline::memory;
        absent_why_ = e.what();
    } catch (const ShapeError& e) {
        p_->v = DevVocoder{};
        absent_ = gpu::Decline::shape;
        absent_why_ = e.what();
    }
    resident_ = absent_why_.empty();
}

VocoderGpu::~VocoderGpu() = default;

std::string VocoderGpu::device_name() const { return p_->dev->info().name; }

const VocoderGpuDims& VocoderGpu::dims() const { return p_->v.dims; }

void VocoderGpu::set_profiling(bool on) { p_->dev->set_profiling(on); }

std::vector<gpu::KernelTime> VocoderGpu::last_profile() const { return p_->dev->last_profile(); }

void VocoderGpu::decline(gpu::Decline why, const std::string& reason) {
    stats_.decline(why);
    reason_ = reason;
}

bool VocoderGpu::admit(int64_t frames, bool plain) {
    if (!on_) {
        decline(gpu::Decline::knob, "the vocoder seat is off");
        return false;
    }
    if (!resident_) {
        decline(absent_, absent_why_);
        return false;
    }
    if (!plain) {
        decline(gpu::Decline::shape, "SineGen's noise and a peer's source spectrum have no GPU "
                                     "path (the seat computes the graph's deterministic source)");
        return false;
    }
    const std::string why =
        gpu_vocoder_unfit(p_->v.dims, frames, p_->dev->info().max_storage_range);
    if (!why.empty()) {
        decline(gpu::Decline::shape, why);
        return false;
    }
    try {
        p_->reserve(frames);
    } catch (const DeviceError& e) {
        decline(gpu::Decline::memory, e.what());
        return false;
    }
    return true;
}

void VocoderGpu::run(const float* asr, int64_t frames, const float* f0, const float* n,
                     const float* style, std::vector<float>& audio) {
    Impl& p = *p_;
    p.reserve(frames);   // admit reserved it: a no-op unless the caller skipped admit
    const int64_t curve = 2 * frames;
    gpu::Device& dev = *p.dev;
    const size_t fb = sizeof(float);
    dev.upload(*p.enc, 0, asr, size_t(p.v.asr_channels * frames) * fb);
    dev.upload(*p.curves, 0, f0, size_t(curve) * fb);
    dev.upload(*p.curves, size_t(curve) * fb, n, size_t(curve) * fb);
    dev.upload(*p.style, 0, style, size_t(p.v.style_width) * fb);
    const uint64_t up = uint64_t(p.v.asr_channels * frames + 2 * curve + p.v.style_width) * fb;
    p.dispatches = 0;
    std::unique_ptr<gpu::Encoder> e = dev.encoder();
    const int64_t samples = p.record(*e, frames);
    dev.submit(*e);
    audio.resize(size_t(samples));
    dev.download(*p.audio, 0, audio.data(), size_t(samples) * fb);
    ++stats_.served;
    stats_.dispatches += e->dispatches();
    ++stats_.uploads;
    bytes_up_ += up;
    bytes_down_ += uint64_t(samples) * fb;
    reason_.clear();
}

}  // namespace dasllama::kokoro

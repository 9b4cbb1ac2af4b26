#include "asr/whisper/gpu_encoder.h"

#include <algorithm>
#include <cmath>

#include "asr/whisper/blocks.h"
#include "core/errors.h"
#include "core/formats.h"
#include "core/tuning.h"
#include "cpu/ops.h"
#include "gk_args.h"
#include "gpu/conv.h"
#include "gpu/matrix.h"
#include "nn/tensor_reader.h"

namespace dasllama::whisper {

namespace {

namespace gk = gpu::gk_args;

constexpr uint32_t kStrideGroup = 256;   // threads of the grid-stride stamps (GK_WG)
constexpr int64_t kConvTaps = 3;         // both stem convolutions (weights.h)
constexpr uint32_t kNanWord = 0x7fc00000u;   // a quiet float32 NaN

// conv1d_tiled's tile and limits (shaders/kernels/conv1d.gk.h: GK_CONV_TO, _TT, _KMAX, _WMAX).
constexpr int64_t kTileChannels = 32, kTileColumns = 64, kTileMaxTaps = 12, kTileMaxWindow = 512;

// The bidirectional attention on cooperative matrices (shaders/kernels/attention_coopmat.gk.h
// with GK_ACM_ALL_KEYS) for the one head size it is stamped at, which every Whisper size has.
constexpr int64_t kFullAttentionHeadDim = 64;
constexpr int64_t kKeyGranule = 16;       // the stamp reads keys 16 at a time
constexpr int64_t kMaxGroupsX = 65535;    // kv_store's grid-stride dispatch limit

// Whether the encoder's self-attention takes attention_full_cm_64 where the device has
// cooperative matrices and the matrices are not float32 (their products then round to float16
// already). Measured on an H200, tiny.en's 30 s window in the int8 lane: 5.1 ms a window
// against 34.3 ms with attention_f32 (one query head per frame and head, 9000 of them).
const tuning::Knob& kFullAttentionCoopmat = tuning::define(
    "vulkan.whisper.attention_coopmat", 1, 0, 1,
    "1: the Whisper encoder's attention on cooperative matrices where the products are float16; "
    "0: attention_f32");

// Whether the encoder's products of float16 matrices read their input as one float16 panel
// (mm_stage, with the LayerNorm formed on the way in) on the tiled stamps of the LLM's prefill,
// where gpu::staged_panel allows it, instead of matmul_<fmt>_coopmat on float32 rows. Measured
// on an H200, tiny.en's 30 s window in the int8 lane: its 16 products 1.62 -> 0.75 ms, the
// window 5.14 -> 4.30 ms (bench/whisper_encoder_profile.py).
const tuning::Knob& kStagedProducts = tuning::define(
    "vulkan.whisper.staged", 1, 0, 1,
    "1: the Whisper encoder's products on staged float16 panels where allowed; 0: unstaged");

// The staged input stage of a pre-norm product (mm_input.h): LayerNorm with weight and bias.
constexpr uint32_t kLayerNormAffine = GK_MM_IN_LAYERNORM + 1u;

uint32_t u32(int64_t v) { return uint32_t(v); }
uint32_t grid(int64_t items) { return gpu::stride_groups(items, kStrideGroup); }

struct DevNorm {
    std::unique_ptr<gpu::Buffer> w, b;
    std::unique_ptr<gpu::Buffer> wb;   // w then b in one buffer: the staged products' norm stage
};

struct DevLinear {
    gpu::DeviceMatrix m;
    std::unique_ptr<gpu::Buffer> bias;   // nullptr: none
};

struct DevConv {
    std::unique_ptr<gpu::Buffer> w, b;
    gpu::ConvPanel panel;   // the float16 lane's, where conv1d_coopmat serves
    int64_t c_in = 0, c_out = 0, stride = 1;
};

struct DevLayer {
    DevNorm attn_ln, mlp_ln;
    DevLinear qkv, out, fc1, fc2;
};

EncoderGpuDims dims_of(const WhisperConfig& c) {
    EncoderGpuDims e;
    e.n_mels = c.n_mels;
    e.n_ctx = c.n_audio_ctx;
    e.d = c.n_audio_state;
    e.heads = c.n_audio_head;
    e.ff = 4 * c.n_audio_state;
    e.layers = c.n_audio_layer;
    return e;
}

// Why the loaded weights have no GPU form ("" when they all do).
std::string weights_unfit(const WhisperWeights& w) {
    for (const EncoderLayer& l : w.enc)
        for (const nn::Linear* m : {&l.qkv, &l.out, &l.fc1, &l.fc2})
            if (gpu::device_format(*m->w.type).empty())
                return std::string("an encoder matrix of type ") + m->w.type->name +
                       " has no GPU kernels";
    return "";
}

}  // namespace

struct EncoderGpu::Impl {
    std::shared_ptr<gpu::Device> dev;
    EncoderGpuDims e;
    bool coopmat = false;
    // The int8 lane on a device with cooperative matrices: float32 matrices go up as float16,
    // so the products (and then the attention) run on cooperative matrices in float16, as the
    // lane's CPU products round their activations to 8 bits. The float32 lane keeps float32.
    bool half_products = false;
    uint64_t* weight_bytes = nullptr;
    DevConv conv1, conv2;
    std::unique_ptr<gpu::Buffer> pos, pos_base, dummy;
    std::vector<DevLayer> layers;
    DevNorm ln_post;
    // The call's buffers: window, conv1's output, the residual rows, a norm's output, q/k/v,
    // the head-major queries and attention output, the attention rows, the MLP's hidden rows.
    std::unique_ptr<gpu::Buffer> win, c1, c2, x, h, qkv, qh, ah, attn, ff;
    // The staged products' float16 input panel (n_ctx rows of the widest input); null when
    // they are off (the knob at upload, or float32 matrices).
    std::unique_ptr<gpu::Buffer> panel;
    // The cooperative-matrix attention's stamp ("" when attention_f32 serves) and its float16
    // keys and values, rows padded to the stamp's granule.
    std::string full_attention;
    std::unique_ptr<gpu::Buffer> kc, vc;
    std::unique_ptr<gpu::Encoder> recording;

    std::unique_ptr<gpu::Buffer> make(int64_t elems, const char* label) {
        return dev->alloc(size_t(std::max<int64_t>(elems, 1)) * sizeof(float), label);
    }
    std::unique_ptr<gpu::Buffer> floats(const std::vector<float>& v, const char* label) {
        return gpu::upload_floats(*dev, v, label, *weight_bytes);
    }
    DevNorm norm(const Norm& n) {
        std::vector<float> wb(n.w);
        wb.insert(wb.end(), n.b.begin(), n.b.end());
        return {floats(n.w, "whisper norm"), floats(n.b, "whisper norm"),
                floats(wb, "whisper norm (staged)")};
    }
    DevLinear linear(const nn::Linear& l, const char* label) {
        DevLinear d;
        if (half_products && l.w.type->type == GgmlType::F32) {
            std::vector<uint16_t> h(size_t(l.w.rows * l.w.cols));
            for (int64_t r = 0; r < l.w.rows; ++r)
                cpu::f32_to_f16_row(reinterpret_cast<const float*>(l.w.data + r * l.w.row_bytes),
                                    h.data() + r * l.w.cols, l.w.cols);
            d.m = gpu::upload_matrix(*dev, *type_traits(uint32_t(GgmlType::F16)), l.w.cols,
                                     {gpu::HostRows{reinterpret_cast<const uint8_t*>(h.data()),
                                                    l.w.rows}},
                                     label, *weight_bytes);
        } else {
            d.m = gpu::upload_matrix(*dev, *l.w.type, l.w.cols,
                                     {gpu::HostRows{l.w.data, l.w.rows}}, label, *weight_bytes);
        }
        d.bias = floats(l.bias, "whisper bias");
        return d;
    }
    DevConv conv(const nn::TensorReader& r, const std::string& p, int64_t c_out, int64_t c_in,
                 int64_t stride) {
        DevConv c;
        const std::vector<float> w = r.floats(p + ".weight", {c_out, c_in, kConvTaps});
        c.w = floats(w, "whisper conv");
        if (half_products && gpu::conv_coopmat_usable(*dev))
            c.panel = gpu::upload_conv_panel(*dev, w.data(), c_out, c_in, kConvTaps,
                                             "whisper conv panel", *weight_bytes);
        c.b = floats(r.floats(p + ".bias", {c_out}), "whisper conv bias");
        c.c_in = c_in;
        c.c_out = c_out;
        c.stride = stride;
        return c;
    }

    void upload(const WhisperWeights& w) {
        const int64_t d = e.d;
        nn::TensorReader r(w.file);
        conv1 = conv(r, "enc.conv1", d, e.n_mels, 1);
        conv2 = conv(r, "enc.conv2", d, d, 2);
        pos = floats(w.enc_pos, "whisper positions");
        for (const EncoderLayer& l : w.enc) {
            DevLayer g;
            g.attn_ln = norm(l.attn_ln);
            g.mlp_ln = norm(l.mlp_ln);
            g.qkv = linear(l.qkv, "whisper enc qkv");
            g.out = linear(l.out, "whisper enc out");
            g.fc1 = linear(l.fc1, "whisper enc fc1");
            g.fc2 = linear(l.fc2, "whisper enc fc2");
            layers.push_back(std::move(g));
        }
        ln_post = norm(w.ln_post);
        const uint32_t zero = 0;
        pos_base = dev->alloc(16, "whisper position base");
        dev->upload(*pos_base, 0, &zero, sizeof(zero));
        dummy = dev->alloc(16, "unused binding");
        const int64_t n = e.n_ctx, T = 2 * n;
        win = make(e.n_mels * T, "whisper mel window");
        c1 = make(d * T, "whisper conv1");
        c2 = make(d * n, "whisper conv2");
        x = make(n * d, "whisper residual");
        h = make(n * d, "whisper norm rows");
        qkv = make(3 * n * d, "whisper qkv");
        attn = make(n * d, "whisper attention rows");
        ff = make(e.ff * n, "whisper mlp rows");
        // float32 matrices never stage (gpu::staged_panel)
        if (coopmat && kStagedProducts.get() != 0 && layers.front().qkv.m.format != "f32")
            panel = dev->alloc((size_t(n) * size_t(std::max(d, e.ff)) * 2 + 15) / 16 * 16,
                               "whisper staged panel");
        full_attention = full_attention_stamp(layers.front().qkv.m.format);
        if (full_attention.empty()) {
            qh = make(n * d, "whisper queries by head");
            ah = make(n * d, "whisper attention by head");
        } else {
            const int64_t key_rows = (n + kKeyGranule - 1) / kKeyGranule * kKeyGranule;
            kc = dev->alloc(size_t(key_rows * d) * 2, "whisper keys (f16)");
            vc = dev->alloc(size_t(key_rows * d) * 2, "whisper values (f16)");
        }
        // NaN in every activation at the start, so a value the recording never writes shows in
        // the output (tests/test_whisper_gpu.py asserts it finite) rather than passing as 0.
        // The key rows past n, which the last granule reads with weight zero, must be finite.
        auto enc = dev->encoder();
        for (gpu::Buffer* b : {c1.get(), c2.get(), x.get(), h.get(), qkv.get(), qh.get(),
                               ah.get(), attn.get(), ff.get(), kc.get(), vc.get()})
            if (b) enc->fill(*b, 0, b->size(), b == kc.get() || b == vc.get() ? 0u : kNanWord);
        dev->submit(*enc);
    }

    std::string full_attention_stamp(const std::string& format) const {
        if (!coopmat || format == "f32" || kFullAttentionCoopmat.get() == 0) return "";
        if (e.d / e.heads != kFullAttentionHeadDim) return "";
        const gpu::StampInfo* st = gpu::find_stamp("attention_full_cm_64");
        return st && st->spirv ? "attention_full_cm_64" : "";
    }

    // y [c_out, l_out] = conv(x [c_in, l_in]) + bias, pad 1 both sides.
    void conv_rec(gpu::Encoder& enc, const DevConv& c, gpu::Buffer& in, int64_t l_in,
                  gpu::Buffer& out) {
        const int64_t l_out = (l_in + 2 - kConvTaps) / c.stride + 1;
        gk::conv1d a{};
        a.c_in = u32(c.c_in);
        a.c_out = u32(c.c_out);
        a.l_in = u32(l_in);
        a.l_out = u32(l_out);
        a.taps = u32(kConvTaps);
        a.stride = u32(c.stride);
        a.dilation = 1;
        a.pad_left = 1;
        a.groups = 1;
        a.has_bias = 1;
        a.div = 1.0f;
        a.in_up = 1;
        const int64_t window = (kTileColumns - 1) * c.stride + (kConvTaps - 1) + 1;
        if (c.panel)
            gpu::conv1d_coopmat(enc, c.panel, a, in, *c.b, out);
        else if (kConvTaps <= kTileMaxTaps && window <= kTileMaxWindow)
            enc.dispatch(gpu::require_stamp("conv1d_tiled"), {&in, c.w.get(), c.b.get(), &out}, a,
                         u32((l_out + kTileColumns - 1) / kTileColumns),
                         u32((c.c_out + kTileChannels - 1) / kTileChannels));
        else
            enc.dispatch(gpu::require_stamp("conv1d"), {&in, c.w.get(), c.b.get(), &out}, a,
                         grid(c.c_out * l_out));
    }

    void gelu_rec(gpu::Encoder& enc, gpu::Buffer& in, gpu::Buffer& out, int64_t rows,
                  int64_t cols, bool transpose, gpu::Buffer* add) {
        gk::gelu_erf a{};
        a.rows = u32(rows);
        a.cols = u32(cols);
        a.transpose = transpose ? 1u : 0u;
        a.act = 1;
        a.add = add ? 1u : 0u;
        enc.dispatch(gpu::require_stamp("gelu_erf"), {&in, &out, add ? add : dummy.get()}, a,
                     grid(rows * cols));
    }

    void norm_rec(gpu::Encoder& enc, const DevNorm& nm, gpu::Buffer& in, gpu::Buffer& out) {
        gk::layernorm a{};
        a.n = u32(e.d);
        a.rows = u32(e.n_ctx);
        a.affine = 1;
        a.eps = float(kLayerNormEps);
        enc.dispatch(gpu::require_stamp("layernorm"),
                     {&in, nm.w.get(), nm.b.get(), dummy.get(), &out}, a, u32(e.n_ctx));
    }

    // Whether linear_rec() of `l` with input stage `mode` reads a staged panel.
    bool staged(const DevLinear& l, uint32_t mode) const {
        return panel && gpu::staged_panel(l.m.format, l.m.cols, e.n_ctx, mode, coopmat);
    }

    // The LayerNorm `nm` of the rows at `in` into `out`, or, where `next` (the product that
    // reads them) is staged, nothing: linear_rec forms it on its way in (norm_stage()).
    bool norm_or_stage(gpu::Encoder& enc, const DevNorm& nm, const DevLinear& next,
                       gpu::Buffer& in, gpu::Buffer& out) {
        if (staged(next, kLayerNormAffine)) return true;
        norm_rec(enc, nm, in, out);
        enc.barrier();
        return false;
    }
    gpu::ProjectionInput norm_stage(const DevNorm& nm) const {
        return gpu::ProjectionInput{kLayerNormAffine, nm.wb.get(), 0, float(kLayerNormEps)};
    }

    // y[t * y_stride + r] (+)= W in(x_t), then + bias (its own pass, after a barrier); in() the
    // input stage `st` (plain, or a LayerNorm when the product is staged).
    void linear_rec(gpu::Encoder& enc, const DevLinear& l, gpu::Buffer& in, int64_t in_stride,
                    gpu::Buffer& out, int64_t out_stride, bool accumulate,
                    const gpu::ProjectionInput& st = gpu::ProjectionInput()) {
        if (staged(l, st.mode)) {
            gpu::stage_input(enc, in, 0, u32(in_stride), l.m.cols, e.n_ctx, st, *panel, *dummy);
            enc.barrier();
            gpu::project_staged(enc, l.m, *panel, out, 0, u32(out_stride), e.n_ctx, accumulate,
                                *dummy);
        } else {
            gpu::project(enc, l.m, in, 0, u32(in_stride), out, 0, u32(out_stride), e.n_ctx,
                         accumulate, *dummy, coopmat);
        }
        if (!l.bias) return;
        enc.barrier();
        gk::add_scale a{};
        a.n = u32(l.m.rows);
        a.rows = u32(e.n_ctx);
        a.y_stride = u32(out_stride);
        a.x_stride = 0;
        a.div = 1.0f;
        enc.dispatch(gpu::require_stamp("add_scale"),
                     {&out, l.bias.get(), dummy.get(), dummy.get()}, a, grid(l.m.rows * e.n_ctx));
    }

    // Columns [col0, col0 + width) of `rows` rows `src_stride` apart -> rows `dst_stride` apart.
    void copy_rec(gpu::Encoder& enc, gpu::Buffer& src, int64_t src_off, int64_t src_stride,
                  gpu::Buffer& dst, int64_t dst_off, int64_t dst_stride, int64_t width) {
        gk::rows a{};
        a.width = u32(width);
        a.rows = u32(e.n_ctx);
        a.src_off = u32(src_off);
        a.src_stride = u32(src_stride);
        a.dst_off = u32(dst_off);
        a.dst_stride = u32(dst_stride);
        enc.dispatch(gpu::require_stamp("rows_copy"), {&src, &dst, dummy.get()}, a,
                     grid(width * e.n_ctx));
    }

    // Bidirectional attention on attention_f32 (a causal kernel): every frame is its own query
    // "head" (head h of frame t at h * n + t, the queries head-major), all placed at position
    // n - 1, so each sees all n keys; kv head h = (h * n + t) / n.
    void attend_rec(gpu::Encoder& enc) {
        if (!full_attention.empty()) return attend_coopmat_rec(enc);
        const int64_t n = e.n_ctx, d = e.d, H = e.heads, hd = d / H;
        for (int64_t hh = 0; hh < H; ++hh) copy_rec(enc, *qkv, hh * hd, 3 * d, *qh, hh * n * hd, hd, hd);
        enc.barrier();
        gk::attention_f32 a{};
        a.n_tok = 1;
        a.n_head = u32(H * n);
        a.n_head_kv = u32(H);
        a.head_dim = u32(hd);
        a.pos0 = u32(n - 1);
        a.window = 0;
        a.q_off = 0;
        a.q_stride = 0;
        a.kv_stride = u32(3 * d);
        a.k_off = u32(d);
        a.v_off = u32(2 * d);
        a.out_off = 0;
        a.out_stride = 0;
        a.scale = float(1.0 / std::sqrt(double(hd)));
        enc.dispatch(gpu::require_stamp("attention_f32"), {qh.get(), qkv.get(), qkv.get(), ah.get(),
                                                           pos_base.get()},
                     a, u32(H * n), 1);
        enc.barrier();
        for (int64_t hh = 0; hh < H; ++hh) copy_rec(enc, *ah, hh * n * hd, hd, *attn, hh * hd, d, hd);
    }

    // The same attention with the queries read from the q/k/v rows and the output written as
    // rows: keys and values stored as float16 rows, then attention_full_cm_64, every query
    // seeing keys 0 .. n - 1.
    void attend_coopmat_rec(gpu::Encoder& enc) {
        const int64_t n = e.n_ctx, d = e.d, H = e.heads, hd = d / H;
        for (auto [cache, off] : {std::pair{kc.get(), d}, std::pair{vc.get(), 2 * d}}) {
            gk::kv_store s{};
            s.n_tok = u32(n);
            s.width = u32(d);
            s.src_off = u32(off);
            s.src_stride = u32(3 * d);
            s.dst_off = 0;
            enc.dispatch(gpu::require_stamp("kv_store_f16"), {qkv.get(), cache}, s,
                         u32(std::min<int64_t>((n * d + 511) / 512, kMaxGroupsX)));
        }
        enc.barrier();
        gk::attention_coopmat a{};
        a.n_tok = u32(n);
        a.n_head = u32(H);
        a.n_head_kv = u32(H);
        a.head_dim = u32(hd);
        a.head_dim_v = u32(hd);
        a.pos0 = u32(n - 1);
        a.window = 0;
        a.q_off = 0;
        a.q_stride = u32(3 * d);
        a.k_off = 0;
        a.v_off = 0;
        a.out_off = 0;
        a.out_stride = u32(d);
        a.scale = float(1.0 / std::sqrt(double(hd)));
        enc.dispatch(gpu::require_stamp(full_attention),
                     {qkv.get(), kc.get(), vc.get(), attn.get(), pos_base.get()}, a, u32(H),
                     u32((n + kKeyGranule - 1) / kKeyGranule));
    }

    void record(gpu::Encoder& enc) {
        const int64_t n = e.n_ctx, d = e.d, T = 2 * n;
        conv_rec(enc, conv1, *win, T, *c1);
        enc.barrier();
        gelu_rec(enc, *c1, *c1, d, T, false, nullptr);
        enc.barrier();
        conv_rec(enc, conv2, *c1, T, *c2);
        enc.barrier();
        gelu_rec(enc, *c2, *x, d, n, true, pos.get());   // [d, n] -> [n, d] + positions
        enc.barrier();
        for (const DevLayer& l : layers) {
            if (norm_or_stage(enc, l.attn_ln, l.qkv, *x, *h))
                linear_rec(enc, l.qkv, *x, d, *qkv, 3 * d, false, norm_stage(l.attn_ln));
            else
                linear_rec(enc, l.qkv, *h, d, *qkv, 3 * d, false);
            enc.barrier();
            attend_rec(enc);
            enc.barrier();
            linear_rec(enc, l.out, *attn, d, *x, d, true);
            enc.barrier();
            if (norm_or_stage(enc, l.mlp_ln, l.fc1, *x, *h))
                linear_rec(enc, l.fc1, *x, d, *ff, e.ff, false, norm_stage(l.mlp_ln));
            else
                linear_rec(enc, l.fc1, *h, d, *ff, e.ff, false);
            enc.barrier();
            gelu_rec(enc, *ff, *ff, n, e.ff, false, nullptr);
            enc.barrier();
            linear_rec(enc, l.fc2, *ff, e.ff, *x, d, true);
            enc.barrier();
        }
        norm_rec(enc, ln_post, *x, *x);
    }
};

EncoderGpu::EncoderGpu(const WhisperWeights& w, const std::string& spec) {
    on_ = gpu::seat_enabled_by_env("encoder");
    auto dev = gpu::open_device(spec);   // throws DeviceError naming the devices there are
    p_ = std::make_unique<Impl>();
    p_->dev = dev;
    p_->e = dims_of(w.cfg);
    p_->coopmat = dev->info().coopmat_khr;
    p_->half_products = p_->coopmat && w.compute == ComputeType::kInt8;
    p_->weight_bytes = &weight_bytes_;
    absent_why_ = gpu_encoder_unfit(p_->e, dev->info().max_storage_range);
    if (absent_why_.empty()) absent_why_ = weights_unfit(w);
    if (!absent_why_.empty()) {
        absent_ = gpu::Decline::shape;
        return;
    }
    try {
        p_->upload(w);
    } catch (const DeviceError& e) {
        absent_ = gpu::Decline::memory;
        absent_why_ = e.what();
    } catch (const ShapeError& e) {
        absent_ = gpu::Decline::shape;
        absent_why_ = e.what();
    }
    if (!absent_why_.empty()) {   // let what was had go
        auto keep = p_->dev;
        p_ = std::make_unique<Impl>();
        p_->dev = keep;
        p_->e = dims_of(w.cfg);
    }
    resident_ = absent_why_.empty();
}

EncoderGpu::~EncoderGpu() = default;

std::string EncoderGpu::device_name() const { return p_->dev->info().name; }

void EncoderGpu::decline(gpu::Decline why, const std::string& reason) {
    stats_.decline(why);
    reason_ = reason;
}

bool EncoderGpu::admit() {
    if (!on_) {
        decline(gpu::Decline::knob, "the encoder seat is off");
        return false;
    }
    if (!resident_) {
        decline(absent_, absent_why_);
        return false;
    }
    return true;
}

void EncoderGpu::set_profiling(bool on) {
    p_->dev->set_profiling(on);
    p_->recording.reset();   // a recording holds its timestamps, or none
}

std::vector<gpu::KernelTime> EncoderGpu::last_profile() const { return p_->dev->last_profile(); }

void EncoderGpu::run(const float* window, std::vector<float>& out) {
    Impl& p = *p_;
    gpu::Device& dev = *p.dev;
    const int64_t n = p.e.n_ctx, d = p.e.d;
    const size_t win_bytes = size_t(p.e.n_mels * 2 * n) * sizeof(float);
    dev.upload(*p.win, 0, window, win_bytes);
    const bool replay = p.recording != nullptr;
    if (!replay) {
        auto enc = dev.encoder();
        p.record(*enc);
        p.recording = std::move(enc);
    }
    try {
        dev.submit(*p.recording);
    } catch (...) {
        p.recording.reset();   // record afresh after a failed submit
        throw;
    }
    out.resize(size_t(n * d));
    dev.download(*p.x, 0, out.data(), out.size() * sizeof(float));
    ++stats_.served;
    if (replay) ++stats_.replays;
    stats_.dispatches += p.recording->dispatches();
    ++stats_.uploads;
    bytes_up_ += win_bytes;
    bytes_down_ += out.size() * sizeof(float);
    reason_.clear();
}

}  // namespace dasllama::whisper

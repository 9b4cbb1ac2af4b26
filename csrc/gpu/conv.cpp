#include "gpu/conv.h"

#include <string>
#include <vector>

#include "core/errors.h"
#include "core/tuning.h"
#include "cpu/ops.h"
#include "gpu/matrix.h"
#include "gpu/stamps.h"

namespace dasllama::gpu {

namespace {

// conv1d_coopmat's tile and K step (GK_CCM_TILE_O, GK_CCM_TILE_T, GK_CCM_BK).
constexpr int64_t kTileChannels = 64, kTileColumns = 64, kStepCols = 32;

const tuning::Knob& kConvCoopmat = tuning::define(
    "vulkan.conv.coopmat", 1, 0, 1,
    "1: dense convolutions, plain and transposed, of the Kokoro and Whisper seats on "
    "cooperative matrices (float16 operands, float32 sums) where the device has them; 0: the "
    "float32 stamps (conv1d_tiled, conv_tr1d)");

// The panel of `phases` float16 blocks [c_out][taps][ci_pad]; weight(ph, o, k, i) gives each value.
template <typename Weight>
ConvPanel upload_panel(Device& dev, int64_t c_out, int64_t c_in, int64_t taps, int64_t phases,
                       Weight weight, const char* label, uint64_t& bytes) {
    ConvPanel p;
    p.c_out = c_out;
    p.c_in = c_in;
    p.taps = taps;
    p.phases = phases;
    p.ci_pad = (c_in + kStepCols - 1) / kStepCols * kStepCols;
    const int64_t k_cols = taps * p.ci_pad;
    std::vector<float> row(size_t(k_cols), 0.0f);
    std::vector<uint16_t> panel(size_t(phases * c_out * k_cols));
    for (int64_t ph = 0; ph < phases; ++ph)
        for (int64_t o = 0; o < c_out; ++o) {
            for (int64_t k = 0; k < taps; ++k)
                for (int64_t i = 0; i < c_in; ++i)
                    row[size_t(k * p.ci_pad + i)] = weight(ph, o, k, i);
            cpu::f32_to_f16_row(row.data(), panel.data() + (ph * c_out + o) * k_cols, k_cols);
        }
    const size_t n = panel.size() * sizeof(uint16_t);
    p.w = dev.alloc(n, label);
    dev.upload(*p.w, 0, panel.data(), n);
    bytes += n;
    return p;
}

gk_args::conv1d_coopmat base_args(const ConvPanel& p, uint32_t c_in, uint32_t c_out,
                                  uint32_t taps, const char* what) {
    if (int64_t(c_in) != p.c_in || int64_t(c_out) != p.c_out || int64_t(taps) != p.taps)
        throw ShapeError(std::string(what) + ": a convolution of " + std::to_string(c_in) +
                         " -> " + std::to_string(c_out) + " channels and " +
                         std::to_string(taps) + " taps on a panel of " + std::to_string(p.c_in) +
                         " -> " + std::to_string(p.c_out) + " and " + std::to_string(p.taps));
    gk_args::conv1d_coopmat c{};
    c.c_in = c_in;
    c.c_out = c_out;
    c.taps = uint32_t(p.taps);
    c.ci_pad = uint32_t(p.ci_pad);
    c.phases = uint32_t(p.phases);
    return c;
}

// The fields conv1d's and conv_tr1d's arguments share, into c.
template <typename Args>
void copy_shared(gk_args::conv1d_coopmat& c, const Args& a) {
    c.l_out = a.l_out;
    c.pad_left = a.pad_left;
    c.x_off = a.x_off;
    c.y_off = a.y_off;
    c.has_bias = a.has_bias;
    c.in_act = a.in_act;
    c.slope = a.slope;
    c.out_mode = a.out_mode;
}

uint32_t groups_of(int64_t items, int64_t per_group) {
    return uint32_t((items + per_group - 1) / per_group);
}

}  // namespace

bool conv_coopmat_usable(const Device& dev) {
    if (!dev.info().coopmat_khr || kConvCoopmat.get() == 0) return false;
    const StampInfo* st = find_stamp("conv1d_coopmat");
    return st && st->spirv;
}

ConvPanel upload_conv_panel(Device& dev, const float* w, int64_t c_out, int64_t c_in,
                            int64_t taps, const char* label, uint64_t& bytes) {
    return upload_panel(dev, c_out, c_in, taps, 1,
                        [&](int64_t, int64_t o, int64_t k, int64_t i) {
                            return w[(o * c_in + i) * taps + k];
                        }, label, bytes);
}

bool conv_tr_panel_fits(int64_t taps, int64_t stride, int64_t dilation, int64_t groups) {
    return groups == 1 && dilation == 1 && stride > 1 && taps % stride == 0;
}

ConvPanel upload_conv_tr_panel(Device& dev, const float* w, int64_t c_in, int64_t c_out,
                               int64_t taps, int64_t stride, const char* label, uint64_t& bytes) {
    if (!conv_tr_panel_fits(taps, stride, 1, 1))
        throw ShapeError(std::string(label) + ": a transposed convolution of " +
                         std::to_string(taps) + " taps at stride " + std::to_string(stride) +
                         " has no panel form (its taps must be a multiple of its stride)");
    const int64_t j_taps = taps / stride;
    // Phase r's tap u is the transposed weight's tap r + S (J - 1 - u): taps reversed.
    return upload_panel(dev, c_out, c_in, j_taps, stride,
                        [&](int64_t r, int64_t o, int64_t u, int64_t i) {
                            const int64_t k = r + stride * (j_taps - 1 - u);
                            return w[(i * c_out + o) * taps + k];
                        }, label, bytes);
}

void conv1d_coopmat(Encoder& e, const ConvPanel& p, const gk_args::conv1d& a, Buffer& x,
                    Buffer& bias, Buffer& y) {
    if (a.groups != 1 || p.phases != 1)
        throw ShapeError("conv1d_coopmat: groups " + std::to_string(a.groups) + " or a " +
                         "transposed convolution's panel for a plain convolution");
    gk_args::conv1d_coopmat c = base_args(p, a.c_in, a.c_out, a.taps, "conv1d_coopmat");
    copy_shared(c, a);
    c.l_in = a.l_in;
    c.stride = a.stride;
    c.dilation = a.dilation;
    c.div = a.div;
    c.in_up = a.in_up;
    c.y_row = a.l_out;
    c.shift = 0;
    e.dispatch(require_stamp("conv1d_coopmat"), {&x, p.w.get(), &bias, &y}, c,
               groups_of(a.l_out, kTileColumns), groups_of(a.c_out, kTileChannels));
}

void conv_tr1d_coopmat(Encoder& e, const ConvPanel& p, const gk_args::conv_tr1d& a, Buffer& x,
                       Buffer& bias, Buffer& y) {
    if (a.groups != 1 || a.dilation != 1 || int64_t(a.stride) != p.phases ||
        int64_t(a.taps) != p.taps * p.phases)
        throw ShapeError("conv_tr1d_coopmat: stride " + std::to_string(a.stride) + ", " +
                         std::to_string(a.taps) + " taps on a panel of " +
                         std::to_string(p.phases) + " phases of " + std::to_string(p.taps));
    gk_args::conv1d_coopmat c = base_args(p, a.c_in, a.c_out, uint32_t(p.taps),
                                          "conv_tr1d_coopmat");
    copy_shared(c, a);
    c.l_in = a.n_in;
    c.stride = 1;
    c.dilation = 1;
    c.div = 1.0f;
    c.in_up = 1;
    c.y_row = a.l_out + a.shift;
    c.shift = a.shift;
    // A phase has at most ceil((l_out + pad_left) / stride) columns.
    const int64_t columns = groups_of(int64_t(a.l_out) + a.pad_left, a.stride);
    e.dispatch(require_stamp("conv1d_coopmat"), {&x, p.w.get(), &bias, &y}, c,
               groups_of(columns, kTileColumns), groups_of(a.c_out, kTileChannels),
               uint32_t(p.phases));
}

}  // namespace dasllama::gpu

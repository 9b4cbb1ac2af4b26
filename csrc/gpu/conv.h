// Dense 1-D convolutions, plain and transposed, on cooperative matrices (shaders/kernels/
// conv1d_coopmat.gk.h): the float16 weight panels, made once at load, and dispatches that take
// the same arguments as conv1d / conv1d_tiled and conv_tr1d. The seats that convolve (Kokoro's
// vocoder, Whisper's conv stem) pick this path where conv_coopmat_usable() says so and keep the
// float32 stamps elsewhere (devices without cooperative matrices, Metal).
#pragma once

#include <cstdint>
#include <memory>

#include "gk_args.h"
#include "gpu/device.h"

namespace dasllama::gpu {

// A plain convolution's panel is float16 [c_out][taps][ci_pad] (input channels zero-padded); a
// transposed one of stride S has S of them, one a phase, each of taps = its taps / S.
struct ConvPanel {
    std::unique_ptr<Buffer> w;
    int64_t c_out = 0, c_in = 0, taps = 0, ci_pad = 0, phases = 1;
    explicit operator bool() const { return bool(w); }
};

// Whether `dev` runs conv1d_coopmat: it has cooperative matrices, this build has the stamp and
// the knob vulkan.conv.coopmat is 1.
bool conv_coopmat_usable(const Device& dev);

// The panel of a dense convolution's weights w [c_out][c_in][taps] (torch's layout), rounded to
// float16. Throws DeviceError when the memory cannot be had.
ConvPanel upload_conv_panel(Device& dev, const float* w, int64_t c_out, int64_t c_in,
                            int64_t taps, const char* label, uint64_t& bytes);

// Whether a transposed convolution has a panel form: dense, dilation 1, its taps a multiple of
// its stride (every phase then has the same taps).
bool conv_tr_panel_fits(int64_t taps, int64_t stride, int64_t dilation, int64_t groups);

// The phase panels of a transposed convolution's weights w [c_in][c_out][taps] (torch's
// layout; conv_tr_panel_fits). Throws DeviceError when the memory cannot be had.
ConvPanel upload_conv_tr_panel(Device& dev, const float* w, int64_t c_in, int64_t c_out,
                               int64_t taps, int64_t stride, const char* label, uint64_t& bytes);

// y (mode) conv(act(x)) + bias as conv1d's arguments `a` describe it (groups must be 1; c_in,
// c_out and taps those of the panel), on cooperative matrices.
void conv1d_coopmat(Encoder& e, const ConvPanel& p, const gk_args::conv1d& a, Buffer& x,
                    Buffer& bias, Buffer& y);
// The transposed convolution conv_tr1d's arguments `a` describe, on a panel of
// upload_conv_tr_panel.
void conv_tr1d_coopmat(Encoder& e, const ConvPanel& p, const gk_args::conv_tr1d& a, Buffer& x,
                       Buffer& bias, Buffer& y);

}  // namespace dasllama::gpu

// Kokoro's BiLSTM in both lanes (weight_ops.h): the int8 graph's DynamicQuantizeLSTM as the
// reference's lstm_integer computes it, and the float form (the reference's lstm_float: the same
// recurrence with float32 GEMMs). The lane is the weights' (I8 or F32), picked per
// projection by Linear. In the int8 lane each GEMM quantizes its left operand as
// DynamicQuantizeLinear does (int8_ops.h): the input projection over the whole sequence at once,
// the recurrent one over h at every step. Gates in the file's ONNX order i, o, f, c with the
// summed bias Wb + Rb:
//     g = (x W + h R) + b;  i, o, f = logistic(g_i, g_o, g_f);  c~ = tanh(g_c)
//     c' = c f + i c~;  h' = tanh(c') o          (MLAS's logistic and tanh: onnx_math.h)
// Both directions start from zeros; the backward one reads the sequence from its end and its
// outputs are written back in time order: out row t = [fwd h_t | bwd h_t]. The two directions
// run on two threads of the pool.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tts/kokoro/weight_ops.h"
#include "tts/kokoro/weights.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::kokoro {

class BiLstm {
public:
    BiLstm() = default;
    // MODULE.weight_ih [2, In, 4H], .weight_hh [2, H, 4H], .bias [2, 8H]; for I8 weights also
    // the per-direction .weight_ih_scale, .weight_ih_zp, .weight_hh_scale, .weight_hh_zp [2].
    static BiLstm load(const KokoroWeights& w, const std::string& module);

    Lane lane() const { return ih_[0].lane(); }
    int64_t input() const { return ih_[0].in(); }
    int64_t hidden() const { return hidden_; }
    // x [T, In] -> out [T, 2H]. swap_directions (a negative control for tests): the backward
    // direction's output is not reversed back into time order.
    void forward(const float* x, int64_t t, float* out, ThreadPool* pool,
                 bool swap_directions = false) const;

private:
    void direction(int d, const float* xw, int64_t t, float* out, int64_t ld, bool reverse) const;

    std::string name_;
    int64_t hidden_ = 0;
    Linear ih_[2], hh_[2];
    std::vector<float> bias_[2];   // Wb + Rb, 4H each
};

}  // namespace dasllama::kokoro

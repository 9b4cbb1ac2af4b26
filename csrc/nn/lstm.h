// A one-layer LSTM over float32 rows (torch.nn.LSTM's and LSTMCell's arithmetic), shared by the
// models that carry one: Silero VAD's decoder (a cell stepped once per 32 ms window, its state
// kept per stream) and Kokoro's BiLSTMs (whole sequences, both directions).
//
// Gate order: the weights hold four blocks of `hidden` rows in PyTorch's order i, f, g, o
// (ONNX stores i, o, f, c; converters reorder):
//     z = W_ih x + b_ih + W_hh h + b_hh         (4 * hidden values)
//     i = sigmoid(z_i)  f = sigmoid(z_f)  g = tanh(z_g)  o = sigmoid(z_o)
//     c' = f * c + i * g                         h' = o * tanh(c')
// A bidirectional layer is two Lstm objects composed by bilstm(): the backward one reads the
// sequence from its end; its outputs are written back in time order (torch's [fwd | bwd]).
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/matmul.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::nn {

// One sequence's recurrent state (batch 1): h and c, plus the gate buffer a step writes.
struct LstmState {
    std::vector<float> h, c;
    std::vector<float> gates, recur;   // scratch: 4 * hidden each

    void reset(int64_t hidden);        // h = c = 0
};

class Lstm {
public:
    Lstm() = default;
    // weight_ih [4H, I], weight_hh [4H, H], bias_ih and bias_hh [4H] (empty: none), float32 in
    // NumPy order, gate blocks i, f, g, o. Throws ShapeError when the sizes do not fit.
    Lstm(std::vector<float> weight_ih, std::vector<float> weight_hh,
         const std::vector<float>& bias_ih, const std::vector<float>& bias_hh, int64_t input,
         int64_t hidden);
    Lstm(const Lstm&) = delete;              // the matrices view w_ih_ / w_hh_
    Lstm& operator=(const Lstm&) = delete;
    Lstm(Lstm&&) = default;
    Lstm& operator=(Lstm&&) = default;

    int64_t input_size() const { return input_; }
    int64_t hidden_size() const { return hidden_; }
    LstmState new_state() const;             // zeros

    // One step: x [I] -> s.h, s.c updated in place (s.h is the step's output).
    void step(const float* x, LstmState& s, ThreadPool& pool) const;
    // A sequence: x [T, I] -> out [T, H], starting from s and leaving the last state in s. The
    // input projections of all T rows are one matmul. reverse: steps run t = T-1 .. 0 (the
    // backward direction); out row t is still the output at time t.
    void sequence(const float* x, int64_t T, LstmState& s, float* out, ThreadPool& pool,
                  bool reverse = false) const;

private:
    // z (4H, input part and bias already in it) += W_hh h, then the cell update.
    void cell(float* z, LstmState& s, ThreadPool& pool) const;

    int64_t input_ = 0, hidden_ = 0;
    std::vector<float> w_ih_, w_hh_, bias_;  // bias_ = b_ih + b_hh
    cpu::WeightMatrix ih_, hh_;
};

// A bidirectional layer from zero states: out [T, 2H], row t = [fwd h_t | bwd h_t].
void bilstm(const Lstm& fwd, const Lstm& bwd, const float* x, int64_t T, float* out,
            ThreadPool& pool);

}  // namespace dasllama::nn

// Streaming 1-D convolutions on time-major rows [T, C] (pocket_tts modules/conv.py): each call
// takes the next T input rows and returns every output row they complete, so decoding a signal
// in pieces gives the same rows as decoding it at once.
//
// StreamConv1d: causal Conv1d. Its history starts as (K - 1) * dilation + 1 - stride rows of
// zeros (pad_mode constant) or copies of the first input row (replicate); each output row is
// one window [K * Cin] times the weight repacked to [Cout, K * Cin] (a float32 matmul). With
// dilation 1 a window is K consecutive rows of the signal, read in place; dilated windows are
// gathered first (im2col).
// StreamConvTr1d: ConvTranspose1d with stride s, kernel K >= s: T rows in give T * s rows out;
// the last K - s rows of the overlap-add wait for the next call (the bias is added once).
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/matmul.h"
#include "tts/pocket/weights.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::pocket {

class StreamConv1d {
public:
    StreamConv1d(const ConvWeights& w, int64_t stride, int64_t dilation, bool replicate_pad);
    // w_ views packed_'s heap buffer: a move keeps it, a copy would not.
    StreamConv1d(const StreamConv1d&) = delete;
    StreamConv1d& operator=(const StreamConv1d&) = delete;
    StreamConv1d(StreamConv1d&&) = default;
    void reset();
    // in [T, Cin] -> out [n_out, Cout] (resized); returns n_out.
    int64_t process(const float* in, int64_t T, std::vector<float>& out, ThreadPool& pool);
    int64_t cin() const { return cin_; }
    int64_t cout() const { return cout_; }

private:
    int64_t cin_, cout_, k_, stride_, dilation_;
    bool replicate_;
    bool fresh_ = true;
    std::vector<float> packed_, bias_;
    cpu::WeightMatrix w_;
    int64_t hist_ = 0;          // rows kept from earlier calls, at the front of buf_
    std::vector<float> buf_, cols_;
};

class StreamConvTr1d {
public:
    // depthwise: weight (C, 1, K), groups = C.
    StreamConvTr1d(const ConvWeights& w, int64_t stride, bool depthwise = false);
    StreamConvTr1d(const StreamConvTr1d&) = delete;
    StreamConvTr1d& operator=(const StreamConvTr1d&) = delete;
    StreamConvTr1d(StreamConvTr1d&&) = default;
    void reset();
    // in [T, Cin] -> out [T * stride, Cout] (resized).
    void process(const float* in, int64_t T, std::vector<float>& out, ThreadPool& pool);
    int64_t cout() const { return cout_; }

private:
    int64_t cin_, cout_, k_, stride_;
    bool depthwise_;
    std::vector<float> weight_, packed_, bias_;
    cpu::WeightMatrix w_;
    std::vector<float> tail_, next_tail_, z_;
};

}  // namespace dasllama::pocket

// Word alignment of a window's text: where in the audio each text token was spoken, from the
// cross-attention of the model's alignment heads (the (layer, head) pairs of
// whisper.alignment_heads) and dynamic time warping, as CTranslate2 computes it for
// faster-whisper's word timestamps. The NumPy reference is dasllama/reference/whisper_align.py.
//
// 1. The decoder runs sot_sequence + <|notimestamps|> + text + <|endoftext|> once (teacher
//    forcing), keeping each layer's cross-attention queries (Decoder::keep_cross_queries).
// 2. Per alignment head, the logits q.k / sqrt(head_dim) over the window's first
//    num_frames / 2 encoder rows (the audio's content) go through a softmax per token,
// 3. are normalized per frame over all the tokens of step 1 ((w - mean) / population std),
// 4. and median filtered along the frames (odd width, edges reflected).
// 5. The heads' mean, rows <|notimestamps|>..last text token, is the matrix whose negation
//    DTW aligns (negative_dtw: ties favour a frame step, then a row step, then the diagonal).
// 6. Text token t's probability: the softmax over the text tokens (ids below <|endoftext|>)
//    of the logits at the position before it.
//
// Only word timestamps run this: decoding never keeps the queries.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "asr/whisper/decoder.h"
#include "asr/whisper/weights.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::whisper {

// faster-whisper's median filter width: smooths a head's frame-to-frame jitter.
constexpr int kMedianFilterWidth = 7;

struct AlignmentResult {
    // The DTW path, first to last: (text_indices[k], time_indices[k]) pairs of a row (0:
    // <|notimestamps|>, t + 1: after text token t) and an encoder frame (20 ms each).
    std::vector<int32_t> text_indices, time_indices;
    std::vector<float> text_token_probs;   // [n_text]
    std::vector<float> matrix;             // [n_text + 1, n_frames]: what DTW aligned
    int64_t n_frames = 0;
};

struct AlignOptions {
    int median_filter_width = kMedianFilterWidth;
    // (layer, head) pairs, flat; empty: the file's whisper.alignment_heads.
    std::vector<int32_t> heads;
};

// Aligns text_tokens (ids below <|endoftext|>) on the decoder's window (set_audio), whose first
// num_frames mel frames are audio. Uses the decoder's slot 0 (its self-attention cache is
// refilled; decoding resets it anyway). An empty text gives an empty result; a window with
// fewer than 2 frames of audio puts every row at frame 0. Throws Error when there are no
// alignment heads (a file converted without them), ShapeError naming a bad head, token, width
// or frame count.
AlignmentResult align(Decoder& dec, const WhisperWeights& w,
                      const std::vector<int32_t>& sot_sequence,
                      const std::vector<int32_t>& text_tokens, int64_t num_frames,
                      const AlignOptions& o, ThreadPool& pool);

// Median of `width` (odd) neighbours along each of `rows` rows of n floats, in place; index
// -k reads k and n - 1 + k reads n - 1 - k. Rows of n <= width / 2 stay as they are.
void median_filter_rows(float* x, int64_t rows, int64_t n, int width);

// DTW of the cost -x over x [n, m] (row-major): the path's (row, column) pairs in order.
std::vector<std::pair<int32_t, int32_t>> negative_dtw(const float* x, int64_t n, int64_t m);

}  // namespace dasllama::whisper

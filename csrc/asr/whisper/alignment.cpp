#include "asr/whisper/alignment.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/errors.h"
#include "core/thread_pool.h"
#include "cpu/matmul.h"

namespace dasllama::whisper {

namespace {

// Turns the queries off again however align() leaves.
struct KeepQueries {
    Decoder& dec;
    explicit KeepQueries(Decoder& d) : dec(d) { dec.keep_cross_queries(true); }
    ~KeepQueries() { dec.keep_cross_queries(false); }
};

std::vector<std::pair<int64_t, int64_t>> checked_heads(const WhisperConfig& c,
                                                       const std::vector<int32_t>& flat) {
    if (flat.empty())
        throw Error("whisper align: the model has no alignment heads (whisper.alignment_heads "
                    "is empty; convert it from a model whose config lists them)");
    if (flat.size() % 2 != 0)
        throw ShapeError("whisper align: alignment heads are (layer, head) pairs, got " +
                         std::to_string(flat.size()) + " numbers");
    std::vector<std::pair<int64_t, int64_t>> heads;
    for (size_t i = 0; i < flat.size(); i += 2) {
        const int64_t layer = flat[i], head = flat[i + 1];
        if (layer < 0 || layer >= c.n_text_layer || head < 0 || head >= c.n_text_head)
            throw ShapeError("whisper align: alignment head (" + std::to_string(layer) + ", " +
                             std::to_string(head) + ") is outside the decoder's " +
                             std::to_string(c.n_text_layer) + " layers of " +
                             std::to_string(c.n_text_head) + " heads");
        heads.emplace_back(layer, head);
    }
    return heads;
}

// In place over each row of n: softmax.
void softmax_rows(float* x, int64_t rows, int64_t n) {
    for (int64_t r = 0; r < rows; ++r) {
        float* row = x + r * n;
        const float mx = *std::max_element(row, row + n);
        double sum = 0.0;
        for (int64_t j = 0; j < n; ++j) {
            row[j] = std::exp(row[j] - mx);
            sum += row[j];
        }
        const float inv = float(1.0 / sum);
        for (int64_t j = 0; j < n; ++j) row[j] *= inv;
    }
}

// In place over each column of x [rows, n]: (x - mean) / population std. A column whose
// values are all equal (std 0) becomes 0 rather than 0 / 0.
void normalize_columns(float* x, int64_t rows, int64_t n) {
    std::vector<double> mean(size_t(n), 0.0), var(size_t(n), 0.0);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < n; ++j) mean[size_t(j)] += x[r * n + j];
    for (double& m : mean) m /= double(rows);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < n; ++j) {
            const double dv = x[r * n + j] - mean[size_t(j)];
            var[size_t(j)] += dv * dv;
        }
    for (int64_t j = 0; j < n; ++j) {
        const double sd = std::sqrt(var[size_t(j)] / double(rows));
        for (int64_t r = 0; r < rows; ++r) {
            float& v = x[r * n + j];
            v = sd > 0.0 ? float((v - mean[size_t(j)]) / sd) : 0.0f;
        }
    }
}

}  // namespace

void median_filter_rows(float* x, int64_t rows, int64_t n, int width) {
    if (width < 1 || width % 2 == 0)
        throw ShapeError("whisper align: median filter width " + std::to_string(width) +
                         " is not an odd number >= 1");
    const int64_t rank = width / 2;
    if (n <= rank) return;
    std::vector<float> row(static_cast<size_t>(n)), window(static_cast<size_t>(width));
    for (int64_t r = 0; r < rows; ++r) {
        float* out = x + r * n;
        std::copy(out, out + n, row.begin());
        for (int64_t j = 0; j < n; ++j) {
            for (int64_t k = -rank; k <= rank; ++k) {
                int64_t at = std::abs(j + k);
                if (at >= n) at = 2 * (n - 1) - at;
                window[size_t(k + rank)] = row[size_t(at)];
            }
            std::nth_element(window.begin(), window.begin() + rank, window.end());
            out[j] = window[size_t(rank)];
        }
    }
}

std::vector<std::pair<int32_t, int32_t>> negative_dtw(const float* x, int64_t n, int64_t m) {
    std::vector<std::pair<int32_t, int32_t>> path;
    if (n <= 0 || m <= 0) return path;
    const float inf = std::numeric_limits<float>::infinity();
    const int64_t ld = m + 1;
    std::vector<float> cost(size_t((n + 1) * ld), inf);
    // 0: diagonal, 1: a row (text token) on, 2: a column (frame) on
    std::vector<uint8_t> trace(size_t((n + 1) * ld), 0);
    cost[0] = 0.0f;
    for (int64_t j = 1; j <= m; ++j) {
        for (int64_t i = 1; i <= n; ++i) {
            const float c0 = cost[size_t((i - 1) * ld + j - 1)];
            const float c1 = cost[size_t((i - 1) * ld + j)];
            const float c2 = cost[size_t(i * ld + j - 1)];
            float c;
            uint8_t t;
            if (c0 < c1 && c0 < c2) {
                c = c0;
                t = 0;
            } else if (c1 < c0 && c1 < c2) {
                c = c1;
                t = 1;
            } else {
                c = c2;
                t = 2;
            }
            cost[size_t(i * ld + j)] = c - x[(i - 1) * m + (j - 1)];
            trace[size_t(i * ld + j)] = t;
        }
    }
    int64_t i = n, j = m;
    while (i > 0 && j > 0) {
        path.emplace_back(int32_t(i - 1), int32_t(j - 1));
        const uint8_t t = trace[size_t(i * ld + j)];
        if (t == 0) {
            --i;
            --j;
        } else if (t == 1) {
            --i;
        } else {
            --j;
        }
    }
    std::reverse(path.begin(), path.end());
    return path;
}

AlignmentResult align(Decoder& dec, const WhisperWeights& w,
                      const std::vector<int32_t>& sot_sequence,
                      const std::vector<int32_t>& text_tokens, int64_t num_frames,
                      const AlignOptions& o, ThreadPool& pool) {
    const WhisperConfig& c = w.cfg;
    const auto heads = checked_heads(c, o.heads.empty() ? c.alignment_heads : o.heads);
    if (o.median_filter_width < 1 || o.median_filter_width % 2 == 0)
        throw ShapeError("whisper align: median_filter_width " +
                         std::to_string(o.median_filter_width) + " is not an odd number >= 1");
    if (num_frames < 0)
        throw ShapeError("whisper align: num_frames " + std::to_string(num_frames) + " < 0");
    if (sot_sequence.empty())
        throw ShapeError("whisper align: the start-of-transcript sequence is empty");
    for (int32_t t : text_tokens)
        if (t < 0 || t >= c.tok.eot)
            throw ShapeError("whisper align: text token " + std::to_string(t) +
                             " is not a text token (ids 0.." + std::to_string(c.tok.eot - 1) +
                             ")");
    AlignmentResult r;
    const int64_t n_text = int64_t(text_tokens.size());
    if (n_text == 0) return r;
    const int64_t offset = int64_t(sot_sequence.size());
    std::vector<int32_t> tokens(sot_sequence);
    tokens.push_back(c.tok.no_timestamps);
    tokens.insert(tokens.end(), text_tokens.begin(), text_tokens.end());
    tokens.push_back(c.tok.eot);
    const int64_t n = int64_t(tokens.size()), d = c.n_text_state;

    const float* h;
    {
        KeepQueries keep(dec);
        dec.reset(1);
        h = dec.forward(tokens.data(), n, pool, 0);
    }
    // 6. token probabilities: rows offset.. predict the text tokens
    {
        std::vector<float> logits(size_t(n_text * c.n_vocab));
        dec.logits(h + offset * d, n_text, logits.data(), pool);
        r.text_token_probs.resize(size_t(n_text));
        const int64_t V = c.tok.eot;   // the text tokens alone
        for (int64_t t = 0; t < n_text; ++t) {
            const float* z = logits.data() + t * c.n_vocab;
            const float mx = *std::max_element(z, z + V);
            double sum = 0.0;
            for (int64_t k = 0; k < V; ++k) sum += std::exp(double(z[k] - mx));
            r.text_token_probs[size_t(t)] =
                float(std::exp(double(z[text_tokens[size_t(t)]] - mx)) / sum);
        }
    }
    const int64_t n_frames = std::min(num_frames / 2, c.n_audio_ctx);   // conv2's stride 2
    r.n_frames = n_frames;
    const int64_t rows = n_text + 1;
    if (n_frames == 0) {   // no audio frame to align to: every row at the window's start
        for (int64_t t = 0; t < rows; ++t) {
            r.text_indices.push_back(int32_t(t));
            r.time_indices.push_back(0);
        }
        return r;
    }
    // 2-5, head by head
    const int64_t hd = d / c.n_text_head, n_kv = c.n_audio_ctx;
    const float scale = float(1.0 / std::sqrt(double(hd)));
    std::vector<float> q(size_t(n * hd)), scores(size_t(n * n_kv)), weights(size_t(n * n_frames));
    std::vector<float> sum(size_t(n * n_frames), 0.0f);
    for (const auto& [layer, head] : heads) {
        const float* ql = dec.cross_queries(layer);
        for (int64_t t = 0; t < n; ++t)
            for (int64_t k = 0; k < hd; ++k)
                q[size_t(t * hd + k)] = ql[t * d + head * hd + k] * scale;
        cpu::matmul(dec.cross_kv(layer).keys(head), q.data(), n, scores.data(), pool,
                    cpu::Precision::kF32);
        for (int64_t t = 0; t < n; ++t)
            std::copy(scores.data() + t * n_kv, scores.data() + t * n_kv + n_frames,
                      weights.data() + t * n_frames);
        softmax_rows(weights.data(), n, n_frames);
        normalize_columns(weights.data(), n, n_frames);
        median_filter_rows(weights.data(), n, n_frames, o.median_filter_width);
        for (size_t k = 0; k < sum.size(); ++k) sum[k] += weights[k];
    }
    const float inv_heads = 1.0f / float(heads.size());
    r.matrix.assign(sum.begin() + offset * n_frames, sum.begin() + (offset + rows) * n_frames);
    for (float& v : r.matrix) v *= inv_heads;
    for (const auto& [i, j] : negative_dtw(r.matrix.data(), rows, n_frames)) {
        r.text_indices.push_back(i);
        r.time_indices.push_back(j);
    }
    return r;
}

}  // namespace dasllama::whisper

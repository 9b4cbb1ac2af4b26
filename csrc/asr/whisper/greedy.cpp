#include "asr/whisper/greedy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/errors.h"

namespace dasllama::whisper {

namespace {

constexpr float kMasked = -std::numeric_limits<float>::infinity();

void mask(float* z, int64_t from, int64_t to) {   // [from, to)
    for (int64_t i = std::max<int64_t>(from, 0); i < to; ++i) z[i] = kMasked;
}

// log-softmax of z [n] into lp (double sums).
void log_softmax(const float* z, int64_t n, std::vector<double>& lp) {
    lp.resize(size_t(n));
    const float m = *std::max_element(z, z + n);
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(double(z[i]) - double(m));
    const double log_sum = double(m) + std::log(sum);
    for (int64_t i = 0; i < n; ++i) lp[size_t(i)] = double(z[i]) - log_sum;
}

}  // namespace

void apply_rules(const WhisperConfig& c, const DecodeOptions& o, bool timestamps, int64_t step,
                 const std::vector<int32_t>& out, float* z) {
    const int64_t V = c.n_vocab, ts_begin = c.tok.timestamp_begin, eot = c.tok.eot;
    const int64_t begin = int64_t(o.prefix.size());   // the first free step
    for (int32_t id : o.suppress_tokens)
        if (id >= 0 && id < V) z[id] = kMasked;
    if (step == begin && o.suppress_blank)
        for (int32_t id : c.suppress_ids_begin) z[id] = kMasked;
    if (!timestamps) return;
    z[c.tok.no_timestamps] = kMasked;
    bool check = false;
    if (step == begin && step == 0) {
        mask(z, 0, ts_begin);
        mask(z, ts_begin + o.max_initial_timestamp_index + 1, V);
    } else if (step > begin) {
        const int32_t last = out[size_t(step - 1)];
        if (last >= ts_begin) {
            const int32_t penultimate = step - 1 > begin ? out[size_t(step - 2)] : last;
            if (penultimate >= ts_begin) {
                mask(z, ts_begin, V);           // a pair is complete: text next
            } else {
                mask(z, 0, eot);                // a lone timestamp: its partner or the end
                mask(z, ts_begin, last);
                check = true;
            }
        } else {
            check = true;
            for (int64_t t = step - 1; t >= begin; --t)
                if (out[size_t(t)] >= ts_begin) {   // no timestamp before the last one
                    mask(z, ts_begin, int64_t(out[size_t(t)]) + 1);
                    break;
                }
        }
    }
    if (!check) return;
    std::vector<double> lp;
    log_softmax(z, V, lp);
    double ts_max = -std::numeric_limits<double>::infinity();
    for (int64_t i = ts_begin; i < V; ++i) ts_max = std::max(ts_max, lp[size_t(i)]);
    double ts_mass = -std::numeric_limits<double>::infinity();
    if (std::isfinite(ts_max)) {
        double s = 0.0;
        for (int64_t i = ts_begin; i < V; ++i) s += std::exp(lp[size_t(i)] - ts_max);
        ts_mass = ts_max + std::log(s);
    }
    const double text_max = *std::max_element(lp.begin(), lp.begin() + ts_begin);
    if (ts_mass > text_max) mask(z, 0, ts_begin);
}

DecodeResult greedy_decode(Decoder& dec, const WhisperConfig& c,
                           const std::vector<int32_t>& prompt, const DecodeOptions& o,
                           ThreadPool& pool) {
    const auto sot = std::find(prompt.begin(), prompt.end(), c.tok.sot);
    if (sot == prompt.end())
        throw ShapeError("whisper decode: the prompt has no <|startoftranscript|> (" +
                         std::to_string(c.tok.sot) + ")");
    const int64_t limit = o.max_length > 0 ? std::min(o.max_length, c.n_text_ctx) : c.n_text_ctx;
    const int64_t n_prompt = int64_t(prompt.size());
    if (n_prompt >= limit)
        throw ShapeError("whisper decode: a prompt of " + std::to_string(n_prompt) +
                         " tokens leaves no room in a text context of " + std::to_string(limit));
    const int64_t max_new = std::min(limit / 2, limit - (n_prompt - 1));
    const bool timestamps = prompt.back() != c.tok.no_timestamps;
    const int64_t V = c.n_vocab, d = c.n_text_state;

    DecodeResult r;
    std::vector<float> z(static_cast<size_t>(V));
    std::vector<double> lp;
    dec.reset();
    const float* h = dec.forward(prompt.data(), n_prompt, pool);
    // no-speech probability: the raw logits at <|startoftranscript|>
    dec.logits(h + (sot - prompt.begin()) * d, 1, z.data(), pool);
    log_softmax(z.data(), V, lp);
    r.no_speech_prob = float(std::exp(lp[size_t(c.tok.no_speech)]));
    dec.logits(h + (n_prompt - 1) * d, 1, z.data(), pool);
    const int64_t n_forced = int64_t(o.prefix.size());
    for (int32_t id : o.prefix)
        if (id < 0 || id >= V)
            throw ShapeError("whisper decode: prefix token " + std::to_string(id) +
                             " is outside the vocabulary of " + std::to_string(V));
    for (int64_t step = 0; step < max_new; ++step) {
        apply_rules(c, o, timestamps, step, r.tokens, z.data());
        int64_t best;
        if (step < n_forced) {
            best = o.prefix[size_t(step)];      // forced: no score
        } else {
            log_softmax(z.data(), V, lp);
            best = std::max_element(lp.begin(), lp.end()) - lp.begin();
            r.sum_logprob += lp[size_t(best)];
            if (best == c.tok.eot) break;
        }
        r.tokens.push_back(int32_t(best));
        if (dec.n_past() >= c.n_text_ctx) break;
        const int32_t next = int32_t(best);
        h = dec.forward(&next, 1, pool);
        dec.logits(h, 1, z.data(), pool);
    }
    return r;
}

}  // namespace dasllama::whisper

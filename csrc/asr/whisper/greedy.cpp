#include "asr/whisper/greedy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "asr/whisper/scoring.h"
#include "core/errors.h"
#include "nn/activations.h"

namespace dasllama::whisper {

namespace {

constexpr float kMasked = -std::numeric_limits<float>::infinity();

void mask(float* z, int64_t from, int64_t to) {   // [from, to)
    for (int64_t i = std::max<int64_t>(from, 0); i < to; ++i) z[i] = kMasked;
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
    // A timestamp is forced when the timestamps' total probability beats the best text
    // token's: log sum_ts exp(z) > max_text z (the log-softmax's normalizer is on both sides).
    const double ts_mass = nn::log_sum_exp(z + ts_begin, V - ts_begin);
    const float text_max = *std::max_element(z, z + ts_begin);
    if (ts_mass > double(text_max)) mask(z, 0, ts_begin);
}

DecodeResult greedy_decode(Decoder& dec, const WhisperConfig& c,
                           const std::vector<int32_t>& prompt, const DecodeOptions& o,
                           ThreadPool& pool) {
    const DecodePlan plan = plan_decode(c, prompt, o);
    const int64_t V = c.n_vocab;
    DecodeResult r;
    std::vector<float> z(static_cast<size_t>(V));
    dec.reset();
    r.no_speech_prob = run_prompt(dec, c, prompt, plan, z.data(), pool);
    const int64_t n_forced = int64_t(o.prefix.size());
    for (int64_t step = 0; step < plan.max_steps; ++step) {
        apply_rules(c, o, plan.timestamps, step, r.tokens, z.data());
        int64_t best;
        if (step < n_forced) {
            best = o.prefix[size_t(step)];      // forced: no score
        } else {
            best = std::max_element(z.begin(), z.end()) - z.begin();   // the first of equals
            r.sum_logprob += double(z[size_t(best)]) - nn::log_sum_exp(z.data(), V);
            if (best == c.tok.eot) break;
        }
        r.tokens.push_back(int32_t(best));
        if (dec.n_past() >= c.n_text_ctx) break;
        const int32_t next = int32_t(best);
        dec.logits(dec.forward(&next, 1, pool), 1, z.data(), pool);
    }
    return r;
}

}  // namespace dasllama::whisper

#include "asr/whisper/sampling.h"

#include <cmath>
#include <random>
#include <string>

#include "asr/whisper/scoring.h"
#include "core/errors.h"
#include "nn/activations.h"

namespace dasllama::whisper {

namespace {

struct Candidate {
    std::vector<int32_t> tokens;
    double sum_logprob = 0.0;
};

// A token drawn from softmax(z / temperature); masked (-inf) logits are never drawn.
int32_t draw(const float* z, int64_t n, float temperature, std::mt19937_64& rng,
             std::vector<float>& p) {
    p.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) p[size_t(i)] = z[i] / temperature;
    nn::softmax_row(p.data(), n);
    double total = 0.0;
    for (int64_t i = 0; i < n; ++i)
        if (!std::isinf(z[i])) total += p[size_t(i)];
    // 53 random bits: a uniform double in [0, 1) the same on every standard library
    const double u = double(rng() >> 11) * 0x1.0p-53;
    const double target = u * total;
    double acc = 0.0;
    int32_t last = -1;
    for (int64_t i = 0; i < n; ++i) {
        if (std::isinf(z[i])) continue;
        last = int32_t(i);
        acc += p[size_t(i)];
        if (acc > target) return last;
    }
    return last;
}

}  // namespace

DecodeResult sample_decode(Decoder& dec, const WhisperConfig& c, const std::vector<int32_t>& prompt,
                           const DecodeOptions& o, const SampleOptions& s, ThreadPool& pool) {
    if (!(s.temperature > 0.0f) || !std::isfinite(s.temperature))
        throw ShapeError("whisper sampling: temperature " + std::to_string(s.temperature) +
                         " is not a finite number above 0");
    if (s.best_of < 1)
        throw ShapeError("whisper sampling: best_of " + std::to_string(s.best_of) + " < 1");
    const DecodePlan plan = plan_decode(c, prompt, o);
    const int64_t V = c.n_vocab;
    const int n = s.best_of;
    DecodeResult r;
    std::vector<float> zs(size_t(n) * size_t(V));
    dec.reset(1);
    r.no_speech_prob = run_prompt(dec, c, prompt, plan, zs.data(), pool, 0);
    for (int k = 1; k < n; ++k)   // the first step's logits are every candidate's
        std::copy(zs.begin(), zs.begin() + V, zs.begin() + size_t(k) * size_t(V));
    dec.reorder(std::vector<int>(size_t(n), 0));

    std::mt19937_64 rng(s.seed);
    std::vector<Candidate> cands(static_cast<size_t>(n));
    std::vector<int> active(static_cast<size_t>(n));   // slot k decodes candidate active[k]
    for (int k = 0; k < n; ++k) active[size_t(k)] = k;
    std::vector<int> next_active, origin;
    std::vector<int32_t> last;
    std::vector<float> p;
    const int64_t n_forced = int64_t(o.prefix.size());
    for (int64_t step = 0; step < plan.max_steps && !active.empty(); ++step) {
        next_active.clear();
        origin.clear();
        last.clear();
        for (size_t k = 0; k < active.size(); ++k) {
            Candidate& cand = cands[size_t(active[k])];
            float* zk = zs.data() + k * size_t(V);
            apply_rules(c, o, plan.timestamps, step, cand.tokens, zk);
            int32_t token;
            if (step < n_forced) {
                token = o.prefix[size_t(step)];   // forced: no score
            } else {
                token = draw(zk, V, s.temperature, rng, p);
                cand.sum_logprob += double(zk[token]) - nn::log_sum_exp(zk, V);
                if (token == c.tok.eot) continue;
            }
            cand.tokens.push_back(token);
            if (dec.n_past(int(k)) >= c.n_text_ctx) continue;
            next_active.push_back(active[k]);
            origin.push_back(int(k));
            last.push_back(token);
        }
        if (next_active.empty() || step + 1 == plan.max_steps) break;
        if (origin.size() != active.size()) dec.reorder(origin);   // moves: each slot once
        active.swap(next_active);
        const float* h = active.size() == 1 ? dec.forward(last.data(), 1, pool, 0)
                                            : dec.forward_slots(last.data(), pool);
        dec.logits(h, int64_t(active.size()), zs.data(), pool);
    }
    const size_t best = first_best(cands.size(), [&](size_t i) {
        return normalized_score(cands[i].sum_logprob, cands[i].tokens.size(), s.length_penalty);
    });
    r.tokens = std::move(cands[best].tokens);
    r.sum_logprob = cands[best].sum_logprob;
    return r;
}

}  // namespace dasllama::whisper

#include "llm/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace dasllama {

namespace {

[[noreturn]] void bad(const char* name, double value, const char* rule) {
    std::ostringstream os;
    os << name << " must be " << rule << ", got " << value;
    throw std::invalid_argument(os.str());
}

// Largest logit first; equal logits by lower id, so every order below is total and the
// surviving set does not depend on the sorting algorithm.
template <class C>
bool before(const C& a, const C& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

}  // namespace

void validate(const SamplerParams& p) {
    if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature))
        bad("temperature", p.temperature, "a finite value >= 0 (0 = greedy)");
    if (p.top_k < 0) bad("top_k", p.top_k, ">= 0 (0 = off)");
    if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) bad("top_p", p.top_p, "in (0, 1] (1 = off)");
    if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) bad("min_p", p.min_p, "in [0, 1] (0 = off)");
    if (!(p.repeat_penalty > 0.0f) || !std::isfinite(p.repeat_penalty))
        bad("repeat_penalty", p.repeat_penalty, "a finite value > 0 (1 = off)");
    if (!std::isfinite(p.presence_penalty))
        bad("presence_penalty", p.presence_penalty, "finite (0 = off)");
    if (!std::isfinite(p.frequency_penalty))
        bad("frequency_penalty", p.frequency_penalty, "finite (0 = off)");
    if (p.penalty_last_n < -1)
        bad("penalty_last_n", p.penalty_last_n, ">= -1 (0 = off, -1 = every accepted token)");
    if (p.seed < 0 || p.seed > 0xFFFFFFFFll)
        bad("seed", static_cast<double>(p.seed), "in [0, 2^32)");
}

Sampler::Sampler(const SamplerParams& params) : params_(params) {
    validate(params_);
    rng_.seed(static_cast<uint32_t>(params_.seed));
}

void Sampler::reset() {
    history_.clear();
    rng_.seed(static_cast<uint32_t>(params_.seed));
}

void Sampler::accept(int32_t token) {
    if (token < 0) bad("token", token, ">= 0");
    if (params_.penalty_last_n == 0) return;
    history_.push_back(token);
    if (params_.penalty_last_n > 0)
        while (history_.size() > static_cast<size_t>(params_.penalty_last_n)) history_.pop_front();
}

// genrand_res53: 27 + 26 bits of two outputs make a double uniform in [0, 1).
double Sampler::uniform() {
    const uint32_t a = rng_() >> 5, b = rng_() >> 6;
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

void Sampler::filter(const float* logits, size_t n, std::vector<Candidate>& cand) const {
    if (n == 0) throw std::invalid_argument("logits are empty (need one value per vocabulary entry)");
    if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
        throw std::invalid_argument("logits have more entries than an int32 token id can index");
    cand.resize(n);
    for (size_t i = 0; i < n; ++i) {
        const float v = logits[i];
        if (std::isnan(v) || v == std::numeric_limits<float>::infinity()) {
            std::ostringstream os;
            os << "logits[" << i << "] is " << v << "; logits must be finite or -inf";
            throw std::invalid_argument(os.str());
        }
        cand[i] = {v, static_cast<int32_t>(i)};
    }

    // 1. penalties
    const SamplerParams& p = params_;
    if (!history_.empty() &&
        (p.repeat_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f)) {
        std::unordered_map<int32_t, int> count;
        for (int32_t t : history_) ++count[t];
        for (const auto& [t, c] : count) {
            if (static_cast<size_t>(t) >= n) continue;   // not in this vocabulary
            float& v = cand[t].logit;
            v = v > 0.0f ? v / p.repeat_penalty : v * p.repeat_penalty;
            v -= static_cast<float>(c) * p.frequency_penalty + p.presence_penalty;
        }
    }

    const auto best = std::min_element(cand.begin(), cand.end(), before<Candidate>);
    if (best->logit == -std::numeric_limits<float>::infinity())
        throw std::invalid_argument("every logit is -inf; no token can be sampled");

    // 2. greedy
    if (p.temperature == 0.0f) {
        const Candidate only = *best;
        cand.assign(1, only);
        return;
    }

    const float max_logit = best->logit;   // survives every step below

    // 3. top_k: cand becomes the k best, sorted.
    bool sorted = false;
    if (p.top_k > 0 && static_cast<size_t>(p.top_k) < cand.size()) {
        std::partial_sort(cand.begin(), cand.begin() + p.top_k, cand.end(), before<Candidate>);
        cand.resize(p.top_k);
        sorted = true;
    }

    // 4. top_p: sort a growing head until it holds mass p (whole-vocabulary sorts are the
    // slow part at 256K entries, and the head that reaches p is usually small).
    if (p.top_p < 1.0f) {
        double total = 0.0;
        for (const Candidate& c : cand) total += std::exp(static_cast<double>(c.logit) - max_logit);
        const double target = static_cast<double>(p.top_p) * total;
        size_t head = sorted ? cand.size() : std::min<size_t>(cand.size(), 256);
        for (;;) {
            if (!sorted || head < cand.size())
                std::partial_sort(cand.begin(), cand.begin() + head, cand.end(), before<Candidate>);
            double cum = 0.0;
            size_t keep = 0;
            while (keep < head) {
                cum += std::exp(static_cast<double>(cand[keep].logit) - max_logit);
                ++keep;
                if (cum >= target) break;
            }
            if (cum >= target || head == cand.size()) {
                cand.resize(keep);
                sorted = true;
                break;
            }
            head = std::min(cand.size(), head * 4);
        }
    }

    // 5. min_p, on logits: p_i >= min_p * p_max  <=>  logit_i >= max_logit + log(min_p).
    if (p.min_p > 0.0f) {
        const float floor = max_logit + std::log(p.min_p);
        auto end = std::stable_partition(cand.begin(), cand.end(),
                                         [&](const Candidate& c) { return c.logit >= floor; });
        cand.erase(end, cand.end());   // never empty: the max itself passes
    }
    // 6. temperature is applied by weights(), in double, so a tiny T cannot overflow a float.
}

// Unnormalized probabilities exp((logit - max) / T) of the candidates; returns their sum.
double Sampler::weights(const std::vector<Candidate>& cand, std::vector<double>& w) const {
    float max_logit = -std::numeric_limits<float>::infinity();
    for (const Candidate& c : cand) max_logit = std::max(max_logit, c.logit);
    const double inv_t = 1.0 / static_cast<double>(params_.temperature);
    w.resize(cand.size());
    double total = 0.0;
    for (size_t i = 0; i < cand.size(); ++i) {
        w[i] = std::exp((static_cast<double>(cand[i].logit) - max_logit) * inv_t);
        total += w[i];
    }
    return total;
}

int32_t Sampler::greedy(const float* logits, size_t n) const {
    if (n == 0) throw std::invalid_argument("logits are empty (need one value per vocabulary entry)");
    if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
        throw std::invalid_argument("logits have more entries than an int32 token id can index");
    // The maximum, NaN and +inf noted on the way (SSE2, the x86-64 baseline, 4 x 4 lanes: the
    // scalar loop was most of a batched step's sampling at 256K entries); then the first
    // index holding the maximum, which is the lowest id of equal logits: the order of before().
    const float inf = std::numeric_limits<float>::infinity();
    float mx = -inf;
    int bad = 0;
    size_t i = 0;
#if defined(__SSE2__)
    {
        const __m128 vinf = _mm_set1_ps(inf);
        __m128 m[4], b[4];
        for (int l = 0; l < 4; ++l) m[l] = _mm_set1_ps(-inf), b[l] = _mm_setzero_ps();
        for (; i + 16 <= n; i += 16)
            for (int l = 0; l < 4; ++l) {
                const __m128 v = _mm_loadu_ps(logits + i + 4 * l);
                m[l] = _mm_max_ps(v, m[l]);     // NaN lanes keep m (noted in b instead)
                b[l] = _mm_or_ps(b[l], _mm_cmpnlt_ps(v, vinf));   // !(v < inf)
            }
        float lanes[16], flags[16];
        for (int l = 0; l < 4; ++l) {
            _mm_storeu_ps(lanes + 4 * l, m[l]);
            _mm_storeu_ps(flags + 4 * l, b[l]);
        }
        for (int l = 0; l < 16; ++l) {
            mx = lanes[l] > mx ? lanes[l] : mx;
            uint32_t f;
            std::memcpy(&f, &flags[l], sizeof f);
            bad |= f != 0;
        }
    }
#endif
    for (; i < n; ++i) {
        mx = logits[i] > mx ? logits[i] : mx;
        bad |= !(logits[i] < inf);
    }
    if (bad) {
        for (size_t k = 0; k < n; ++k)
            if (!(logits[k] < inf)) {
                std::ostringstream os;
                os << "logits[" << k << "] is " << logits[k] << "; logits must be finite or -inf";
                throw std::invalid_argument(os.str());
            }
    }
    size_t best = 0;    // mx is one of the logits (-inf when all are): the scan finds it
    while (!(logits[best] == mx)) ++best;
    Candidate top{logits[best], static_cast<int32_t>(best)};
    const SamplerParams& p = params_;
    if (!history_.empty() &&
        (p.repeat_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f)) {
        // Step 1 of the chain on the history's tokens only (the same arithmetic as filter);
        // every other token keeps its logit, so the arg max is the better of the best penalized
        // token and the best token outside the history.
        std::unordered_map<int32_t, int> count;
        for (int32_t t : history_) ++count[t];
        Candidate penalized{-std::numeric_limits<float>::infinity(), -1};
        for (const auto& [t, c] : count) {
            if (static_cast<size_t>(t) >= n) continue;   // not in this vocabulary
            float v = logits[t];
            v = v > 0.0f ? v / p.repeat_penalty : v * p.repeat_penalty;
            v -= static_cast<float>(c) * p.frequency_penalty + p.presence_penalty;
            const Candidate cand{v, t};
            if (penalized.id < 0 || before(cand, penalized)) penalized = cand;
        }
        if (count.count(top.id)) {    // the raw arg max was penalized: the best of the rest
            Candidate rest{-std::numeric_limits<float>::infinity(), -1};
            for (size_t i = 0; i < n; ++i) {
                if (rest.id >= 0 && !(logits[i] > rest.logit)) continue;
                if (count.count(static_cast<int32_t>(i))) continue;
                rest = {logits[i], static_cast<int32_t>(i)};
            }
            top = rest;
        }
        if (penalized.id >= 0 && (top.id < 0 || before(penalized, top))) top = penalized;
    }
    if (top.logit == -std::numeric_limits<float>::infinity())
        throw std::invalid_argument("every logit is -inf; no token can be sampled");
    return top.id;
}

int32_t Sampler::sample(const float* logits, size_t n, Scratch& scratch) {
    // Greedy needs no candidate list: one pass over the logits (a vocabulary-sized list built
    // and scanned per token was the larger part of sampling at 256K entries).
    if (params_.temperature == 0.0f) return greedy(logits, n);
    std::vector<Candidate>& cand = scratch.cand;
    std::vector<double>& w = scratch.weights;
    filter(logits, n, cand);
    if (cand.size() == 1) return cand[0].id;
    const double total = weights(cand, w);
    // 7. draw: the first candidate whose cumulative weight exceeds u * total.
    const double u = uniform() * total;
    double cum = 0.0;
    for (size_t i = 0; i < cand.size(); ++i) {
        cum += w[i];
        if (cum > u) return cand[i].id;
    }
    // Rounding can leave u a hair above the last cumulative sum: take the last with weight.
    for (size_t i = cand.size(); i-- > 0;)
        if (w[i] > 0.0) return cand[i].id;
    return cand.back().id;
}

void Sampler::probabilities(const float* logits, size_t n, float* out) const {
    std::vector<Candidate> cand;
    std::vector<double> w;
    filter(logits, n, cand);
    std::fill(out, out + n, 0.0f);
    if (cand.size() == 1) {
        out[cand[0].id] = 1.0f;
        return;
    }
    const double total = weights(cand, w);
    for (size_t i = 0; i < cand.size(); ++i) out[cand[i].id] = static_cast<float>(w[i] / total);
}

}  // namespace dasllama

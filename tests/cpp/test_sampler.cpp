// The sampler's chain on hand-computed cases; the Python tests cover the distributions.
#include <cmath>
#include <stdexcept>
#include <vector>

#include "check.h"
#include "llm/sampler.h"

using dasllama::Sampler;
using dasllama::SamplerParams;

namespace {

SamplerParams plain(float temperature) {
    SamplerParams p;
    p.temperature = temperature;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    return p;
}

std::vector<float> probs(const Sampler& s, const std::vector<float>& logits) {
    std::vector<float> out(logits.size());
    s.probabilities(logits.data(), logits.size(), out.data());
    return out;
}

// The token one sample of `logits` picks (the sampler's state, e.g. its history, applies).
int32_t pick(Sampler& s, const std::vector<float>& logits) {
    return s.sample(logits.data(), logits.size());
}

}  // namespace

TEST(greedy_takes_the_arg_max_and_the_lower_id_on_ties) {
    Sampler s(plain(0.0f));
    CHECK(pick(s, {0.5f, 3.0f, -1.0f, 3.0f}) == 1);
}

TEST(top_k_keeps_the_k_largest) {
    SamplerParams p = plain(1.0f);
    p.top_k = 2;
    Sampler s(p);
    const std::vector<float> pr = probs(s, {1.0f, 4.0f, 3.0f, 0.0f});
    CHECK(pr[0] == 0.0f && pr[3] == 0.0f);
    const double e = std::exp(-1.0);
    CHECK(std::fabs(pr[1] - 1.0 / (1.0 + e)) < 1e-6 && std::fabs(pr[2] - e / (1.0 + e)) < 1e-6);
}

TEST(top_p_keeps_the_head_that_reaches_p) {
    // softmax of log(0.5, 0.3, 0.15, 0.05): top_p 0.8 keeps 0.5 + 0.3 exactly.
    SamplerParams p = plain(1.0f);
    p.top_p = 0.79f;
    Sampler s(p);
    const std::vector<float> pr = probs(s, {std::log(0.15f), std::log(0.5f), std::log(0.05f), std::log(0.3f)});
    CHECK(pr[0] == 0.0f && pr[2] == 0.0f);
    CHECK(std::fabs(pr[1] - 0.625f) < 1e-6 && std::fabs(pr[3] - 0.375f) < 1e-6);
}

TEST(min_p_drops_tokens_below_a_share_of_the_best) {
    SamplerParams p = plain(1.0f);
    p.min_p = 0.2f;
    Sampler s(p);
    // p = 0.5, 0.3, 0.15, 0.05 -> threshold 0.1 removes only the last.
    const std::vector<float> pr = probs(s, {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)});
    CHECK(pr[3] == 0.0f && pr[2] > 0.0f);
}

TEST(repetition_penalty_divides_positive_and_multiplies_negative_logits) {
    SamplerParams p = plain(0.0f);
    p.repeat_penalty = 2.0f;
    Sampler s(p);
    const std::vector<float> l = {3.0f, 2.0f, -1.0f};
    CHECK(pick(s, l) == 0);
    s.accept(0);   // 3 -> 1.5 < 2
    CHECK(pick(s, l) == 1);
}

TEST(presence_and_frequency_penalties_subtract) {
    SamplerParams p = plain(0.0f);
    p.frequency_penalty = 0.4f;
    p.presence_penalty = 0.1f;
    Sampler s(p);
    const std::vector<float> l = {2.0f, 1.0f};
    s.accept(0);
    s.accept(0);   // 2 - 2*0.4 - 0.1 = 1.1 > 1
    CHECK(pick(s, l) == 0);
    s.accept(0);   // 2 - 3*0.4 - 0.1 = 0.7 < 1
    CHECK(pick(s, l) == 1);
}

TEST(history_keeps_the_last_n) {
    SamplerParams p = plain(0.0f);
    p.penalty_last_n = 2;
    p.repeat_penalty = 10.0f;
    Sampler s(p);
    for (int t : {0, 1, 1}) s.accept(t);   // 0 has left the window
    CHECK(s.history_size() == 2);
    CHECK(pick(s, {2.0f, 1.5f}) == 0);
}

TEST(same_seed_same_tokens_and_reset_replays) {
    std::vector<float> l(100);
    for (size_t i = 0; i < l.size(); ++i) l[i] = std::sin(static_cast<float>(i));
    SamplerParams p = plain(1.0f);
    p.seed = 1234;
    Sampler a(p), b(p);
    std::vector<int32_t> first;
    for (int i = 0; i < 50; ++i) {
        const int32_t t = pick(a, l);
        CHECK(t == pick(b, l));
        first.push_back(t);
    }
    a.reset();
    for (int i = 0; i < 50; ++i) CHECK(pick(a, l) == first[i]);
}

TEST(bad_values_throw) {
    auto with = [](auto set) {
        SamplerParams p;
        set(p);
        return p;
    };
    CHECK_THROWS_AS(Sampler(with([](SamplerParams& p) { p.temperature = -1.0f; })), std::invalid_argument);
    CHECK_THROWS_AS(Sampler(with([](SamplerParams& p) { p.temperature = NAN; })), std::invalid_argument);
    CHECK_THROWS_AS(Sampler(with([](SamplerParams& p) { p.top_p = 0.0f; })), std::invalid_argument);
    CHECK_THROWS_AS(Sampler(with([](SamplerParams& p) { p.top_k = -1; })), std::invalid_argument);
    CHECK_THROWS_AS(Sampler(with([](SamplerParams& p) { p.min_p = 1.5f; })), std::invalid_argument);
    CHECK_THROWS_AS(Sampler(with([](SamplerParams& p) { p.repeat_penalty = 0.0f; })), std::invalid_argument);
    CHECK_THROWS_AS(Sampler(with([](SamplerParams& p) { p.seed = -1; })), std::invalid_argument);
    Sampler s(plain(1.0f));
    std::vector<float> l = {0.0f, NAN};
    CHECK_THROWS_AS(s.sample(l.data(), l.size()), std::invalid_argument);
    CHECK_THROWS_AS(s.sample(l.data(), 0), std::invalid_argument);
    CHECK_THROWS_AS(s.accept(-3), std::invalid_argument);
}

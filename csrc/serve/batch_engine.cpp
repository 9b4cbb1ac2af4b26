#include "serve/batch_engine.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "core/errors.h"
#include "core/thread_pool.h"
#include "llm/forward.h"
#include "llm/model.h"

namespace dasllama::serve {

namespace {

// The log of the softmax normalizer of logits, and the k most probable tokens with their log
// probabilities into top (ties: lower id first).
float top_logprobs_of(const float* logits, int64_t n, int k, std::vector<TokenLogprob>& top) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < n; ++i) mx = std::max(mx, logits[i]);
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(double(logits[i]) - mx);
    const float log_z = float(mx + std::log(sum));
    top.clear();
    if (k <= 0) return log_z;
    auto better = [logits](int32_t a, int32_t b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };
    std::vector<int32_t> best;  // kept sorted, at most k
    best.reserve(size_t(k) + 1);
    for (int64_t i = 0; i < n; ++i) {
        const auto id = int32_t(i);
        if (int(best.size()) == k && !better(id, best.back())) continue;
        best.insert(std::upper_bound(best.begin(), best.end(), id, better), id);
        if (int(best.size()) > k) best.pop_back();
    }
    for (int32_t id : best) top.push_back({id, logits[id] - log_z});
    return log_z;
}

// Rows a step appends to one slot at most: with rings, a model with sliding layers caps its
// prompt chunks so that the rings stay small; otherwise a step takes what its budget allows.
int64_t max_take_for(const ModelConfig& cfg, int64_t prefill_chunk, bool rings) {
    if (!rings) return std::numeric_limits<int64_t>::max();
    bool sliding = false;
    for (const LayerConfig& l : cfg.layers) sliding = sliding || l.sliding;
    if (!sliding || cfg.sliding_window <= 0) return std::numeric_limits<int64_t>::max();
    return std::max<int64_t>(1, std::min(prefill_chunk, kRingAppendRows));
}

}  // namespace

struct BatchEngine::Slot {
    bool active = false;
    std::vector<int32_t> tokens;   // tokens whose K/V rows the slot's cache holds, in order
    std::vector<int32_t> prompt;   // the rest of the prompt, still to evaluate
    size_t prompt_done = 0;        // of prompt, evaluated
    int32_t next = -1;             // a sampled token to feed in the next step
    std::unique_ptr<Sampler> sampler;
    int top_logprobs = -1;
    std::vector<uint32_t> mask;    // empty: no mask
    std::vector<int32_t> banned;   // never sampled
    int64_t started = 0, used = 0; // clock_ values
};

BatchEngine::BatchEngine(LLMModel& model, int n_slots, int64_t n_ctx, int64_t prefill_chunk,
                         bool sliding_rings)
    : model_(model), n_vocab_(model.n_vocab()), prefill_chunk_(prefill_chunk),
      sliding_rings_(sliding_rings),
      max_take_(max_take_for(model.config(), prefill_chunk, sliding_rings)),
      pool_(model.config(), n_slots, n_ctx, model.kv_type(), sliding_rings,
            std::min<int64_t>(max_take_, std::max<int64_t>(n_ctx, 1))) {
    if (prefill_chunk < 1)
        throw std::invalid_argument("prefill_chunk must be >= 1, got " +
                                    std::to_string(prefill_chunk));
    model_.with_cpu_parts([&](const LLMModel::CpuParts& p) {
        // The model's forward holds min(512, its n_ctx) rows; a step must hold every slot's
        // decode row, so a model opened with fewer positions than slots gets one of our own.
        if (p.forward.max_batch() < n_slots)
            own_forward_ = std::make_unique<Forward>(p.cfg, p.weights, n_slots, p.pool.size());
        const Forward& f = own_forward_ ? *own_forward_ : p.forward;
        max_step_rows_ = f.max_batch();
        forward_scratch_bytes_ = f.scratch_bytes();
        return 0;
    });
    slots_.resize(size_t(n_slots));
    seat_ = std::make_unique<BatchSeat>(model, n_slots, n_ctx, sliding_rings);
}

std::map<std::string, gpu::SeatStats> BatchEngine::seat_stats() const {
    if (!seat_->present()) return {};
    return {{"batch", seat_->stats()}};
}

BatchEngine::~BatchEngine() = default;

int64_t BatchEngine::kv_layer_rows(int layer) const {
    if (layer < 0 || layer >= int(model_.config().n_layer))
        throw std::invalid_argument("kv_layer_rows: layer " + std::to_string(layer) +
                                    " is outside [0, " + std::to_string(model_.config().n_layer) + ")");
    return pool_.layer_rows(layer);
}

int64_t BatchEngine::scratch_bytes() const {
    int64_t n = int64_t(logits_.capacity() * sizeof(float) + ids_.capacity() * sizeof(int32_t));
    for (const Sampler::Scratch& s : sampler_scratch_) n += s.bytes();
    for (const Slot& s : slots_)
        n += int64_t((s.tokens.capacity() + s.prompt.capacity() + s.banned.capacity()) *
                         sizeof(int32_t) + s.mask.capacity() * sizeof(uint32_t));
    return n;
}

BatchEngine::Slot& BatchEngine::checked(int slot, const char* what) {
    return const_cast<Slot&>(static_cast<const BatchEngine*>(this)->checked(slot, what));
}

const BatchEngine::Slot& BatchEngine::checked(int slot, const char* what) const {
    if (slot < 0 || slot >= n_slots())
        throw std::invalid_argument(std::string(what) + ": slot " + std::to_string(slot) +
                                    " is outside [0, " + std::to_string(n_slots()) + ")");
    return slots_[size_t(slot)];
}

int BatchEngine::n_active() const {
    return int(std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return s.active; }));
}

bool BatchEngine::active(int slot) const { return checked(slot, "active").active; }

int64_t BatchEngine::n_past(int slot) const {
    return int64_t(checked(slot, "n_past").tokens.size());
}

int64_t BatchEngine::pending(int slot) const {
    const Slot& s = checked(slot, "pending");
    return int64_t(s.prompt.size() - s.prompt_done);
}

BatchEngine::Started BatchEngine::start(const int32_t* prompt, int64_t n,
                                        const SamplerParams& params, int top_logprobs,
                                        const std::vector<int32_t>& banned) {
    if (n <= 0) throw std::invalid_argument("start: the prompt is empty");
    if (n > n_ctx())
        throw ShapeError("start: the prompt has " + std::to_string(n) + " tokens but a slot "
                         "holds n_ctx=" + std::to_string(n_ctx()));
    for (int64_t i = 0; i < n; ++i)
        if (prompt[i] < 0 || prompt[i] >= n_vocab_)
            throw std::invalid_argument("start: token id " + std::to_string(prompt[i]) +
                                        " at index " + std::to_string(i) + " is outside [0, " +
                                        std::to_string(n_vocab_) + ")");
    if (top_logprobs < -1 || top_logprobs > kMaxTopLogprobs)
        throw std::invalid_argument("start: top_logprobs must be in [-1, " +
                                    std::to_string(kMaxTopLogprobs) + "], got " +
                                    std::to_string(top_logprobs));
    validate(params);
    for (size_t i = 0; i < banned.size(); ++i)
        if (banned[i] < 0 || banned[i] >= n_vocab_)
            throw std::invalid_argument("start: banned token " + std::to_string(banned[i]) +
                                        " at index " + std::to_string(i) + " is outside [0, " +
                                        std::to_string(n_vocab_) + ")");
    if (int64_t(banned.size()) >= n_vocab_)
        throw std::invalid_argument("start: every token is banned");

    int best = -1;
    size_t best_prefix = 0;
    for (int i = 0; i < n_slots(); ++i) {
        const Slot& s = slots_[size_t(i)];
        if (s.active) continue;
        const size_t limit = std::min(s.tokens.size(), size_t(n - 1));
        size_t k = 0;
        while (k < limit && s.tokens[k] == prompt[k]) ++k;
        // A ring layer that no longer holds the window before k cannot go on from there (the
        // device slots are absent with rings: batch_seat.h).
        if (!pool_.slot(i).resumable(int64_t(k))) k = 0;
        if (best < 0 || k > best_prefix || (k == best_prefix && s.used < slots_[size_t(best)].used)) {
            best = i;
            best_prefix = k;
        }
    }
    if (best < 0)
        throw Error("start: all " + std::to_string(n_slots()) + " slots are busy");

    Slot& s = slots_[size_t(best)];
    pool_.slot(best).truncate(int64_t(best_prefix));
    seat_->forget(best, int64_t(best_prefix));
    s.tokens.resize(best_prefix);
    s.prompt.assign(prompt + best_prefix, prompt + n);
    s.prompt_done = 0;
    s.next = -1;
    s.sampler = std::make_unique<Sampler>(params);
    for (int64_t i = 0; i < n; ++i) s.sampler->accept(prompt[i]);
    s.top_logprobs = top_logprobs;
    s.mask.clear();
    s.banned = banned;
    s.started = s.used = ++clock_;
    s.active = true;
    stats_.prompt_tokens += n;
    stats_.cached_tokens += int64_t(best_prefix);
    stats_.prefix_hits += best_prefix > 0 ? 1 : 0;
    return {best, int64_t(best_prefix)};
}

void BatchEngine::set_mask(int slot, const uint32_t* words, int64_t n_words) {
    Slot& s = checked(slot, "set_mask");
    if (!s.active) throw std::invalid_argument("set_mask: slot " + std::to_string(slot) + " is not active");
    const int64_t used = std::min<int64_t>(std::max<int64_t>(n_words, 0), (n_vocab_ + 31) / 32);
    bool any = false;
    for (int64_t w = 0; w < used && !any; ++w) {
        uint32_t bits = words[w];
        if (w == (n_vocab_ - 1) / 32 && n_vocab_ % 32) bits &= (uint32_t(1) << (n_vocab_ % 32)) - 1;
        any = bits != 0;
    }
    if (!any) throw std::invalid_argument("set_mask: the mask allows no token");
    s.mask.assign(words, words + used);
}

void BatchEngine::finish(int slot) {
    Slot& s = checked(slot, "finish");
    s.active = false;
    s.prompt.clear();
    s.prompt_done = 0;
    s.next = -1;
    s.sampler.reset();
    s.mask.clear();
    s.used = ++clock_;
}

std::vector<Sampled> BatchEngine::step() {
    struct Part {
        int slot;
        int64_t take;  // prompt tokens taken (0: a decode row)
    };
    std::vector<SequenceRows> seqs;
    std::vector<Part> parts;
    ids_.clear();

    // Decode rows first, then prompt chunks, oldest sequence first.
    for (int i = 0; i < n_slots(); ++i) {
        Slot& s = slots_[size_t(i)];
        if (!s.active || s.next < 0) continue;
        if (int64_t(s.tokens.size()) >= n_ctx())
            throw ShapeError("step: slot " + std::to_string(i) + " holds n_ctx=" +
                             std::to_string(n_ctx()) + " positions; finish it first");
        ids_.push_back(s.next);
        seqs.push_back({&pool_.slot(i), 1, true});
        parts.push_back({i, 0});
    }
    const int64_t n_decode = int64_t(ids_.size());
    int64_t budget = max_step_rows_ - n_decode;
    if (n_decode > 0) budget = std::min(budget, prefill_chunk_);
    std::vector<int> reading;
    for (int i = 0; i < n_slots(); ++i)
        if (slots_[size_t(i)].active && pending(i) > 0) reading.push_back(i);
    std::sort(reading.begin(), reading.end(),
              [this](int a, int b) { return slots_[size_t(a)].started < slots_[size_t(b)].started; });
    for (int i : reading) {
        if (budget <= 0) break;
        Slot& s = slots_[size_t(i)];
        const int64_t left = pending(i), take = std::min({left, budget, max_take_});
        ids_.insert(ids_.end(), s.prompt.begin() + int64_t(s.prompt_done),
                    s.prompt.begin() + int64_t(s.prompt_done) + take);
        seqs.push_back({&pool_.slot(i), take, take == left});
        parts.push_back({i, take});
        budget -= take;
    }
    if (ids_.empty()) return {};

    int64_t n_want = 0;
    for (const SequenceRows& q : seqs) n_want += q.want_logits ? 1 : 0;
    logits_.resize(size_t(n_want * n_vocab_));
    bool served = false;
    if (seat_->present()) {
        std::vector<BatchSeat::Rows> rows;
        for (size_t j = 0; j < parts.size(); ++j) {
            const int i = parts[j].slot;
            rows.push_back({i, &pool_.slot(i), int64_t(slots_[size_t(i)].tokens.size()),
                            seqs[j].n, seqs[j].want_logits});
        }
        served = seat_->serve(ids_.data(), rows, logits_.data());
        // The CPU runs it: each host cache first gets the rows only the device holds.
        if (!served)
            for (const Part& part : parts)
                seat_->sync_host(part.slot, pool_.slot(part.slot),
                                 int64_t(slots_[size_t(part.slot)].tokens.size()));
    }
    if (!served) {
        try {
            model_.with_cpu_parts([&](const LLMModel::CpuParts& p) {
                Forward& f = own_forward_ ? *own_forward_ : p.forward;
                f.run_batch(ids_.data(), seqs.data(), int(seqs.size()), p.pool, p.precision,
                            logits_.data());
                return 0;
            });
        } catch (...) {
            for (const Part& part : parts)
                pool_.slot(part.slot).truncate(int64_t(slots_[size_t(part.slot)].tokens.size()));
            throw;
        }
    }
    stats_.steps += 1;
    stats_.rows += int64_t(ids_.size());

    // Each sequence that reached its end of input draws its token. The draws are independent
    // (a sampler per slot, a scratch per pool share), so they run on the pool: at a 256K
    // vocabulary, 8 serial passes over the logits left the other threads waiting.
    std::vector<size_t> drawing;   // parts that sample, in order
    for (size_t j = 0; j < parts.size(); ++j)
        if (seqs[j].want_logits) drawing.push_back(j);
    std::vector<Sampled> out(drawing.size());
    std::vector<float> log_z(drawing.size(), 0.0f);
    auto draw = [&](size_t k, Sampler::Scratch& scratch) {
        Slot& s = slots_[size_t(parts[drawing[k]].slot)];
        float* lg = logits_.data() + int64_t(k) * n_vocab_;
        Sampled& r = out[k];
        r.slot = parts[drawing[k]].slot;
        r.logprob = std::numeric_limits<float>::quiet_NaN();
        if (s.top_logprobs >= 0) log_z[k] = top_logprobs_of(lg, n_vocab_, s.top_logprobs, r.top);
        if (!s.mask.empty()) {
            for (int64_t t = 0; t < n_vocab_; ++t) {
                const int64_t w = t / 32;
                if (w >= int64_t(s.mask.size()) || !((s.mask[size_t(w)] >> (t % 32)) & 1u))
                    lg[t] = -std::numeric_limits<float>::infinity();
            }
        }
        for (int32_t t : s.banned) lg[t] = -std::numeric_limits<float>::infinity();
        try {
            r.token = s.sampler->sample(lg, size_t(n_vocab_), scratch);
        } catch (const std::invalid_argument& e) {  // the mask and bans left no token
            r.token = -1;
            r.error = e.what();
        }
    };
    model_.with_cpu_parts([&](const LLMModel::CpuParts& p) {
        const int shares = std::min<int>(p.pool.size(), int(drawing.size()));
        if (int(sampler_scratch_.size()) < p.pool.size()) sampler_scratch_.resize(size_t(p.pool.size()));
        if (shares <= 1) {
            for (size_t k = 0; k < drawing.size(); ++k) draw(k, sampler_scratch_[0]);
        } else {
            p.pool.run([&](int share, int n_shares) {
                for (size_t k = size_t(share); k < drawing.size(); k += size_t(n_shares))
                    draw(k, sampler_scratch_[size_t(share)]);
            });
        }
        return 0;
    });

    for (size_t j = 0; j < parts.size(); ++j) {
        Slot& s = slots_[size_t(parts[j].slot)];
        if (parts[j].take == 0) {
            s.tokens.push_back(s.next);
        } else {
            const auto from = s.prompt.begin() + int64_t(s.prompt_done);
            s.tokens.insert(s.tokens.end(), from, from + parts[j].take);
            s.prompt_done += size_t(parts[j].take);
        }
        s.next = -1;
    }
    for (size_t k = 0; k < drawing.size(); ++k) {
        Sampled& r = out[k];
        Slot& s = slots_[size_t(r.slot)];
        s.mask.clear();
        if (!r.error.empty()) continue;
        s.sampler->accept(r.token);
        // A mask never excludes the sampled token, so its logit is still the model's.
        if (s.top_logprobs >= 0) r.logprob = logits_[size_t(int64_t(k) * n_vocab_ + r.token)] - log_z[k];
        s.next = r.token;
        s.used = ++clock_;
        stats_.generated += 1;
    }
    return out;
}

}  // namespace dasllama::serve

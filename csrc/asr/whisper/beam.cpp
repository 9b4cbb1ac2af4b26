#include "asr/whisper/beam.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "asr/whisper/scoring.h"
#include "core/errors.h"
#include "nn/activations.h"

namespace dasllama::whisper {

namespace {

struct Candidate {
    double score;      // summed log-probabilities
    int32_t token;
    int origin;        // the beam it extends
};

struct Hypothesis {
    std::vector<int32_t> tokens;
    double score;
};

}  // namespace

DecodeResult beam_decode(Decoder& dec, const WhisperConfig& c, const std::vector<int32_t>& prompt,
                         const DecodeOptions& o, const BeamOptions& b, ThreadPool& pool) {
    const int B = b.beam_size;
    const int64_t max_hyps = int64_t(std::round(float(B) * b.patience));
    if (B < 2) throw ShapeError("whisper beam search: beam_size " + std::to_string(B) + " < 2");
    if (max_hyps < 1)
        throw ShapeError("whisper beam search: patience " + std::to_string(b.patience) +
                         " keeps no hypothesis");
    if (!o.prefix.empty())
        throw ShapeError("whisper beam search: a prefix is not supported with beams");
    const DecodePlan plan = plan_decode(c, prompt, o);
    const int64_t max_steps = plan.max_steps, V = c.n_vocab;
    const int n_cand = 2 * B;

    DecodeResult r;
    std::vector<float> z(static_cast<size_t>(V));
    dec.reset(1);
    r.no_speech_prob = run_prompt(dec, c, prompt, plan, z.data(), pool, 0);

    std::vector<std::vector<int32_t>> seqs(1);   // the beams' outputs so far
    std::vector<double> scores(1, 0.0);
    std::vector<Hypothesis> hyps;
    std::vector<Candidate> all;
    std::vector<int32_t> best_ids;
    std::vector<int32_t> last_tokens(static_cast<size_t>(B));
    std::vector<float> zs;
    bool finished = false;
    for (int64_t step = 0; step < max_steps && !finished; ++step) {
        const int n_beams = int(seqs.size());   // 1 at the first step, then B
        all.clear();
        if (step > 0) {   // every beam's last token in one batch, a slot each
            for (int k = 0; k < n_beams; ++k) last_tokens[size_t(k)] = seqs[size_t(k)].back();
            const float* h = dec.forward_slots(last_tokens.data(), pool);
            zs.resize(size_t(n_beams) * size_t(V));
            dec.logits(h, n_beams, zs.data(), pool);
        }
        for (int k = 0; k < n_beams; ++k) {
            float* zk = step > 0 ? zs.data() + size_t(k) * size_t(V) : z.data();
            apply_rules(c, o, plan.timestamps, step, seqs[size_t(k)], zk);
            // this beam's best n_cand tokens are all that can reach the overall top n_cand
            const double shift = scores[size_t(k)] - nn::log_sum_exp(zk, V);
            top_logits(zk, V, n_cand, best_ids);
            for (int32_t id : best_ids) all.push_back({double(zk[id]) + shift, id, k});
        }
        // the best n_cand over every beam; ties keep the lower flat index (beam, token)
        std::stable_sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& x) {
            if (a.score != x.score) return a.score > x.score;
            return a.origin != x.origin ? a.origin < x.origin : a.token < x.token;
        });
        all.resize(size_t(n_cand));
        const bool last_step = step + 1 == max_steps;
        std::vector<int> active(static_cast<size_t>(B));
        int secondary = B;
        for (int k = 0; k < B; ++k) {
            const Candidate& cand = all[size_t(k)];
            int next = k;
            if (cand.token == c.tok.eot || last_step) {
                Hypothesis hyp{seqs[size_t(cand.origin)], cand.score};
                if (cand.token != c.tok.eot) hyp.tokens.push_back(cand.token);
                hyps.push_back(std::move(hyp));
                for (int j = secondary; j < n_cand; ++j)
                    if (all[size_t(j)].token != c.tok.eot) {
                        next = j;
                        secondary = j + 1;
                        break;
                    }
            }
            active[size_t(k)] = next;
        }
        finished = last_step || int64_t(hyps.size()) >= max_hyps;
        if (finished) break;
        std::vector<std::vector<int32_t>> next_seqs(static_cast<size_t>(B));
        std::vector<double> next_scores(static_cast<size_t>(B));
        std::vector<int> origin(static_cast<size_t>(B));
        for (int k = 0; k < B; ++k) {
            const Candidate& cand = all[size_t(active[size_t(k)])];
            next_seqs[size_t(k)] = seqs[size_t(cand.origin)];
            next_seqs[size_t(k)].push_back(cand.token);
            next_scores[size_t(k)] = cand.score;
            origin[size_t(k)] = cand.origin;
        }
        dec.reorder(origin);   // after the first step: B copies of the prompt's slot
        seqs = std::move(next_seqs);
        scores = std::move(next_scores);
    }
    // the best by score / length^length_penalty (the first of equals)
    const size_t best = first_best(hyps.size(), [&](size_t i) {
        return normalized_score(hyps[i].score, hyps[i].tokens.size(), b.length_penalty);
    });
    r.tokens = hyps[best].tokens;
    r.sum_logprob = hyps[best].score;
    return r;
}

}  // namespace dasllama::whisper

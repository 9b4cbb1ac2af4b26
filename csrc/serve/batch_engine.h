// The batching engine: several sequences of one model decoded together (continuous batching).
//
// A sequence occupies a slot: a region of the KV pool, its own sampler and its token history.
// step() makes one batch of rows: the next token of every decoding sequence, plus a chunk of at
// most prefill_chunk prompt tokens from sequences still reading their prompt (the whole budget
// when nobody decodes), runs it through the model (the matrix products over all rows, attention
// per sequence over its own cache) and samples each sequence that reached its end of input. A
// new sequence joins at a step boundary; one that finishes leaves its slot free with its cached
// tokens kept, so a later prompt that shares their prefix evaluates only the rest.
//
// Memory beyond the weights and the pool: the steps run on the model's own CPU forward pass
// (its max_batch-row buffers, under the model's lock), and the slots' samplers draw on the
// model's pool with one vocabulary-sized scratch per pool thread, not one per slot;
// scratch_bytes() reports what the engine itself holds.
//
// Each slot's sampler sees what LLM.generate's would (every prompt token accepted, then each
// sampled one): with batch-invariant kernels (each output row depends on its own input row only,
// cpu/matmul.h) the same seed gives the same tokens whatever else is in the batch.
//
// On a model opened on a GPU the step is the seat "batch" (serve/batch_seat.h): the device
// runs it over device K/V slots of the engine's own, or declines with a reason and the CPU
// chain runs it over the host pool, the rows moving between the two as needed; seat_stats()
// counts it. The device's products are not batch-invariant (a product of several rows may
// take another kernel than one of a single row), so there the same seed gives the same text
// up to near-ties of the logits, not bit for bit.
//
// Stopping is the caller's: it calls finish(slot) after a token it does not want to continue
// from (end of generation, a stop string, max_tokens, n_past(slot) == n_ctx()).
// Not thread-safe: one caller at a time (the Python wrapper owns it). The model's lock is held
// during a step's forward pass, so eval() on the same model waits for it and vice versa.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gpu/seat.h"
#include "llm/sampler.h"
#include "serve/batch_seat.h"
#include "serve/kv_pool.h"

namespace dasllama {
class Forward;
class LLMModel;
}

namespace dasllama::serve {

// The most prompt rows one step takes from one sequence when the engine keeps rings for
// sliding-window layers: each slot's ring for such a layer holds window + this - 1 rows
// (serve/kv_pool.h), and the products of a 128-row chunk already run near the full-batch rate.
constexpr int64_t kRingAppendRows = 128;

// The most alternatives a sampled token reports (OpenAI's top_logprobs limit).
constexpr int kMaxTopLogprobs = 20;

struct TokenLogprob {
    int32_t token;
    float logprob;
};

// A token sampled by step(): logprob is log softmax of the model's logits (before penalties,
// masks and temperature), NaN unless the slot asked for logprobs; top holds the most probable
// tokens, most probable first.
struct Sampled {
    int slot = -1;
    int32_t token = -1;
    float logprob = 0.0f;
    std::vector<TokenLogprob> top;
    std::string error;  // non-empty: this slot could not sample (token -1); the others did
};

struct EngineStats {
    int64_t steps = 0;            // forward steps run
    int64_t rows = 0;             // rows over all steps
    int64_t prompt_tokens = 0;    // prompt tokens of started sequences (cached included)
    int64_t cached_tokens = 0;    // of those, reused from a slot's cache
    int64_t prefix_hits = 0;      // sequences that reused at least one cached token
    int64_t generated = 0;        // tokens sampled
};

class BatchEngine {
public:
    // n_ctx: positions each slot holds. prefill_chunk: prompt tokens a step takes while other
    // sequences decode (>= 1). sliding_rings: a sliding-window layer keeps a ring of
    // window + min(prefill_chunk, kRingAppendRows) - 1 rows per slot instead of n_ctx (less
    // pool, but a step takes at most kRingAppendRows prompt rows from one sequence, and a
    // cached prefix is reused only while the ring still holds the window before its end);
    // off, every layer keeps n_ctx rows. Throws ShapeError / std::invalid_argument naming a
    // bad value, Error when the model is closed.
    BatchEngine(LLMModel& model, int n_slots, int64_t n_ctx, int64_t prefill_chunk,
                bool sliding_rings = false);
    ~BatchEngine();
    BatchEngine(const BatchEngine&) = delete;
    BatchEngine& operator=(const BatchEngine&) = delete;

    struct Started {
        int slot;
        int64_t cached;  // prompt tokens whose K/V rows were already in the slot
    };
    // Starts a sequence on the free slot whose cached tokens share the longest prefix with the
    // prompt (leaving at least one token to evaluate, which gives the logits), else on the one
    // used longest ago. top_logprobs: -1 for none, else 0..kMaxTopLogprobs. banned: tokens its
    // samples never take (ignoring end of generation: the end tokens). Throws Error when
    // every slot is busy, ShapeError when the prompt exceeds n_ctx (naming both), and
    // std::invalid_argument for an empty prompt, an id outside the vocabulary (naming it and its
    // index) or bad sampler settings.
    Started start(const int32_t* prompt, int64_t n, const SamplerParams& params, int top_logprobs,
                  const std::vector<int32_t>& banned = {});

    // The tokens the slot's next sample may take: bit t % 32 of words[t / 32]; tokens past the
    // words are excluded. Holds until that sample, then clears. Throws std::invalid_argument for
    // a slot that is not active or a mask that excludes every token.
    void set_mask(int slot, const uint32_t* words, int64_t n_words);

    // Ends the slot's sequence; the slot is free and keeps its cached tokens for reuse.
    void finish(int slot);

    // One forward step over every active sequence. Returns the tokens sampled (one per sequence
    // that finished its input); empty when nothing is active. A sequence whose cache is full
    // (n_past(slot) == n_ctx()) must be finished first (ShapeError otherwise). On an exception
    // every cache is as it was before the step.
    std::vector<Sampled> step();

    int n_slots() const { return pool_.n_slots(); }
    int64_t n_ctx() const { return pool_.n_ctx(); }
    int64_t kv_pool_bytes() const { return pool_.bytes(); }
    // Rows each slot keeps for `layer`: n_ctx, or with sliding_rings a sliding layer's ring
    // (window + min(prefill_chunk, kRingAppendRows) - 1 when that is fewer).
    int64_t kv_layer_rows(int layer) const;
    // Bytes the engine holds beyond the weights and the pool: the logits of a step (one row of
    // n_vocab per sampling sequence), the sampler scratch (one per pool thread), each slot's
    // token history and mask. Grows to its high-water mark and stays there.
    int64_t scratch_bytes() const;
    // Bytes of the forward pass's per-row buffers the steps run on: the model's own (shared,
    // not allocated by the engine) unless the model's holds fewer rows than there are slots.
    int64_t forward_scratch_bytes() const { return forward_scratch_bytes_; }
    // Rows one step may hold (the forward pass's max_batch).
    int64_t max_step_rows() const { return max_step_rows_; }
    bool sliding_rings() const { return sliding_rings_; }
    int n_active() const;
    bool active(int slot) const;
    // Positions of the slot's cache in use (prompt evaluated so far plus tokens fed back).
    int64_t n_past(int slot) const;
    // Prompt tokens the slot has still to evaluate.
    int64_t pending(int slot) const;
    const EngineStats& stats() const { return stats_; }
    // {"batch": counters} on a model opened on a GPU; empty on the CPU.
    std::map<std::string, gpu::SeatStats> seat_stats() const;
    // Why the seat last declined a step ("" if it never did), and the bytes of its device K/V.
    const std::string& seat_reason() const { return seat_->reason(); }
    uint64_t device_kv_bytes() const { return seat_->device_kv_bytes(); }

private:
    struct Slot;
    Slot& checked(int slot, const char* what);
    const Slot& checked(int slot, const char* what) const;

    LLMModel& model_;
    int64_t n_vocab_;
    int64_t prefill_chunk_;
    bool sliding_rings_;
    int64_t max_take_;  // prompt rows a step takes from one sequence (the pool's max_append)
    KVPool pool_;
    int64_t max_step_rows_ = 0, forward_scratch_bytes_ = 0;
    std::unique_ptr<Forward> own_forward_;  // only when the model's holds fewer rows than slots
    std::vector<Slot> slots_;
    int64_t clock_ = 0;  // orders starts (prefill FIFO) and uses (least recently used)
    EngineStats stats_;
    std::unique_ptr<BatchSeat> seat_;
    // Reused between steps.
    std::vector<int32_t> ids_;
    std::vector<float> logits_;
    std::vector<Sampler::Scratch> sampler_scratch_;  // one per pool share, for the slots' draws
};

}  // namespace dasllama::serve

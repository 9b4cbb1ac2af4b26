// Whisper's text decoder on the CPU. Token embeddings + learned positions, pre-LN blocks of
// causal self-attention over a KV cache (llm/kv_cache.h, float32 rows entering through
// kv_cache_append_rows; cpu::attention reads it), cross-attention to the encoder output, and
// a GELU MLP; a final LayerNorm; logits from the tied embedding (or the file's projection).
//
// The cross-attention keys and values of every layer are computed once per window
// (set_audio) and held head by head (nn/attention_full.h) for all the window's steps.
// Several token sequences (the hypotheses of a beam search) decode on the same window, each in
// its own self-attention cache: a slot. Not thread-safe: one decoding at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "asr/whisper/weights.h"
#include "cpu/ops.h"
#include "llm/kv_cache.h"
#include "nn/attention_full.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::whisper {

class Decoder {
public:
    Decoder(WhisperWeights& w, int n_threads);

    // enc [n_audio_ctx, d]: the window's encoder output. Computes the cross-attention cache
    // and empties the self-attention cache.
    void set_audio(const float* enc, ThreadPool& pool);
    bool has_audio() const { return has_audio_; }
    // Forgets the self-attention caches (new token sequences on the same window) and makes
    // n_slots of them (at least 1).
    void reset(int n_slots = 1);
    int n_slots() const { return int(caches_.size()); }
    int64_t n_past(int slot = 0) const { return caches_.at(size_t(slot))->n_past(); }
    // The slots become origin.size() of them, slot k continuing the old slot origin[k] (a
    // beam step's reordering; after the first step, copies of slot 0). An old slot's cache
    // moves to the first new slot that continues it; only the others copy its rows.
    void reorder(const std::vector<int>& origin);

    // Runs tokens [n] at positions n_past(slot).. in `slot` and returns the final hidden
    // states [n, d] (valid until the next call). Throws ShapeError when the positions would
    // pass n_text_ctx or a token id is outside the vocabulary, Error when no audio is set.
    const float* forward(const int32_t* tokens, int64_t n, ThreadPool& pool, int slot = 0);
    // One token per slot (tokens [n_slots()]), each at its slot's next position, as one batch:
    // the weights are read once for every slot. Returns the hidden states [n_slots(), d].
    const float* forward_slots(const int32_t* tokens, ThreadPool& pool);
    // logits [n, n_vocab] of hidden rows h [n, d].
    void logits(const float* h, int64_t n, float* out, ThreadPool& pool) const;

    // While on, forward() keeps each layer's cross-attention queries [n, d] (the word
    // alignment reads them with cross_kv; decoding leaves it off and copies nothing).
    void keep_cross_queries(bool on) { keep_queries_ = on; }
    // Layer `layer`'s cross-attention queries of the last forward() while kept.
    const float* cross_queries(int64_t layer) const {
        return kept_q_.at(size_t(layer)).data();
    }
    // Layer `layer`'s cross-attention keys and values of the window (set_audio).
    const nn::HeadKV& cross_kv(int64_t layer) const { return cross_.at(size_t(layer)); }

private:
    WhisperWeights& w_;
    std::unique_ptr<KVCache> make_cache() const;
    const float* run(const int32_t* tokens, int64_t n, ThreadPool& pool, int slot);

    std::vector<std::unique_ptr<KVCache>> caches_, spare_;
    std::vector<nn::HeadKV> cross_;
    bool has_audio_ = false;
    bool keep_queries_ = false;
    std::vector<std::vector<float>> kept_q_;
    cpu::AttentionScratch scratch_;
    nn::AttendScratch cross_scratch_;
    std::vector<float> x_, h_, qkv_, q_, k_, v_, attn_, proj_, ff_, kv_rows_, copy_k_, copy_v_;
    std::vector<int> row_slot_;
    std::vector<int64_t> row_pos_;
    std::vector<KVCache::LayerView> views_;
    std::vector<cpu::AttentionJob> jobs_;
};

}  // namespace dasllama::whisper

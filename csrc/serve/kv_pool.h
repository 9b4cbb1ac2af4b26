// The KV pool of a batching engine: one allocation cut into per-slot regions, each region a
// whole KVCache of n_ctx positions (the layout of llm/kv_cache.h). Every slot gets the full
// context: the pool is n_slots x one slot's bytes, never one context split between slots.
// With rings on, a sliding-window layer (gemma3's local layers) keeps a ring of
// window + max_append - 1 rows instead of n_ctx when that is fewer: max_append is the most rows
// a step appends to one slot, so every query of a step still sees its whole window. Off (the
// default), every layer keeps n_ctx rows. Pages of a region are only touched as its sequence
// grows, so a ring saves resident memory only once a sequence outgrows it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "llm/kv_cache.h"
#include "llm/model_config.h"

namespace dasllama::serve {

class KVPool {
public:
    // Throws ShapeError for n_slots < 1, n_ctx < 1 or a size that overflows, std::bad_alloc
    // when the allocation fails.
    // rings: sliding layers keep rings; max_append: then the most positions one step appends to
    // a slot (>= 1).
    KVPool(const ModelConfig& cfg, int n_slots, int64_t n_ctx, KVType type, bool rings,
           int64_t max_append);

    int n_slots() const { return int(caches_.size()); }
    int64_t n_ctx() const { return n_ctx_; }
    int64_t slot_bytes() const { return slot_bytes_; }
    int64_t bytes() const { return slot_bytes_ * n_slots(); }
    // Rows each slot keeps for layer l: n_ctx, or the ring of a sliding layer.
    int64_t layer_rows(int layer) const { return caches_.front()->layer_rows(layer); }
    KVCache& slot(int i) { return *caches_[size_t(i)]; }

private:
    int64_t n_ctx_ = 0, slot_bytes_ = 0;
    std::unique_ptr<uint8_t[]> arena_;
    std::vector<std::unique_ptr<KVCache>> caches_;
};

}  // namespace dasllama::serve

#include "serve/kv_pool.h"

#include <limits>
#include <string>

#include "core/errors.h"

namespace dasllama::serve {

KVPool::KVPool(const ModelConfig& cfg, int n_slots, int64_t n_ctx, KVType type, bool rings,
               int64_t max_append)
    : n_ctx_(n_ctx) {
    if (n_slots < 1) throw ShapeError("kv pool: n_slots must be >= 1, got " + std::to_string(n_slots));
    std::vector<int64_t> windows;  // empty: every layer keeps n_ctx rows
    if (rings) {
        windows.assign(size_t(cfg.n_layer), 0);
        for (size_t l = 0; l < windows.size() && l < cfg.layers.size(); ++l)
            if (cfg.layers[l].sliding) windows[l] = cfg.sliding_window;
    }
    slot_bytes_ = KVCache::bytes_for(cfg.n_layer, n_ctx, cfg.n_head_kv, cfg.head_dim,
                                     cfg.head_dim_v, type, windows, max_append);
    if (slot_bytes_ > std::numeric_limits<int64_t>::max() / n_slots)
        throw ShapeError("kv pool: " + std::to_string(n_slots) + " slots of n_ctx " +
                         std::to_string(n_ctx) + " overflow");
    arena_.reset(new uint8_t[size_t(slot_bytes_ * n_slots)]);
    for (int i = 0; i < n_slots; ++i)
        caches_.push_back(std::make_unique<KVCache>(cfg.n_layer, n_ctx, cfg.n_head_kv,
                                                    cfg.head_dim, cfg.head_dim_v, type,
                                                    arena_.get() + int64_t(i) * slot_bytes_,
                                                    windows, max_append));
}

}  // namespace dasllama::serve

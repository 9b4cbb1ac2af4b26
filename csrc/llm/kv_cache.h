// The key/value cache of a text model: per layer, the K and V rows of every position seen so
// far, stored in f16 (default), f32 or q8_0.
//
// kv_cache_append_rows is THE one way rows enter the cache (DESIGN.md): the CPU forward pass
// calls it layer by layer, and any device that runs ahead flushes its rows through it before
// handing work back. Rows enter in order: a layer's rows are contiguous from position 0, so
// a layer never has holes, and n_past() is the length every layer has reached.
//
// Layout per layer: [n_head_kv][rows][head_dim], so that attention reads one head's keys
// over a run of positions as one contiguous block. rows is n_ctx, except on a ring layer: a
// layer that attends to the last `window` positions only (gemma3's local layers) may keep a
// ring of window + max_append - 1 rows, position p in row p % rows; that is enough for a query
// at any position of an append of at most max_append rows, and for falling back (truncate) to
// any position whose window is still held. A wrapped run of rows is read through the scratch.
// Not thread-safe for writers; readers (attention threads) may read concurrently while nobody
// appends.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "cpu/ops.h"

namespace dasllama {

enum class KVType { F16, F32, Q8_0 };

// "f16" | "f32" | "q8_0"; throws std::invalid_argument naming the value otherwise.
KVType kv_type_from_string(std::string_view name);
const char* kv_type_name(KVType t);

class KVCache {
public:
    // Throws ShapeError when a dimension is out of range or q8_0 is asked for heads that are
    // not a multiple of its 32-element block.
    KVCache(int64_t n_layer, int64_t n_ctx, int64_t n_head_kv, int64_t head_dim_k,
            int64_t head_dim_v, KVType type);
    // The same cache over `arena`, bytes_for(...) bytes that the caller owns and keeps alive
    // (a region of a pool shared by several sequences: serve/kv_pool.h).
    KVCache(int64_t n_layer, int64_t n_ctx, int64_t n_head_kv, int64_t head_dim_k,
            int64_t head_dim_v, KVType type, uint8_t* arena);
    // The same over `arena`, with ring layers: windows[l] > 0 makes layer l a ring of
    // min(n_ctx, windows[l] + max_append - 1) rows (windows has n_layer entries; 0: all
    // positions); an append then takes at most max_append rows (>= 1).
    KVCache(int64_t n_layer, int64_t n_ctx, int64_t n_head_kv, int64_t head_dim_k,
            int64_t head_dim_v, KVType type, uint8_t* arena, const std::vector<int64_t>& windows,
            int64_t max_append);
    // Bytes a cache of this shape holds; throws ShapeError as the constructor does.
    static int64_t bytes_for(int64_t n_layer, int64_t n_ctx, int64_t n_head_kv,
                             int64_t head_dim_k, int64_t head_dim_v, KVType type);
    static int64_t bytes_for(int64_t n_layer, int64_t n_ctx, int64_t n_head_kv,
                             int64_t head_dim_k, int64_t head_dim_v, KVType type,
                             const std::vector<int64_t>& windows, int64_t max_append);

    // Stores n_rows positions pos..pos+n_rows-1 of `layer`. k_rows is n_rows x
    // (n_head_kv * head_dim_k) float32, v_rows n_rows x (n_head_kv * head_dim_v). pos must
    // be at most the layer's current length (rows past it are overwritten: the layer is
    // truncated to pos first). Throws ShapeError naming the layer, pos and sizes otherwise.
    void kv_cache_append_rows(int layer, int64_t pos, int64_t n_rows, const float* k_rows,
                              const float* v_rows);

    // Forgets positions >= n (n >= n_past() changes nothing). Throws ShapeError when a ring
    // layer no longer holds the window a query at n needs (resumable(n) is false).
    void truncate(int64_t n);
    // Whether every layer can go on from position n: n is at most its length and, on a ring
    // layer, the positions a query at n attends to (n - window < k < n) are still held.
    // Position 0 always can.
    bool resumable(int64_t n) const;

    int64_t n_past() const;                 // positions every layer holds
    int64_t layer_length(int layer) const;  // positions this layer holds
    int64_t n_ctx() const { return n_ctx_; }
    int64_t layer_rows(int layer) const;    // rows this layer stores (n_ctx unless a ring)
    int64_t max_append() const { return max_append_; }
    int64_t n_layer() const { return int64_t(lengths_.size()); }
    int64_t n_head_kv() const { return n_head_kv_; }
    int64_t head_dim_k() const { return head_dim_k_; }
    int64_t head_dim_v() const { return head_dim_v_; }
    KVType type() const { return type_; }
    int64_t bytes() const;

    // A reader of one layer for cpu::attention.
    class LayerView : public cpu::KVSource {
    public:
        LayerView(const KVCache& cache, int layer) : cache_(cache), layer_(layer) {}
        const float* keys(int64_t kv_head, int64_t pos0, int64_t n, float* scratch) const override;
        const float* values(int64_t kv_head, int64_t pos0, int64_t n, float* scratch) const override;

    private:
        const KVCache& cache_;
        int layer_;
    };
    LayerView layer(int layer) const;

    // Rows pos0..pos0+n-1 of one head as float32: a pointer into the cache for f32 (unless the
    // run wraps around a ring), else the rows converted into `scratch` (n x head_dim floats).
    // No checks (the caller's are done).
    const float* read_rows(bool values, int layer, int64_t kv_head, int64_t pos0, int64_t n,
                           float* scratch) const;

    // Rows pos0..pos0+n-1 of one layer in the order kv_cache_append_rows takes them:
    // k_rows n x (n_head_kv * head_dim_k), v_rows n x (n_head_kv * head_dim_v), float32.
    // Throws ShapeError when the layer does not hold them.
    void read_layer_rows(int layer, int64_t pos0, int64_t n, float* k_rows, float* v_rows) const;

private:
    void check_layer(int layer) const;
    uint8_t* row_ptr(bool values, int layer, int64_t kv_head, int64_t pos) const;
    const float* convert_rows(bool values, const uint8_t* src, int64_t n, float* out) const;
    bool layer_resumable(size_t layer, int64_t n) const;

    int64_t n_ctx_, n_head_kv_, head_dim_k_, head_dim_v_;
    KVType type_;
    int64_t k_row_bytes_, v_row_bytes_;        // one head's row at one position
    std::unique_ptr<uint8_t[]> owned_;         // the storage, unless the caller gave an arena
    std::vector<uint8_t*> k_, v_;              // per layer, into owned_ or the arena
    std::vector<int64_t> lengths_;             // per layer
    std::vector<int64_t> rows_, windows_;      // per layer: rows stored; window (0: none)
    int64_t max_append_ = 0;                   // rows one append may take (0: no limit)
};

}  // namespace dasllama

#include "llm/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "core/errors.h"
#include "core/formats.h"

namespace dasllama {

namespace {

constexpr int64_t kQ8Block = 32;
constexpr int64_t kQ8Bytes = 34;

int64_t row_bytes_for(KVType t, int64_t dim) {
    switch (t) {
        case KVType::F16: return dim * 2;
        case KVType::F32: return dim * 4;
        case KVType::Q8_0: return dim / kQ8Block * kQ8Bytes;
    }
    return 0;
}

}  // namespace

KVType kv_type_from_string(std::string_view name) {
    if (name == "f16") return KVType::F16;
    if (name == "f32") return KVType::F32;
    if (name == "q8_0") return KVType::Q8_0;
    throw std::invalid_argument("kv_type must be one of f16, f32, q8_0, got '" +
                                std::string(name) + "'");
}

const char* kv_type_name(KVType t) {
    switch (t) {
        case KVType::F16: return "f16";
        case KVType::F32: return "f32";
        case KVType::Q8_0: return "q8_0";
    }
    return "?";
}

namespace {

void check_shape(int64_t n_layer, int64_t n_ctx, int64_t n_head_kv, int64_t head_dim_k,
                 int64_t head_dim_v, KVType type) {
    if (n_layer <= 0 || n_ctx <= 0 || n_head_kv <= 0 || head_dim_k <= 0 || head_dim_v <= 0)
        throw ShapeError("kv cache: every size must be positive, got n_layer=" +
                         std::to_string(n_layer) + " n_ctx=" + std::to_string(n_ctx) +
                         " n_head_kv=" + std::to_string(n_head_kv) + " head_dim_k=" +
                         std::to_string(head_dim_k) + " head_dim_v=" + std::to_string(head_dim_v));
    if (type == KVType::Q8_0 && (head_dim_k % kQ8Block || head_dim_v % kQ8Block))
        throw ShapeError("kv cache: q8_0 needs head sizes that are multiples of 32, got k=" +
                         std::to_string(head_dim_k) + " v=" + std::to_string(head_dim_v) +
                         "; use kv_type f16 or f32");
}

}  // namespace

int64_t KVCache::bytes_for(int64_t n_layer, int64_t n_ctx, int64_t n_head_kv, int64_t head_dim_k,
                           int64_t head_dim_v, KVType type) {
    check_shape(n_layer, n_ctx, n_head_kv, head_dim_k, head_dim_v, type);
    const int64_t row = row_bytes_for(type, head_dim_k) + row_bytes_for(type, head_dim_v);
    const int64_t limit = std::numeric_limits<int64_t>::max();
    if (n_ctx > limit / n_head_kv / row || n_ctx * n_head_kv * row > limit / n_layer)
        throw ShapeError("kv cache: n_ctx=" + std::to_string(n_ctx) + " is too large");
    return n_layer * n_ctx * n_head_kv * row;
}

KVCache::KVCache(int64_t n_layer, int64_t n_ctx, int64_t n_head_kv, int64_t head_dim_k,
                 int64_t head_dim_v, KVType type)
    : KVCache(n_layer, n_ctx, n_head_kv, head_dim_k, head_dim_v, type, nullptr) {}

KVCache::KVCache(int64_t n_layer, int64_t n_ctx, int64_t n_head_kv, int64_t head_dim_k,
                 int64_t head_dim_v, KVType type, uint8_t* arena)
    : n_ctx_(n_ctx), n_head_kv_(n_head_kv), head_dim_k_(head_dim_k), head_dim_v_(head_dim_v),
      type_(type) {
    const int64_t total = bytes_for(n_layer, n_ctx, n_head_kv, head_dim_k, head_dim_v, type);
    k_row_bytes_ = row_bytes_for(type, head_dim_k);
    v_row_bytes_ = row_bytes_for(type, head_dim_v);
    // Not zero-filled: positions past a layer's length are never read, so pages are only
    // touched as the context grows.
    if (!arena) {
        owned_.reset(new uint8_t[size_t(total)]);
        arena = owned_.get();
    }
    const int64_t per_layer_k = n_head_kv * n_ctx * k_row_bytes_;
    const int64_t per_layer_v = n_head_kv * n_ctx * v_row_bytes_;
    lengths_.assign(size_t(n_layer), 0);
    for (int64_t l = 0; l < n_layer; ++l) {
        k_.push_back(arena + l * (per_layer_k + per_layer_v));
        v_.push_back(k_.back() + per_layer_k);
    }
}

void KVCache::check_layer(int layer) const {
    if (layer < 0 || layer >= n_layer())
        throw ShapeError("kv cache: layer " + std::to_string(layer) + " is outside [0, " +
                         std::to_string(n_layer()) + ")");
}

uint8_t* KVCache::row_ptr(bool values, int layer, int64_t kv_head, int64_t pos) const {
    const int64_t rb = values ? v_row_bytes_ : k_row_bytes_;
    uint8_t* base = (values ? v_ : k_)[size_t(layer)];
    return base + (kv_head * n_ctx_ + pos) * rb;
}

void KVCache::kv_cache_append_rows(int layer, int64_t pos, int64_t n_rows, const float* k_rows,
                                   const float* v_rows) {
    check_layer(layer);
    const int64_t have = lengths_[size_t(layer)];
    if (pos < 0 || pos > have || n_rows < 0 || pos + n_rows > n_ctx_)
        throw ShapeError("kv cache: layer " + std::to_string(layer) + " holds " +
                         std::to_string(have) + " positions of " + std::to_string(n_ctx_) +
                         "; cannot append " + std::to_string(n_rows) + " rows at position " +
                         std::to_string(pos));
    for (int pass = 0; pass < 2; ++pass) {
        const bool values = pass == 1;
        const float* src = values ? v_rows : k_rows;
        const int64_t dim = values ? head_dim_v_ : head_dim_k_;
        for (int64_t r = 0; r < n_rows; ++r) {
            for (int64_t h = 0; h < n_head_kv_; ++h) {
                const float* x = src + (r * n_head_kv_ + h) * dim;
                uint8_t* dst = row_ptr(values, layer, h, pos + r);
                switch (type_) {
                    case KVType::F32: std::memcpy(dst, x, size_t(dim) * 4); break;
                    case KVType::F16:
                        cpu::f32_to_f16_row(x, reinterpret_cast<uint16_t*>(dst), dim);
                        break;
                    case KVType::Q8_0:
                        quantize(*type_traits(uint32_t(GgmlType::Q8_0)), x, dst, dim);
                        break;
                }
            }
        }
    }
    lengths_[size_t(layer)] = pos + n_rows;
}

void KVCache::truncate(int64_t n) {
    if (n < 0) throw ShapeError("kv cache: cannot truncate to " + std::to_string(n) + " positions");
    for (int64_t& len : lengths_) len = std::min(len, n);
}

int64_t KVCache::n_past() const { return *std::min_element(lengths_.begin(), lengths_.end()); }

int64_t KVCache::layer_length(int layer) const {
    check_layer(layer);
    return lengths_[size_t(layer)];
}

int64_t KVCache::bytes() const {
    return n_layer() * n_head_kv_ * n_ctx_ * (k_row_bytes_ + v_row_bytes_);
}

KVCache::LayerView KVCache::layer(int layer) const {
    check_layer(layer);
    return LayerView(*this, layer);
}

const float* KVCache::read_rows(bool values, int layer, int64_t kv_head, int64_t pos0, int64_t n,
                                float* scratch) const {
    const int64_t dim = values ? head_dim_v_ : head_dim_k_;
    const uint8_t* src = row_ptr(values, layer, kv_head, pos0);
    switch (type_) {
        case KVType::F32: return reinterpret_cast<const float*>(src);
        case KVType::F16:
            cpu::f16_to_f32_row(reinterpret_cast<const uint16_t*>(src), scratch, n * dim);
            return scratch;
        case KVType::Q8_0:
            dequantize(*type_traits(uint32_t(GgmlType::Q8_0)), src, scratch, n * dim);
            return scratch;
    }
    return scratch;
}

const float* KVCache::LayerView::keys(int64_t kv_head, int64_t pos0, int64_t n,
                                      float* scratch) const {
    return cache_.read_rows(false, layer_, kv_head, pos0, n, scratch);
}

const float* KVCache::LayerView::values(int64_t kv_head, int64_t pos0, int64_t n,
                                        float* scratch) const {
    return cache_.read_rows(true, layer_, kv_head, pos0, n, scratch);
}

void KVCache::read_layer_rows(int layer, int64_t pos0, int64_t n, float* k_rows,
                              float* v_rows) const {
    check_layer(layer);
    if (pos0 < 0 || n < 0 || pos0 + n > layer_length(layer))
        throw ShapeError("kv cache: layer " + std::to_string(layer) + " holds " +
                         std::to_string(layer_length(layer)) + " positions, cannot read " +
                         std::to_string(n) + " from " + std::to_string(pos0));
    for (bool values : {false, true}) {
        const int64_t hd = values ? head_dim_v_ : head_dim_k_;
        float* out = values ? v_rows : k_rows;
        std::vector<float> scratch(size_t(n * hd));
        for (int64_t h = 0; h < n_head_kv_; ++h) {
            const float* rows = read_rows(values, layer, h, pos0, n, scratch.data());
            for (int64_t t = 0; t < n; ++t)
                std::copy_n(rows + t * hd, hd, out + (t * n_head_kv_ + h) * hd);
        }
    }
}

}  // namespace dasllama

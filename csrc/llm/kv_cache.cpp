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

// Rows each layer stores: n_ctx, or a ring of window + max_append - 1 rows when that is fewer.
static std::vector<int64_t> layer_rows_for(int64_t n_layer, int64_t n_ctx,
                                    const std::vector<int64_t>& windows, int64_t max_append) {
    if (!windows.empty() && int64_t(windows.size()) != n_layer)
        throw ShapeError("kv cache: " + std::to_string(windows.size()) + " layer windows for " +
                         std::to_string(n_layer) + " layers");
    if (!windows.empty() && max_append < 1)
        throw ShapeError("kv cache: max_append must be >= 1, got " + std::to_string(max_append));
    std::vector<int64_t> rows(size_t(n_layer), n_ctx);
    for (size_t l = 0; l < windows.size(); ++l) {
        if (windows[l] < 0)
            throw ShapeError("kv cache: layer " + std::to_string(l) + " has window " +
                             std::to_string(windows[l]));
        if (windows[l] > 0 && windows[l] - 1 < n_ctx - max_append)
            rows[l] = windows[l] + max_append - 1;
    }
    return rows;
}

int64_t KVCache::bytes_for(int64_t n_layer, int64_t n_ctx, int64_t n_head_kv, int64_t head_dim_k,
                           int64_t head_dim_v, KVType type) {
    return bytes_for(n_layer, n_ctx, n_head_kv, head_dim_k, head_dim_v, type, {}, 0);
}

int64_t KVCache::bytes_for(int64_t n_layer, int64_t n_ctx, int64_t n_head_kv, int64_t head_dim_k,
                           int64_t head_dim_v, KVType type, const std::vector<int64_t>& windows,
                           int64_t max_append) {
    check_shape(n_layer, n_ctx, n_head_kv, head_dim_k, head_dim_v, type);
    const int64_t row = row_bytes_for(type, head_dim_k) + row_bytes_for(type, head_dim_v);
    const int64_t limit = std::numeric_limits<int64_t>::max();
    if (n_ctx > limit / n_head_kv / row || n_ctx * n_head_kv * row > limit / n_layer)
        throw ShapeError("kv cache: n_ctx=" + std::to_string(n_ctx) + " is too large");
    int64_t total = 0;
    for (int64_t r : layer_rows_for(n_layer, n_ctx, windows, max_append)) total += r * n_head_kv * row;
    return total;
}

KVCache::KVCache(int64_t n_layer, int64_t n_ctx, int64_t n_head_kv, int64_t head_dim_k,
                 int64_t head_dim_v, KVType type)
    : KVCache(n_layer, n_ctx, n_head_kv, head_dim_k, head_dim_v, type, nullptr, {}, 0) {}

KVCache::KVCache(int64_t n_layer, int64_t n_ctx, int64_t n_head_kv, int64_t head_dim_k,
                 int64_t head_dim_v, KVType type, uint8_t* arena)
    : KVCache(n_layer, n_ctx, n_head_kv, head_dim_k, head_dim_v, type, arena, {}, 0) {}

KVCache::KVCache(int64_t n_layer, int64_t n_ctx, int64_t n_head_kv, int64_t head_dim_k,
                 int64_t head_dim_v, KVType type, uint8_t* arena,
                 const std::vector<int64_t>& windows, int64_t max_append)
    : n_ctx_(n_ctx), n_head_kv_(n_head_kv), head_dim_k_(head_dim_k), head_dim_v_(head_dim_v),
      type_(type) {
    const int64_t total = bytes_for(n_layer, n_ctx, n_head_kv, head_dim_k, head_dim_v, type,
                                    windows, max_append);
    k_row_bytes_ = row_bytes_for(type, head_dim_k);
    v_row_bytes_ = row_bytes_for(type, head_dim_v);
    rows_ = layer_rows_for(n_layer, n_ctx, windows, max_append);
    windows_.assign(size_t(n_layer), 0);
    for (size_t l = 0; l < rows_.size(); ++l)
        if (rows_[l] < n_ctx) windows_[l] = windows[l];
    max_append_ = windows.empty() ? 0 : max_append;
    // Not zero-filled: positions past a layer's length are never read, so pages are only
    // touched as the context grows.
    if (!arena) {
        owned_.reset(new uint8_t[size_t(total)]);
        arena = owned_.get();
    }
    lengths_.assign(size_t(n_layer), 0);
    uint8_t* at = arena;
    for (int64_t l = 0; l < n_layer; ++l) {
        k_.push_back(at);
        v_.push_back(at + n_head_kv * rows_[size_t(l)] * k_row_bytes_);
        at = v_.back() + n_head_kv * rows_[size_t(l)] * v_row_bytes_;
    }
}

int64_t KVCache::layer_rows(int layer) const {
    check_layer(layer);
    return rows_[size_t(layer)];
}

bool KVCache::layer_resumable(size_t l, int64_t n) const {
    const int64_t len = lengths_[l];
    if (n == 0 || n >= len || rows_[l] == n_ctx_) return true;
    const int64_t oldest = std::max<int64_t>(0, len - rows_[l]);  // the oldest position held
    return std::max<int64_t>(0, n - windows_[l] + 1) >= oldest;
}

bool KVCache::resumable(int64_t n) const {
    if (n < 0) return false;
    for (size_t l = 0; l < lengths_.size(); ++l)
        if (!layer_resumable(l, n)) return false;
    return true;
}

void KVCache::check_layer(int layer) const {
    if (layer < 0 || layer >= n_layer())
        throw ShapeError("kv cache: layer " + std::to_string(layer) + " is outside [0, " +
                         std::to_string(n_layer()) + ")");
}

uint8_t* KVCache::row_ptr(bool values, int layer, int64_t kv_head, int64_t pos) const {
    const int64_t rb = values ? v_row_bytes_ : k_row_bytes_;
    uint8_t* base = (values ? v_ : k_)[size_t(layer)];
    const int64_t rows = rows_[size_t(layer)];
    return base + (kv_head * rows + pos % rows) * rb;
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
    if (rows_[size_t(layer)] < n_ctx_ &&
        (n_rows > max_append_ || !layer_resumable(size_t(layer), pos)))
        throw ShapeError("kv cache: layer " + std::to_string(layer) + " is a ring of " +
                         std::to_string(rows_[size_t(layer)]) + " rows holding " +
                         std::to_string(have) + " positions; cannot append " +
                         std::to_string(n_rows) + " rows at position " + std::to_string(pos) +
                         " (at most " + std::to_string(max_append_) + " a time, from a position "
                         "whose window is still held)");
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
    if (!resumable(n))
        throw ShapeError("kv cache: cannot truncate to " + std::to_string(n) + " positions: a "
                         "ring layer no longer holds the window before it");
    for (int64_t& len : lengths_) len = std::min(len, n);
}

int64_t KVCache::n_past() const { return *std::min_element(lengths_.begin(), lengths_.end()); }

int64_t KVCache::layer_length(int layer) const {
    check_layer(layer);
    return lengths_[size_t(layer)];
}

int64_t KVCache::bytes() const {
    int64_t total = 0;
    for (int64_t r : rows_) total += n_head_kv_ * r * (k_row_bytes_ + v_row_bytes_);
    return total;
}

KVCache::LayerView KVCache::layer(int layer) const {
    check_layer(layer);
    return LayerView(*this, layer);
}

const float* KVCache::convert_rows(bool values, const uint8_t* src, int64_t n, float* out) const {
    const int64_t dim = values ? head_dim_v_ : head_dim_k_;
    switch (type_) {
        case KVType::F32:
            std::memcpy(out, src, size_t(n * dim) * 4);
            break;
        case KVType::F16:
            cpu::f16_to_f32_row(reinterpret_cast<const uint16_t*>(src), out, n * dim);
            break;
        case KVType::Q8_0:
            dequantize(*type_traits(uint32_t(GgmlType::Q8_0)), src, out, n * dim);
            break;
    }
    return out;
}

const float* KVCache::read_rows(bool values, int layer, int64_t kv_head, int64_t pos0, int64_t n,
                                float* scratch) const {
    const int64_t rows = rows_[size_t(layer)];
    const int64_t first = rows - pos0 % rows;  // rows before the ring wraps
    const uint8_t* src = row_ptr(values, layer, kv_head, pos0);
    if (n > first) {  // a wrapped run: the tail of the ring, then its head
        const int64_t dim = values ? head_dim_v_ : head_dim_k_;
        convert_rows(values, src, first, scratch);
        convert_rows(values, row_ptr(values, layer, kv_head, pos0 + first), n - first,
                     scratch + first * dim);
        return scratch;
    }
    if (type_ == KVType::F32) return reinterpret_cast<const float*>(src);
    return convert_rows(values, src, n, scratch);
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
    if (n > 0 && pos0 < layer_length(layer) - rows_[size_t(layer)])
        throw ShapeError("kv cache: layer " + std::to_string(layer) + " is a ring that no longer "
                         "holds position " + std::to_string(pos0));
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

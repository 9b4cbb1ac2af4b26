// The KV cache: rows enter through kv_cache_append_rows only, come back as the storage type's
// exact rounding (f32 as is, f16 by f32_to_f16, q8_0 by the Q8_0 quantizer), and the length
// rules (no holes, n_ctx bound, truncate) hold.
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "check.h"
#include "core/errors.h"
#include "core/formats.h"
#include "llm/kv_cache.h"

using namespace dasllama;

namespace {

std::vector<float> randn(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 2.0f);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

// What the cache should return for `x` stored as `t`.
std::vector<float> stored_as(KVType t, const std::vector<float>& x, int64_t dim) {
    std::vector<float> out(x.size());
    if (t == KVType::F32) return x;
    if (t == KVType::F16) {
        for (size_t i = 0; i < x.size(); ++i) out[i] = f16_to_f32(f32_to_f16(x[i]));
        return out;
    }
    const TypeTraits& q8 = *type_traits(uint32_t(GgmlType::Q8_0));
    std::vector<uint8_t> blocks(size_t(row_bytes(q8, dim)));
    for (size_t r = 0; r < x.size() / size_t(dim); ++r) {
        quantize(q8, x.data() + r * dim, blocks.data(), dim);
        dequantize(q8, blocks.data(), out.data() + r * dim, dim);
    }
    return out;
}

}  // namespace

TEST(rows_round_trip_per_type) {
    const int64_t n_layer = 2, n_ctx = 200, nkv = 3, hdk = 64, hdv = 32, n = 150;
    for (KVType t : {KVType::F32, KVType::F16, KVType::Q8_0}) {
        KVCache c(n_layer, n_ctx, nkv, hdk, hdv, t);
        CHECK(c.n_past() == 0);
        const auto k = randn(size_t(n * nkv * hdk), 1), v = randn(size_t(n * nkv * hdv), 2);
        for (int l = 0; l < n_layer; ++l) {
            // Two appends (a prompt, then a token) make the rows.
            c.kv_cache_append_rows(l, 0, n - 1, k.data(), v.data());
            c.kv_cache_append_rows(l, n - 1, 1, k.data() + (n - 1) * nkv * hdk,
                                   v.data() + (n - 1) * nkv * hdv);
        }
        CHECK(c.n_past() == n);
        // Expected rows per head, [pos, dim], from the [pos, head, dim] inputs.
        for (int64_t h = 0; h < nkv; ++h) {
            std::vector<float> kh, vh;
            for (int64_t p = 0; p < n; ++p) {
                kh.insert(kh.end(), k.begin() + (p * nkv + h) * hdk, k.begin() + (p * nkv + h + 1) * hdk);
                vh.insert(vh.end(), v.begin() + (p * nkv + h) * hdv, v.begin() + (p * nkv + h + 1) * hdv);
            }
            const auto want_k = stored_as(t, kh, hdk), want_v = stored_as(t, vh, hdv);
            std::vector<float> scratch(size_t(n * hdk));
            const KVCache::LayerView view = c.layer(1);
            const float* got_k = view.keys(h, 0, n, scratch.data());
            CHECK(std::memcmp(got_k, want_k.data(), want_k.size() * 4) == 0);
            const float* got_v = view.values(h, 10, n - 10, scratch.data());
            CHECK(std::memcmp(got_v, want_v.data() + 10 * hdv, (n - 10) * hdv * 4) == 0);
            if (t != KVType::F32) {
                // Negative control: the stored rows are not the unrounded inputs.
                CHECK(std::memcmp(view.keys(h, 0, n, scratch.data()), kh.data(), kh.size() * 4) != 0);
            }
        }
    }
}

TEST(length_rules) {
    KVCache c(3, 16, 1, 32, 32, KVType::F16);
    std::vector<float> rows(16 * 32, 1.0f);
    c.kv_cache_append_rows(0, 0, 10, rows.data(), rows.data());
    CHECK(c.layer_length(0) == 10);
    CHECK(c.n_past() == 0);  // layers 1 and 2 hold nothing yet
    // A hole (position past the layer's length) and an overflow of n_ctx are refused.
    CHECK_THROWS_AS(c.kv_cache_append_rows(1, 1, 1, rows.data(), rows.data()), ShapeError);
    CHECK_THROWS_AS(c.kv_cache_append_rows(0, 10, 7, rows.data(), rows.data()), ShapeError);
    CHECK_THROWS_AS(c.kv_cache_append_rows(3, 0, 1, rows.data(), rows.data()), ShapeError);
    CHECK_THROWS_AS(c.kv_cache_append_rows(-1, 0, 1, rows.data(), rows.data()), ShapeError);
    for (int l = 1; l < 3; ++l) c.kv_cache_append_rows(l, 0, 10, rows.data(), rows.data());
    CHECK(c.n_past() == 10);

    c.truncate(4);
    CHECK(c.n_past() == 4 && c.layer_length(2) == 4);
    c.truncate(8);  // truncating never grows
    CHECK(c.n_past() == 4);
    CHECK_THROWS_AS(c.truncate(-1), ShapeError);
    // Rewriting from an earlier position replaces the rows.
    std::vector<float> twos(32, 2.0f), scratch(32);
    c.kv_cache_append_rows(0, 2, 1, twos.data(), twos.data());
    CHECK(c.layer_length(0) == 3);
    CHECK(c.layer(0).keys(0, 2, 1, scratch.data())[5] == 2.0f);
    CHECK(c.layer(0).keys(0, 1, 1, scratch.data())[5] == 1.0f);
}

TEST(construction_errors) {
    CHECK_THROWS_AS(KVCache(2, 8, 1, 16, 16, KVType::Q8_0), ShapeError);  // 16 is not a block
    CHECK_THROWS_AS(KVCache(0, 8, 1, 32, 32, KVType::F16), ShapeError);
    CHECK_THROWS_AS(KVCache(1, 0, 1, 32, 32, KVType::F16), ShapeError);
    CHECK_THROWS_AS(kv_type_from_string("bf16"), std::invalid_argument);
    CHECK(kv_type_from_string("q8_0") == KVType::Q8_0);
    CHECK(std::string(kv_type_name(KVType::F16)) == "f16");
    KVCache c(2, 8, 2, 32, 64, KVType::F16);
    CHECK(c.bytes() == 2 * 2 * 8 * (32 + 64) * 2);
}

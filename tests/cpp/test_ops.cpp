// cpu/ops.h against plain double-precision implementations written here from the
// definitions. Every comparison prints its error next to its bar, and each family has a
// negative control: a plausible bug whose error must exceed the bar at least tenfold.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <random>
#include <vector>

#include "check.h"
#include "compare.h"
#include "core/errors.h"
#include "core/thread_pool.h"
#include "cpu/ops.h"

using namespace dasllama;

namespace {

using compare::bites;
using compare::randn;
using compare::rel_l2;
using compare::within;

// --- naive references ----------------------------------------------------------------------

std::vector<double> naive_rmsnorm(const std::vector<float>& x, const std::vector<float>& w,
                                  int64_t rows, int64_t n, double eps, int64_t divisor = 0) {
    if (divisor == 0) divisor = n;
    std::vector<double> out(x.size());
    for (int64_t r = 0; r < rows; ++r) {
        double ss = 0;
        for (int64_t i = 0; i < n; ++i) ss += double(x[r * n + i]) * x[r * n + i];
        const double inv = 1.0 / std::sqrt(ss / double(divisor) + eps);
        for (int64_t i = 0; i < n; ++i) out[r * n + i] = x[r * n + i] * inv * w[i];
    }
    return out;
}

// Rotates pair (a, b) of each head by pos * base^(-2i/n_rot).
std::vector<double> naive_rope(const std::vector<float>& x, int64_t n_tokens, int64_t n_heads,
                               int64_t hd, int64_t n_rot, bool neox, double base, int64_t pos0) {
    std::vector<double> out(x.begin(), x.end());
    for (int64_t t = 0; t < n_tokens; ++t)
        for (int64_t h = 0; h < n_heads; ++h)
            for (int64_t i = 0; i < n_rot / 2; ++i) {
                const double ang = double(pos0 + t) * std::pow(base, -2.0 * i / n_rot);
                const int64_t off = (t * n_heads + h) * hd;
                const int64_t a = off + (neox ? i : 2 * i), b = off + (neox ? i + n_rot / 2 : 2 * i + 1);
                out[a] = x[a] * std::cos(ang) - x[b] * std::sin(ang);
                out[b] = x[a] * std::sin(ang) + x[b] * std::cos(ang);
            }
    return out;
}

// keys/values: [n_kv_pos, n_head_kv, hd]; q: [n_tokens, n_head, hd]. `causal_shift` = 1 models
// an off-by-one bug (a query cannot see its own key).
std::vector<double> naive_attention(const cpu::AttentionShape& s, const std::vector<float>& q,
                                    int64_t n_tokens, int64_t pos0, const std::vector<float>& K,
                                    const std::vector<float>& V, int causal_shift = 0) {
    const int64_t hd = s.head_dim, hdv = s.head_dim_v, g = s.n_head / s.n_head_kv;
    std::vector<double> out(size_t(n_tokens * s.n_head * hdv), 0.0);
    for (int64_t t = 0; t < n_tokens; ++t) {
        const int64_t p = pos0 + t;
        for (int64_t h = 0; h < s.n_head; ++h) {
            const int64_t kvh = h / g;
            std::vector<double> sc;
            std::vector<int64_t> keys;
            for (int64_t k = 0; k + causal_shift <= p; ++k) {
                if (s.window > 0 && p - k >= s.window) continue;
                double d = 0;
                for (int64_t i = 0; i < hd; ++i)
                    d += double(q[(t * s.n_head + h) * hd + i]) * K[(k * s.n_head_kv + kvh) * hd + i];
                sc.push_back(d * s.scale);
                keys.push_back(k);
            }
            if (keys.empty()) continue;
            const double mx = *std::max_element(sc.begin(), sc.end());
            double sum = 0;
            for (double& v : sc) sum += (v = std::exp(v - mx));
            for (size_t j = 0; j < keys.size(); ++j)
                for (int64_t i = 0; i < hdv; ++i)
                    out[(t * s.n_head + h) * hdv + i] +=
                        sc[j] / sum * V[(keys[j] * s.n_head_kv + kvh) * hdv + i];
        }
    }
    return out;
}

// A float32 KV source over [n_pos, n_head_kv, hd] arrays (the cache's layout is per head;
// this one copies rows into the scratch to exercise that path).
class ArraySource : public cpu::KVSource {
public:
    ArraySource(const std::vector<float>& K, const std::vector<float>& V, int64_t n_head_kv,
                int64_t hd, int64_t hdv)
        : K_(K), V_(V), nkv_(n_head_kv), hd_(hd), hdv_(hdv) {}
    const float* keys(int64_t kvh, int64_t pos0, int64_t n, float* scratch) const override {
        return gather(K_, hd_, kvh, pos0, n, scratch);
    }
    const float* values(int64_t kvh, int64_t pos0, int64_t n, float* scratch) const override {
        return gather(V_, hdv_, kvh, pos0, n, scratch);
    }

private:
    const float* gather(const std::vector<float>& a, int64_t dim, int64_t kvh, int64_t pos0,
                        int64_t n, float* scratch) const {
        for (int64_t r = 0; r < n; ++r)
            std::copy_n(a.data() + ((pos0 + r) * nkv_ + kvh) * dim, dim, scratch + r * dim);
        return scratch;
    }
    const std::vector<float>& K_;
    const std::vector<float>& V_;
    int64_t nkv_, hd_, hdv_;
};

}  // namespace

TEST(rmsnorm_matches_double) {
    const int64_t rows = 7, n = 96;
    auto x = randn(size_t(rows * n), 1, 3.0f), w = randn(size_t(n), 2);
    std::vector<float> out(x.size());
    cpu::rmsnorm(x.data(), w.data(), rows, n, 1e-6, out.data());
    const double bar = 1e-6;  // float32 rounding of a few operations per element
    CHECK(within("rmsnorm", rel_l2(out, naive_rmsnorm(x, w, rows, n, 1e-6)), bar));
    // Negative control: the mean square divided by n - 1.
    CHECK(bites("rmsnorm (control: mean over n - 1)",
                rel_l2(out, naive_rmsnorm(x, w, rows, n, 1e-6, n - 1)), bar));
    // In place gives the same.
    std::vector<float> y = x;
    cpu::rmsnorm(y.data(), w.data(), rows, n, 1e-6, y.data());
    CHECK(y == out);
}

TEST(softmax_and_gates_match_double) {
    auto x = randn(300, 3, 4.0f), u = randn(300, 4);
    std::vector<float> sm = x;
    cpu::softmax(sm.data(), int64_t(sm.size()));
    std::vector<double> want(x.size());
    const double mx = *std::max_element(x.begin(), x.end());
    double sum = 0;
    for (size_t i = 0; i < x.size(); ++i) sum += (want[i] = std::exp(x[i] - mx));
    for (double& v : want) v /= sum;
    CHECK(within("softmax", rel_l2(sm, want), 1e-6));

    std::vector<float> g = x;
    cpu::swiglu(g.data(), u.data(), int64_t(g.size()));
    std::vector<double> ws(x.size()), wg(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
        const double v = x[i];
        ws[i] = v / (1 + std::exp(-v)) * u[i];
        wg[i] = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))) * u[i];
    }
    CHECK(within("swiglu", rel_l2(g, ws), 1e-6));
    std::vector<float> h = x;
    cpu::geglu_tanh(h.data(), u.data(), int64_t(h.size()));
    CHECK(within("geglu_tanh", rel_l2(h, wg), 1e-6));
    // Negative control: the two activations are not interchangeable.
    CHECK(bites("geglu_tanh vs silu (control)", rel_l2(h, ws), 1e-6));
}

TEST(rope_norm_and_neox_match_double) {
    const int64_t T = 9, H = 3, hd = 32, pos0 = 1000;
    for (int64_t n_rot : {int64_t(32), int64_t(16)}) {
        for (bool neox : {false, true}) {
            auto x = randn(size_t(T * H * hd), 5);
            std::vector<float> c(size_t(T * n_rot / 2)), s(c.size());
            cpu::rope_table(1e6, 1.0, n_rot, pos0, T, c.data(), s.data());
            std::vector<float> y = x;
            cpu::rope(y.data(), T, H, hd, n_rot, neox, c.data(), s.data());
            char what[64];
            std::snprintf(what, sizeof what, "rope %s n_rot=%lld", neox ? "neox" : "norm",
                          (long long)n_rot);
            CHECK(within(what, rel_l2(y, naive_rope(x, T, H, hd, n_rot, neox, 1e6, pos0)), 1e-6));
            // Negative controls: the other pairing, and positions off by one.
            CHECK(bites("  control: other pairing", rel_l2(y, naive_rope(x, T, H, hd, n_rot, !neox, 1e6, pos0)), 1e-6));
            CHECK(bites("  control: positions + 1", rel_l2(y, naive_rope(x, T, H, hd, n_rot, neox, 1e6, pos0 + 1)), 1e-6));
            // Dimensions past n_rot pass through.
            bool kept = true;
            for (int64_t t = 0; t < T * H; ++t)
                for (int64_t i = n_rot; i < hd; ++i) kept &= y[t * hd + i] == x[t * hd + i];
            CHECK(kept);
        }
    }
    // Frequency factors divide the frequencies; linear scaling multiplies the positions.
    const int64_t n_rot = 8;
    std::vector<float> f(n_rot / 2, 2.0f), c1(n_rot / 2), s1(n_rot / 2), c2(n_rot / 2), s2(n_rot / 2);
    cpu::rope_table(1e4, 1.0, n_rot, 10, 1, c1.data(), s1.data(), f.data());
    cpu::rope_table(1e4, 0.5, n_rot, 10, 1, c2.data(), s2.data());
    for (int64_t i = 0; i < n_rot / 2; ++i) CHECK(std::fabs(c1[i] - c2[i]) < 1e-6 && std::fabs(s1[i] - s2[i]) < 1e-6);
}

TEST(attention_matches_double) {
    struct Case {
        int64_t n_head, n_head_kv, hd, hdv, n_tokens, pos0, window;
    };
    const Case cases[] = {
        {4, 2, 32, 32, 1, 0, 0},     // first token: sees only itself
        {4, 2, 32, 32, 1, 150, 0},   // decode over several key blocks
        {4, 4, 16, 24, 37, 0, 0},    // prefill, MHA, v width != k width
        {6, 2, 32, 32, 40, 90, 0},   // prefill on top of a cache
        {4, 1, 64, 64, 50, 100, 33}, // sliding window crossing block edges
        {2, 1, 8, 8, 70, 0, 1},      // window 1: each query sees only itself
    };
    for (int n_threads : {1, 3}) {
        ThreadPool pool(n_threads);
        for (const Case& c : cases) {
            cpu::AttentionShape s;
            s.n_head = c.n_head;
            s.n_head_kv = c.n_head_kv;
            s.head_dim = c.hd;
            s.head_dim_v = c.hdv;
            s.scale = float(1.0 / std::sqrt(double(c.hd)));
            s.window = c.window;
            const int64_t n_pos = c.pos0 + c.n_tokens;
            auto q = randn(size_t(c.n_tokens * c.n_head * c.hd), 11, 2.0f);
            auto K = randn(size_t(n_pos * c.n_head_kv * c.hd), 12, 2.0f);
            auto V = randn(size_t(n_pos * c.n_head_kv * c.hdv), 13);
            ArraySource src(K, V, c.n_head_kv, c.hd, c.hdv);
            cpu::AttentionScratch scratch(n_threads, c.hd, c.hdv);
            std::vector<float> out(size_t(c.n_tokens * c.n_head * c.hdv), NAN);
            cpu::attention(s, q.data(), c.n_tokens, c.pos0, src, out.data(), pool, scratch);
            char what[96];
            std::snprintf(what, sizeof what, "attention H=%lld/%lld T=%lld pos0=%lld win=%lld thr=%d",
                          (long long)c.n_head, (long long)c.n_head_kv, (long long)c.n_tokens,
                          (long long)c.pos0, (long long)c.window, n_threads);
            const double bar = 2e-6;  // float32 dot products and online-softmax rescaling
            CHECK(within(what, rel_l2(out, naive_attention(s, q, c.n_tokens, c.pos0, K, V)), bar));
            if (c.window != 1 && !(c.n_tokens == 1 && c.pos0 == 0)) {
                // Negative controls: a query that cannot see its own key; no sliding window.
                CHECK(bites("  control: off-by-one causal mask",
                            rel_l2(out, naive_attention(s, q, c.n_tokens, c.pos0, K, V, 1)), bar));
            }
            if (c.window > 0) {
                cpu::AttentionShape no_window = s;
                no_window.window = 0;
                CHECK(bites("  control: window ignored",
                            rel_l2(out, naive_attention(no_window, q, c.n_tokens, c.pos0, K, V)), bar));
            }
        }
    }
}

// An ArraySource that notes any read outside [lo, hi]: a sliding-window ring holds only the
// positions its queries can see.
class BoundedSource : public ArraySource {
public:
    BoundedSource(const std::vector<float>& K, const std::vector<float>& V, int64_t n_head_kv,
                  int64_t hd, int64_t lo, int64_t hi)
        : ArraySource(K, V, n_head_kv, hd, hd), lo_(lo), hi_(hi) {}
    const float* keys(int64_t kvh, int64_t pos0, int64_t n, float* scratch) const override {
        note(pos0, n);
        return ArraySource::keys(kvh, pos0, n, scratch);
    }
    const float* values(int64_t kvh, int64_t pos0, int64_t n, float* scratch) const override {
        note(pos0, n);
        return ArraySource::values(kvh, pos0, n, scratch);
    }
    bool strayed() const { return strayed_; }

private:
    void note(int64_t pos0, int64_t n) const {
        if (pos0 < lo_ || pos0 + n - 1 > hi_) strayed_ = true;  // any thread may set it
    }
    int64_t lo_, hi_;
    mutable std::atomic<bool> strayed_{false};
};

TEST(attention_batch_equals_each_job_alone) {
    // The items a call is cut into (how many heads of a kv group share a pass over the keys,
    // how many rows) depend on the whole batch and the threads; a sequence's output must not.
    // Bit for bit, as a batching engine's "same text at 1 or 8 slots" needs. Windows above the
    // key block (64) put an item's first visible key at different places in a block.
    struct Job {
        int64_t n_tokens, pos0;
    };
    const Job jobs[] = {{1, 70}, {1, 3}, {5, 130}, {1, 200}, {20, 0}, {19, 150}};
    const int n_jobs = int(sizeof jobs / sizeof jobs[0]);
    const int64_t H = 8, HKV = 2, D = 32;
    for (int64_t window : {int64_t(0), int64_t(50), int64_t(100)}) {
        std::vector<std::vector<float>> q, K, V, first;  // first: alone, on 1 thread
        K.reserve(n_jobs);  // each source keeps references to its arrays
        V.reserve(n_jobs);
        std::vector<std::unique_ptr<BoundedSource>> src;
        for (int j = 0; j < n_jobs; ++j) {
            const int64_t n_pos = jobs[j].pos0 + jobs[j].n_tokens;
            q.push_back(randn(size_t(jobs[j].n_tokens * H * D), 20 + j, 2.0f));
            K.push_back(randn(size_t(n_pos * HKV * D), 40 + j, 2.0f));
            V.push_back(randn(size_t(n_pos * HKV * D), 60 + j));
            const int64_t lo = window > 0 ? std::max<int64_t>(0, jobs[j].pos0 - window + 1) : 0;
            src.push_back(
                std::make_unique<BoundedSource>(K.back(), V.back(), HKV, D, lo, n_pos - 1));
        }
        cpu::AttentionShape s;
        s.n_head = H;
        s.n_head_kv = HKV;
        s.head_dim = s.head_dim_v = D;
        s.scale = float(1.0 / std::sqrt(double(D)));
        s.window = window;
        for (int n_threads : {1, 3}) {
            ThreadPool pool(n_threads);
            cpu::AttentionScratch scratch(n_threads, D, D);
            std::vector<std::vector<float>> batched, alone;
            std::vector<cpu::AttentionJob> list;
            for (int j = 0; j < n_jobs; ++j) {
                batched.emplace_back(q[j].size(), NAN);
                alone.emplace_back(q[j].size(), NAN);
                list.push_back({q[j].data(), jobs[j].n_tokens, jobs[j].pos0, src[j].get(),
                                batched[j].data()});
            }
            cpu::attention_batch(s, list.data(), n_jobs, pool, scratch);
            for (int j = 0; j < n_jobs; ++j) {
                cpu::attention(s, q[j].data(), jobs[j].n_tokens, jobs[j].pos0, *src[j],
                               alone[j].data(), pool, scratch);
                const size_t bytes = q[j].size() * sizeof(float);
                CHECK(std::memcmp(batched[j].data(), alone[j].data(), bytes) == 0);
                if (n_threads == 1) first.push_back(alone[j]);
                else CHECK(std::memcmp(first[j].data(), alone[j].data(), bytes) == 0);
                CHECK(!src[j]->strayed());
            }
            // Control: the comparison sees a change of one query.
            std::vector<float> q0 = q[0];
            q0[0] += 1.0f;
            cpu::attention(s, q0.data(), 1, jobs[0].pos0, *src[0], alone[0].data(), pool, scratch);
            CHECK(std::memcmp(batched[0].data(), alone[0].data(), batched[0].size() * 4) != 0);
        }
    }
}

TEST(attention_rejects_mismatched_scratch) {
    ThreadPool pool(2);
    cpu::AttentionShape s;
    s.n_head = 2;
    s.n_head_kv = 1;
    s.head_dim = s.head_dim_v = 8;
    std::vector<float> q(16), K(8), V(8), out(16);
    ArraySource src(K, V, 1, 8, 8);
    cpu::AttentionScratch small(1, 8, 8);
    CHECK_THROWS_AS(cpu::attention(s, q.data(), 1, 0, src, out.data(), pool, small), ShapeError);
    cpu::AttentionScratch wrong_dim(2, 16, 16);
    CHECK_THROWS_AS(cpu::attention(s, q.data(), 1, 0, src, out.data(), pool, wrong_dim), ShapeError);
    s.n_head_kv = 3;
    cpu::AttentionScratch ok(2, 8, 8);
    CHECK_THROWS_AS(cpu::attention(s, q.data(), 1, 0, src, out.data(), pool, ok), ShapeError);
}

TEST(dispatched_kernels_match_generic) {
    const cpu::ops::Kernels& generic = cpu::ops::variant("generic");
    // Every half value, and floats across the half range (ties, subnormals, overflow).
    std::vector<uint16_t> halves(65536);
    for (uint32_t h = 0; h < 65536; ++h) halves[h] = uint16_t(h);
    std::vector<float> floats = randn(4099, 21, 1000.0f);
    for (float f : {0.0f, -0.0f, 65504.0f, 65520.0f, 1e6f, -1e6f, 5.96e-8f, 2.98e-8f, 1e-5f,
                    1.0009765625f, 1.00048828125f, 1.00146484375f})
        floats.push_back(f);
    auto y0 = randn(1003, 22), x = randn(1003, 23);
    for (const std::string& isa : cpu::ops::available_variants()) {
        const cpu::ops::Kernels& k = cpu::ops::variant(isa);
        std::vector<float> a(65536), b(65536);
        generic.f16_to_f32(halves.data(), a.data(), 65536);
        k.f16_to_f32(halves.data(), b.data(), 65536);
        bool same = true;
        for (size_t i = 0; i < a.size(); ++i)
            same &= std::memcmp(&a[i], &b[i], 4) == 0 || (std::isnan(a[i]) && std::isnan(b[i]));
        CHECK_MSG(same, isa);
        std::vector<uint16_t> ha(floats.size()), hb(floats.size());
        generic.f32_to_f16(floats.data(), ha.data(), int64_t(floats.size()));
        k.f32_to_f16(floats.data(), hb.data(), int64_t(floats.size()));
        CHECK_MSG(ha == hb, isa);
        std::vector<float> ya = y0, yb = y0;
        generic.axpy(ya.data(), 0.37f, x.data(), int64_t(x.size()));
        k.axpy(yb.data(), 0.37f, x.data(), int64_t(x.size()));
        std::vector<double> want(ya.begin(), ya.end());
        CHECK(within(("axpy " + isa).c_str(), rel_l2(yb, want), 1e-6));
        std::printf("  variant %s checked\n", isa.c_str());
    }
}

#include "nn/attention_full.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "core/thread_pool.h"
#include "cpu/dot.h"
#include "nn/activations.h"
#include "nn/linear.h"

namespace dasllama::nn {

void HeadKV::assign(const float* k, const float* v, int64_t ld, int64_t n_kv, int64_t n_head,
                    int64_t head_dim) {
    n_kv_ = n_kv;
    n_head_ = n_head;
    head_dim_ = head_dim;
    k_.resize(size_t(n_head * n_kv * head_dim));
    vt_.resize(k_.size());
    for (int64_t h = 0; h < n_head; ++h) {
        float* kh = k_.data() + h * n_kv * head_dim;
        float* vh = vt_.data() + h * n_kv * head_dim;
        for (int64_t t = 0; t < n_kv; ++t) {
            const float* kr = k + t * ld + h * head_dim;
            const float* vr = v + t * ld + h * head_dim;
            std::copy(kr, kr + head_dim, kh + t * head_dim);
            for (int64_t c = 0; c < head_dim; ++c) vh[c * n_kv + t] = vr[c];
        }
    }
    keys_.clear();
    values_t_.clear();
    for (int64_t h = 0; h < n_head; ++h) {
        keys_.push_back(f32_matrix(k_.data() + h * n_kv * head_dim, n_kv, head_dim));
        values_t_.push_back(f32_matrix(vt_.data() + h * n_kv * head_dim, head_dim, n_kv));
    }
}

namespace {

void softmax_rows(float* s, int64_t rows, int64_t n, ThreadPool& pool) {
    auto body = [=](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            softmax_row(s + r * n, n);
        }
    };
    if (rows < 4) {
        body(0, rows);
        return;
    }
    pool.run([&](int t, int nt) {
        const int64_t per = (rows + nt - 1) / nt;
        body(std::min(rows, t * per), std::min(rows, (t + 1) * per));
    });
}

// Up to this many queries (a decoding step), heads are handed to the threads in one pool
// round and each runs plain dot products: two matmul pool rounds per head cost more than the
// work. Heads are claimed one at a time, so a descheduled thread holds none up.
constexpr int64_t kFewQueries = 8;

void attend_few(const HeadKV& kv, const float* q, int64_t ld_q, int64_t n_q, float scale,
                float* out, int64_t ld_out, ThreadPool& pool, AttendScratch& sc) {
    const int64_t hd = kv.head_dim(), n_kv = kv.n_kv(), n_head = kv.n_head();
    sc.scores.resize(size_t(n_head * n_kv));
    sc.q.resize(size_t(n_head * hd));
    std::atomic<int64_t> next{0};
    pool.run([&](int, int) {
        for (int64_t h; (h = next.fetch_add(1, std::memory_order_relaxed)) < n_head;) {
            float* p = sc.scores.data() + h * n_kv;
            float* qh = sc.q.data() + h * hd;
            const float* k = reinterpret_cast<const float*>(kv.keys(h).data);
            const float* vt = reinterpret_cast<const float*>(kv.values_t(h).data);
            for (int64_t i = 0; i < n_q; ++i) {
                for (int64_t c = 0; c < hd; ++c) qh[c] = q[i * ld_q + h * hd + c] * scale;
                cpu::dot_f32_rows(qh, k, hd, n_kv, hd, p);
                softmax_row(p, n_kv);
                float* o = out + i * ld_out + h * hd;
                for (int64_t c = 0; c < hd; ++c) o[c] = cpu::dot_f32(vt + c * n_kv, p, n_kv);
            }
        }
    });
}

}  // namespace

void attend_all(const HeadKV& kv, const float* q, int64_t ld_q, int64_t n_q, float scale,
                float* out, int64_t ld_out, ThreadPool& pool, AttendScratch& sc) {
    if (n_q <= kFewQueries) {
        attend_few(kv, q, ld_q, n_q, scale, out, ld_out, pool, sc);
        return;
    }
    const int64_t hd = kv.head_dim(), n_kv = kv.n_kv();
    sc.q.resize(size_t(n_q * hd));
    sc.scores.resize(size_t(n_q * n_kv));
    sc.out.resize(size_t(n_q * hd));
    for (int64_t h = 0; h < kv.n_head(); ++h) {
        for (int64_t t = 0; t < n_q; ++t) {
            const float* src = q + t * ld_q + h * hd;
            float* dst = sc.q.data() + t * hd;
            for (int64_t c = 0; c < hd; ++c) dst[c] = src[c] * scale;
        }
        cpu::matmul(kv.keys(h), sc.q.data(), n_q, sc.scores.data(), pool, cpu::Precision::kF32);
        softmax_rows(sc.scores.data(), n_q, n_kv, pool);
        cpu::matmul(kv.values_t(h), sc.scores.data(), n_q, sc.out.data(), pool,
                    cpu::Precision::kF32);
        for (int64_t t = 0; t < n_q; ++t)
            std::copy(sc.out.data() + t * hd, sc.out.data() + (t + 1) * hd,
                      out + t * ld_out + h * hd);
    }
}

}  // namespace dasllama::nn

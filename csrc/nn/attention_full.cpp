#include "nn/attention_full.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "core/thread_pool.h"
#include "cpu/dot.h"
#include "cpu/ops.h"
#include "nn/activations.h"
#include "nn/linear.h"

namespace dasllama::nn {

void HeadKV::assign(const float* k, const float* v, int64_t ld, int64_t n_kv, int64_t n_head,
                    int64_t head_dim, bool half_copy) {
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
    kt16_.clear();
    vt16_.clear();
    if (half_copy) {
        kt16_.resize(k_.size());
        vt16_.resize(k_.size());
        std::vector<float> row(static_cast<size_t>(n_kv));
        for (int64_t h = 0; h < n_head; ++h)
            for (int64_t c = 0; c < head_dim; ++c) {
                const float* kh = k_.data() + h * n_kv * head_dim;
                for (int64_t t = 0; t < n_kv; ++t) row[size_t(t)] = kh[t * head_dim + c];
                const int64_t at = (h * head_dim + c) * n_kv;
                cpu::f32_to_f16_row(row.data(), kt16_.data() + at, n_kv);
                cpu::f32_to_f16_row(vt_.data() + at, vt16_.data() + at, n_kv);
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

// Up to this many queries (a decoding step: one per beam), heads are handed to the threads
// one at a time in one pool round: two matmul pool rounds per head cost more than the work.
constexpr int64_t kFewQueries = 8;

// One head, float32 rows: per query, a dot product with every key, the softmax, a dot
// product with every value row.
void attend_few_head_f32(const HeadKV& kv, int64_t h, const float* q, int64_t ld_q,
                         int64_t n_q, float scale, float* out, int64_t ld_out, float* p,
                         float* qh, float*) {
    const int64_t hd = kv.head_dim(), n_kv = kv.n_kv();
    const float* k = reinterpret_cast<const float*>(kv.keys(h).data);
    const float* vt = reinterpret_cast<const float*>(kv.values_t(h).data);
    for (int64_t i = 0; i < n_q; ++i) {
        for (int64_t c = 0; c < hd; ++c) qh[c] = q[i * ld_q + h * hd + c] * scale;
        for (int64_t j = 0; j < n_kv; ++j) p[j] = cpu::dot_f32(qh, k + j * hd, hd);
        softmax_row(p, n_kv);
        float* o = out + i * ld_out + h * hd;
        for (int64_t c = 0; c < hd; ++c) o[c] = cpu::dot_f32(vt + c * n_kv, p, n_kv);
    }
}

// One head, half-precision rows: each row of K^T and of V^T is widened once into `row` for
// all the head's queries (scores [n_q, n_kv]).
void attend_few_head_half(const HeadKV& kv, int64_t h, const float* q, int64_t ld_q,
                          int64_t n_q, float scale, float* out, int64_t ld_out, float* scores,
                          float* qh, float* row) {
    const int64_t hd = kv.head_dim(), n_kv = kv.n_kv();
    const uint16_t* kt = kv.keys_t_half(h);
    const uint16_t* vt = kv.values_t_half(h);
    for (int64_t i = 0; i < n_q; ++i)
        for (int64_t c = 0; c < hd; ++c) qh[i * hd + c] = q[i * ld_q + h * hd + c] * scale;
    std::fill(scores, scores + n_q * n_kv, 0.0f);
    for (int64_t c = 0; c < hd; ++c) {
        cpu::f16_to_f32_row(kt + c * n_kv, row, n_kv);
        for (int64_t i = 0; i < n_q; ++i) cpu::axpy(scores + i * n_kv, qh[i * hd + c], row, n_kv);
    }
    for (int64_t i = 0; i < n_q; ++i) softmax_row(scores + i * n_kv, n_kv);
    for (int64_t c = 0; c < hd; ++c) {
        cpu::f16_to_f32_row(vt + c * n_kv, row, n_kv);
        for (int64_t i = 0; i < n_q; ++i)
            out[i * ld_out + h * hd + c] = cpu::dot_f32(row, scores + i * n_kv, n_kv);
    }
}

void attend_few(const HeadKV& kv, const float* q, int64_t ld_q, int64_t n_q, float scale,
                float* out, int64_t ld_out, ThreadPool& pool, AttendScratch& sc) {
    const int64_t hd = kv.head_dim(), n_kv = kv.n_kv(), n_head = kv.n_head();
    const bool half = kv.has_half();
    // per head: scores (all its queries' with half rows), scaled queries, a widened row
    const int64_t per_scores = (half ? n_q : 1) * n_kv, per_q = (half ? n_q : 1) * hd;
    sc.scores.resize(size_t(n_head * per_scores));
    sc.q.resize(size_t(n_head * per_q));
    sc.rows.resize(size_t(half ? n_head * n_kv : 0));
    auto* head = half ? attend_few_head_half : attend_few_head_f32;
    std::atomic<int64_t> next{0};
    pool.run([&](int, int) {   // heads claimed: a descheduled thread holds no head up
        for (int64_t h; (h = next.fetch_add(1, std::memory_order_relaxed)) < n_head;)
            head(kv, h, q, ld_q, n_q, scale, out, ld_out, sc.scores.data() + h * per_scores,
                 sc.q.data() + h * per_q, half ? sc.rows.data() + h * n_kv : nullptr);
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

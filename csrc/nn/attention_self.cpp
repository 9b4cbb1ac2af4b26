#include "nn/attention_self.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <string_view>

#include "core/cpu_features.h"
#include "core/errors.h"
#include "core/thread_pool.h"
#include "cpu/dispatch.h"
#include "nn/activations.h"

namespace dasllama::nn {

namespace self_attn {

void scores_generic(const float* qs, int64_t nq, int64_t hd, const float* kt, int64_t ld_kt,
                    int64_t n_kt, float* s, int64_t ld_s) {
    for (int64_t i = 0; i < nq; ++i) {
        float* row = s + i * ld_s;
        std::fill(row, row + n_kt, 0.0f);
        for (int64_t c = 0; c < hd; ++c) {
            const float a = qs[i * hd + c];
            const float* kc = kt + c * ld_kt;
            for (int64_t j = 0; j < n_kt; ++j) row[j] += a * kc[j];
        }
    }
}

void weighted_sum_generic(const float* p, int64_t ld_p, int64_t nq, const float* v, int64_t ld_v,
                          int64_t nk, int64_t hd, float* tot) {
    std::vector<float> acc(static_cast<size_t>(hd));
    for (int64_t i = 0; i < nq; ++i) {
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t j = 0; j < nk; ++j) {
            const float w = p[i * ld_p + j];
            const float* vj = v + j * ld_v;
            for (int64_t c = 0; c < hd; ++c) acc[size_t(c)] += w * vj[c];
        }
        for (int64_t c = 0; c < hd; ++c) tot[i * hd + c] += acc[size_t(c)];
    }
}

namespace {

const Kernels generic{"generic", scores_generic, weighted_sum_generic};

const cpu::Variants<Kernels>& variants() {
    static const cpu::Variants<Kernels> list{
#if defined(DASLLAMA_X86)
        kernels_avx512(),
        kernels_avx2(),
#endif
        &generic};
    return list;
}

}  // namespace

DASLLAMA_VARIANT_ENTRY_POINTS(Kernels)

}  // namespace self_attn

namespace {

using self_attn::kKeyBlock;
using self_attn::kKeyPad;
using self_attn::kQueryBlock;

// One (head, query block) task: scores, softmax rows, weighted sum by key blocks.
// kt: the head's keys transposed (rows ld_t apart); vh: its value rows, packed (hd apart).
void attend_block(const self_attn::Kernels& kern, const float* q, int64_t ld, int64_t n,
                  int64_t hd, int64_t h, int64_t i0, int64_t nq, float scale, const float* kt,
                  const float* vh, int64_t n_kt, int64_t ld_t, float* out, int64_t ld_out,
                  std::vector<float>& buf) {
    buf.resize(size_t(kQueryBlock * (ld_t + 2 * hd)));
    float* s = buf.data();
    float* qs = s + kQueryBlock * ld_t;
    float* tot = qs + kQueryBlock * hd;
    for (int64_t i = 0; i < nq; ++i)
        for (int64_t c = 0; c < hd; ++c) qs[i * hd + c] = q[(i0 + i) * ld + h * hd + c] * scale;
    kern.scores(qs, nq, hd, kt, ld_t, n_kt, s, ld_t);
    for (int64_t i = 0; i < nq; ++i) softmax_row(s + i * ld_t, n);
    std::fill(tot, tot + nq * hd, 0.0f);
    for (int64_t j0 = 0; j0 < n; j0 += kKeyBlock)
        kern.weighted_sum(s + j0, ld_t, nq, vh + j0 * hd, hd, std::min(kKeyBlock, n - j0), hd,
                          tot);
    for (int64_t i = 0; i < nq; ++i)
        std::copy(tot + i * hd, tot + (i + 1) * hd, out + (i0 + i) * ld_out + h * hd);
}

void run(const self_attn::Kernels& kern, const float* q, const float* k, const float* v,
         int64_t ld, int64_t n, int64_t n_head, int64_t hd, float scale, float* out,
         int64_t ld_out, ThreadPool& pool, SelfAttendScratch& sc) {
    if (n <= 0 || n_head <= 0 || hd <= 0 || ld < n_head * hd || ld_out < n_head * hd)
        throw ShapeError("attend_self: " + std::to_string(n) + " rows, " +
                         std::to_string(n_head) + " heads of " + std::to_string(hd) +
                         ", ld " + std::to_string(ld) + ", ld_out " + std::to_string(ld_out));
    const int64_t n_kt = (n + kKeyPad - 1) / kKeyPad * kKeyPad;
    const int64_t ld_t = n_kt + self_attn::kRowSkew;   // transposed keys' and scores' rows
    sc.kt.resize(size_t(n_head * hd * ld_t));
    sc.vh.resize(size_t(n_head * n * hd));   // a key block's values contiguous
    if (int64_t(sc.shares.size()) < pool.size()) sc.shares.resize(size_t(pool.size()));
    // K_h^T and V_h per head; the padding columns of K_h^T stay zero.
    pool.run([&](int t, int nt) {
        for (int64_t h = t; h < n_head; h += nt) {
            float* kh = sc.kt.data() + h * hd * ld_t;
            float* vh = sc.vh.data() + h * n * hd;
            for (int64_t c = 0; c < hd; ++c)
                std::fill(kh + c * ld_t + n, kh + c * ld_t + n_kt, 0.0f);
            for (int64_t j = 0; j < n; ++j) {
                const float* kr = k + j * ld + h * hd;
                for (int64_t c = 0; c < hd; ++c) kh[c * ld_t + j] = kr[c];
                const float* vr = v + j * ld + h * hd;
                std::copy(vr, vr + hd, vh + j * hd);
            }
        }
    });
    const int64_t n_blocks = (n + kQueryBlock - 1) / kQueryBlock;
    const int64_t n_tasks = n_head * n_blocks;
    std::atomic<int64_t> next{0};
    pool.run([&](int t, int) {
        for (int64_t task; (task = next.fetch_add(1, std::memory_order_relaxed)) < n_tasks;) {
            // head-major: the threads share one head's keys and values in cache at a time
            const int64_t h = task / n_blocks, i0 = (task % n_blocks) * kQueryBlock;
            attend_block(kern, q, ld, n, hd, h, i0, std::min(kQueryBlock, n - i0), scale,
                         sc.kt.data() + h * hd * ld_t, sc.vh.data() + h * n * hd, n_kt, ld_t,
                         out, ld_out, sc.shares[size_t(t)]);
        }
    });
}

const self_attn::Bf16Kernels* bf16_kernels() {
#if defined(DASLLAMA_X86)
    static const self_attn::Bf16Kernels* chosen =
        cpu_features().allows("amx") ? self_attn::bf16_kernels_amx() : nullptr;
    return chosen;
#else
    return nullptr;
#endif
}

void run_bf16(const self_attn::Bf16Kernels& kern, const float* q, const float* k,
              const float* v, int64_t ld, int64_t n, int64_t n_head, int64_t hd, float scale,
              float* out, int64_t ld_out, ThreadPool& pool, SelfAttendScratch& sc) {
    const int64_t n_kt = (n + kKeyPad - 1) / kKeyPad * kKeyPad;
    const int64_t per_head = n_kt * hd;
    sc.keys_bf16.resize(size_t(n_head * per_head));
    sc.values_bf16.resize(size_t(n_head * per_head));
    if (int64_t(sc.blocks.size()) < pool.size()) sc.blocks.resize(size_t(pool.size()));
    pool.run([&](int t, int nt) {
        for (int64_t h = t; h < 2 * n_head; h += nt) {
            if (h < n_head)
                kern.pack_keys(k + h * hd, ld, n, hd, n_kt, sc.keys_bf16.data() + h * per_head);
            else
                kern.pack_values(v + (h - n_head) * hd, ld, n, hd, n_kt,
                                 sc.values_bf16.data() + (h - n_head) * per_head);
        }
    });
    const int64_t n_blocks = (n + kQueryBlock - 1) / kQueryBlock;
    const int64_t n_tasks = n_head * n_blocks;
    std::atomic<int64_t> next{0};
    pool.run([&](int t, int) {
        for (int64_t task; (task = next.fetch_add(1, std::memory_order_relaxed)) < n_tasks;) {
            const int64_t h = task / n_blocks, i0 = (task % n_blocks) * kQueryBlock;
            kern.block(q + i0 * ld + h * hd, ld, std::min(kQueryBlock, n - i0), scale,
                       sc.keys_bf16.data() + h * per_head, sc.values_bf16.data() + h * per_head,
                       n, n_kt, sc.blocks[size_t(t)], out + i0 * ld_out + h * hd, ld_out);
        }
    });
}

}  // namespace

bool bf16_available(int64_t head_dim) {
    return bf16_kernels() != nullptr && head_dim == self_attn::kBf16HeadDim;
}

void attend_self(const float* q, const float* k, const float* v, int64_t ld, int64_t n,
                 int64_t n_head, int64_t head_dim, float scale, float* out, int64_t ld_out,
                 ThreadPool& pool, SelfAttendScratch& scratch, AttendPrecision precision) {
    if (precision == AttendPrecision::kBF16 && bf16_available(head_dim) && n > 0 &&
        n_head > 0 && ld >= n_head * head_dim && ld_out >= n_head * head_dim) {
        run_bf16(*bf16_kernels(), q, k, v, ld, n, n_head, head_dim, scale, out, ld_out, pool,
                 scratch);
        return;
    }
    if (std::string_view(self_attn::active().isa) == "generic" && n > 0 && n_head > 0 &&
        head_dim > 0 && ld >= n_head * head_dim && ld_out >= n_head * head_dim) {
        scratch.heads.assign(k, v, ld, n, n_head, head_dim);
        attend_all(scratch.heads, q, ld, n, scale, out, ld_out, pool, scratch.heads_scratch);
        return;
    }
    run(self_attn::active(), q, k, v, ld, n, n_head, head_dim, scale, out, ld_out, pool, scratch);
}

void attend_self_with(std::string_view isa, const float* q, const float* k, const float* v,
                      int64_t ld, int64_t n, int64_t n_head, int64_t head_dim, float scale,
                      float* out, int64_t ld_out, ThreadPool& pool, SelfAttendScratch& scratch) {
    run(self_attn::variant(isa), q, k, v, ld, n, n_head, head_dim, scale, out, ld_out, pool,
        scratch);
}

}  // namespace dasllama::nn

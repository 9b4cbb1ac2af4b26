// Bidirectional multi-head attention (every query sees every key): Whisper's encoder
// self-attention and its decoder's cross-attention to the encoder output.
//
// HeadKV holds one layer's keys and values head by head, ready for the matmul kernels: K_h
// [n_kv, head_dim] and V_h^T [head_dim, n_kv] per head. For each head, scores = q_h K_h^T
// (scaled), a softmax per query row, then out_h = P V_h: two float32 matmuls. Made once from
// rows (the cross-attention cache is made once per window and read at every decoding step).
// A decoding step's few queries are memory-bound: every step reads the whole cache. A HeadKV
// made with half_copy also holds K_h^T and V_h^T in IEEE half precision (half the bytes), and
// few queries then read those rows, widened a row at a time (F16C): scores as sums of key rows
// scaled by query values, outputs as dot products with value rows, in float32. The reduced
// precision lanes take it (rel-l2 of the attention output about 3e-4 against float32); the
// float32 lane keeps float32 rows.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/matmul.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::nn {

class HeadKV {
public:
    HeadKV() = default;
    HeadKV(const HeadKV&) = delete;             // matrices view the buffers
    HeadKV& operator=(const HeadKV&) = delete;
    HeadKV(HeadKV&&) = default;
    HeadKV& operator=(HeadKV&&) = default;

    // k and v: n_kv rows of n_head * head_dim floats, ld floats apart (k and v may be
    // column blocks of one fused projection). half_copy: also the half-precision rows that
    // few queries read.
    void assign(const float* k, const float* v, int64_t ld, int64_t n_kv, int64_t n_head,
                int64_t head_dim, bool half_copy = false);
    int64_t n_kv() const { return n_kv_; }
    int64_t n_head() const { return n_head_; }
    int64_t head_dim() const { return head_dim_; }
    const cpu::WeightMatrix& keys(int64_t h) const { return keys_[size_t(h)]; }
    const cpu::WeightMatrix& values_t(int64_t h) const { return values_t_[size_t(h)]; }
    bool has_half() const { return !kt16_.empty(); }
    // K_h^T and V_h^T [head_dim, n_kv] in half precision (with half_copy).
    const uint16_t* keys_t_half(int64_t h) const { return kt16_.data() + h * n_kv_ * head_dim_; }
    const uint16_t* values_t_half(int64_t h) const {
        return vt16_.data() + h * n_kv_ * head_dim_;
    }

private:
    int64_t n_kv_ = 0, n_head_ = 0, head_dim_ = 0;
    std::vector<float> k_, vt_;
    std::vector<uint16_t> kt16_, vt16_;
    std::vector<cpu::WeightMatrix> keys_, values_t_;
};

// Working memory of attend_all, grown to the largest call.
struct AttendScratch {
    std::vector<float> q, scores, out, rows;
};

// out [n_q, n_head * head_dim] (ld_out floats apart) = softmax(q_h K_h^T * scale) V_h per head,
// q [n_q, n_head * head_dim] ld_q floats apart.
void attend_all(const HeadKV& kv, const float* q, int64_t ld_q, int64_t n_q, float scale,
                float* out, int64_t ld_out, ThreadPool& pool, AttendScratch& scratch);

}  // namespace dasllama::nn

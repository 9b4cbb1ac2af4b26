// Bidirectional multi-head attention (every query sees every key): Whisper's encoder
// self-attention and its decoder's cross-attention to the encoder output.
//
// HeadKV holds one layer's keys and values head by head, ready for the matmul kernels: K_h
// [n_kv, head_dim] and V_h^T [head_dim, n_kv] per head. For each head, scores = q_h K_h^T
// (scaled), a softmax per query row, then out_h = P V_h: two float32 matmuls. Made once from
// rows (the cross-attention cache is made once per window and read at every decoding step).
// A decoding step's few queries take the scores of all keys with cpu::dot_f32_rows instead
// (a dot product per key, 16 keys reduced at once) and the sums with a dot per value column.
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
    // column blocks of one fused projection).
    void assign(const float* k, const float* v, int64_t ld, int64_t n_kv, int64_t n_head,
                int64_t head_dim);
    int64_t n_kv() const { return n_kv_; }
    int64_t n_head() const { return n_head_; }
    int64_t head_dim() const { return head_dim_; }
    const cpu::WeightMatrix& keys(int64_t h) const { return keys_[size_t(h)]; }
    const cpu::WeightMatrix& values_t(int64_t h) const { return values_t_[size_t(h)]; }

private:
    int64_t n_kv_ = 0, n_head_ = 0, head_dim_ = 0;
    std::vector<float> k_, vt_;
    std::vector<cpu::WeightMatrix> keys_, values_t_;
};

// Working memory of attend_all, grown to the largest call.
struct AttendScratch {
    std::vector<float> q, scores, out;
};

// out [n_q, n_head * head_dim] (ld_out floats apart) = softmax(q_h K_h^T * scale) V_h per head,
// q [n_q, n_head * head_dim] ld_q floats apart.
void attend_all(const HeadKV& kv, const float* q, int64_t ld_q, int64_t n_q, float scale,
                float* out, int64_t ld_out, ThreadPool& pool, AttendScratch& scratch);

}  // namespace dasllama::nn

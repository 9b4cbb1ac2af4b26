// Bidirectional self-attention over many rows at once (Whisper's encoder: 1500 rows attend to
// each other), read straight from the rows of a fused q/k/v projection.
//
// attend_self runs all heads in one pool round: threads take (head, block of queries) tasks.
// A task computes the block's scores against every key (keys transposed once per call, so
// the product broadcasts query values against contiguous key columns), a softmax per row,
// then the weighted sum of value rows (packed per head once per call), key block by key
// block: a block's partial sums are added
// to the running totals, so no float sum runs over more than kKeyBlock terms. Scores of a
// block stay in the thread's cache; nothing of size n x n is ever stored.
//
// The kernels are a dispatched family (cpu/dispatch.h): generic C++ in attention_self.cpp,
// AVX-512 and AVX2 in attention_self_avx512.cpp and _avx2.cpp; tests/cpp/test_nn.cpp checks
// each against double. Where only the generic kernels run (arm64), attend_self hands the call
// to nn::attend_all, whose per-head matmuls use the CPU's vector matmul kernels.
// AttendPrecision::kBF16 (the reduced-precision lanes) has its own kernels on AMX
// (attention_self_amx.cpp): the same tasks, both products on the tile unit in bfloat16.
//
// Against nn::attend_all (per-head matmuls, two pool rounds per head and a softmax round),
// one thread of an AVX-512 Sapphire Rapids core spent 52-56 ms of CPU time on a tiny.en layer
// (1500 rows, 6 heads of 64), attend_self 39-41 ms in float32 and 14 ms in bfloat16.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "nn/attention_full.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::nn {

namespace self_attn {
// One bfloat16 task's working memory: its queries, scores and probabilities.
struct Bf16Block {
    std::vector<uint16_t> q, p;
    std::vector<float> s;
};
}  // namespace self_attn

// Working memory of attend_self, grown to the largest call and reused.
struct SelfAttendScratch {
    std::vector<float> kt;                    // [n_head][head_dim][n_kv rounded up, skewed]
    std::vector<float> vh;                    // [n_head][n_kv][head_dim]
    std::vector<std::vector<float>> shares;  // per pool share: scores, scaled queries, totals
    std::vector<uint16_t> keys_bf16, values_bf16;          // the bfloat16 path's packed heads
    std::vector<self_attn::Bf16Block> blocks;               // per pool share
    HeadKV heads;                     // the fallback without a vector variant (attend_all)
    AttendScratch heads_scratch;
};

// kF32: float32 products (the parity lane). kBF16: queries, keys, probabilities and values
// rounded to bfloat16, products summed in float32 on the AMX tile unit, for the reduced
// precision lanes (rel-l2 about 4e-3 against float32 attention); where bf16_available() is
// false it runs kF32.
enum class AttendPrecision { kF32, kBF16 };

// Whether AttendPrecision::kBF16 runs in bfloat16 at this head_dim on this CPU (AMX built
// and usable, head_dim == self_attn::kBf16HeadDim).
bool bf16_available(int64_t head_dim);

// out[t, h*hd + c] = sum_j softmax_j(scale * q_h[t] . k_h[j]) v_h[j, c] for t < n, every head.
// q, k, v: n rows of n_head * head_dim floats, ld floats apart (column blocks of one fused
// projection may share ld); out rows ld_out floats apart. Throws ShapeError for sizes <= 0.
void attend_self(const float* q, const float* k, const float* v, int64_t ld, int64_t n,
                 int64_t n_head, int64_t head_dim, float scale, float* out, int64_t ld_out,
                 ThreadPool& pool, SelfAttendScratch& scratch,
                 AttendPrecision precision = AttendPrecision::kF32);

// attend_self with a named kernel variant (tests): see available_variants().
void attend_self_with(std::string_view isa, const float* q, const float* k, const float* v,
                      int64_t ld, int64_t n, int64_t n_head, int64_t head_dim, float scale,
                      float* out, int64_t ld_out, ThreadPool& pool, SelfAttendScratch& scratch);

namespace self_attn {
// Keys of one call are padded to a multiple of this (zero columns: scores computed and
// ignored), so the kernels' key tiles never need masks.
constexpr int64_t kKeyPad = 64;
// The keys' transposed rows and the scores' rows of one call lie this many floats past a
// multiple of kKeyPad apart: at 1536 keys a plain stride of 6 KiB maps the rows of a key tile
// into a few sets of a 12-way L1, so the tiles every query block re-reads missed it. (Values
// are packed per head into contiguous rows for the same reason: the rows of a fused q/k/v
// projection, 3 * 512 floats apart, collide the same way.)
constexpr int64_t kRowSkew = 16;
// Keys per partial sum of the weighted sum (see the header comment).
constexpr int64_t kKeyBlock = 128;
// Queries per task: their scores (kQueryBlock x n_kv floats) stay in L2 while a key block's
// values are reused by every query of the block.
constexpr int64_t kQueryBlock = 96;

struct Kernels {
    const char* isa;
    // s[i, j] = sum_c qs[i, c] kt[c, j] for i < nq, j < n_kt (a multiple of kKeyPad);
    // qs is nq x hd (row stride hd, already scaled), kt hd x n_kt (rows ld_kt apart), s rows
    // ld_s apart.
    void (*scores)(const float* qs, int64_t nq, int64_t hd, const float* kt, int64_t ld_kt,
                   int64_t n_kt, float* s, int64_t ld_s);
    // tot[i, c] += sum_{j < nk} p[i, j] v[j, c] for i < nq, c < hd; p rows ld_p apart, v rows
    // ld_v apart, tot row stride hd. One call is one key block (nk <= kKeyBlock).
    void (*weighted_sum)(const float* p, int64_t ld_p, int64_t nq, const float* v, int64_t ld_v,
                         int64_t nk, int64_t hd, float* tot);
};
// The generic kernels (plain C++); the AVX-512 file calls them for shapes it does not tile.
void scores_generic(const float* qs, int64_t nq, int64_t hd, const float* kt, int64_t ld_kt,
                    int64_t n_kt, float* s, int64_t ld_s);
void weighted_sum_generic(const float* p, int64_t ld_p, int64_t nq, const float* v, int64_t ld_v,
                          int64_t nk, int64_t hd, float* tot);
std::vector<std::string> available_variants();  // best first, ends with "generic"
const Kernels& variant(std::string_view isa);   // throws Error when not available
const Kernels& active();
const Kernels* kernels_avx512();  // attention_self_avx512.cpp (x86-64 builds only)
const Kernels* kernels_avx2();    // attention_self_avx2.cpp (x86-64 builds only)

// The bfloat16 path (attention_self_amx.cpp): the head dimension its tiles are laid out for.
constexpr int64_t kBf16HeadDim = 64;
struct Bf16Kernels {
    const char* isa;
    // One head's keys / values (n rows ld floats apart, hd == kBf16HeadDim), rows n..n_kt
    // zero, as the products' B tiles: n_kt * hd bfloat16 values.
    void (*pack_keys)(const float* k, int64_t ld, int64_t n, int64_t hd, int64_t n_kt,
                      uint16_t* out);
    void (*pack_values)(const float* v, int64_t ld, int64_t n, int64_t hd, int64_t n_kt,
                        uint16_t* out);
    // out rows i < nq (ld_out apart) = softmax(scale q_i . K^T) V for queries q (ld_q apart)
    // of one head against its packed keys kp and values vp (n keys, padded to n_kt).
    void (*block)(const float* q, int64_t ld_q, int64_t nq, float scale, const uint16_t* kp,
                  const uint16_t* vp, int64_t n, int64_t n_kt, Bf16Block& buf, float* out,
                  int64_t ld_out);
};
const Bf16Kernels* bf16_kernels_amx();  // nullptr when the build has no AMX kernels
}  // namespace self_attn

}  // namespace dasllama::nn

// Private to the matmul family (matmul*.cpp): the packed weight layout, the quantized
// activation layout and the kernel table.
//
// Every integer kind is packed into one scheme. A weight is an unsigned level u with
//     w = d_b * (u - offset) + m_b
// per block b of B elements (B = 32, or 16 for Q6_K): d_b a scale, m_b an additive min (only
// the kinds that have one), offset a power of two fixed per kind. A GGUF row is re-expressed
// exactly in this form (K-quant sub-block scales d * sc and mins dmin * m are products of an
// f16 and a 6- or 8-bit integer: exact in float32, so those kinds store float32 scales).
//
// Blocks are taken in groups that fill the 16 int32 lanes of a 512-bit vector. A full group
// is 16 blocks, one lane each. The last group of a row, when fewer than 16 blocks remain, may
// instead hold 8 (or, for 32-element blocks, 4) blocks of 2 (4) lanes each, so a short tail
// (576 = 18 x 32 columns) does not cost a whole group; it may be partly empty. Lane
// l = i * lanes_per_block + j holds elements [j * E, (j + 1) * E) of block i (E = elements
// per lane). "Chunk" c is the lane's elements 4c..4c+3: one vpdpbusd per chunk accumulates
// all lanes' partial dot products at once. Group layout, r blocks in L = r * lanes_per_block
// lanes:
//     levels   nibble kinds: E/8 streams of 4L bytes; stream p holds chunk 2p in the low
//                nibbles and chunk 2p+1 in the high nibbles
//              byte kinds (Q8_0): E/4 streams of 4L bytes, chunk c = stream c
//     planes   `planes` x (E/4) little-endian uint64 words: bit 4l+j of word (k, c) is bit
//              4+k of the level of lane l's element 4c+j (Q5: one plane; Q6_K: two)
//     scales   r values d_b (f16 or f32)
//     mins     r values m_b (same type), only for kinds with a min
// Rows are groups back to back; every row of a matrix has the same size.
//
// Activations (kFast) are quantized per token and group to the same lanes, always 16 wide
// (missing lanes are zero): E/4 chunks of 64 int8, then per lane the block's float scale da,
// the int32 sum sa of the lane's levels, and dsa = da * sa as float. Then
//     sum_lanes [ d * da * (dot(u, q) - offset * sa) + m * dsa ]
// is the product; the parenthesis is exact in int32.
#pragma once

#include <cstdint>
#include <type_traits>

namespace dasllama::cpu::mm {

enum PackKind : int { kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ8_0, kQ4_K, kQ5_K, kQ6_K, kPackKinds };

// Calls fn(std::integral_constant<PackKind, K>{}) for the run-time kind, so each kernel file's
// templates over K are reached through this one switch.
template <typename Fn>
inline void with_pack_kind(PackKind kind, Fn&& fn) {
    switch (kind) {
        case kQ4_0: return fn(std::integral_constant<PackKind, kQ4_0>{});
        case kQ4_1: return fn(std::integral_constant<PackKind, kQ4_1>{});
        case kQ5_0: return fn(std::integral_constant<PackKind, kQ5_0>{});
        case kQ5_1: return fn(std::integral_constant<PackKind, kQ5_1>{});
        case kQ8_0: return fn(std::integral_constant<PackKind, kQ8_0>{});
        case kQ4_K: return fn(std::integral_constant<PackKind, kQ4_K>{});
        case kQ5_K: return fn(std::integral_constant<PackKind, kQ5_K>{});
        case kQ6_K: return fn(std::integral_constant<PackKind, kQ6_K>{});
        default: return;
    }
}

struct PackFormat {
    const char* name;
    bool nibbles;      // levels as nibbles (else bytes)
    int planes;        // high-bit planes above the nibble (0, 1 or 2)
    int block;         // elements per scale: 32 or 16
    bool f32_scales;   // scales (and mins) as float32, else f16
    bool has_min;
    int offset_log2;   // offset = 1 << offset_log2, or none when -1
};

constexpr PackFormat kFormats[kPackKinds] = {
    {"Q4_0", true, 0, 32, false, false, 3},  {"Q4_1", true, 0, 32, false, true, -1},
    {"Q5_0", true, 1, 32, false, false, 4},  {"Q5_1", true, 1, 32, false, true, -1},
    {"Q8_0", false, 0, 32, false, false, 7}, {"Q4_K", true, 0, 32, true, true, -1},
    {"Q5_K", true, 1, 32, true, true, -1},   {"Q6_K", true, 2, 16, true, false, 5},
};

constexpr int kGroup = 16;  // lanes of a 512-bit int32 vector; blocks of a full group

// The shape of the group that starts at block b0 of a row of nb blocks.
struct GroupShape {
    int blocks;           // capacity: 16, 8 or 4
    int r;                // blocks present, <= blocks
    int lanes_per_block;  // 16 / blocks
    int elems;            // elements per lane
    int chunks;           // elems / 4
    int lanes() const { return r * lanes_per_block; }
};

inline GroupShape group_at(const PackFormat& f, int64_t nb, int64_t b0) {
    const int64_t rem = nb - b0;
    GroupShape g;
    // Two chunks per lane at least, so nibble kinds can pair chunks in one byte.
    const int smallest = f.block == 32 ? 4 : 8;
    g.blocks = rem >= kGroup ? kGroup : rem <= smallest ? smallest : rem <= 8 ? 8 : kGroup;
    g.r = static_cast<int>(rem < g.blocks ? rem : g.blocks);
    g.lanes_per_block = kGroup / g.blocks;
    g.elems = f.block / g.lanes_per_block;
    g.chunks = g.elems / 4;
    return g;
}

// Where element e of block i of a group lives: its lane, chunk and byte in the chunk.
struct Slot {
    int lane, chunk, byte;
};
inline Slot slot_of(const GroupShape& g, int i, int e) {
    const int k = e % g.elems;
    return {i * g.lanes_per_block + e / g.elems, k / 4, k % 4};
}

inline int64_t level_bytes(const PackFormat& f, const GroupShape& g) {
    return int64_t(g.chunks) * 4 * g.lanes() / (f.nibbles ? 2 : 1);
}
inline int64_t plane_bytes(const PackFormat& f, const GroupShape& g) {
    return int64_t(f.planes) * g.chunks * 8;
}
inline int64_t scale_bytes(const PackFormat& f, const GroupShape& g) {
    return int64_t(g.r) * (f.f32_scales ? 4 : 2) * (f.has_min ? 2 : 1);
}
inline int64_t group_bytes(const PackFormat& f, const GroupShape& g) {
    return level_bytes(f, g) + plane_bytes(f, g) + scale_bytes(f, g);
}
// Packed bytes of a row of nb blocks.
inline int64_t packed_row_bytes(const PackFormat& f, int64_t nb) {
    int64_t bytes = 0;
    for (int64_t b0 = 0; b0 < nb;) {
        const GroupShape g = group_at(f, nb, b0);
        bytes += group_bytes(f, g);
        b0 += g.r;
    }
    return bytes;
}

// Activation layout: bytes of a group and of a token (cols elements).
inline int64_t act_group_bytes(const GroupShape& g) { return int64_t(g.chunks) * 64 + 3 * 64; }
inline int64_t act_row_bytes(const PackFormat& f, int64_t cols) {
    const int64_t nb = cols / f.block;
    int64_t bytes = 0;
    for (int64_t b0 = 0; b0 < nb;) {
        const GroupShape g = group_at(f, nb, b0);
        bytes += act_group_bytes(g);
        b0 += g.r;
    }
    return bytes;
}

// --- the kernel table -------------------------------------------------------------------------
struct Kernels {
    const char* isa;
    // Quantizes one token's cols activations (cols a multiple of the block) into the layout
    // above, for weights of kind `kind`.
    void (*quantize_act)(PackKind kind, const float* x, int64_t cols, uint8_t* out);
    // y[t * ldy + r] = product of packed row r and activation token t, for r < n_rows,
    // t < n_tokens. w points at row 0; act at token 0, tokens act_stride bytes apart.
    void (*gemm)(PackKind kind, const uint8_t* w, int64_t w_row_bytes, int64_t n_rows,
                 int64_t cols, const uint8_t* act, int64_t act_stride, int64_t n_tokens,
                 float* y, int64_t ldy);

    // The float path (Precision::kF32, and types without an integer kernel).
    // y[t * ldy + r] = sum_c w[r * ldw + c] * x[t * ldx + c] over float32 rows.
    void (*gemm_f32)(const float* w, int64_t ldw, int64_t n_rows, int64_t cols, const float* x,
                     int64_t ldx, int64_t n_tokens, float* y, int64_t ldy);
    // The same over Q8_0 rows in their GGUF blocks (w_row_bytes apart): each weight d * q is
    // formed in registers, exactly (an f16 times an int8 fits float32), and multiplied with
    // float32 activations. For a few tokens (decode), where dequantizing rows to memory first
    // would cost as much as the product.
    void (*gemm_q8_0_f32)(const uint8_t* w, int64_t w_row_bytes, int64_t n_rows, int64_t cols,
                          const float* x, int64_t ldx, int64_t n_tokens, float* y, int64_t ldy);
    // One Q8_0 row of cols elements to float32, as core/formats.h's dequantize (exactly).
    void (*dequantize_q8_0)(const uint8_t* src, float* dst, int64_t cols);
    // One F16 row to float32, exactly (F16C where built): an F16 matrix on the float path is
    // read at half the bytes of a widened copy and multiplied as that copy would be.
    void (*dequantize_f16)(const uint8_t* src, float* dst, int64_t cols);
};

// Generic kernels (matmul_generic.cpp), the reference the variants are tested against.
void quantize_act_generic(PackKind kind, const float* x, int64_t cols, uint8_t* out);
void gemm_generic(PackKind kind, const uint8_t* w, int64_t w_row_bytes, int64_t n_rows,
                  int64_t cols, const uint8_t* act, int64_t act_stride, int64_t n_tokens,
                  float* y, int64_t ldy);
// The generic float path is one dot product per output through the dot family (cpu/dot.h),
// which picks its own ISA variant: levels without tiled float kernels (neon) keep theirs.
void gemm_f32_generic(const float* w, int64_t ldw, int64_t n_rows, int64_t cols,
                      const float* x, int64_t ldx, int64_t n_tokens, float* y, int64_t ldy);
void gemm_q8_0_f32_generic(const uint8_t* w, int64_t w_row_bytes, int64_t n_rows, int64_t cols,
                           const float* x, int64_t ldx, int64_t n_tokens, float* y, int64_t ldy);
void dequantize_q8_0_generic(const uint8_t* src, float* dst, int64_t cols);
void dequantize_f16_generic(const uint8_t* src, float* dst, int64_t cols);

// Tiled float kernels (matmul_f32_avx2.cpp, matmul_f32_avx512.cpp; x86-64 builds only).
void gemm_f32_avx2(const float* w, int64_t ldw, int64_t n_rows, int64_t cols, const float* x,
                   int64_t ldx, int64_t n_tokens, float* y, int64_t ldy);
void gemm_q8_0_f32_avx2(const uint8_t* w, int64_t w_row_bytes, int64_t n_rows, int64_t cols,
                        const float* x, int64_t ldx, int64_t n_tokens, float* y, int64_t ldy);
void dequantize_q8_0_avx2(const uint8_t* src, float* dst, int64_t cols);
void dequantize_f16_avx2(const uint8_t* src, float* dst, int64_t cols);
void gemm_f32_avx512(const float* w, int64_t ldw, int64_t n_rows, int64_t cols,
                     const float* x, int64_t ldx, int64_t n_tokens, float* y, int64_t ldy);
void gemm_q8_0_f32_avx512(const uint8_t* w, int64_t w_row_bytes, int64_t n_rows, int64_t cols,
                          const float* x, int64_t ldx, int64_t n_tokens, float* y, int64_t ldy);
void dequantize_q8_0_avx512(const uint8_t* src, float* dst, int64_t cols);
void dequantize_f16_avx512(const uint8_t* src, float* dst, int64_t cols);

const Kernels* kernels_avx2();    // matmul_avx2.cpp   (x86-64 builds only)
const Kernels* kernels_avx512();  // matmul_avx512.cpp (x86-64 builds only)
const Kernels* kernels_neon();    // matmul_neon.cpp   (arm64 builds only)

// --- packing (matmul_pack.cpp) ----------------------------------------------------------------
// The packed kind of a GGUF type, or -1 when it has no integer kernel.
int pack_kind_of(uint32_t ggml_type);
// Packs one GGUF row of cols elements into `out` (packed_row_bytes bytes).
void pack_row(PackKind kind, const uint8_t* src, int64_t cols, uint8_t* out);
// The float values of one packed row (the inverse of pack_row, as dequantize computes them).
void unpack_row(PackKind kind, const uint8_t* packed, int64_t cols, float* out);

}  // namespace dasllama::cpu::mm

// Tensor formats: the ggml type ids a GGUF file may name, their block layouts, and the
// conversions between them and float32.
//
// Layout facts (block_size elements stored in type_size bytes) come from the public GGUF
// specification. Every converter here is built with -ffp-contract=off: its results must
// equal the NumPy reference (python/dasllama/reference/quants.py) bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace dasllama {

// Type ids as written in GGUF tensor infos. Ids 4 and 5 (Q4_2, Q4_3) were retired upstream.
enum class GgmlType : uint32_t {
    F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
    Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
    IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
    IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
    TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39,
};

// Converts n elements (a multiple of block_size) between a format and float32.
using DequantizeFn = void (*)(const uint8_t* src, float* dst, int64_t n);
using QuantizeFn = void (*)(const float* src, uint8_t* dst, int64_t n);

struct TypeTraits {
    GgmlType type;
    const char* name;      // ggml's spelling: "Q4_K", "F16", ...
    int64_t block_size;    // elements per block
    int64_t type_size;     // bytes per block
    DequantizeFn dequantize;  // nullptr when this build cannot read the format
    QuantizeFn quantize;      // nullptr when this build cannot write it
};

// nullptr for an id no GGUF writer uses (the reader reports it as a bad type id).
const TypeTraits* type_traits(uint32_t id);
// nullptr for an unknown name.
const TypeTraits* type_traits(std::string_view name);
// All known types, in id order; for listings and tests.
const TypeTraits* const* all_type_traits(size_t* count);

// Bytes that n elements of a type occupy. Throws FormatError when n is not a multiple of the
// block size or the byte count overflows int64.
int64_t row_bytes(const TypeTraits& t, int64_t n);

// Checked conversions: throw FormatError naming the type when it has no converter or n is not
// a block multiple.
void dequantize(const TypeTraits& t, const uint8_t* src, float* dst, int64_t n);
void quantize(const TypeTraits& t, const float* src, uint8_t* dst, int64_t n);

// IEEE half and bfloat16 conversions, exact (round to nearest even on the way down).
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);

}  // namespace dasllama

// The converters behind the type table in core/formats.cpp: one pair per format, each over
// n elements (n a multiple of the block size, checked by the caller). Blocks are read and
// written byte by byte (little-endian scales), so no alignment is assumed.
#pragma once

#include <cstdint>

namespace dasllama::quants {

#define DASLLAMA_DECLARE_DEQUANTIZE(fmt) \
    void dequantize_##fmt(const uint8_t* src, float* dst, int64_t n);
#define DASLLAMA_DECLARE_QUANTIZE(fmt) \
    void quantize_##fmt(const float* src, uint8_t* dst, int64_t n);

// Plain floats (float.cpp).
DASLLAMA_DECLARE_DEQUANTIZE(f32) DASLLAMA_DECLARE_QUANTIZE(f32)
DASLLAMA_DECLARE_DEQUANTIZE(f16) DASLLAMA_DECLARE_QUANTIZE(f16)
DASLLAMA_DECLARE_DEQUANTIZE(bf16) DASLLAMA_DECLARE_QUANTIZE(bf16)

// 32-element blocks with one scale (legacy.cpp).
DASLLAMA_DECLARE_DEQUANTIZE(q4_0) DASLLAMA_DECLARE_QUANTIZE(q4_0)
DASLLAMA_DECLARE_DEQUANTIZE(q4_1) DASLLAMA_DECLARE_QUANTIZE(q4_1)
DASLLAMA_DECLARE_DEQUANTIZE(q5_0) DASLLAMA_DECLARE_QUANTIZE(q5_0)
DASLLAMA_DECLARE_DEQUANTIZE(q5_1) DASLLAMA_DECLARE_QUANTIZE(q5_1)
DASLLAMA_DECLARE_DEQUANTIZE(q8_0) DASLLAMA_DECLARE_QUANTIZE(q8_0)

// 256-element super-blocks (kquants.cpp).
DASLLAMA_DECLARE_DEQUANTIZE(q2_k)
DASLLAMA_DECLARE_DEQUANTIZE(q3_k)
DASLLAMA_DECLARE_DEQUANTIZE(q4_k) DASLLAMA_DECLARE_QUANTIZE(q4_k)
DASLLAMA_DECLARE_DEQUANTIZE(q5_k) DASLLAMA_DECLARE_QUANTIZE(q5_k)
DASLLAMA_DECLARE_DEQUANTIZE(q6_k) DASLLAMA_DECLARE_QUANTIZE(q6_k)
DASLLAMA_DECLARE_DEQUANTIZE(q8_k) DASLLAMA_DECLARE_QUANTIZE(q8_k)

// Non-linear codebooks (iquants.cpp).
DASLLAMA_DECLARE_DEQUANTIZE(iq4_nl)
DASLLAMA_DECLARE_DEQUANTIZE(iq4_xs)

#undef DASLLAMA_DECLARE_DEQUANTIZE
#undef DASLLAMA_DECLARE_QUANTIZE

}  // namespace dasllama::quants

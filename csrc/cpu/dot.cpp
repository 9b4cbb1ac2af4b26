// Dot products: the generic kernels, the variant list and the checked entry points.
#include "cpu/dot.h"

#include <string>

#include "core/errors.h"
#include "core/formats.h"
#include "cpu/dispatch.h"

namespace dasllama::cpu {
namespace dot {

// Eight interleaved partial sums: independent chains the compiler may vectorize without
// reassociating (no fast-math), so the result is the same at every optimization level.
float f32_generic(const float* a, const float* b, int64_t n) {
    float acc[8] = {};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
    float tail = 0.0f;
    for (; i < n; ++i) tail += a[i] * b[i];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) +
           tail;
}

float q8_0_generic(const uint8_t* a, const uint8_t* b, int64_t n) {
    float sum = 0.0f;
    for (int64_t blk = 0; blk < n / kQ8_0Block; ++blk, a += kQ8_0Bytes, b += kQ8_0Bytes) {
        int32_t isum = 0;  // |sum| <= 32 * 128 * 128 = 2^19: exact
        for (int i = 0; i < kQ8_0Block; ++i)
            isum += int32_t(int8_t(a[2 + i])) * int32_t(int8_t(b[2 + i]));
        const float da = f16_to_f32(uint16_t(a[0] | a[1] << 8));  // little-endian scale
        const float db = f16_to_f32(uint16_t(b[0] | b[1] << 8));
        sum += da * db * float(isum);
    }
    return sum;
}

namespace {

const Kernels generic{"generic", f32_generic, q8_0_generic, f32_rows_each<f32_generic>};

const Variants<Kernels>& variants() {
    static const Variants<Kernels> list{
#if defined(DASLLAMA_X86)
        kernels_avx512(), kernels_avx2(),
#endif
#if defined(DASLLAMA_ARM64)
        kernels_neon(),
#endif
        &generic};
    return list;
}

}  // namespace

DASLLAMA_VARIANT_ENTRY_POINTS(Kernels)

}  // namespace dot

float dot_f32(const float* a, const float* b, int64_t n) {
    if (n < 0) throw ShapeError("dot_f32: negative length " + std::to_string(n));
    return dot::active().f32(a, b, n);
}

void dot_f32_rows(const float* a, const float* rows, int64_t ld, int64_t n_rows, int64_t n,
                  float* out) {
    if (n < 0 || n_rows < 0 || ld < n)
        throw ShapeError("dot_f32_rows: " + std::to_string(n_rows) + " rows of " +
                         std::to_string(n) + " floats, " + std::to_string(ld) + " apart");
    dot::active().f32_rows(a, rows, ld, n_rows, n, out);
}

float dot_q8_0(const uint8_t* a_blocks, const uint8_t* b_blocks, int64_t n) {
    if (n < 0 || n % dot::kQ8_0Block != 0)
        throw FormatError("dot_q8_0: length " + std::to_string(n) +
                          " is not a non-negative multiple of the Q8_0 block size 32");
    return dot::active().q8_0(a_blocks, b_blocks, n);
}

}  // namespace dasllama::cpu

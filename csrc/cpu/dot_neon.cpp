// Dot products for arm64 with the dot-product extension (built with DASLLAMA_ISA_FLAGS_neon,
// armv8.2-a+dotprod+fp16). Built without dotprod, the file offers no table and the generic
// kernels serve.
#include "cpu/dot.h"

#if defined(__ARM_FEATURE_DOTPROD)

#include <arm_neon.h>

#include <cstring>

namespace dasllama::cpu::dot {
namespace {

float f32_neon(const float* a, const float* b, int64_t n) {
    float32x4_t acc0 = vdupq_n_f32(0.0f), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = vfmaq_f32(acc0, vld1q_f32(a + i), vld1q_f32(b + i));
        acc1 = vfmaq_f32(acc1, vld1q_f32(a + i + 4), vld1q_f32(b + i + 4));
        acc2 = vfmaq_f32(acc2, vld1q_f32(a + i + 8), vld1q_f32(b + i + 8));
        acc3 = vfmaq_f32(acc3, vld1q_f32(a + i + 12), vld1q_f32(b + i + 12));
    }
    for (; i + 4 <= n; i += 4) acc0 = vfmaq_f32(acc0, vld1q_f32(a + i), vld1q_f32(b + i));
    float s = vaddvq_f32(vaddq_f32(vaddq_f32(acc0, acc1), vaddq_f32(acc2, acc3)));
    for (; i < n; ++i) s += a[i] * b[i];
    return s;
}

float f16(const uint8_t* p) {
    __fp16 h;                 // ACLE half storage type; the conversion to float is exact
    std::memcpy(&h, p, 2);    // arm64 Linux and macOS are little-endian, like the file
    return static_cast<float>(h);
}

float q8_0_neon(const uint8_t* a, const uint8_t* b, int64_t n) {
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (int64_t blk = 0; blk < n / kQ8_0Block; ++blk, a += kQ8_0Bytes, b += kQ8_0Bytes) {
        const int8_t* qa = reinterpret_cast<const int8_t*>(a + 2);
        const int8_t* qb = reinterpret_cast<const int8_t*>(b + 2);
        // sdot: signed x signed bytes, four products per int32 lane, exact for all int8.
        int32x4_t p = vdotq_s32(vdupq_n_s32(0), vld1q_s8(qa), vld1q_s8(qb));
        p = vdotq_s32(p, vld1q_s8(qa + 16), vld1q_s8(qb + 16));
        acc = vfmaq_f32(acc, vcvtq_f32_s32(p), vdupq_n_f32(f16(a) * f16(b)));
    }
    return vaddvq_f32(acc);
}

const Kernels table{"neon_dotprod", f32_neon, q8_0_neon, f32_rows_each<f32_neon>};

}  // namespace

const Kernels* kernels_neon() { return &table; }

}  // namespace dasllama::cpu::dot

#else

namespace dasllama::cpu::dot {
const Kernels* kernels_neon() { return nullptr; }
}  // namespace dasllama::cpu::dot

#endif

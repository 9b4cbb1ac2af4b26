#include "core/formats.h"

#include <cstring>
#include <string>

#include "core/errors.h"
#include "core/quants/quants.h"

namespace dasllama {

namespace {

using namespace quants;

// One row per type id. Converters are nullptr where this build has none; the reader still
// knows the layout, so such tensors can be listed and read raw.
const TypeTraits kTypes[] = {
    {GgmlType::F32, "F32", 1, 4, dequantize_f32, quantize_f32},
    {GgmlType::F16, "F16", 1, 2, dequantize_f16, quantize_f16},
    {GgmlType::Q4_0, "Q4_0", 32, 18, dequantize_q4_0, quantize_q4_0},
    {GgmlType::Q4_1, "Q4_1", 32, 20, dequantize_q4_1, quantize_q4_1},
    {GgmlType::Q5_0, "Q5_0", 32, 22, dequantize_q5_0, quantize_q5_0},
    {GgmlType::Q5_1, "Q5_1", 32, 24, dequantize_q5_1, quantize_q5_1},
    {GgmlType::Q8_0, "Q8_0", 32, 34, dequantize_q8_0, quantize_q8_0},
    {GgmlType::Q8_1, "Q8_1", 32, 36, nullptr, nullptr},
    {GgmlType::Q2_K, "Q2_K", 256, 84, dequantize_q2_k, nullptr},
    {GgmlType::Q3_K, "Q3_K", 256, 110, dequantize_q3_k, nullptr},
    {GgmlType::Q4_K, "Q4_K", 256, 144, dequantize_q4_k, quantize_q4_k},
    {GgmlType::Q5_K, "Q5_K", 256, 176, dequantize_q5_k, quantize_q5_k},
    {GgmlType::Q6_K, "Q6_K", 256, 210, dequantize_q6_k, quantize_q6_k},
    {GgmlType::Q8_K, "Q8_K", 256, 292, dequantize_q8_k, quantize_q8_k},
    {GgmlType::IQ2_XXS, "IQ2_XXS", 256, 66, nullptr, nullptr},
    {GgmlType::IQ2_XS, "IQ2_XS", 256, 74, nullptr, nullptr},
    {GgmlType::IQ3_XXS, "IQ3_XXS", 256, 98, nullptr, nullptr},
    {GgmlType::IQ1_S, "IQ1_S", 256, 50, nullptr, nullptr},
    {GgmlType::IQ4_NL, "IQ4_NL", 32, 18, dequantize_iq4_nl, nullptr},
    {GgmlType::IQ3_S, "IQ3_S", 256, 110, nullptr, nullptr},
    {GgmlType::IQ2_S, "IQ2_S", 256, 82, nullptr, nullptr},
    {GgmlType::IQ4_XS, "IQ4_XS", 256, 136, dequantize_iq4_xs, nullptr},
    {GgmlType::I8, "I8", 1, 1, nullptr, nullptr},
    {GgmlType::I16, "I16", 1, 2, nullptr, nullptr},
    {GgmlType::I32, "I32", 1, 4, nullptr, nullptr},
    {GgmlType::I64, "I64", 1, 8, nullptr, nullptr},
    {GgmlType::F64, "F64", 1, 8, nullptr, nullptr},
    {GgmlType::IQ1_M, "IQ1_M", 256, 56, nullptr, nullptr},
    {GgmlType::BF16, "BF16", 1, 2, dequantize_bf16, quantize_bf16},
    {GgmlType::TQ1_0, "TQ1_0", 256, 54, nullptr, nullptr},
    {GgmlType::TQ2_0, "TQ2_0", 256, 66, nullptr, nullptr},
    {GgmlType::MXFP4, "MXFP4", 32, 17, nullptr, nullptr},
};
constexpr size_t kTypeCount = sizeof(kTypes) / sizeof(kTypes[0]);

const TypeTraits* const* pointer_table() {
    static const TypeTraits* table[kTypeCount] = {};
    static bool filled = [] {
        for (size_t i = 0; i < kTypeCount; ++i) table[i] = &kTypes[i];
        return true;
    }();
    (void)filled;
    return table;
}

void check_length(const TypeTraits& t, int64_t n) {
    if (n < 0 || n % t.block_size != 0)
        throw FormatError(std::string(t.name) + ": element count " + std::to_string(n) +
                          " is not a multiple of the block size " +
                          std::to_string(t.block_size));
}

}  // namespace

const TypeTraits* type_traits(uint32_t id) {
    for (const TypeTraits& t : kTypes)
        if (static_cast<uint32_t>(t.type) == id) return &t;
    return nullptr;
}

const TypeTraits* type_traits(std::string_view name) {
    for (const TypeTraits& t : kTypes)
        if (name == t.name) return &t;
    return nullptr;
}

const TypeTraits* const* all_type_traits(size_t* count) {
    *count = kTypeCount;
    return pointer_table();
}

int64_t row_bytes(const TypeTraits& t, int64_t n) {
    check_length(t, n);
    const int64_t blocks = n / t.block_size;
    if (blocks > INT64_MAX / t.type_size)
        throw FormatError(std::string(t.name) + ": " + std::to_string(n) +
                          " elements overflow a 64-bit byte count");
    return blocks * t.type_size;
}

void dequantize(const TypeTraits& t, const uint8_t* src, float* dst, int64_t n) {
    if (!t.dequantize)
        throw FormatError(std::string("dequantize: no converter for type ") + t.name);
    check_length(t, n);
    t.dequantize(src, dst, n);
}

void quantize(const TypeTraits& t, const float* src, uint8_t* dst, int64_t n) {
    if (!t.quantize) throw FormatError(std::string("quantize: no converter for type ") + t.name);
    check_length(t, n);
    t.quantize(src, dst, n);
}

}  // namespace dasllama

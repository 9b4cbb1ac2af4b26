// Dot products of two rows: the first CPU kernel family, and the model of the dispatch
// pattern (cpu/dispatch.h). Generic kernels in dot.cpp; dot_avx2.cpp, dot_avx512.cpp and
// dot_neon.cpp override them; tests/cpp/test_cpu_dot.cpp checks every variant against generic.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dasllama::cpu {

// sum_i a[i] * b[i] over n floats (n = 0 gives 0). Throws ShapeError when n < 0.
float dot_f32(const float* a, const float* b, int64_t n);

// out[j] = dot_f32(a, rows + j * ld, n) for j < n_rows, with the same bits as dot_f32 row by
// row (the vector kernels sum 16 or 8 rows at once and reduce them together, pairing the lanes
// as dot_f32's reduction does). Throws ShapeError when n, n_rows or ld is negative, or ld < n.
void dot_f32_rows(const float* a, const float* rows, int64_t ld, int64_t n_rows, int64_t n,
                  float* out);

// Dot product of two Q8_0 rows of n elements (n / 32 blocks of 34 bytes: an f16 scale d, then
// 32 int8 quants q). Result: sum over blocks of d_a * d_b * sum_i(int32(q_a[i] * q_b[i])).
// The int8 products are summed exactly for every int8 value, -128 included. Throws
// FormatError when n is negative or not a multiple of 32.
float dot_q8_0(const uint8_t* a_blocks, const uint8_t* b_blocks, int64_t n);

namespace dot {

constexpr int64_t kQ8_0Block = 32;   // elements per Q8_0 block
constexpr int64_t kQ8_0Bytes = 34;   // bytes per Q8_0 block: f16 scale + 32 int8

// One variant of the family. Kernels take unchecked arguments (the entry points above check).
struct Kernels {
    const char* isa;  // the level it was built for: "generic", "avx2", "avx512", "neon_dotprod"
    float (*f32)(const float* a, const float* b, int64_t n);
    float (*q8_0)(const uint8_t* a_blocks, const uint8_t* b_blocks, int64_t n);
    void (*f32_rows)(const float* a, const float* rows, int64_t ld, int64_t n_rows, int64_t n,
                     float* out);
};

// f32_rows one row at a time through a variant's f32 (variants without a blocked kernel).
template <float (*F32)(const float*, const float*, int64_t)>
void f32_rows_each(const float* a, const float* rows, int64_t ld, int64_t n_rows, int64_t n,
                   float* out) {
    for (int64_t j = 0; j < n_rows; ++j) out[j] = F32(a, rows + j * ld, n);
}

// The variants this process may run (built, supported by the CPU, allowed by
// DASLLAMA_CPU_ISA), best first; always ends with "generic".
std::vector<std::string> available_variants();
// One of them by name; throws Error for a variant not available here.
const Kernels& variant(std::string_view isa);
// The variant the entry points use: the first of available_variants().
const Kernels& active();

// --- for the variant files -------------------------------------------------------------------
float f32_generic(const float* a, const float* b, int64_t n);
float q8_0_generic(const uint8_t* a_blocks, const uint8_t* b_blocks, int64_t n);
const Kernels* kernels_avx2();    // dot_avx2.cpp   (x86-64 builds only)
const Kernels* kernels_avx512();  // dot_avx512.cpp (x86-64 builds only)
const Kernels* kernels_neon();    // dot_neon.cpp   (arm64 builds only)

}  // namespace dot
}  // namespace dasllama::cpu

// The generic matmul kernels: plain C++ over the packed layout (cpu/kernels_matmul.h), the
// reference the ISA variants are tested against. They mirror the vector kernels' arithmetic
// lane for lane (16 float partial sums per row and token, one per block slot of a group), so
// variants differ from them only where a vector unit fuses a multiply-add.
#include <cmath>
#include <cstring>
#include <vector>

#include "core/formats.h"
#include "cpu/dot.h"
#include "cpu/kernels_matmul.h"

namespace dasllama::cpu::mm {

void quantize_act_generic(PackKind kind, const float* x, int64_t cols, uint8_t* out) {
    const PackFormat& f = kFormats[kind];
    const int B = f.block;
    const int64_t nb = cols / B;
    for (int64_t b0 = 0; b0 < nb;) {
        const GroupShape g = group_at(f, nb, b0);
        const int64_t gbytes = act_group_bytes(g);
        std::memset(out, 0, static_cast<size_t>(gbytes));
        int8_t* q = reinterpret_cast<int8_t*>(out);
        float da[kGroup] = {}, dsa[kGroup] = {};
        int32_t sa[kGroup] = {};
        for (int i = 0; i < g.r; ++i) {
            const float* xb = x + (b0 + i) * B;
            float amax = 0.0f;
            for (int e = 0; e < B; ++e) amax = std::fmax(amax, std::fabs(xb[e]));
            const float d = amax / 127.0f;
            const float id = d != 0.0f ? 1.0f / d : 0.0f;
            for (int e = 0; e < B; ++e) {
                // Round half to even, as the vector units' float-to-int conversion does.
                const int v = static_cast<int>(std::nearbyint(xb[e] * id));
                const Slot s = slot_of(g, i, e);
                q[s.chunk * 64 + 4 * s.lane + s.byte] = static_cast<int8_t>(v);
                sa[s.lane] += v;
                da[s.lane] = d;
            }
        }
        for (int l = 0; l < kGroup; ++l) dsa[l] = da[l] * static_cast<float>(sa[l]);
        const int64_t tail = int64_t(g.chunks) * 64;
        std::memcpy(out + tail, da, 64);
        std::memcpy(out + tail + 64, sa, 64);
        std::memcpy(out + tail + 128, dsa, 64);
        out += gbytes;
        b0 += g.r;
    }
}

namespace {

float load_scale(bool f32, const uint8_t* p) {
    if (f32) {
        float v;
        std::memcpy(&v, p, 4);
        return v;
    }
    return f16_to_f32(static_cast<uint16_t>(p[0] | (p[1] << 8)));
}

// The level of lane l's element 4c+j in a group.
int level(const PackFormat& f, const GroupShape& g, const uint8_t* levels, const uint8_t* planes,
          int l, int c, int j) {
    const int at = 4 * l + j, stream = 4 * g.lanes();
    int u = f.nibbles ? (levels[(c / 2) * stream + at] >> (4 * (c % 2))) & 15
                      : levels[c * stream + at];
    for (int k = 0; k < f.planes; ++k)
        u |= ((planes[(k * g.chunks + c) * 8 + at / 8] >> (at % 8)) & 1) << (4 + k);
    return u;
}

float dot_row(const PackFormat& f, const uint8_t* w, int64_t nb, const uint8_t* act) {
    float lanes[kGroup] = {};
    for (int64_t b0 = 0; b0 < nb;) {
        const GroupShape g = group_at(f, nb, b0);
        const uint8_t* planes = w + level_bytes(f, g);
        const uint8_t* scales = planes + plane_bytes(f, g);
        const int ss = f.f32_scales ? 4 : 2;
        const int8_t* q = reinterpret_cast<const int8_t*>(act);
        const uint8_t* tail = act + g.chunks * 64;
        const float* da = reinterpret_cast<const float*>(tail);
        const int32_t* sa = reinterpret_cast<const int32_t*>(tail + 64);
        const float* dsa = reinterpret_cast<const float*>(tail + 128);
        for (int l = 0; l < g.lanes(); ++l) {
            const int i = l / g.lanes_per_block;
            int32_t dot = 0;
            for (int c = 0; c < g.chunks; ++c)
                for (int j = 0; j < 4; ++j)
                    dot += level(f, g, w, planes, l, c, j) * q[c * 64 + 4 * l + j];
            if (f.offset_log2 >= 0) dot -= sa[l] * (1 << f.offset_log2);
            const float d = load_scale(f.f32_scales, scales + i * ss);
            lanes[l] += (d * da[l]) * static_cast<float>(dot);
            if (f.has_min) lanes[l] += load_scale(f.f32_scales, scales + (g.r + i) * ss) * dsa[l];
        }
        w += group_bytes(f, g);
        act += act_group_bytes(g);
        b0 += g.r;
    }
    float sum = 0.0f;
    for (float v : lanes) sum += v;
    return sum;
}

}  // namespace

void gemm_generic(PackKind kind, const uint8_t* w, int64_t w_row_bytes, int64_t n_rows,
                  int64_t cols, const uint8_t* act, int64_t act_stride, int64_t n_tokens,
                  float* y, int64_t ldy) {
    const PackFormat& f = kFormats[kind];
    const int64_t nb = cols / f.block;
    for (int64_t r = 0; r < n_rows; ++r)
        for (int64_t t = 0; t < n_tokens; ++t)
            y[t * ldy + r] = dot_row(f, w + r * w_row_bytes, nb, act + t * act_stride);
}

// --- the float path -----------------------------------------------------------------------------
// One dot product per output through the dot family (cpu/dot.h), which has its own ISA
// variants: a level without tiled float kernels (neon) keeps its vector dot products.

void gemm_f32_generic(const float* w, int64_t ldw, int64_t n_rows, int64_t cols,
                      const float* x, int64_t ldx, int64_t n_tokens, float* y, int64_t ldy) {
    const auto dot = dot::active().f32;
    for (int64_t r = 0; r < n_rows; ++r)
        for (int64_t t = 0; t < n_tokens; ++t) y[t * ldy + r] = dot(w + r * ldw, x + t * ldx, cols);
}

void dequantize_q8_0_generic(const uint8_t* src, float* dst, int64_t cols) {
    for (int64_t b = 0; b < cols / 32; ++b, src += 34, dst += 32) {
        const float d = f16_to_f32(static_cast<uint16_t>(src[0] | (src[1] << 8)));
        for (int j = 0; j < 32; ++j)
            dst[j] = static_cast<float>(static_cast<int8_t>(src[2 + j])) * d;
    }
}

void dequantize_f16_generic(const uint8_t* src, float* dst, int64_t cols) {
    for (int64_t c = 0; c < cols; ++c)
        dst[c] = f16_to_f32(static_cast<uint16_t>(src[2 * c] | (src[2 * c + 1] << 8)));
}

void gemm_q8_0_f32_generic(const uint8_t* w, int64_t w_row_bytes, int64_t n_rows, int64_t cols,
                           const float* x, int64_t ldx, int64_t n_tokens, float* y, int64_t ldy) {
    thread_local std::vector<float> row;  // grow-only: no allocation once warm
    if (row.size() < static_cast<size_t>(cols)) row.resize(static_cast<size_t>(cols));
    for (int64_t r = 0; r < n_rows; ++r) {
        dequantize_q8_0_generic(w + r * w_row_bytes, row.data(), cols);
        gemm_f32_generic(row.data(), cols, 1, cols, x, ldx, n_tokens, y + r, ldy);
    }
}

}  // namespace dasllama::cpu::mm

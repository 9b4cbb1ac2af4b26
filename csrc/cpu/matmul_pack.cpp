// Packing GGUF rows into the matmul layout (cpu/kernels_matmul.h) and back.
//
// A GGUF row is first decoded into unsigned levels u, one per element, and per-block d and m
// with w = d * (u - offset) + m; the group writer then interleaves them. Unpacking computes
// float(u - offset) * d (+ m) in the operation order of core/formats.h's dequantizers, so
// get_row on a packed matrix equals dequantize bit for bit.
#include <cstring>
#include <vector>

#include "core/formats.h"
#include "cpu/kernels_matmul.h"

namespace dasllama::cpu::mm {

namespace {

uint16_t u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t u32(const uint8_t* p) {
    return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
float f16(const uint8_t* p) { return f16_to_f32(u16(p)); }

// One row decoded: levels per element, d and m per block of the packed format.
struct Decoded {
    std::vector<uint8_t> u;
    std::vector<float> d, m;
};

// The legacy 32-element kinds. q4/q5 levels: element j < 16 in the low nibble of qs[j],
// j + 16 in the high nibble; bit 4 from bit j of the 32-bit qh.
void decode_legacy(PackKind kind, const uint8_t* src, int64_t nb, Decoded* out) {
    const int bytes[] = {18, 20, 22, 24, 34};
    for (int64_t b = 0; b < nb; ++b, src += bytes[kind]) {
        uint8_t* u = &out->u[b * 32];
        out->d[b] = f16(src);
        if (kind == kQ8_0) {
            for (int j = 0; j < 32; ++j) u[j] = static_cast<uint8_t>(src[2 + j] ^ 0x80);
            continue;
        }
        const bool has_min = kind == kQ4_1 || kind == kQ5_1;
        const bool five = kind == kQ5_0 || kind == kQ5_1;
        if (has_min) out->m[b] = f16(src + 2);
        const uint8_t* qh = src + (has_min ? 4 : 2);
        const uint8_t* qs = qh + (five ? 4 : 0);
        const uint32_t high = five ? u32(qh) : 0;
        for (int j = 0; j < 16; ++j) {
            u[j] = static_cast<uint8_t>((qs[j] & 15) | ((high >> j) & 1) << 4);
            u[j + 16] = static_cast<uint8_t>((qs[j] >> 4) | ((high >> (j + 16)) & 1) << 4);
        }
    }
}

// Q4_K / Q5_K scales: eight 6-bit scales and mins packed in 12 bytes.
void k4_scale_min(const uint8_t* s, int j, int* scale, int* min) {
    if (j < 4) {
        *scale = s[j] & 63;
        *min = s[j + 4] & 63;
    } else {
        *scale = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

void decode_k(PackKind kind, const uint8_t* src, int64_t n_super, Decoded* out) {
    for (int64_t sb = 0; sb < n_super; ++sb) {
        uint8_t* u = &out->u[sb * 256];
        if (kind == kQ6_K) {  // ql[128] qh[64] int8 scales[16] d
            const uint8_t* ql = src;
            const uint8_t* qh = src + 128;
            const float d = f16(src + 208);
            for (int e = 0; e < 256; ++e) {
                const int h = e / 128, g = (e / 32) % 4, l = e % 32;
                const int low = (ql[64 * h + 32 * (g % 2) + l] >> (4 * (g / 2))) & 15;
                const int hi = (qh[32 * h + l] >> (2 * g)) & 3;
                u[e] = static_cast<uint8_t>(low | hi << 4);
            }
            for (int s = 0; s < 16; ++s)
                out->d[sb * 16 + s] = d * static_cast<float>(static_cast<int8_t>(src[192 + s]));
            src += 210;
            continue;
        }
        // Q4_K: d dmin scales[12] qs[128]; Q5_K: d dmin scales[12] qh[32] qs[128].
        const bool five = kind == kQ5_K;
        const float d = f16(src), dmin = f16(src + 2);
        const uint8_t* qh = src + 16;
        const uint8_t* qs = src + (five ? 48 : 16);
        for (int j = 0; j < 8; ++j) {
            int sc, mn;
            k4_scale_min(src + 4, j, &sc, &mn);
            out->d[sb * 8 + j] = d * static_cast<float>(sc);
            out->m[sb * 8 + j] = -(dmin * static_cast<float>(mn));
            for (int l = 0; l < 32; ++l) {
                int level = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 15;
                if (five) level |= ((qh[l] >> j) & 1) << 4;
                u[32 * j + l] = static_cast<uint8_t>(level);
            }
        }
        src += five ? 176 : 144;
    }
}

void store_scale(const PackFormat& f, float v, uint8_t* p) {
    if (f.f32_scales) {
        std::memcpy(p, &v, 4);
    } else {
        const uint16_t h = f32_to_f16(v);  // v came from an f16: exact
        p[0] = static_cast<uint8_t>(h);
        p[1] = static_cast<uint8_t>(h >> 8);
    }
}

float load_scale(const PackFormat& f, const uint8_t* p) {
    if (f.f32_scales) {
        float v;
        std::memcpy(&v, p, 4);
        return v;
    }
    return f16(p);
}

}  // namespace

int pack_kind_of(uint32_t ggml_type) {
    switch (static_cast<GgmlType>(ggml_type)) {
        case GgmlType::Q4_0: return kQ4_0;
        case GgmlType::Q4_1: return kQ4_1;
        case GgmlType::Q5_0: return kQ5_0;
        case GgmlType::Q5_1: return kQ5_1;
        case GgmlType::Q8_0: return kQ8_0;
        case GgmlType::Q4_K: return kQ4_K;
        case GgmlType::Q5_K: return kQ5_K;
        case GgmlType::Q6_K: return kQ6_K;
        default: return -1;
    }
}

void pack_row(PackKind kind, const uint8_t* src, int64_t cols, uint8_t* out) {
    const PackFormat& f = kFormats[kind];
    const int B = f.block;
    const int64_t nb = cols / B;
    thread_local Decoded dec;  // reused across rows: a large matrix packs without allocating
    dec.u.resize(static_cast<size_t>(cols));
    dec.d.assign(static_cast<size_t>(nb), 0.0f);
    dec.m.assign(static_cast<size_t>(nb), 0.0f);
    if (kind <= kQ8_0)
        decode_legacy(kind, src, nb, &dec);
    else
        decode_k(kind, src, cols / 256, &dec);

    for (int64_t b0 = 0; b0 < nb;) {
        const GroupShape g = group_at(f, nb, b0);
        const int64_t lb = level_bytes(f, g), pb = plane_bytes(f, g);
        std::memset(out, 0, static_cast<size_t>(lb + pb));
        uint8_t* levels = out;
        uint8_t* planes = out + lb;
        const int stream = 4 * g.lanes();
        for (int i = 0; i < g.r; ++i)
            for (int e = 0; e < B; ++e) {
                const int u = dec.u[(b0 + i) * B + e];
                const Slot s = slot_of(g, i, e);
                const int at = 4 * s.lane + s.byte;
                if (f.nibbles)
                    levels[(s.chunk / 2) * stream + at] |=
                        static_cast<uint8_t>((u & 15) << (4 * (s.chunk % 2)));
                else
                    levels[s.chunk * stream + at] = static_cast<uint8_t>(u);
                for (int k = 0; k < f.planes; ++k)  // little-endian uint64: bit at -> byte at / 8
                    planes[(k * g.chunks + s.chunk) * 8 + at / 8] |=
                        static_cast<uint8_t>(((u >> (4 + k)) & 1) << (at % 8));
            }
        out += lb + pb;
        const int ss = f.f32_scales ? 4 : 2;
        for (int i = 0; i < g.r; ++i, out += ss) store_scale(f, dec.d[b0 + i], out);
        if (f.has_min)
            for (int i = 0; i < g.r; ++i, out += ss) store_scale(f, dec.m[b0 + i], out);
        b0 += g.r;
    }
}

void unpack_row(PackKind kind, const uint8_t* packed, int64_t cols, float* out) {
    const PackFormat& f = kFormats[kind];
    const int B = f.block;
    const int64_t nb = cols / B;
    const int offset = f.offset_log2 >= 0 ? 1 << f.offset_log2 : 0;
    for (int64_t b0 = 0; b0 < nb;) {
        const GroupShape g = group_at(f, nb, b0);
        const uint8_t* levels = packed;
        const uint8_t* planes = levels + level_bytes(f, g);
        const uint8_t* scales = planes + plane_bytes(f, g);
        const int ss = f.f32_scales ? 4 : 2;
        const int stream = 4 * g.lanes();
        for (int i = 0; i < g.r; ++i) {
            const float d = load_scale(f, scales + i * ss);
            const float m = f.has_min ? load_scale(f, scales + (g.r + i) * ss) : 0.0f;
            float* y = out + (b0 + i) * B;
            for (int e = 0; e < B; ++e) {
                const Slot s = slot_of(g, i, e);
                const int at = 4 * s.lane + s.byte;
                int u = f.nibbles ? (levels[(s.chunk / 2) * stream + at] >> (4 * (s.chunk % 2))) & 15
                                  : levels[s.chunk * stream + at];
                for (int k = 0; k < f.planes; ++k)
                    u |= ((planes[(k * g.chunks + s.chunk) * 8 + at / 8] >> (at % 8)) & 1) << (4 + k);
                const float v = static_cast<float>(u - offset) * d;
                y[e] = f.has_min ? v + m : v;
            }
        }
        packed += group_bytes(f, g);
        b0 += g.r;
    }
}

}  // namespace dasllama::cpu::mm

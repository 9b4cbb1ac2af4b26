// The i-quant formats with a non-linear 16-entry codebook (dequantize only).
//
// kvalues_iq4nl is the codebook the GGUF format defines for IQ4_NL and IQ4_XS: a 4-bit
// index selects one of these integers, which is then multiplied by the block scale.
//
// IQ4_NL, 18 bytes per 32 elements: d (f16), qs[16]. Element j (j < 16) indexes with the low
// nibble of qs[j], element j + 16 with the high nibble.
//   y = d * kvalue
// IQ4_XS, 136 bytes per 256 elements: d (f16), scales_h (u16), scales_l[4], qs[128]. Sub-block
// j (32 elements) has the 6-bit scale ls = nibble j % 2 of scales_l[j / 2] | (bits 2j..2j+1
// of scales_h) << 4, stored +32; its elements are laid out as one IQ4_NL block's qs in
// qs[16j .. 16j + 16].
//   dl = d * (ls - 32); y = dl * kvalue
#include "core/quants/block_io.h"
#include "core/quants/quants.h"

namespace dasllama::quants {

namespace {

constexpr int8_t kValuesIq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                     1,    13,   25,  38,  53,  69,  89,  113};

// 32 elements from 16 bytes of nibble indices, each times the scale.
void decode_iq4_32(const uint8_t* qs, float scale, float* y) {
    for (int j = 0; j < 16; ++j) {
        y[j] = scale * static_cast<float>(kValuesIq4nl[qs[j] & 0x0f]);
        y[j + 16] = scale * static_cast<float>(kValuesIq4nl[qs[j] >> 4]);
    }
}

}  // namespace

void dequantize_iq4_nl(const uint8_t* src, float* dst, int64_t n) {
    for (int64_t b = 0; b < n / 32; ++b, src += 18, dst += 32) decode_iq4_32(src + 2, load_f16(src), dst);
}

void dequantize_iq4_xs(const uint8_t* src, float* dst, int64_t n) {
    for (int64_t b = 0; b < n / 256; ++b, src += 136, dst += 256) {
        const float d = load_f16(src);
        const uint16_t scales_h = load_u16(src + 2);
        const uint8_t* scales_l = src + 4;
        const uint8_t* qs = src + 8;
        for (int sub = 0; sub < 8; ++sub) {
            const int ls = ((scales_l[sub / 2] >> (4 * (sub % 2))) & 0x0f) |
                           (((scales_h >> (2 * sub)) & 3) << 4);
            const float dl = d * static_cast<float>(ls - 32);
            decode_iq4_32(qs + 16 * sub, dl, dst + 32 * sub);
        }
    }
}

}  // namespace dasllama::quants

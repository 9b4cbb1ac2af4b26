#include "llm/unicode.h"

#include <algorithm>
#include <array>

namespace dasllama::unicode {

namespace {

struct Range {
    uint32_t first;
    uint8_t value;  // UCat | 8 when White_Space
};

constexpr Range kRanges[] = {
#include "llm/unicode_tables.inc"
};

constexpr uint8_t kWhitespaceBit = 8;

CpClass from_value(uint8_t v) {
    return CpClass{static_cast<UCat>(v & 7), (v & kWhitespaceBit) != 0};
}

uint8_t lookup_value(uint32_t cp) {
    // The last entry is the 0x110000 sentinel, so upper_bound never returns begin().
    auto it = std::upper_bound(std::begin(kRanges), std::end(kRanges), cp,
                               [](uint32_t c, const Range& r) { return c < r.first; });
    return (it - 1)->value;
}

// ASCII is most of most texts: answer it from a small table instead of a binary search.
const std::array<uint8_t, 128>& ascii_values() {
    static const std::array<uint8_t, 128> table = [] {
        std::array<uint8_t, 128> t{};
        for (uint32_t c = 0; c < 128; ++c) t[c] = lookup_value(c);
        return t;
    }();
    return table;
}

struct ByteTables {
    std::array<uint32_t, 256> to_cp{};
    std::array<int16_t, 324> from_cp{};  // code points 0..323 cover the whole image
};

const ByteTables& byte_tables() {
    static const ByteTables t = [] {
        ByteTables bt;
        bt.from_cp.fill(-1);
        auto printable = [](int b) {
            return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        };
        uint32_t next = 256;
        for (int b = 0; b < 256; ++b) {
            bt.to_cp[b] = printable(b) ? static_cast<uint32_t>(b) : next++;
            bt.from_cp[bt.to_cp[b]] = static_cast<int16_t>(b);
        }
        return bt;
    }();
    return t;
}

}  // namespace

CpClass classify(uint32_t cp) {
    if (cp < 128) return from_value(ascii_values()[cp]);
    if (cp >= 0x110000) return CpClass{UCat::UNASSIGNED, false};
    return from_value(lookup_value(cp));
}

std::vector<uint32_t> decode_utf8(std::string_view text) {
    std::vector<uint32_t> out;
    out.reserve(text.size());
    const auto* s = reinterpret_cast<const uint8_t*>(text.data());
    const size_t n = text.size();
    auto cont = [&](size_t i) { return i < n && (s[i] & 0xC0) == 0x80; };
    size_t i = 0;
    while (i < n) {
        const uint8_t b = s[i];
        // The same acceptance rules as llama.cpp (overlong forms and surrogates are not
        // rejected), so both sides see the same code points.
        if (b < 0x80) {
            out.push_back(b);
            i += 1;
        } else if ((b & 0xE0) == 0xC0 && cont(i + 1)) {
            out.push_back((uint32_t(b & 0x1F) << 6) | (s[i + 1] & 0x3F));
            i += 2;
        } else if ((b & 0xF0) == 0xE0 && cont(i + 1) && cont(i + 2)) {
            out.push_back((uint32_t(b & 0x0F) << 12) | (uint32_t(s[i + 1] & 0x3F) << 6) |
                          (s[i + 2] & 0x3F));
            i += 3;
        } else if ((b & 0xF8) == 0xF0 && cont(i + 1) && cont(i + 2) && cont(i + 3)) {
            out.push_back((uint32_t(b & 0x07) << 18) | (uint32_t(s[i + 1] & 0x3F) << 12) |
                          (uint32_t(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F));
            i += 4;
        } else {
            out.push_back(kReplacementChar);
            i += 1;
        }
    }
    return out;
}

void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x110000) {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        append_utf8(out, kReplacementChar);
    }
}

uint32_t byte_to_cp(uint8_t b) { return byte_tables().to_cp[b]; }

int cp_to_byte(uint32_t cp) {
    const auto& t = byte_tables().from_cp;
    return cp < t.size() ? t[cp] : -1;
}

}  // namespace dasllama::unicode

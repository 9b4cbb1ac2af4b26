// Unicode helpers of the tokenizers: UTF-8 decoding that never fails, the code point classes
// the pre-tokenizers test (\p{L}, \p{N}, \p{P}, whitespace...), and GPT-2's reversible
// byte <-> printable code point table of byte-level BPE.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dasllama::unicode {

// Major general category (the first letter of the Unicode category). The values are those of
// the generated table (gen_unicode_tables.py).
enum class UCat : uint8_t {
    UNASSIGNED = 0, NUMBER = 1, LETTER = 2, SEPARATOR = 3, MARK = 4, PUNCTUATION = 5,
    SYMBOL = 6, CONTROL = 7,
};

struct CpClass {
    UCat cat;
    bool whitespace;  // the White_Space property
    bool is_letter() const { return cat == UCat::LETTER; }
    bool is_number() const { return cat == UCat::NUMBER; }
    bool is_punctuation() const { return cat == UCat::PUNCTUATION; }
};

CpClass classify(uint32_t cp);

constexpr uint32_t kReplacementChar = 0xFFFD;

// Byte length of a UTF-8 sequence from its first byte, without validating anything:
// 0x00-0xBF -> 1 (continuation bytes stand alone), 0xC0-0xDF -> 2, 0xE0-0xEF -> 3,
// 0xF0-0xFF -> 4. This is how llama.cpp splits text into symbols before merging.
inline size_t utf8_seq_len(uint8_t first) {
    static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return kLen[first >> 4];
}

// Decodes UTF-8 into code points. A byte that does not start a well-formed sequence becomes
// U+FFFD and decoding resumes at the next byte (so invalid input never throws).
std::vector<uint32_t> decode_utf8(std::string_view text);
void append_utf8(std::string& out, uint32_t cp);

// GPT-2's byte-level table: each byte maps to a printable code point (printable ASCII and
// Latin-1 map to themselves, the other 68 bytes to U+0100..U+0143).
uint32_t byte_to_cp(uint8_t b);
// The inverse; -1 for a code point that no byte maps to.
int cp_to_byte(uint32_t cp);

}  // namespace dasllama::unicode

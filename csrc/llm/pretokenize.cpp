// Pre-tokenizers of byte-level BPE: llama.cpp's regex lists per tokenizer.ggml.pre, written
// as scanners over code points (no std::regex). A pass turns a list of segments into a finer
// one; as with llama.cpp's splitter, text a regex does not match stays as a piece of its own.
//
// Two kinds of pass, because llama.cpp runs two kinds:
// - scan_gpt2 / scan_llama3 follow the hand-written scanners llama.cpp uses for the GPT-2 and
//   llama3 regexes (Unicode classes from the generated table);
// - the other regexes go through std::regex in llama.cpp on a "collapsed" text where every
//   non-ASCII code point stands for its class. For the regexes used here that collapse loses
//   nothing, so split_runs/split_digit_triples below reproduce them exactly. qwen2's regex
//   takes that path too, and differs from llama3's only in \p{N} (one digit, not 1-3), so it
//   reuses scan_llama3 with max_digits = 1.
#include <cstring>

#include "llm/tokenizer_detail.h"
#include "llm/unicode.h"

namespace dasllama::tokenizer_detail {

namespace {

using unicode::classify;
using unicode::CpClass;
using Segments = std::vector<size_t>;

constexpr uint32_t kOutside = 0xFFFFFFFF;

// One segment [begin, end) of the code points; reads past its end see "nothing".
struct Seg {
    const uint32_t* cps;
    size_t begin, end;
    Segments* out;
    size_t emitted;  // end of the last emitted piece

    uint32_t at(size_t i) const { return i < end ? cps[i] : kOutside; }
    bool inside(size_t i) const { return i < end; }
    CpClass cls(size_t i) const {
        return i < end ? classify(cps[i]) : CpClass{unicode::UCat::UNASSIGNED, false};
    }
    bool letter(size_t i) const { return inside(i) && cls(i).is_letter(); }
    bool number(size_t i) const { return inside(i) && cls(i).is_number(); }
    bool space(size_t i) const { return inside(i) && cls(i).whitespace; }
    // [^\s\p{L}\p{N}]: any code point that is none of those.
    bool other(size_t i) const {
        if (!inside(i)) return false;
        const CpClass c = cls(i);
        return !(c.whitespace || c.is_letter() || c.is_number());
    }
    // Emits [emitted, to) as a piece; returns `to` so callers can write pos = emit(x).
    size_t emit(size_t to) {
        if (to > emitted) out->push_back(to - emitted);
        emitted = to;
        return to;
    }
};

template <typename Fn>
Segments each_segment(const std::vector<uint32_t>& cps, const Segments& in, Fn&& scan) {
    Segments out;
    out.reserve(in.size() * 2);
    size_t start = 0;
    for (size_t len : in) {
        Seg s{cps.data(), start, start + len, &out, start};
        scan(s);
        start += len;
    }
    return out;
}

bool is_contraction_tail(uint32_t a, uint32_t b, bool fold_case, size_t* len) {
    auto low = [&](uint32_t c) { return (fold_case && c >= 'A' && c <= 'Z') ? c + 32 : c; };
    a = low(a);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') { *len = 2; return true; }
    b = low(b);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
        *len = 3;
        return true;
    }
    return false;
}

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
void scan_gpt2(Seg& s) {
    for (size_t pos = s.begin; pos < s.end;) {
        const uint32_t c = s.at(pos);
        size_t len = 0;
        if (c == '\'' && pos + 1 < s.end &&
            is_contraction_tail(s.at(pos + 1), pos + 2 < s.end ? s.at(pos + 2) : kOutside,
                                false, &len)) {
            pos = s.emit(pos + len);
            continue;
        }
        const size_t k = c == ' ' ? pos + 1 : pos;  // the optional leading space
        if (s.letter(k) || s.number(k) || s.other(k)) {
            const bool letters = s.letter(k), numbers = s.number(k);
            size_t p = k;
            if (letters) while (s.letter(p)) ++p;
            else if (numbers) while (s.number(p)) ++p;
            else while (s.other(p)) ++p;
            pos = s.emit(p);
            continue;
        }
        size_t n = 0;
        while (s.space(pos + n)) ++n;
        if (n > 1 && pos + n < s.end) {
            pos = s.emit(pos + n - 1);  // \s+(?!\S): leave the last space to the next word
        } else if (n > 0) {
            pos = s.emit(pos + n);
        } else {
            pos = s.emit(pos + 1);
        }
    }
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}
//   | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
void scan_llama3(Seg& s, size_t max_digits) {
    auto is_rn = [](uint32_t c) { return c == '\r' || c == '\n'; };
    for (size_t pos = s.begin; pos < s.end;) {
        const uint32_t c = s.at(pos);
        size_t len = 0;
        if (c == '\'' && pos + 1 < s.end &&
            is_contraction_tail(s.at(pos + 1), pos + 2 < s.end ? s.at(pos + 2) : kOutside,
                                true, &len)) {
            pos = s.emit(pos + len);
            continue;
        }
        if (!is_rn(c) && !s.number(pos) && (s.letter(pos) || s.letter(pos + 1))) {
            size_t p = pos + 1;  // a letter, or one leading non-letter before letters
            while (s.letter(p)) ++p;
            pos = s.emit(p);
            continue;
        }
        if (s.number(pos)) {
            size_t p = pos;
            while (p - pos < max_digits && s.number(p)) ++p;
            pos = s.emit(p);
            continue;
        }
        const size_t k = c == ' ' ? pos + 1 : pos;
        if (s.other(k)) {
            size_t p = k;
            while (s.other(p)) ++p;
            while (s.inside(p) && is_rn(s.at(p))) ++p;
            pos = s.emit(p);
            continue;
        }
        size_t n = 0, last_rn_end = 0;
        while (s.space(pos + n)) {
            if (is_rn(s.at(pos + n))) last_rn_end = pos + n + 1;
            ++n;
        }
        if (last_rn_end > 0) {
            pos = s.emit(last_rn_end);  // \s*[\r\n]+
        } else if (n > 1 && pos + n < s.end) {
            pos = s.emit(pos + n - 1);
        } else if (n > 0) {
            pos = s.emit(pos + n);
        } else {
            pos = s.emit(pos + 1);
        }
    }
}

// A regex that is one class, "X+" (runs) or "X" (single code points): matches and the text
// between them become pieces.
template <typename Pred>
void split_runs(Seg& s, Pred&& in_class, bool runs) {
    for (size_t pos = s.begin; pos < s.end;) {
        if (!in_class(s.at(pos))) {
            ++pos;
            continue;
        }
        s.emit(pos);  // the gap before the match
        size_t p = pos + 1;
        if (runs) while (p < s.end && in_class(s.at(p))) ++p;
        pos = s.emit(p);
    }
    s.emit(s.end);
}

// [0-9][0-9][0-9]: leftmost non-overlapping triples of ASCII digits.
void split_digit_triples(Seg& s) {
    auto digit = [&](size_t i) { return i < s.end && s.at(i) >= '0' && s.at(i) <= '9'; };
    for (size_t pos = s.begin; pos < s.end;) {
        if (digit(pos) && digit(pos + 1) && digit(pos + 2)) {
            s.emit(pos);
            pos = s.emit(pos + 3);
        } else {
            ++pos;
        }
    }
    s.emit(s.end);
}

// \p{N} as llama.cpp's collapsed std::regex sees it: ASCII 0-9, or a non-ASCII number.
bool collapsed_number(uint32_t c) {
    return c < 128 ? (c >= '0' && c <= '9') : classify(c).is_number();
}

// [\p{P}\$\+<=>\^~\|] (the default pre-tokenizer's first pass).
bool punct_or_listed(uint32_t c) {
    if (c < 128 && c != 0 && std::strchr("$+<=>^~|", static_cast<int>(c))) return true;
    return classify(c).is_punctuation();
}

}  // namespace

std::vector<size_t> pretokenize(PreType pre, const std::vector<uint32_t>& cps) {
    Segments segs;
    if (cps.empty()) return segs;
    segs.push_back(cps.size());
    auto gpt2 = [](Seg& s) { scan_gpt2(s); };
    switch (pre) {
        case PreType::kGpt2:
            return each_segment(cps, segs, gpt2);
        case PreType::kLlama3:
            return each_segment(cps, segs, [](Seg& s) { scan_llama3(s, 3); });
        case PreType::kQwen2:
            return each_segment(cps, segs, [](Seg& s) { scan_llama3(s, 1); });
        case PreType::kSmollm:
            // \p{N}, then the GPT-2 regex.
            segs = each_segment(cps, segs, [](Seg& s) { split_runs(s, collapsed_number, false); });
            return each_segment(cps, segs, gpt2);
        case PreType::kDefault:
            // [\p{P}\$\+<=>\^~\|]+, the GPT-2 regex, \p{N}+, [0-9][0-9][0-9].
            segs = each_segment(cps, segs, [](Seg& s) { split_runs(s, punct_or_listed, true); });
            segs = each_segment(cps, segs, gpt2);
            segs = each_segment(cps, segs, [](Seg& s) { split_runs(s, collapsed_number, true); });
            return each_segment(cps, segs, split_digit_triples);
    }
    return segs;
}

}  // namespace dasllama::tokenizer_detail

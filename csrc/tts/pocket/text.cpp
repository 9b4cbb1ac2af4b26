// Pocket TTS text normalization and chunking (text.h). Each function follows the package's
// function of the same role line by line; Python's str operations are spelled out on code
// points (std::u32string) so that indexing and the character classes agree with Python's.
#include "tts/pocket/text.h"

#include <algorithm>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "llm/unicode.h"
#include "tts/pocket/tokenizer.h"

namespace dasllama::pocket {

namespace {

struct CpRange {
    uint32_t first, end;  // [first, end)
};
struct UpperEntry {
    uint32_t cp;
    uint32_t upper[3];  // 0-padded
};

#include "tts/pocket/text_tables.inc"

template <size_t N>
bool in_ranges(const CpRange (&table)[N], uint32_t cp) {
    const CpRange* it = std::upper_bound(table, table + N, cp,
                                         [](uint32_t c, const CpRange& r) { return c < r.first; });
    return it != table && cp < (it - 1)->end;
}

bool py_isspace(char32_t c) { return in_ranges(kSpaceRanges, c); }
bool py_isdigit(char32_t c) { return in_ranges(kDigitRanges, c); }
bool py_isupper(char32_t c) { return in_ranges(kUpperRanges, c); }

std::u32string py_upper(char32_t c) {
    const auto* end = kUpperMap + sizeof(kUpperMap) / sizeof(kUpperMap[0]);
    const auto* it = std::lower_bound(kUpperMap, end, uint32_t(c),
                                      [](const UpperEntry& e, uint32_t cp) { return e.cp < cp; });
    if (it == end || it->cp != c) return std::u32string(1, c);
    std::u32string out;
    for (uint32_t u : it->upper)
        if (u) out += char32_t(u);
    return out;
}

std::u32string to_u32(std::string_view s) {
    const std::vector<uint32_t> cps = unicode::decode_utf8(s);
    return std::u32string(cps.begin(), cps.end());
}

std::string to_utf8(std::u32string_view s) {
    std::string out;
    for (char32_t c : s) unicode::append_utf8(out, c);
    return out;
}

// str.strip(chars): chars empty means whitespace.
std::u32string strip(std::u32string_view s, std::u32string_view chars = {}, bool left = true) {
    auto drop = [&](char32_t c) {
        return chars.empty() ? py_isspace(c) : chars.find(c) != std::u32string_view::npos;
    };
    size_t lo = 0, hi = s.size();
    if (left) while (lo < hi && drop(s[lo])) ++lo;
    while (hi > lo && drop(s[hi - 1])) --hi;
    return std::u32string(s.substr(lo, hi - lo));
}

std::u32string rstrip(std::u32string_view s, std::u32string_view chars) {
    return strip(s, chars, false);
}

// str.split() with no separator: runs of whitespace separate, none at either end count.
std::vector<std::u32string> split_words(std::u32string_view s) {
    std::vector<std::u32string> out;
    size_t i = 0;
    while (i < s.size()) {
        while (i < s.size() && py_isspace(s[i])) ++i;
        const size_t start = i;
        while (i < s.size() && !py_isspace(s[i])) ++i;
        if (i > start) out.emplace_back(s.substr(start, i - start));
    }
    return out;
}

// str.replace(old, new): non-overlapping, left to right, one pass.
std::u32string replace(std::u32string_view s, std::u32string_view from, std::u32string_view to) {
    std::u32string out;
    for (size_t i = 0; i < s.size();) {
        if (s.compare(i, from.size(), from) == 0) {
            out += to;
            i += from.size();
        } else {
            out += s[i++];
        }
    }
    return out;
}

const std::u32string kTerminal = U".!?\u2026";
const std::u32string kWeak = U",;:-\u2013\u2014";
const std::u32string kClosers = U"\"'\u201d\u2019)]\u00bb";

bool is_one_of(char32_t c, const std::u32string& set) { return set.find(c) != std::u32string::npos; }

// The package's _ensure_terminal_punctuation.
std::u32string ensure_terminal_punctuation(const std::u32string& text) {
    const std::u32string core = rstrip(text, kClosers + U" ");
    const std::u32string closers = strip(std::u32string_view(text).substr(core.size()));
    if (core.empty() || is_one_of(core.back(), kTerminal)) return text;
    if (is_one_of(core.back(), kWeak)) return rstrip(core, kWeak + U" ") + U"." + closers;
    return text + U".";
}

// re.sub(r"([.!?\u2026])\s*[,;:]", r"\1", text): a sentence mark followed by a clause mark
// (spaces between) keeps the sentence mark only.
std::u32string drop_clause_after_sentence_mark(const std::u32string& s) {
    std::u32string out;
    for (size_t i = 0; i < s.size();) {
        if (is_one_of(s[i], kTerminal)) {
            size_t j = i + 1;
            while (j < s.size() && py_isspace(s[j])) ++j;
            if (j < s.size() && (s[j] == U',' || s[j] == U';' || s[j] == U':')) {
                out += s[i];
                i = j + 1;
                continue;
            }
        }
        out += s[i++];
    }
    return out;
}

// _is_decimal_period_boundary: ids[i] starts right after a period between two digits.
bool after_decimal_period(const std::vector<int32_t>& ids, size_t i, const TextTokenizer& tok) {
    const std::u32string prefix = to_u32(tok.decode({ids.begin(), ids.begin() + long(i)}));
    const std::u32string suffix = to_u32(tok.decode({ids.begin() + long(i), ids.end()}));
    return prefix.size() >= 2 && prefix.back() == U'.' && py_isdigit(prefix[prefix.size() - 2]) &&
           !suffix.empty() && py_isdigit(suffix[0]);
}

// _find_boundary_indices: 0, each first non-mark token after a run of mark tokens, len(ids).
std::vector<size_t> boundaries(const std::vector<int32_t>& ids, const std::vector<int32_t>& marks,
                               const TextTokenizer* skip_decimal_with) {
    const std::unordered_set<int32_t> mark_set(marks.begin(), marks.end());
    std::vector<size_t> out{0};
    bool after_mark = false;
    for (size_t i = 0; i < ids.size(); ++i) {
        if (mark_set.count(ids[i])) {
            after_mark = true;
            continue;
        }
        if (after_mark && !(skip_decimal_with && after_decimal_period(ids, i, *skip_decimal_with)))
            out.push_back(i);
        after_mark = false;
    }
    out.push_back(ids.size());
    return out;
}

struct Segment {
    int64_t n_tokens;
    std::string text;
};

std::vector<Segment> segments(const std::vector<int32_t>& ids, const std::vector<size_t>& cuts,
                              const TextTokenizer& tok) {
    std::vector<Segment> out;
    for (size_t k = 0; k + 1 < cuts.size(); ++k)
        out.push_back({int64_t(cuts[k + 1] - cuts[k]),
                       tok.decode({ids.begin() + long(cuts[k]), ids.begin() + long(cuts[k + 1])})});
    return out;
}

// The marks of a probe text: its tokens after the first (the package unpacks `_, *marks`,
// which fails on an empty list).
std::vector<int32_t> marks_of(const TextTokenizer& tok, std::string_view probe) {
    std::vector<int32_t> ids = tok.encode(probe);
    if (ids.empty())
        throw std::invalid_argument("the tokenizer gives no tokens for '" + std::string(probe) +
                                    "': cannot find sentence boundaries");
    ids.erase(ids.begin());
    return ids;
}

}  // namespace

PreparedText prepare_text(std::string_view input, const TextRules& rules) {
    std::u32string text = strip(to_u32(input));
    if (!rules.replace.empty()) {
        std::unordered_map<char32_t, std::u32string> table;
        for (const auto& [from, to] : rules.replace) {
            const std::u32string key = to_u32(from);
            if (key.size() != 1)
                throw std::invalid_argument("text replacement key '" + from +
                                            "' must be one character");
            table[key[0]] = to_u32(to);
        }
        std::u32string translated;
        for (char32_t c : text) {
            auto it = table.find(c);
            if (it == table.end()) translated += c;
            else translated += it->second;
        }
        std::u32string joined;
        for (const auto& w : split_words(translated)) joined += (joined.empty() ? U"" : U" ") + w;
        text = drop_clause_after_sentence_mark(joined);
    }
    if (text.empty()) throw std::invalid_argument("Text prompt cannot be empty");
    text = replace(replace(replace(text, U"\n", U" "), U"\r", U" "), U"  ", U" ");
    if (rules.remove_semicolons) text = replace(text, U";", U",");
    const int guess = split_words(text).size() <= 4 ? 3 : 1;
    if (rules.capitalize_first_letter && !py_isupper(text[0]))
        text = py_upper(text[0]) + text.substr(1);
    if (rules.append_terminal_punctuation) text = ensure_terminal_punctuation(text);
    if (rules.pad_with_spaces && split_words(text).size() < 5) text = std::u32string(8, U' ') + text;
    return {to_utf8(text), guess};
}

std::vector<std::string> split_into_chunks(std::string_view input, const TextTokenizer& tok,
                                           const TextRules& rules, int64_t max_tokens) {
    const std::string text = to_utf8(strip(to_u32(prepare_text(input, rules).text)));
    const std::vector<int32_t> ids = tok.encode(text);

    const std::vector<int32_t> sentence_marks = marks_of(tok, ".!...?");
    const std::vector<Segment> sentences = segments(ids, boundaries(ids, sentence_marks, &tok), tok);

    // Oversized sentences are cut again at , ; : when that gives more than one piece.
    const std::vector<int32_t> clause_marks = marks_of(tok, ",;:");
    std::vector<Segment> refined;
    for (const Segment& s : sentences) {
        if (s.n_tokens <= max_tokens) {
            refined.push_back(s);
            continue;
        }
        const std::vector<int32_t> sub = tok.encode(to_utf8(strip(to_u32(s.text))));
        std::vector<Segment> parts = segments(sub, boundaries(sub, clause_marks, nullptr), tok);
        if (parts.size() > 1) refined.insert(refined.end(), parts.begin(), parts.end());
        else refined.push_back(s);
    }

    // Greedy packing: a piece joins the current chunk (with a space) while the sum fits.
    std::vector<std::string> chunks;
    std::string current;
    int64_t count = 0;
    for (const Segment& s : refined) {
        if (current.empty()) {
            current = s.text, count = s.n_tokens;
        } else if (count + s.n_tokens > max_tokens) {
            chunks.push_back(to_utf8(strip(to_u32(current))));
            current = s.text, count = s.n_tokens;
        } else {
            current += " " + s.text;
            count += s.n_tokens;
        }
    }
    if (!current.empty()) chunks.push_back(to_utf8(strip(to_u32(current))));
    return chunks;
}

std::vector<TextChunk> plan_text(std::string_view text, const TextTokenizer& tok,
                                 const TextRules& rules, int64_t max_tokens) {
    std::vector<TextChunk> out;
    for (const std::string& chunk : split_into_chunks(text, tok, rules, max_tokens)) {
        PreparedText p = prepare_text(chunk, rules);
        std::vector<int32_t> ids = tok.encode(p.text);
        out.push_back({std::move(p.text), std::move(ids), p.frames_after_eos_guess});
    }
    return out;
}

}  // namespace dasllama::pocket

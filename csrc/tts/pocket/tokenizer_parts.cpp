// SentencePiece's precompiled charsmap and the unigram Viterbi search (tokenizer_parts.h).
#include "tts/pocket/tokenizer_parts.h"

#include <cstring>

#include "core/errors.h"

namespace dasllama::pocket::tokenizer_parts {

size_t utf8_char_len(std::string_view text) {
    if (text.empty()) return 0;
    const auto b0 = static_cast<uint8_t>(text[0]);
    size_t len = 0;
    uint32_t cp = 0;
    if (b0 < 0x80) return 1;
    if ((b0 & 0xE0) == 0xC0) len = 2, cp = b0 & 0x1F;
    else if ((b0 & 0xF0) == 0xE0) len = 3, cp = b0 & 0x0F;
    else if ((b0 & 0xF8) == 0xF0) len = 4, cp = b0 & 0x07;
    else return 0;
    if (text.size() < len) return 0;
    for (size_t i = 1; i < len; ++i) {
        const auto b = static_cast<uint8_t>(text[i]);
        if ((b & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (b & 0x3F);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are malformed.
    static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || (cp >= 0xD800 && cp < 0xE000) || cp > 0x10FFFF) return 0;
    return len;
}

// =============================================================================================
// Charsmap: a Darts-clone double array. A unit holds a label (the byte that leads to it), a
// has-leaf bit, and an offset to its children; a leaf unit's low 31 bits are a value (here:
// an offset into the replacement strings).
// =============================================================================================

namespace {

uint32_t unit_offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }
uint32_t unit_label(uint32_t u) { return u & ((1u << 31) | 0xFFu); }
bool unit_has_leaf(uint32_t u) { return (u >> 8) & 1u; }
uint32_t unit_value(uint32_t u) { return u & ((1u << 31) - 1); }

}  // namespace

Charsmap::Charsmap(std::string_view blob, const std::string& where) {
    if (blob.empty()) return;
    uint32_t trie_bytes = 0;
    if (blob.size() < 4) throw FormatError(where + ": precompiled charsmap of " +
                                           std::to_string(blob.size()) + " bytes is truncated");
    std::memcpy(&trie_bytes, blob.data(), 4);  // little-endian, as every supported host
    if (trie_bytes % 4 != 0 || trie_bytes == 0 || trie_bytes > blob.size() - 4)
        throw FormatError(where + ": precompiled charsmap trie size " + std::to_string(trie_bytes) +
                          " does not fit its " + std::to_string(blob.size()) + " bytes");
    trie_.resize(trie_bytes / 4);
    std::memcpy(trie_.data(), blob.data() + 4, trie_bytes);
    replacements_.assign(blob.substr(4 + trie_bytes));
}

std::vector<std::pair<size_t, uint32_t>> Charsmap::prefixes(std::string_view text) const {
    std::vector<std::pair<size_t, uint32_t>> out;
    if (trie_.empty()) return out;
    size_t node = unit_offset(trie_[0]);
    for (size_t i = 0; i < text.size(); ++i) {
        const auto byte = static_cast<uint8_t>(text[i]);
        node ^= byte;
        if (node >= trie_.size()) break;
        const uint32_t unit = trie_[node];
        if (unit_label(unit) != byte) break;
        node ^= unit_offset(unit);
        if (node >= trie_.size()) break;
        if (unit_has_leaf(unit)) out.emplace_back(i + 1, unit_value(trie_[node]));
    }
    return out;
}

std::string_view Charsmap::replacement(uint32_t value) const {
    if (value >= replacements_.size()) return {};
    const char* s = replacements_.data() + value;
    return std::string_view(s, strnlen(s, replacements_.size() - value));
}

std::pair<std::string_view, size_t> Charsmap::longest_prefix(std::string_view text) const {
    const auto found = prefixes(text);
    if (found.empty()) return {{}, 0};
    return {replacement(found.back().second), found.back().first};
}

bool Charsmap::shortest_prefix(std::string_view text, std::string_view& out) const {
    const auto found = prefixes(text);
    if (found.empty()) return false;
    out = replacement(found.front().second);
    return true;
}

// =============================================================================================
// Unigram Viterbi
// =============================================================================================

template <class Score>
std::vector<UnigramPiece> unigram_segment(const UnigramLattice<Score>& lat, std::string_view text,
                                          bool fuse_unk, const std::string& where) {
    struct Best {
        int32_t id = -1;
        Score score = 0;
        int64_t starts_at = -1;
    };
    const size_t n = text.size();
    std::vector<Best> best(n + 1);
    for (size_t start = 0; start < n;) {
        const Score here = best[start].score;
        size_t char_len = utf8_char_len(text.substr(start));
        if (char_len == 0) char_len = 1;
        bool has_single = false;
        const size_t max_len = std::min(lat.max_piece_bytes, n - start);
        for (size_t len = 1; len <= max_len; ++len) {
            auto it = lat.id_of.find(text.substr(start, len));
            if (it == lat.id_of.end()) continue;
            const Score candidate = lat.score[it->second] + here;
            Best& b = best[start + len];
            if (b.starts_at < 0 || candidate > b.score) b = {it->second, candidate, int64_t(start)};
            if (len == char_len) has_single = true;
        }
        if (!has_single) {
            if (lat.unk_id < 0)
                throw FormatError(where + ": the unigram model has no unknown token for a "
                                  "character it cannot segment");
            const Score candidate = lat.unk_score + here;
            Best& b = best[start + char_len];
            if (b.starts_at < 0 || candidate > b.score) b = {lat.unk_id, candidate, int64_t(start)};
        }
        start += char_len;
    }
    std::vector<UnigramPiece> out;
    for (size_t end = n; end > 0;) {
        const Best& b = best[end];
        const auto start = static_cast<size_t>(b.starts_at);
        if (fuse_unk && b.id == lat.unk_id && !out.empty() && out.back().id == lat.unk_id)
            out.back().start = start;  // out is reversed: the previous piece lies to the right
        else
            out.push_back({start, end, b.id});
        end = start;
    }
    return {out.rbegin(), out.rend()};
}

template std::vector<UnigramPiece> unigram_segment<float>(const UnigramLattice<float>&,
                                                          std::string_view, bool,
                                                          const std::string&);
template std::vector<UnigramPiece> unigram_segment<double>(const UnigramLattice<double>&,
                                                           std::string_view, bool,
                                                           const std::string&);

}  // namespace dasllama::pocket::tokenizer_parts

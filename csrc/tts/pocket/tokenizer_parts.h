// Pieces both Pocket tokenizer kinds share (tokenizer_hf.cpp, tokenizer_sp.cpp): SentencePiece's
// precompiled character map and the unigram model's Viterbi search. Not part of the public API.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dasllama::pocket::tokenizer_parts {

// SentencePiece's precompiled normalization map (normalizer_spec.precompiled_charsmap): a
// little-endian uint32 trie size, a Darts-clone double-array trie of that many bytes over
// the source strings, then the NUL-terminated replacement strings its values point into.
class Charsmap {
public:
    Charsmap() = default;
    Charsmap(std::string_view blob, const std::string& where);  // FormatError when malformed
    bool empty() const { return trie_.empty(); }
    // The longest source string that prefixes `text`: (its replacement, its byte length);
    // length 0 when none does.
    std::pair<std::string_view, size_t> longest_prefix(std::string_view text) const;
    // The replacement of the shortest source string that prefixes `text`; false when none.
    bool shortest_prefix(std::string_view text, std::string_view& out) const;

private:
    // (length, value) of every source string that prefixes text, shortest first.
    std::vector<std::pair<size_t, uint32_t>> prefixes(std::string_view text) const;
    std::string_view replacement(uint32_t value) const;
    std::vector<uint32_t> trie_;
    std::string replacements_;
};

// One token of a unigram segmentation: text[start, end) is piece id.
struct UnigramPiece {
    size_t start, end;
    int32_t id;
};

// The unigram model's vocabulary as its Viterbi search sees it. Score is float for
// SentencePiece and double for `tokenizers` (their lattices add in those types).
template <class Score>
struct UnigramLattice {
    std::unordered_map<std::string_view, int32_t> id_of;  // pieces that may match the text
    std::vector<Score> score;                           // per id
    size_t max_piece_bytes = 0;
    Score unk_score = 0;  // for a character no piece starts with
    int32_t unk_id = -1;
};

// The best segmentation of `text` (both packages' "optimized" encode: for each end position
// the best path, ties kept by the first candidate, shorter pieces tried first, an unknown
// character one unk piece). Consecutive unk pieces are fused into one when fuse_unk.
// Throws FormatError (naming `where`) when a character needs the unk piece and there is none.
template <class Score>
std::vector<UnigramPiece> unigram_segment(const UnigramLattice<Score>& lat, std::string_view text,
                                          bool fuse_unk, const std::string& where);

// Byte length of the UTF-8 character starting text[0] when it is well formed, else 0.
size_t utf8_char_len(std::string_view text);

}  // namespace dasllama::pocket::tokenizer_parts

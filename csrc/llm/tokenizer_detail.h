// Internals shared by the tokenizer's files (tokenizer.cpp, tokenizer_spm.cpp,
// tokenizer_bpe.cpp, pretokenize.cpp; their common merge loop is tokenizer_merge.h).
// Not part of the public API.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dasllama::tokenizer_detail {

// Token attributes (from tokenizer.ggml.token_type, plus what llama.cpp infers from texts).
enum Attr : uint32_t {
    kNormal = 1u << 0,
    kUnknown = 1u << 1,
    kControl = 1u << 2,
    kUserDefined = 1u << 3,
    kByte = 1u << 4,
    kUnused = 1u << 5,
    kUndefined = 1u << 6,
};

// Pre-tokenizers (tokenizer.ggml.pre). Each is llama.cpp's regex list for that name,
// reimplemented as scanners over code points (pretokenize.cpp says which regex each pass is).
enum class PreType { kDefault, kGpt2, kLlama3, kQwen2, kSmollm };

// Maps text to an id without allocating: keys are views into an arena that outlives the map.
using TextMap = std::unordered_map<std::string_view, int32_t>;

// Special-token texts in a byte trie, to find every occurrence in a text in one pass.
struct SpecialTrie {
    std::unordered_map<uint64_t, int32_t> edges;  // (node << 8 | byte) -> child node
    std::vector<int32_t> token;                   // node -> token id ending there, or -1
    SpecialTrie() : token(1, -1) {}
    void insert(std::string_view text, int32_t id);
    int32_t child(int32_t node, uint8_t b) const {
        auto it = edges.find((uint64_t(uint32_t(node)) << 8) | b);
        return it == edges.end() ? -1 : it->second;
    }
};

struct Vocab {
    bool spm = false;  // "llama" (SentencePiece) vs "gpt2" (byte-level BPE)
    std::string arena;              // every token's text, back to back
    std::vector<uint32_t> offsets;  // n_vocab + 1 offsets into arena
    std::vector<float> scores;
    std::vector<uint32_t> attrs;
    TextMap token_of;

    // Byte-level BPE.
    PreType pre = PreType::kDefault;
    std::string pre_name = "default";
    std::string merge_arena;  // merge lines "left right", back to back
    TextMap merge_rank;       // "left right" -> rank
    bool ignore_merges = false;  // llama3: a word that is already a token is not merged

    bool add_space_prefix = false;
    bool add_bos = false;
    bool add_eos = false;
    int32_t bos = -1, eos = -1, unk = -1;
    std::vector<int32_t> eog;  // sorted

    // Special-token splitting: texts longest first (llama.cpp's order); rank[id] is the
    // position of a special token in that order, -1 for the others.
    std::vector<int32_t> special_rank;
    SpecialTrie special_trie;

    int32_t size() const { return static_cast<int32_t>(scores.size()); }
    std::string_view text(int32_t id) const {
        return std::string_view(arena).substr(offsets[id], offsets[id + 1] - offsets[id]);
    }
    int32_t find(std::string_view s) const {
        auto it = token_of.find(s);
        return it == token_of.end() ? -1 : it->second;
    }
    // The token for one raw byte: SentencePiece's <0xNN>, or a one-character token.
    int32_t byte_token(uint8_t b) const;
};

// Splits text into words (each a run of code points) as the pre-tokenizer's regexes would;
// returns the words' lengths in code points.
std::vector<size_t> pretokenize(PreType pre, const std::vector<uint32_t>& cps);

// Appends the ids of one raw-text fragment (already space-escaped) by SentencePiece merges.
void spm_encode(const Vocab& v, std::string_view text, std::vector<int32_t>& out);
// Appends the ids of one raw-text fragment by pre-tokenization and byte-level BPE merges.
void bpe_encode(const Vocab& v, std::string_view text, std::vector<int32_t>& out);
// The bytes a byte-level BPE token text stands for (GPT-2 table inverted).
std::string bpe_text_to_bytes(std::string_view text);

}  // namespace dasllama::tokenizer_detail

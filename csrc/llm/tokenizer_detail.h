// Internals shared by the tokenizer's files (tokenizer.cpp, tokenizer_spm.cpp,
// tokenizer_bpe.cpp, pretokenize.cpp; their common merge loop is tokenizer_merge.h).
// Not part of the public API.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <functional>
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

// Texts -> ids, the texts kept elsewhere (an arena and its offsets): an open-addressing table
// of ids alone, at most half full. A node-based map of string views took about 56 bytes an
// entry (14 MiB for a 262,144-token vocabulary); this takes 8. Finding never allocates.
class TextIndex {
public:
    // Indexes ids 0..n-1, text(id) giving each one's text; a text seen before keeps its first
    // id, and on_duplicate(first, id) is called for the later one.
    template <class TextOf, class OnDuplicate>
    void build(int32_t n, const TextOf& text, const OnDuplicate& on_duplicate) {
        size_t cap = 16;
        while (cap < 2 * size_t(n)) cap *= 2;
        slots_.assign(cap, -1);
        for (int32_t id = 0; id < n; ++id) {
            const std::string_view s = text(id);
            size_t at = std::hash<std::string_view>()(s) & (cap - 1);
            while (slots_[at] >= 0 && text(slots_[at]) != s) at = (at + 1) & (cap - 1);
            if (slots_[at] >= 0) on_duplicate(slots_[at], id);
            else slots_[at] = id;
        }
    }
    // The id of `s`, or -1.
    template <class TextOf>
    int32_t find(std::string_view s, const TextOf& text) const {
        if (slots_.empty()) return -1;
        const size_t mask = slots_.size() - 1;
        for (size_t at = std::hash<std::string_view>()(s) & mask; slots_[at] >= 0;
             at = (at + 1) & mask)
            if (text(slots_[at]) == s) return slots_[at];
        return -1;
    }

private:
    std::vector<int32_t> slots_;  // ids; -1: empty
};

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
    TextIndex token_of;             // text -> id

    // Byte-level BPE.
    PreType pre = PreType::kDefault;
    std::string pre_name = "default";
    std::string merge_arena;  // merge lines "left right", back to back
    std::vector<uint32_t> merge_offsets;  // n_merges + 1 offsets into merge_arena
    TextIndex merge_rank;     // "left right" -> rank (its index)
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
        return token_of.find(s, [this](int32_t id) { return text(id); });
    }
    std::string_view merge(int32_t rank) const {
        return std::string_view(merge_arena)
            .substr(merge_offsets[rank], merge_offsets[rank + 1] - merge_offsets[rank]);
    }
    // The rank of the merge "left right", or -1.
    int32_t merge_rank_of(std::string_view key) const {
        return merge_rank.find(key, [this](int32_t r) { return merge(r); });
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

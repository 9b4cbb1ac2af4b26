// Byte-level BPE encoding as llama.cpp does it: pre-tokenize into words, write each word's
// UTF-8 bytes as GPT-2's printable code points, then repeatedly apply the lowest-ranked merge
// among adjacent symbols (ties: leftmost). A final symbol that is not a token is spelt as
// single-byte-character tokens.
#include "llm/tokenizer_detail.h"
#include "llm/tokenizer_merge.h"
#include "llm/unicode.h"

namespace dasllama::tokenizer_detail {

namespace {

void merge_word(const Vocab& v, std::string_view word, std::string& key,
                std::vector<int32_t>& out) {
    if (v.ignore_merges) {
        const int32_t id = v.find(word);
        if (id >= 0) {
            out.push_back(id);
            return;
        }
    }
    // A lower rank merges first, so the priority is minus the rank (int64: no overflow).
    auto pair_priority = [&](const MergeSymbol& l, const MergeSymbol& r) -> std::optional<int64_t> {
        key.assign(word.substr(l.start, l.len));
        key.push_back(' ');
        key.append(word.substr(r.start, r.len));
        const int32_t rank = v.merge_rank_of(key);
        if (rank < 0) return std::nullopt;
        return -int64_t(rank);
    };
    greedy_merge<int64_t>(word, pair_priority, [&](std::string_view piece) {
        const int32_t id = v.find(piece);
        if (id >= 0) {
            out.push_back(id);
            return;
        }
        // As llama.cpp: look each byte of the encoded text up as a one-byte token; the bytes
        // of a multi-byte code point are not tokens and are dropped.
        for (char c : piece) {
            const int32_t b = v.find(std::string_view(&c, 1));
            if (b >= 0) out.push_back(b);
        }
    });
}

}  // namespace

void bpe_encode(const Vocab& v, std::string_view text, std::vector<int32_t>& out) {
    const std::vector<uint32_t> cps = unicode::decode_utf8(text);
    const std::vector<size_t> words = pretokenize(v.pre, cps);
    std::string word, key;
    size_t start = 0;
    for (size_t len : words) {
        word.clear();
        std::string raw;
        for (size_t i = start; i < start + len; ++i) unicode::append_utf8(raw, cps[i]);
        for (char c : raw) unicode::append_utf8(word, unicode::byte_to_cp(static_cast<uint8_t>(c)));
        merge_word(v, word, key, out);
        start += len;
    }
}

std::string bpe_text_to_bytes(std::string_view text) {
    std::string out;
    for (uint32_t cp : unicode::decode_utf8(text)) {
        const int b = unicode::cp_to_byte(cp);
        // A code point outside GPT-2's table (a vocabulary written with raw text) is kept
        // as its UTF-8; llama.cpp would print a "[UNK_BYTE_...]" marker instead.
        if (b >= 0) out.push_back(static_cast<char>(b));
        else unicode::append_utf8(out, cp);
    }
    return out;
}

}  // namespace dasllama::tokenizer_detail

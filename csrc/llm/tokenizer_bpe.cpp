// Byte-level BPE encoding as llama.cpp does it: pre-tokenize into words, write each word's
// UTF-8 bytes as GPT-2's printable code points, then repeatedly apply the lowest-ranked merge
// among adjacent symbols (ties: leftmost). A final symbol that is not a token is spelt as
// single-byte-character tokens.
#include <queue>

#include "llm/tokenizer_detail.h"
#include "llm/unicode.h"

namespace dasllama::tokenizer_detail {

namespace {

struct Symbol {
    int32_t prev, next;
    size_t start, len;  // bytes of the encoded word; len 0 once merged into its left neighbour
};

struct Bigram {
    int32_t left, right;
    int32_t rank;
    size_t len;  // left.len + right.len when queued: a later mismatch means it is stale
};

struct BigramOrder {
    bool operator()(const Bigram& a, const Bigram& b) const {
        return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    }
};

void merge_word(const Vocab& v, std::string_view word, std::string& key,
                std::vector<int32_t>& out) {
    if (v.ignore_merges) {
        const int32_t id = v.find(word);
        if (id >= 0) {
            out.push_back(id);
            return;
        }
    }
    std::vector<Symbol> sym;
    for (size_t off = 0; off < word.size();) {
        const size_t len = std::min(unicode::utf8_seq_len(static_cast<uint8_t>(word[off])),
                                    word.size() - off);
        const auto i = static_cast<int32_t>(sym.size());
        sym.push_back({i - 1, off + len == word.size() ? -1 : i + 1, off, len});
        off += len;
    }

    std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
    auto try_pair = [&](int32_t l, int32_t r) {
        if (l < 0 || r < 0) return;
        key.assign(word.substr(sym[l].start, sym[l].len));
        key.push_back(' ');
        key.append(word.substr(sym[r].start, sym[r].len));
        auto it = v.merge_rank.find(key);
        if (it != v.merge_rank.end()) queue.push({l, r, it->second, sym[l].len + sym[r].len});
    };
    for (int32_t i = 1; i < static_cast<int32_t>(sym.size()); ++i) try_pair(i - 1, i);

    while (!queue.empty()) {
        const Bigram b = queue.top();
        queue.pop();
        Symbol& l = sym[b.left];
        Symbol& r = sym[b.right];
        if (l.len == 0 || r.len == 0 || l.len + r.len != b.len) continue;
        l.len += r.len;
        r.len = 0;
        l.next = r.next;
        if (r.next >= 0) sym[r.next].prev = b.left;
        try_pair(l.prev, b.left);
        try_pair(b.left, l.next);
    }

    for (int32_t i = sym.empty() ? -1 : 0; i >= 0; i = sym[i].next) {
        const std::string_view piece = word.substr(sym[i].start, sym[i].len);
        const int32_t id = v.find(piece);
        if (id >= 0) {
            out.push_back(id);
            continue;
        }
        // As llama.cpp: look each byte of the encoded text up as a one-byte token; the bytes
        // of a multi-byte code point are not tokens and are dropped.
        for (char c : piece) {
            const int32_t b = v.find(std::string_view(&c, 1));
            if (b >= 0) out.push_back(b);
        }
    }
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

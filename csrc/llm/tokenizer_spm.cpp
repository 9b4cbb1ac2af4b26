// SentencePiece-style encoding as llama.cpp does it: split the (space-escaped) text into
// UTF-8 symbols, then repeatedly merge the adjacent pair whose concatenation is the
// highest-scoring vocabulary token (ties: leftmost), and fall back to <0xNN> byte tokens for
// a symbol that is not a token. This is a greedy bigram merge, not unigram Viterbi.
#include <queue>

#include "llm/tokenizer_detail.h"
#include "llm/unicode.h"

namespace dasllama::tokenizer_detail {

namespace {

struct Symbol {
    int32_t prev, next;
    size_t start, len;  // bytes of the text; len 0 once merged into its left neighbour
};

struct Bigram {
    int32_t left, right;
    float score;
    size_t len;  // left.len + right.len when queued: a later mismatch means it is stale
};

struct BigramOrder {
    bool operator()(const Bigram& a, const Bigram& b) const {
        return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
};

}  // namespace

void spm_encode(const Vocab& v, std::string_view text, std::vector<int32_t>& out) {
    std::vector<Symbol> sym;
    sym.reserve(text.size());
    for (size_t off = 0; off < text.size();) {
        const size_t len = std::min(unicode::utf8_seq_len(static_cast<uint8_t>(text[off])),
                                    text.size() - off);
        const auto i = static_cast<int32_t>(sym.size());
        sym.push_back({i - 1, off + len == text.size() ? -1 : i + 1, off, len});
        off += len;
    }

    std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
    auto try_pair = [&](int32_t l, int32_t r) {
        if (l < 0 || r < 0) return;
        const size_t len = sym[l].len + sym[r].len;
        const int32_t id = v.find(text.substr(sym[l].start, len));
        if (id >= 0) queue.push({l, r, v.scores[id], len});
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
        const std::string_view piece = text.substr(sym[i].start, sym[i].len);
        const int32_t id = v.find(piece);
        if (id >= 0) {
            out.push_back(id);
            continue;
        }
        // Only a single symbol can be left unmatched (every merge produced a token).
        for (char c : piece) {
            const int32_t b = v.byte_token(static_cast<uint8_t>(c));
            if (b >= 0) out.push_back(b);
        }
    }
}

}  // namespace dasllama::tokenizer_detail

// The greedy bigram merge both tokenizers run (tokenizer_spm.cpp, tokenizer_bpe.cpp), as
// llama.cpp does it: split a text into UTF-8 characters, then repeatedly merge the adjacent
// pair with the highest priority (ties: leftmost) until no pair has one. The tokenizers differ
// only in what a pair's priority is (SentencePiece: the merged token's score; BPE: minus the
// merge's rank) and in how they spell the pieces left over. Not part of the public API.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <queue>
#include <string_view>
#include <vector>

#include "llm/unicode.h"

namespace dasllama::tokenizer_detail {

// One symbol of the text being merged, in a doubly linked list over the text's characters.
struct MergeSymbol {
    int32_t prev, next;
    size_t start, len;  // bytes of the text; len 0 once merged into its left neighbour
};

// Merges `text` greedily and calls emit(piece) for each final symbol, left to right.
// pair_priority(left, right) returns the priority of merging two adjacent symbols, or nullopt
// when they may not merge; Priority is any totally ordered type (higher merges first).
template <class Priority, class PairPriority, class Emit>
void greedy_merge(std::string_view text, PairPriority&& pair_priority, Emit&& emit) {
    struct Bigram {
        int32_t left, right;
        Priority priority;
        size_t len;  // left.len + right.len when queued: a later mismatch means it is stale
    };
    struct BigramOrder {
        bool operator()(const Bigram& a, const Bigram& b) const {
            return a.priority < b.priority || (a.priority == b.priority && a.left > b.left);
        }
    };

    std::vector<MergeSymbol> sym;
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
        const std::optional<Priority> p = pair_priority(sym[l], sym[r]);
        if (p) queue.push({l, r, *p, sym[l].len + sym[r].len});
    };
    for (int32_t i = 1; i < static_cast<int32_t>(sym.size()); ++i) try_pair(i - 1, i);

    while (!queue.empty()) {
        const Bigram b = queue.top();
        queue.pop();
        MergeSymbol& l = sym[b.left];
        MergeSymbol& r = sym[b.right];
        if (l.len == 0 || r.len == 0 || l.len + r.len != b.len) continue;
        l.len += r.len;
        r.len = 0;
        l.next = r.next;
        if (r.next >= 0) sym[r.next].prev = b.left;
        try_pair(l.prev, b.left);
        try_pair(b.left, l.next);
    }

    for (int32_t i = sym.empty() ? -1 : 0; i >= 0; i = sym[i].next)
        emit(text.substr(sym[i].start, sym[i].len));
}

}  // namespace dasllama::tokenizer_detail

// SentencePiece-style encoding as llama.cpp does it: split the (space-escaped) text into
// UTF-8 symbols, then repeatedly merge the adjacent pair whose concatenation is the
// highest-scoring vocabulary token (ties: leftmost), and fall back to <0xNN> byte tokens for
// a symbol that is not a token. This is a greedy bigram merge, not unigram Viterbi.
#include "llm/tokenizer_detail.h"
#include "llm/tokenizer_merge.h"

namespace dasllama::tokenizer_detail {

void spm_encode(const Vocab& v, std::string_view text, std::vector<int32_t>& out) {
    // Adjacent symbols are adjacent bytes of the text, so the merged token is one substring.
    auto pair_priority = [&](const MergeSymbol& l, const MergeSymbol& r) -> std::optional<float> {
        const int32_t id = v.find(text.substr(l.start, l.len + r.len));
        if (id < 0) return std::nullopt;
        return v.scores[id];
    };
    greedy_merge<float>(text, pair_priority, [&](std::string_view piece) {
        const int32_t id = v.find(piece);
        if (id >= 0) {
            out.push_back(id);
            return;
        }
        // Only a single symbol can be left unmatched (every merge produced a token).
        for (char c : piece) {
            const int32_t b = v.byte_token(static_cast<uint8_t>(c));
            if (b >= 0) out.push_back(b);
        }
    });
}

}  // namespace dasllama::tokenizer_detail

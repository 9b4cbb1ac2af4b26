// Tokenizer: special-token splitting, the encode loop around the SentencePiece / BPE
// encoders, and decoding. Loading lives in tokenizer_load.cpp.
#include "llm/tokenizer.h"

#include <algorithm>
#include <stdexcept>

#include "llm/tokenizer_detail.h"

namespace dasllama {

using namespace tokenizer_detail;

namespace {

const std::string kEscapedSpace = "\xe2\x96\x81";  // U+2581, SentencePiece's space

struct Fragment {
    int32_t token;  // -1 for raw text
    size_t start, len;
};

// Splits text at special tokens exactly as llama.cpp does: for each special token, longest
// text first, every leftmost non-overlapping occurrence that lies wholly in text not yet
// claimed by an earlier (longer) token becomes that token. Control and unknown tokens take
// part only with parse_special; user-defined tokens always do.
std::vector<Fragment> split_special(const Vocab& v, std::string_view text, bool parse_special) {
    struct Hit {
        int32_t rank, token;
        size_t pos, len;
    };
    std::vector<Hit> hits;
    const SpecialTrie& trie = v.special_trie;
    for (size_t pos = 0; pos < text.size(); ++pos) {
        int32_t node = 0;
        for (size_t j = pos; j < text.size(); ++j) {
            node = trie.child(node, static_cast<uint8_t>(text[j]));
            if (node < 0) break;
            const int32_t id = trie.token[node];
            if (id < 0) continue;
            if (!parse_special && (v.attrs[id] & (kControl | kUnknown))) continue;
            hits.push_back({v.special_rank[id], id, pos, j + 1 - pos});
        }
    }
    std::vector<Fragment> frags;
    if (hits.empty()) {
        if (!text.empty()) frags.push_back({-1, 0, text.size()});
        return frags;
    }
    std::sort(hits.begin(), hits.end(), [](const Hit& a, const Hit& b) {
        return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos;
    });
    std::vector<uint8_t> claimed(text.size(), 0);
    std::vector<Fragment> matches;
    int32_t cur_token = -1;
    size_t cur_end = 0;  // end of the current token's last match (matches do not overlap)
    for (const Hit& h : hits) {
        if (h.token != cur_token) {
            cur_token = h.token;
            cur_end = 0;
        }
        if (h.pos < cur_end) continue;
        bool free = true;
        for (size_t i = h.pos; i < h.pos + h.len && free; ++i) free = !claimed[i];
        if (!free) continue;
        std::fill(claimed.begin() + h.pos, claimed.begin() + h.pos + h.len, 1);
        matches.push_back({h.token, h.pos, h.len});
        cur_end = h.pos + h.len;
    }
    std::sort(matches.begin(), matches.end(),
              [](const Fragment& a, const Fragment& b) { return a.start < b.start; });
    size_t at = 0;
    for (const Fragment& m : matches) {
        if (m.start > at) frags.push_back({-1, at, m.start - at});
        frags.push_back(m);
        at = m.start + m.len;
    }
    if (at < text.size()) frags.push_back({-1, at, text.size() - at});
    return frags;
}

std::string escape_spaces(std::string_view text, bool prefix_space) {
    std::string out;
    out.reserve(text.size() + 8);
    if (prefix_space) out += kEscapedSpace;
    for (char c : text) {
        if (c == ' ') out += kEscapedSpace;
        else out.push_back(c);
    }
    return out;
}

std::string unescape_spaces(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
        if (text.compare(i, kEscapedSpace.size(), kEscapedSpace) == 0) {
            out.push_back(' ');
            i += kEscapedSpace.size();
        } else {
            out.push_back(text[i++]);
        }
    }
    return out;
}

int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Vocab> v) : v_(std::move(v)) {}
Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
    const Vocab& v = *v_;
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 4);
    if (add_special && v.add_bos) out.push_back(v.bos);
    // SentencePiece adds a space before text that starts the input or follows a special token.
    bool after_special = true;
    for (const Fragment& f : split_special(v, text, parse_special)) {
        if (f.token >= 0) {
            out.push_back(f.token);
            after_special = true;
            continue;
        }
        const std::string_view raw = text.substr(f.start, f.len);
        if (v.spm) spm_encode(v, escape_spaces(raw, v.add_space_prefix && after_special), out);
        else bpe_encode(v, raw, out);
        after_special = false;
    }
    if (add_special && v.add_eos) out.push_back(v.eos);
    return out;
}

std::string Tokenizer::piece(int32_t id) const {
    const Vocab& v = *v_;
    if (id < 0 || id >= v.size())
        throw std::out_of_range("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                std::to_string(v.size()) + ")");
    const uint32_t a = v.attrs[id];
    const std::string_view text = v.text(id);
    if (a & (kControl | kUnknown | kUserDefined)) return std::string(text);
    if (a & kNormal) return v.spm ? unescape_spaces(text) : bpe_text_to_bytes(text);
    if (a & kByte) {
        // "<0xNN>"; anything else declared as a byte token is shown as it is written.
        if (text.size() == 6 && text.substr(0, 3) == "<0x" && text[5] == '>' &&
            hex_digit(text[3]) >= 0 && hex_digit(text[4]) >= 0)
            return std::string(1, static_cast<char>(hex_digit(text[3]) * 16 + hex_digit(text[4])));
        return std::string(text);
    }
    return std::string();  // unused / undefined tokens render as nothing, as in llama.cpp
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
    const Vocab& v = *v_;
    std::string out;
    bool strip_space = v.add_space_prefix;  // only ever the first token's
    for (int32_t id : ids) {
        if (id < 0 || id >= v.size()) piece(id);  // throws, naming the id
        if (v.attrs[id] & (kControl | kUnknown)) {
            strip_space = false;
            continue;
        }
        std::string p = piece(id);
        out.append(p, strip_space && !p.empty() && p[0] == ' ' ? 1 : 0, std::string::npos);
        strip_space = false;
    }
    return out;
}

int32_t Tokenizer::n_vocab() const { return v_->size(); }
int32_t Tokenizer::bos_id() const { return v_->bos; }
int32_t Tokenizer::eos_id() const { return v_->eos; }
bool Tokenizer::add_bos() const { return v_->add_bos; }
bool Tokenizer::add_eos() const { return v_->add_eos; }
const std::vector<int32_t>& Tokenizer::eog_ids() const { return v_->eog; }
bool Tokenizer::is_eog(int32_t id) const {
    return std::binary_search(v_->eog.begin(), v_->eog.end(), id);
}
bool Tokenizer::is_control(int32_t id) const {
    return id >= 0 && id < v_->size() && (v_->attrs[id] & (kControl | kUnknown)) != 0;
}
const char* Tokenizer::kind() const { return v_->spm ? "spm" : "bpe"; }
const std::string& Tokenizer::pre() const { return v_->pre_name; }

}  // namespace dasllama

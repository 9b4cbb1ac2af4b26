// A HuggingFace `tokenizers` JSON as Pocket TTS uses it (tokenizer.h lists what is covered).
// The pipeline is the package's: split out added tokens, normalize each remaining segment,
// pre-tokenize it into words (Metaspace), run the model on each word; decode maps ids to
// tokens, drops special ones and runs the decoder chain.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <queue>
#include <unordered_map>

#include "core/errors.h"
#include "core/gguf.h"
#include "llm/unicode.h"
#include "tts/pocket/json.h"
#include "tts/pocket/tokenizer.h"
#include "tts/pocket/tokenizer_parts.h"

namespace dasllama::pocket {

namespace {

using tokenizer_parts::Charsmap;
using tokenizer_parts::UnigramLattice;

constexpr double kUnigramUnkPenalty = 10.0;  // the unk piece scores min_score - 10

[[noreturn]] void unsupported(const std::string& where, const std::string& what) {
    throw FormatError(where + ": " + what + " is not supported by the Pocket tokenizer");
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
    if (from.empty()) return std::string(s);
    std::string out;
    for (size_t i = 0; i < s.size();) {
        if (s.compare(i, from.size(), from) == 0) {
            out += to;
            i += from.size();
        } else {
            out += s[i++];
        }
    }
    return out;
}

bool rust_whitespace(uint32_t cp) { return unicode::classify(cp).whitespace; }

std::string base64_decode(std::string_view s, const std::string& where) {
    auto value = [](char c) -> int {
        if (c >= 'A' && c <= 'Z') return c - 'A';
        if (c >= 'a' && c <= 'z') return c - 'a' + 26;
        if (c >= '0' && c <= '9') return c - '0' + 52;
        if (c == '+') return 62;
        if (c == '/') return 63;
        return -1;
    };
    std::string out;
    uint32_t acc = 0;
    int bits = 0;
    for (char c : s) {
        if (c == '=') break;
        const int v = value(c);
        if (v < 0) throw FormatError(where + ": precompiled_charsmap is not base64");
        acc = (acc << 6) | uint32_t(v);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out += char((acc >> bits) & 0xFF);
        }
    }
    return out;
}

// ---------------------------------------------------------------------------------------------
// Normalizers (one segment's text at a time)
// ---------------------------------------------------------------------------------------------

struct Normalizer {
    enum Kind { kPrepend, kReplace, kReplaceRun, kStrip, kPrecompiled } kind;
    std::string a, b;  // Prepend: a; Replace: a -> b; ReplaceRun: runs of a -> b
    size_t min_run = 1;  // ReplaceRun: the shortest run replaced
    bool left = false, right = false;
    Charsmap charsmap = {};
};

// The Precompiled normalizer (tokenizers' precompiled.rs): a grapheme cluster shorter than 6
// bytes that some source string prefixes is replaced whole by the shortest such string's
// replacement; otherwise each character is replaced by its own entry, if any. Clusters are
// approximated as a character and the combining marks (and zero-width joiners) after it:
// exact for text without other multi-character clusters.
std::string precompiled_normalize(const Charsmap& m, std::string_view s) {
    std::string out;
    size_t i = 0;
    while (i < s.size()) {
        size_t end = i + std::max<size_t>(1, tokenizer_parts::utf8_char_len(s.substr(i)));
        while (end < s.size()) {
            const size_t len = tokenizer_parts::utf8_char_len(s.substr(end));
            if (len == 0) break;
            const uint32_t cp = unicode::decode_utf8(s.substr(end, len))[0];
            if (!(unicode::classify(cp).cat == unicode::UCat::MARK || cp == 0x200D)) break;
            end += len;
        }
        std::string_view cluster = s.substr(i, end - i), rep;
        if (cluster.size() < 6 && m.shortest_prefix(cluster, rep)) {
            out += rep;
        } else {
            for (size_t j = 0; j < cluster.size();) {
                const size_t len = std::max<size_t>(1, tokenizer_parts::utf8_char_len(cluster.substr(j)));
                const std::string_view ch = cluster.substr(j, len);
                out += m.shortest_prefix(ch, rep) ? rep : ch;
                j += len;
            }
        }
        i = end;
    }
    return out;
}

std::string apply(const Normalizer& n, std::string s) {
    switch (n.kind) {
    case Normalizer::kPrepend:
        return s.empty() ? s : n.a + s;
    case Normalizer::kReplace:
        return replace_all(s, n.a, n.b);
    case Normalizer::kReplaceRun: {
        std::string out;
        for (size_t i = 0; i < s.size();) {
            size_t run = 0;
            while (s.compare(i + run * n.a.size(), n.a.size(), n.a) == 0) ++run;
            if (run >= n.min_run) out += n.b, i += run * n.a.size();
            else if (run > 0) out.append(s, i, run * n.a.size()), i += run * n.a.size();
            else out += s[i++];
        }
        return out;
    }
    case Normalizer::kStrip: {
        std::vector<uint32_t> cps = unicode::decode_utf8(s);
        size_t lo = 0, hi = cps.size();
        if (n.left) while (lo < hi && rust_whitespace(cps[lo])) ++lo;
        if (n.right) while (hi > lo && rust_whitespace(cps[hi - 1])) --hi;
        std::string out;
        for (size_t i = lo; i < hi; ++i) unicode::append_utf8(out, cps[i]);
        return out;
    }
    case Normalizer::kPrecompiled:
        return precompiled_normalize(n.charsmap, s);
    }
    return s;
}

// ---------------------------------------------------------------------------------------------
// Decoders (a list of token strings in, a list out)
// ---------------------------------------------------------------------------------------------

struct Decoder {
    enum Kind { kMetaspace, kReplace, kByteFallback, kFuse, kStrip } kind;
    std::string a, b;       // Metaspace: replacement; Replace: a -> b; Strip: content
    bool prepend = true;    // Metaspace: the first token's replacement characters are dropped
    size_t start = 0, stop = 0;  // Strip
};

int byte_token_value(std::string_view t) {
    if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
    int v = 0;
    for (char c : t.substr(3, 2)) {
        v <<= 4;
        if (c >= '0' && c <= '9') v |= c - '0';
        else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
        else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
        else return -1;
    }
    return v;
}

std::vector<std::string> apply(const Decoder& d, std::vector<std::string> tokens) {
    switch (d.kind) {
    case Decoder::kMetaspace:
        for (size_t i = 0; i < tokens.size(); ++i)
            tokens[i] = replace_all(tokens[i], d.a, (i == 0 && d.prepend) ? "" : " ");
        return tokens;
    case Decoder::kReplace:
        for (auto& t : tokens) t = replace_all(t, d.a, d.b);
        return tokens;
    case Decoder::kFuse: {
        std::string all;
        for (auto& t : tokens) all += t;
        return {all};
    }
    case Decoder::kStrip:
        for (auto& t : tokens) {
            std::vector<uint32_t> cps = unicode::decode_utf8(t);
            const std::vector<uint32_t> c = unicode::decode_utf8(d.a);
            size_t lo = 0, hi = cps.size();
            if (c.size() == 1) {
                for (size_t k = 0; k < d.start && lo < hi && cps[lo] == c[0]; ++k) ++lo;
                for (size_t k = 0; k < d.stop && hi > lo && cps[hi - 1] == c[0]; ++k) --hi;
            }
            std::string out;
            for (size_t i = lo; i < hi; ++i) unicode::append_utf8(out, cps[i]);
            t = out;
        }
        return tokens;
    case Decoder::kByteFallback: {
        // Runs of <0xNN> tokens become their bytes when those are valid UTF-8, else one
        // U+FFFD per byte.
        std::vector<std::string> out;
        std::string bytes;
        size_t n_bytes = 0;
        auto flush = [&] {
            if (n_bytes == 0) return;
            bool valid = true;
            for (size_t i = 0; i < bytes.size();) {
                const size_t len = tokenizer_parts::utf8_char_len(std::string_view(bytes).substr(i));
                if (len == 0) { valid = false; break; }
                i += len;
            }
            if (valid) out.push_back(bytes);
            else for (size_t i = 0; i < n_bytes; ++i) out.push_back("\xEF\xBF\xBD");
            bytes.clear();
            n_bytes = 0;
        };
        for (auto& t : tokens) {
            const int v = byte_token_value(t);
            if (v >= 0) {
                bytes += char(v);
                ++n_bytes;
            } else {
                flush();
                out.push_back(t);
            }
        }
        flush();
        return out;
    }
    }
    return tokens;
}

// ---------------------------------------------------------------------------------------------
// The tokenizer
// ---------------------------------------------------------------------------------------------

struct AddedToken {
    std::string content;
    int32_t id;
    bool special;
};

class HFTokenizer final : public TextTokenizer {
public:
    HFTokenizer(const Json& root, const std::string& where) : where_(where) {
        load_model(root.at("model", where), where + ": model");
        load_added(root, where);
        load_normalizer(root.get("normalizer"), where + ": normalizer");
        load_pre_tokenizer(root.get("pre_tokenizer"), where + ": pre_tokenizer");
        load_decoder(root.get("decoder"), where + ": decoder");
        check_post_processor(root.get("post_processor"), where + ": post_processor");
    }

    std::vector<int32_t> encode(std::string_view text) const override {
        std::vector<int32_t> ids;
        size_t seg = 0;
        auto run_segment = [&](size_t end) {
            if (end > seg) encode_segment(text.substr(seg, end - seg), seg == 0, ids);
        };
        for (size_t i = 0; i < text.size();) {
            const AddedToken* hit = match_added(text.substr(i));
            if (!hit) {
                ++i;
                continue;
            }
            run_segment(i);
            ids.push_back(hit->id);
            i += hit->content.size();
            seg = i;
        }
        run_segment(text.size());
        return ids;
    }

    std::string decode(const std::vector<int32_t>& ids) const override {
        std::vector<std::string> tokens;
        for (int32_t id : ids) {
            check_id(id);
            if (special_[size_t(id)]) continue;
            tokens.push_back(vocab_[size_t(id)]);
        }
        std::string out;
        if (decoders_.empty() && !has_decoder_) {
            for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
            return out;
        }
        for (const Decoder& d : decoders_) tokens = apply(d, std::move(tokens));
        for (auto& t : tokens) out += t;
        return out;
    }

    std::string piece(int32_t id) const override {
        check_id(id);
        return vocab_[size_t(id)];
    }
    int32_t n_vocab() const override { return int32_t(vocab_.size()); }
    int32_t unk_id() const override { return unk_; }
    const char* kind() const override { return "tokenizers"; }

private:
    // ----- loading -----

    void load_model(const Json& m, const std::string& where) {
        const std::string type = m.at("type", where).str(where + ".type");
        if (type == "BPE") load_bpe(m, where);
        else if (type == "Unigram") load_unigram(m, where);
        else unsupported(where, "model type '" + type + "'");
    }

    void set_vocab(int32_t id, const std::string& text, const std::string& where) {
        if (id < 0 || id > 10'000'000)
            throw FormatError(where + ": token id " + std::to_string(id) + " is out of range");
        if (size_t(id) >= vocab_.size()) vocab_.resize(size_t(id) + 1), special_.resize(vocab_.size());
        vocab_[size_t(id)] = text;
    }

    void index_vocab() {
        for (size_t i = 0; i < vocab_.size(); ++i) id_of_.emplace(vocab_[i], int32_t(i));
    }

    void load_bpe(const Json& m, const std::string& where) {
        bpe_ = true;
        if (!m.get("dropout").is_null() && m.get("dropout").num(where) != 0)
            unsupported(where, "BPE dropout");
        for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
            if (!m.get(k).is_null() && !m.get(k).str(where).empty())
                unsupported(where, std::string("BPE ") + k);
        fuse_unk_ = m.get("fuse_unk").boolean(false);
        byte_fallback_ = m.get("byte_fallback").boolean(false);
        ignore_merges_ = m.get("ignore_merges").boolean(false);
        for (const auto& [text, id] : m.at("vocab", where).object(where + ".vocab"))
            set_vocab(int32_t(id.num(where + ".vocab")), text, where + ".vocab");
        index_vocab();
        const Json& unk = m.get("unk_token");
        if (!unk.is_null()) {
            unk_ = vocab_id(unk.str(where + ".unk_token"));
            if (unk_ < 0) throw FormatError(where + ".unk_token '" + unk.str(where) +
                                            "' is not in the vocabulary");
        }
        const auto& merges = m.at("merges", where).array(where + ".merges");
        for (size_t r = 0; r < merges.size(); ++r) {
            std::string left, right;
            const std::string w = where + ".merges[" + std::to_string(r) + "]";
            if (merges[r].is_array()) {
                const auto& pair = merges[r].array(w);
                if (pair.size() != 2) throw FormatError(w + ": expected a pair");
                left = pair[0].str(w), right = pair[1].str(w);
            } else {
                const std::string line = merges[r].str(w);
                const size_t sp = line.find(' ', 1);
                if (sp == std::string::npos) throw FormatError(w + ": expected 'left right'");
                left = line.substr(0, sp), right = line.substr(sp + 1);
            }
            const int32_t a = vocab_id(left), b = vocab_id(right), c = vocab_id(left + right);
            if (a < 0 || b < 0 || c < 0)
                throw FormatError(w + ": '" + left + "' '" + right + "' is not in the vocabulary");
            merges_[pair_key(a, b)] = {int32_t(r), c};  // a repeated pair: the last wins
        }
    }

    void load_unigram(const Json& m, const std::string& where) {
        const auto& vocab = m.at("vocab", where).array(where + ".vocab");
        if (vocab.empty()) throw FormatError(where + ".vocab is empty");
        std::vector<double> scores;
        for (size_t i = 0; i < vocab.size(); ++i) {
            const std::string w = where + ".vocab[" + std::to_string(i) + "]";
            const auto& entry = vocab[i].array(w);
            if (entry.size() != 2) throw FormatError(w + ": expected [piece, score]");
            set_vocab(int32_t(i), entry[0].str(w), w);
            scores.push_back(entry[1].num(w));
        }
        index_vocab();
        byte_fallback_ = m.get("byte_fallback").boolean(false);
        const Json& unk = m.get("unk_id");
        if (!unk.is_null()) {
            unk_ = int32_t(unk.num(where + ".unk_id"));
            if (unk_ < 0 || size_t(unk_) >= vocab.size())
                throw FormatError(where + ".unk_id " + std::to_string(unk_) + " is out of range");
        }
        lattice_.score = scores;
        lattice_.unk_id = unk_;
        double min_score = scores[0];
        for (size_t i = 0; i < vocab.size(); ++i) {
            min_score = std::min(min_score, scores[i]);
            lattice_.id_of.emplace(vocab_[i], int32_t(i));  // first id wins, as the package's map
            lattice_.max_piece_bytes = std::max(lattice_.max_piece_bytes, vocab_[i].size());
        }
        lattice_.unk_score = min_score - kUnigramUnkPenalty;
    }

    void load_added(const Json& root, const std::string& where) {
        const Json& added = root.get("added_tokens");
        if (added.is_null()) return;
        const auto& list = added.array(where + ": added_tokens");
        for (size_t i = 0; i < list.size(); ++i) {
            const std::string w = where + ": added_tokens[" + std::to_string(i) + "]";
            const Json& t = list[i];
            for (const char* flag : {"single_word", "lstrip", "rstrip"})
                if (t.get(flag).boolean(false)) unsupported(w, std::string(flag));
            AddedToken a{t.at("content", w).str(w), int32_t(t.at("id", w).num(w)),
                         t.get("special").boolean(false)};
            if (a.content.empty()) continue;
            if (a.id < 0 || size_t(a.id) >= vocab_.size())
                throw FormatError(w + ": id " + std::to_string(a.id) + " is outside the vocabulary");
            if (vocab_[size_t(a.id)] != a.content)
                throw FormatError(w + ": '" + a.content + "' is not token " + std::to_string(a.id));
            special_[size_t(a.id)] = a.special;
            added_.push_back(a);
        }
        // Leftmost-longest: at a position, the longest added token that matches.
        std::sort(added_.begin(), added_.end(), [](const AddedToken& x, const AddedToken& y) {
            return x.content.size() > y.content.size();
        });
    }

    void load_normalizer(const Json& n, const std::string& where) {
        if (n.is_null()) return;
        const std::string type = n.at("type", where).str(where);
        if (type == "Sequence") {
            const auto& list = n.at("normalizers", where).array(where);
            for (size_t i = 0; i < list.size(); ++i)
                load_normalizer(list[i], where + "[" + std::to_string(i) + "]");
        } else if (type == "Prepend") {
            normalizers_.push_back({Normalizer::kPrepend, n.at("prepend", where).str(where), ""});
        } else if (type == "Replace") {
            const std::string content = n.at("content", where).str(where);
            size_t min_run = 0;
            const Json& regex = n.at("pattern", where).get("Regex");
            if (!regex.is_null()) {
                Normalizer r{Normalizer::kReplaceRun, run_regex(regex.str(where), min_run, where), content};
                r.min_run = min_run;
                normalizers_.push_back(std::move(r));
            } else {
                normalizers_.push_back({Normalizer::kReplace, string_pattern(n, where), content});
            }
        } else if (type == "Strip") {
            Normalizer s{Normalizer::kStrip, "", ""};
            s.left = n.get("strip_left").boolean(false);
            s.right = n.get("strip_right").boolean(false);
            normalizers_.push_back(std::move(s));
        } else if (type == "Precompiled") {
            Normalizer p{Normalizer::kPrecompiled, "", ""};
            const Json& blob = n.get("precompiled_charsmap");
            if (!blob.is_null())
                p.charsmap = Charsmap(base64_decode(blob.str(where), where), where);
            normalizers_.push_back(std::move(p));
        } else {
            unsupported(where, "normalizer '" + type + "'");
        }
    }

    // The one kind of regex converted SentencePiece tokenizers use: a run of one literal
    // character, "c{n,}" or "c+". Returns the character (UTF-8) and sets the shortest run.
    static std::string run_regex(const std::string& re, size_t& min_run, const std::string& where) {
        const std::vector<uint32_t> cps = unicode::decode_utf8(re);
        size_t i = 0;
        if (!cps.empty() && cps[0] == '\\') ++i;
        if (i < cps.size() && (i == 1 || std::string_view("\\.^$|?*+()[]{}").find(char(cps[0])) ==
                                             std::string_view::npos)) {
            std::string c;
            unicode::append_utf8(c, cps[i]);
            std::string rest;
            for (size_t k = i + 1; k < cps.size(); ++k) unicode::append_utf8(rest, cps[k]);
            if (rest == "+") return min_run = 1, c;
            if (rest.size() >= 4 && rest.front() == '{' && rest.substr(rest.size() - 2) == ",}" &&
                rest.find_first_not_of("0123456789", 1) == rest.size() - 2) {
                min_run = std::stoul(rest.substr(1, rest.size() - 3));
                if (min_run > 0) return c;
            }
        }
        unsupported(where, "Replace regex '" + re + "' (only a run of one character: c{n,}, c+)");
    }

    static std::string string_pattern(const Json& n, const std::string& where) {
        const Json& p = n.at("pattern", where);
        if (!p.get("String").is_null()) return p.get("String").str(where + ".pattern");
        unsupported(where, "a Replace pattern other than a plain string");
    }

    void load_pre_tokenizer(const Json& p, const std::string& where) {
        if (p.is_null()) return;
        const std::string type = p.at("type", where).str(where);
        if (type == "Sequence") {
            const auto& list = p.at("pretokenizers", where).array(where);
            if (list.size() > 1) unsupported(where, "a Sequence of several pre-tokenizers");
            for (const Json& q : list) load_pre_tokenizer(q, where);
            return;
        }
        if (type != "Metaspace") unsupported(where, "pre-tokenizer '" + type + "'");
        metaspace_ = true;
        replacement_ = p.at("replacement", where).str(where);
        if (unicode::decode_utf8(replacement_).size() != 1)
            throw FormatError(where + ".replacement must be one character");
        prepend_ = prepend_scheme(p, where);
        split_ = p.get("split").boolean(true);
    }

    static std::string prepend_scheme(const Json& p, const std::string& where) {
        const Json& scheme = p.get("prepend_scheme");
        if (!scheme.is_null()) {
            const std::string s = scheme.str(where + ".prepend_scheme");
            if (s != "always" && s != "first" && s != "never")
                throw FormatError(where + ".prepend_scheme '" + s + "' is not always|first|never");
            return s;
        }
        return p.get("add_prefix_space").boolean(true) ? "always" : "never";
    }

    void load_decoder(const Json& d, const std::string& where) {
        if (d.is_null()) return;
        has_decoder_ = true;
        const std::string type = d.at("type", where).str(where);
        if (type == "Sequence") {
            const auto& list = d.at("decoders", where).array(where);
            for (size_t i = 0; i < list.size(); ++i)
                load_decoder(list[i], where + "[" + std::to_string(i) + "]");
        } else if (type == "Metaspace") {
            Decoder m{Decoder::kMetaspace, d.at("replacement", where).str(where), ""};
            m.prepend = prepend_scheme(d, where) != "never";
            decoders_.push_back(std::move(m));
        } else if (type == "Replace") {
            decoders_.push_back({Decoder::kReplace, string_pattern(d, where),
                                 d.at("content", where).str(where)});
        } else if (type == "ByteFallback") {
            decoders_.push_back({Decoder::kByteFallback, "", ""});
        } else if (type == "Fuse") {
            decoders_.push_back({Decoder::kFuse, "", ""});
        } else if (type == "Strip") {
            Decoder s{Decoder::kStrip, d.at("content", where).str(where), ""};
            s.start = size_t(d.get("start").num_or(0));
            s.stop = size_t(d.get("stop").num_or(0));
            decoders_.push_back(std::move(s));
        } else {
            unsupported(where, "decoder '" + type + "'");
        }
    }

    static void check_post_processor(const Json& p, const std::string& where) {
        if (p.is_null()) return;
        const std::string type = p.at("type", where).str(where);
        if (type == "TemplateProcessing") {
            const auto& single = p.at("single", where).array(where + ".single");
            if (single.size() == 1 && !single[0].get("Sequence").is_null()) return;
        }
        unsupported(where, "a post-processor that adds tokens ('" + type + "')");
    }

    // ----- encoding -----

    static uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

    int32_t vocab_id(const std::string& s) const {
        auto it = id_of_.find(s);
        return it == id_of_.end() ? -1 : it->second;
    }

    void check_id(int32_t id) const {
        if (id < 0 || size_t(id) >= vocab_.size())
            throw ShapeError(where_ + ": token id " + std::to_string(id) + " is outside [0, " +
                             std::to_string(vocab_.size()) + ")");
    }

    const AddedToken* match_added(std::string_view s) const {
        for (const AddedToken& a : added_)
            if (s.substr(0, a.content.size()) == a.content) return &a;
        return nullptr;
    }

    void encode_segment(std::string_view raw, bool at_start, std::vector<int32_t>& ids) const {
        std::string s(raw);
        for (const Normalizer& n : normalizers_) s = apply(n, std::move(s));
        if (s.empty()) return;
        if (!metaspace_) return encode_word(s, ids);
        s = replace_all(s, " ", replacement_);
        const bool prepend = prepend_ == "always" || (prepend_ == "first" && at_start);
        if (prepend && s.compare(0, replacement_.size(), replacement_) != 0) s = replacement_ + s;
        if (!split_) return encode_word(s, ids);
        // Split before every replacement character (it stays with the word it starts).
        size_t start = 0;
        for (size_t i = replacement_.size(); i <= s.size(); ++i) {
            if (i == s.size() || s.compare(i, replacement_.size(), replacement_) == 0) {
                if (i > start) encode_word(std::string_view(s).substr(start, i - start), ids);
                start = i;
            }
        }
    }

    void encode_word(std::string_view w, std::vector<int32_t>& ids) const {
        if (bpe_) return bpe_word(w, ids);
        for (const auto& p : tokenizer_parts::unigram_segment(lattice_, w, true, where_)) {
            const std::string_view piece = w.substr(p.start, p.end - p.start);
            const int32_t id = p.id == unk_ ? vocab_id(std::string(piece)) : p.id;
            if (id >= 0) {
                ids.push_back(id);
            } else if (!byte_fallback_ || !push_bytes(piece, ids)) {
                ids.push_back(unk_);
            }
        }
    }

    // <0xNN> ids of every byte of s, when the vocabulary has them all.
    bool push_bytes(std::string_view s, std::vector<int32_t>& ids) const {
        std::vector<int32_t> bytes;
        for (unsigned char c : s) {
            static const char* kHex = "0123456789ABCDEF";
            const int32_t id = vocab_id(std::string("<0x") + kHex[c >> 4] + kHex[c & 15] + ">");
            if (id < 0) return false;
            bytes.push_back(id);
        }
        ids.insert(ids.end(), bytes.begin(), bytes.end());
        return true;
    }

    // The BPE model's word: characters (unknown ones as unk or bytes), then merges by rank,
    // lowest first, leftmost among equals.
    void bpe_word(std::string_view w, std::vector<int32_t>& ids) const {
        if (ignore_merges_) {
            const int32_t id = vocab_id(std::string(w));
            if (id >= 0) return ids.push_back(id);
        }
        std::vector<int32_t> sym;
        bool pending_unk = false;
        auto flush_unk = [&] {
            if (pending_unk) sym.push_back(unk_);
            pending_unk = false;
        };
        for (size_t i = 0; i < w.size();) {
            const size_t len = std::max<size_t>(1, tokenizer_parts::utf8_char_len(w.substr(i)));
            const std::string_view ch = w.substr(i, len);
            i += len;
            const int32_t id = vocab_id(std::string(ch));
            if (id >= 0) {
                flush_unk();
                sym.push_back(id);
                continue;
            }
            if (byte_fallback_) {
                std::vector<int32_t> bytes;
                if (push_bytes(ch, bytes)) {
                    flush_unk();
                    sym.insert(sym.end(), bytes.begin(), bytes.end());
                    continue;
                }
            }
            if (unk_ < 0) continue;  // no unknown token: the character is dropped
            if (pending_unk && !fuse_unk_) sym.push_back(unk_);
            pending_unk = true;
        }
        flush_unk();
        merge(sym);
        ids.insert(ids.end(), sym.begin(), sym.end());
    }

    void merge(std::vector<int32_t>& sym) const {
        struct Cand {
            int32_t rank;
            size_t pos;
            int32_t left, right, result;
            bool operator<(const Cand& o) const {  // a max-heap: invert for lowest rank, pos
                return rank != o.rank ? rank > o.rank : pos > o.pos;
            }
        };
        const size_t n = sym.size();
        std::vector<int64_t> prev(n), next(n);
        std::vector<bool> alive(n, true);
        for (size_t i = 0; i < n; ++i) prev[i] = int64_t(i) - 1, next[i] = i + 1 < n ? int64_t(i + 1) : -1;
        std::priority_queue<Cand> q;
        auto consider = [&](int64_t l) {
            if (l < 0 || next[size_t(l)] < 0) return;
            const auto r = size_t(next[size_t(l)]);
            auto it = merges_.find(pair_key(sym[size_t(l)], sym[r]));
            if (it != merges_.end())
                q.push({it->second.first, size_t(l), sym[size_t(l)], sym[r], it->second.second});
        };
        for (size_t i = 0; i + 1 < n; ++i) consider(int64_t(i));
        while (!q.empty()) {
            const Cand c = q.top();
            q.pop();
            if (!alive[c.pos] || sym[c.pos] != c.left || next[c.pos] < 0) continue;
            const auto r = size_t(next[c.pos]);
            if (sym[r] != c.right) continue;
            sym[c.pos] = c.result;
            alive[r] = false;
            next[c.pos] = next[r];
            if (next[r] >= 0) prev[size_t(next[r])] = int64_t(c.pos);
            consider(prev[c.pos]);
            consider(int64_t(c.pos));
        }
        std::vector<int32_t> out;
        for (size_t i = 0; i < n; ++i) if (alive[i]) out.push_back(sym[i]);
        sym.swap(out);
    }

    std::string where_;
    std::vector<std::string> vocab_;
    std::vector<bool> special_;
    std::unordered_map<std::string, int32_t> id_of_;
    std::vector<AddedToken> added_;
    std::vector<Normalizer> normalizers_;
    std::vector<Decoder> decoders_;
    bool has_decoder_ = false;
    bool metaspace_ = false, split_ = true;
    std::string replacement_ = "\xE2\x96\x81", prepend_ = "always";
    int32_t unk_ = -1;
    bool bpe_ = false, fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
    std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // -> (rank, result)
    UnigramLattice<double> lattice_;
};

}  // namespace

std::shared_ptr<TextTokenizer> tokenizer_from_json(std::string_view json, const std::string& where) {
    const Json root = Json::parse(json, where);
    return std::make_shared<HFTokenizer>(root, where);
}

std::shared_ptr<TextTokenizer> tokenizer_from_gguf(const GGUFFile& f) {
    const std::string path = f.path();
    const GGUFEntry* kind = f.find("pocket.tokenizer.kind");
    if (!kind) throw GGUFError(path + ": pocket.tokenizer.kind is missing");
    const std::string_view k = f.as_string(kind->value);
    if (k == "tokenizers") {
        const GGUFEntry* e = f.find("tokenizer.huggingface.json");
        if (!e) throw GGUFError(path + ": tokenizer.huggingface.json is missing");
        return tokenizer_from_json(f.as_string(e->value), path + ": tokenizer.huggingface.json");
    }
    if (k == "sentencepiece") {
        const GGUFEntry* e = f.find("pocket.tokenizer.sentencepiece");
        if (!e || e->value.type != GGUFType::ARRAY || e->value.elem_type != GGUFType::U8)
            throw GGUFError(path + ": pocket.tokenizer.sentencepiece is missing or not a u8 array");
        const auto* data = reinterpret_cast<const char*>(f.array_data(e->value));
        return tokenizer_from_sentencepiece(std::string_view(data, e->value.count),
                                            path + ": pocket.tokenizer.sentencepiece");
    }
    throw GGUFError(path + ": pocket.tokenizer.kind '" + std::string(k) +
                    "' is not tokenizers or sentencepiece");
}

}  // namespace dasllama::pocket

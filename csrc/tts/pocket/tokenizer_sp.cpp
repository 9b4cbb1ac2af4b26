// A SentencePiece model proto as Pocket TTS uses it (tokenizer.h lists what is covered): the
// normalizer spec, then the unigram Viterbi search or the BPE merges by score, then byte
// fallback; decode renders pieces as the sentencepiece package's decode does.
#include <algorithm>
#include <cfloat>
#include <cstring>
#include <unordered_map>

#include "core/errors.h"
#include "llm/tokenizer_merge.h"
#include "llm/unicode.h"
#include "tts/pocket/tokenizer.h"
#include "tts/pocket/tokenizer_parts.h"

namespace dasllama::pocket {

namespace {

using tokenizer_parts::Charsmap;

const std::string kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's escaped space

// ---------------------------------------------------------------------------------------------
// The protobuf wire format, only as far as ModelProto needs it
// ---------------------------------------------------------------------------------------------

class ProtoReader {
public:
    ProtoReader(std::string_view s, const std::string& where) : s_(s), where_(where) {}
    bool done() const { return pos_ >= s_.size(); }

    // Next field: its number and wire type; the value is read by one of the calls below.
    std::pair<uint32_t, uint32_t> next() {
        const uint64_t key = varint();
        return {uint32_t(key >> 3), uint32_t(key & 7)};
    }
    uint64_t varint() {
        uint64_t v = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            if (pos_ >= s_.size()) fail("truncated varint");
            const auto b = static_cast<uint8_t>(s_[pos_++]);
            v |= uint64_t(b & 0x7F) << shift;
            if (b < 0x80) return v;
        }
        fail("varint longer than 10 bytes");
    }
    std::string_view bytes() {
        const uint64_t n = varint();
        if (n > s_.size() - pos_) fail("length " + std::to_string(n) + " runs past the end");
        const std::string_view out = s_.substr(pos_, n);
        pos_ += n;
        return out;
    }
    float fixed32_float() {
        if (s_.size() - pos_ < 4) fail("truncated float");
        float f;
        std::memcpy(&f, s_.data() + pos_, 4);
        pos_ += 4;
        return f;
    }
    void skip(uint32_t wire) {
        switch (wire) {
        case 0: varint(); break;
        case 1: advance(8); break;
        case 2: bytes(); break;
        case 5: advance(4); break;
        default: fail("wire type " + std::to_string(wire) + " is not supported");
        }
    }

private:
    void advance(size_t n) {
        if (s_.size() - pos_ < n) fail("truncated field");
        pos_ += n;
    }
    [[noreturn]] void fail(const std::string& what) const {
        throw FormatError(where_ + ": not a SentencePiece model (byte " + std::to_string(pos_) +
                          ": " + what + ")");
    }
    std::string_view s_;
    const std::string& where_;
    size_t pos_ = 0;
};

enum PieceType : uint32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4,
                            kUnused = 5, kByte = 6 };
enum ModelType : uint32_t { kUnigram = 1, kBpe = 2 };

struct Piece {
    std::string text;
    float score = 0;
    uint32_t type = kNormal;
};

// ---------------------------------------------------------------------------------------------
// The tokenizer
// ---------------------------------------------------------------------------------------------

class SPTokenizer final : public TextTokenizer {
public:
    SPTokenizer(std::string_view proto, const std::string& where) : where_(where) {
        std::string_view charsmap;
        ProtoReader r(proto, where);
        while (!r.done()) {
            const auto [field, wire] = r.next();
            if (field == 1 && wire == 2) pieces_.push_back(read_piece(r.bytes()));
            else if (field == 2 && wire == 2) read_trainer(r.bytes());
            else if (field == 3 && wire == 2) charsmap = read_normalizer(r.bytes());
            else r.skip(wire);
        }
        if (pieces_.empty()) throw FormatError(where + ": the SentencePiece model has no pieces");
        if (model_type_ != kUnigram && model_type_ != kBpe)
            throw FormatError(where + ": SentencePiece model_type " + std::to_string(model_type_) +
                              " is not supported (unigram or bpe)");
        charsmap_ = Charsmap(charsmap, where + ": normalizer_spec.precompiled_charsmap");
        index();
    }

    std::vector<int32_t> encode(std::string_view text) const override {
        const std::string norm = normalize(text);
        std::vector<int32_t> ids;
        if (norm.empty()) return ids;
        if (model_type_ == kUnigram) {
            for (const auto& p : tokenizer_parts::unigram_segment(lattice_, norm, true, where_))
                emit(std::string_view(norm).substr(p.start, p.end - p.start), p.id, ids);
        } else {
            auto priority = [&](const tokenizer_detail::MergeSymbol& l,
                                const tokenizer_detail::MergeSymbol& r) -> std::optional<float> {
                auto it = lattice_.id_of.find(std::string_view(norm).substr(l.start, l.len + r.len));
                if (it == lattice_.id_of.end()) return std::nullopt;
                return pieces_[size_t(it->second)].score;
            };
            // Symbols left that are not pieces are unknown; a run of them is one unk piece.
            std::vector<std::pair<std::string_view, int32_t>> pieces;
            tokenizer_detail::greedy_merge<float>(norm, priority, [&](std::string_view piece) {
                auto it = lattice_.id_of.find(piece);
                const int32_t id = it == lattice_.id_of.end() ? unk_ : it->second;
                if (id == unk_ && !pieces.empty() && pieces.back().second == unk_)
                    pieces.back().first = std::string_view(pieces.back().first.data(),
                                                           pieces.back().first.size() + piece.size());
                else
                    pieces.emplace_back(piece, id);
            });
            for (const auto& [piece, id] : pieces) emit(piece, id, ids);
        }
        return ids;
    }

    std::string decode(const std::vector<int32_t>& ids) const override {
        std::string out, bytes;
        bool at_start = true;  // no visible text yet: a leading escaped space is dropped
        auto flush_bytes = [&] {
            // Byte pieces become their bytes; bytes that are not valid UTF-8 become U+FFFD.
            for (size_t i = 0; i < bytes.size();) {
                const size_t len = tokenizer_parts::utf8_char_len(std::string_view(bytes).substr(i));
                if (len == 0) out += "\xEF\xBF\xBD", i += 1;
                else out.append(bytes, i, len), i += len;
            }
            bytes.clear();
            if (!out.empty()) at_start = false;
        };
        for (int32_t id : ids) {
            check_id(id);
            const Piece& p = pieces_[size_t(id)];
            if (p.type == kByte) {
                bytes += char(byte_value_[size_t(id)]);
                continue;
            }
            flush_bytes();
            if (p.type == kControl) continue;
            std::string_view text = p.text;
            if (p.type == kUnknown) {
                out += unk_surface_;
            } else {
                if (at_start && add_dummy_prefix_ && text.substr(0, kSpace.size()) == kSpace)
                    text.remove_prefix(kSpace.size());
                for (size_t i = 0; i < text.size();) {
                    if (text.compare(i, kSpace.size(), kSpace) == 0) out += ' ', i += kSpace.size();
                    else out += text[i++];
                }
            }
            if (!out.empty()) at_start = false;
        }
        flush_bytes();
        return out;
    }

    std::string piece(int32_t id) const override {
        check_id(id);
        return pieces_[size_t(id)].text;
    }
    int32_t n_vocab() const override { return int32_t(pieces_.size()); }
    int32_t unk_id() const override { return unk_; }
    const char* kind() const override { return "sentencepiece"; }

private:
    Piece read_piece(std::string_view msg) const {
        Piece p;
        ProtoReader r(msg, where_);
        while (!r.done()) {
            const auto [field, wire] = r.next();
            if (field == 1 && wire == 2) p.text = std::string(r.bytes());
            else if (field == 2 && wire == 5) p.score = r.fixed32_float();
            else if (field == 3 && wire == 0) p.type = uint32_t(r.varint());
            else r.skip(wire);
        }
        return p;
    }

    void read_trainer(std::string_view msg) {
        ProtoReader r(msg, where_);
        while (!r.done()) {
            const auto [field, wire] = r.next();
            if (field == 3 && wire == 0) model_type_ = uint32_t(r.varint());
            else if (field == 35 && wire == 0) byte_fallback_ = r.varint() != 0;
            else if (field == 44 && wire == 2) unk_surface_ = std::string(r.bytes());
            else if (field == 24 && wire == 0 && r.varint() != 0)
                throw FormatError(where_ + ": treat_whitespace_as_suffix is not supported");
            else r.skip(wire);
        }
    }

    std::string_view read_normalizer(std::string_view msg) {
        std::string_view charsmap;
        ProtoReader r(msg, where_);
        while (!r.done()) {
            const auto [field, wire] = r.next();
            if (field == 2 && wire == 2) charsmap = r.bytes();
            else if (field == 3 && wire == 0) add_dummy_prefix_ = r.varint() != 0;
            else if (field == 4 && wire == 0) remove_extra_whitespaces_ = r.varint() != 0;
            else if (field == 5 && wire == 0) escape_whitespaces_ = r.varint() != 0;
            else r.skip(wire);
        }
        return charsmap;
    }

    void index() {
        float min_score = FLT_MAX, max_score = -FLT_MAX;
        for (const Piece& p : pieces_)
            if (p.type == kNormal) min_score = std::min(min_score, p.score), max_score = std::max(max_score, p.score);
        lattice_.score.resize(pieces_.size());
        byte_value_.assign(pieces_.size(), -1);
        for (size_t i = 0; i < pieces_.size(); ++i) {
            const Piece& p = pieces_[i];
            const auto id = int32_t(i);
            if (p.type == kUnknown && unk_ < 0) unk_ = id;
            if (p.type == kByte) {
                byte_value_[i] = parse_byte(p.text);
                if (byte_value_[i] < 0) throw FormatError(where_ + ": byte piece '" + p.text + "'");
                byte_id_[uint8_t(byte_value_[i])] = id;
            }
            if (p.type != kNormal && p.type != kUserDefined) continue;
            lattice_.id_of.emplace(p.text, id);
            lattice_.max_piece_bytes = std::max(lattice_.max_piece_bytes, p.text.size());
            // A user-defined piece always wins the lattice: length times the best score.
            lattice_.score[i] = p.type == kUserDefined
                ? float(double(p.text.size()) * max_score - 0.1) : p.score;
        }
        if (unk_ < 0) throw FormatError(where_ + ": the SentencePiece model has no unknown piece");
        lattice_.unk_id = unk_;
        lattice_.unk_score = min_score - 10.0f;
    }

    static int parse_byte(std::string_view t) {
        if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
        int v = 0;
        for (char c : t.substr(3, 2)) {
            v <<= 4;
            if (c >= '0' && c <= '9') v |= c - '0';
            else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
            else return -1;
        }
        return v;
    }

    void check_id(int32_t id) const {
        if (id < 0 || size_t(id) >= pieces_.size())
            throw ShapeError(where_ + ": token id " + std::to_string(id) + " is outside [0, " +
                             std::to_string(pieces_.size()) + ")");
    }

    // An unknown piece falls back to its bytes when the model has byte pieces for them.
    void emit(std::string_view piece, int32_t id, std::vector<int32_t>& ids) const {
        if (id != unk_ || !byte_fallback_) return ids.push_back(id);
        std::vector<int32_t> bytes;
        for (unsigned char c : piece) {
            if (byte_id_[c] < 0) return ids.push_back(unk_);
            bytes.push_back(byte_id_[c]);
        }
        ids.insert(ids.end(), bytes.begin(), bytes.end());
    }

    // The normalizer spec: the charsmap (longest match; otherwise one character, invalid
    // UTF-8 as U+FFFD), leading/trailing/repeated spaces dropped, a dummy space in front,
    // spaces escaped as U+2581.
    std::string normalize(std::string_view in) const {
        auto next = [&](std::string_view s) -> std::pair<std::string, size_t> {
            const auto [rep, len] = charsmap_.longest_prefix(s);
            if (len > 0) return {std::string(rep), len};
            const size_t n = tokenizer_parts::utf8_char_len(s);
            if (n == 0) return {"\xEF\xBF\xBD", 1};
            return {std::string(s.substr(0, n)), n};
        };
        if (remove_extra_whitespaces_) {
            while (!in.empty()) {
                const auto [rep, len] = next(in);
                if (rep != " ") break;
                in.remove_prefix(len);
            }
        }
        std::string out;
        if (in.empty()) return out;
        const std::string space = escape_whitespaces_ ? kSpace : " ";
        if (add_dummy_prefix_) out += space;
        bool prev_space = remove_extra_whitespaces_;
        while (!in.empty()) {
            auto [rep, len] = next(in);
            std::string_view sp = rep;
            if (prev_space) while (!sp.empty() && sp.front() == ' ') sp.remove_prefix(1);
            if (!sp.empty()) {
                for (char c : sp) {
                    if (escape_whitespaces_ && c == ' ') out += kSpace;
                    else out += c;
                }
                prev_space = sp.back() == ' ';
            }
            in.remove_prefix(len);
            prev_space = prev_space && remove_extra_whitespaces_;
        }
        if (remove_extra_whitespaces_)
            while (out.size() >= space.size() && out.compare(out.size() - space.size(), space.size(), space) == 0)
                out.resize(out.size() - space.size());
        return out;
    }

    std::string where_;
    std::vector<Piece> pieces_;
    uint32_t model_type_ = kUnigram;
    bool byte_fallback_ = false;
    std::string unk_surface_ = " \xE2\x81\x87 ";
    bool add_dummy_prefix_ = true, remove_extra_whitespaces_ = true, escape_whitespaces_ = true;
    Charsmap charsmap_;
    tokenizer_parts::UnigramLattice<float> lattice_;
    int32_t unk_ = -1;
    std::vector<int> byte_value_;
    std::vector<int32_t> byte_id_ = std::vector<int32_t>(256, -1);  // byte -> its piece
};

}  // namespace

std::shared_ptr<TextTokenizer> tokenizer_from_sentencepiece(std::string_view proto,
                                                            const std::string& where) {
    return std::make_shared<SPTokenizer>(proto, where);
}

}  // namespace dasllama::pocket

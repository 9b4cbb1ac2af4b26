// The JSON reader of json.h: a recursive-descent parser over RFC 8259.
#include "tts/pocket/json.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "core/errors.h"
#include "llm/unicode.h"

namespace dasllama::pocket {

namespace {
constexpr int kMaxDepth = 64;  // tokenizer files nest a few levels; deeper input is refused
const Json kNull;
}  // namespace

class JsonParser {
public:
    JsonParser(std::string_view s, const std::string& where) : s_(s), where_(where) {}

    Json document() {
        Json v = value(0);
        skip_space();
        if (pos_ != s_.size()) fail("trailing characters after the document");
        return v;
    }

private:
    [[noreturn]] void fail(const std::string& what) const {
        throw FormatError(where_ + ": invalid JSON at byte " + std::to_string(pos_) + ": " + what);
    }

    void skip_space() {
        while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' ||
                                    s_[pos_] == '\r'))
            ++pos_;
    }

    bool consume(std::string_view word) {
        if (s_.substr(pos_, word.size()) != word) return false;
        pos_ += word.size();
        return true;
    }

    Json value(int depth) {
        if (depth > kMaxDepth) fail("nested deeper than " + std::to_string(kMaxDepth));
        skip_space();
        if (pos_ >= s_.size()) fail("unexpected end");
        Json v;
        const char c = s_[pos_];
        if (c == '{') {
            v.type_ = Json::Type::kObject;
            ++pos_;
            skip_space();
            if (consume("}")) return v;
            while (true) {
                skip_space();
                if (pos_ >= s_.size() || s_[pos_] != '"') fail("expected a member name");
                std::string key = string();
                skip_space();
                if (!consume(":")) fail("expected ':'");
                v.members_.emplace_back(std::move(key), value(depth + 1));
                skip_space();
                if (consume("}")) return v;
                if (!consume(",")) fail("expected ',' or '}'");
            }
        }
        if (c == '[') {
            v.type_ = Json::Type::kArray;
            ++pos_;
            skip_space();
            if (consume("]")) return v;
            while (true) {
                v.items_.push_back(value(depth + 1));
                skip_space();
                if (consume("]")) return v;
                if (!consume(",")) fail("expected ',' or ']'");
            }
        }
        if (c == '"') {
            v.type_ = Json::Type::kString;
            v.string_ = string();
            return v;
        }
        if (consume("true")) return v.type_ = Json::Type::kBool, v.bool_ = true, v;
        if (consume("false")) return v.type_ = Json::Type::kBool, v.bool_ = false, v;
        if (consume("null")) return v;
        v.type_ = Json::Type::kNumber;
        v.number_ = number();
        return v;
    }

    // Numbers are read as serde_json (the `tokenizers` package's reader, default features)
    // reads them, not correctly rounded: the decimal digits as a u64 (digits past its range
    // ignored), then one multiplication or division by a power of ten. Unigram scores differ
    // from the correctly rounded value in the last bit now and then, and the Viterbi search
    // breaks ties by those bits, so ids match the package only with its arithmetic.
    double number() {
        const size_t start = pos_;
        auto digit = [&] { return pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9'; };
        const bool negative = consume("-");
        if (!digit()) fail("expected a value");
        uint64_t significand = 0;
        int64_t exponent = 0;
        bool overflow = false;
        auto take = [&](bool after_point) {
            const uint64_t d = uint64_t(s_[pos_++] - '0');
            if (!overflow && (significand > UINT64_MAX / 10 ||
                              (significand == UINT64_MAX / 10 && d > UINT64_MAX % 10)))
                overflow = true;
            if (overflow) {
                if (!after_point) ++exponent;  // an ignored integer digit still scales
            } else {
                significand = significand * 10 + d;
                if (after_point) --exponent;
            }
        };
        if (s_[pos_] == '0') {
            ++pos_;
            if (digit()) fail("leading zero");
        } else {
            while (digit()) take(false);
        }
        if (consume(".")) {
            if (!digit()) fail("expected a digit after '.'");
            while (digit()) take(true);
        }
        if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
            ++pos_;
            bool exp_negative = false;
            if (!consume("+")) exp_negative = consume("-");
            if (!digit()) fail("expected an exponent");
            int64_t e = 0;
            while (digit()) e = std::min<int64_t>(e * 10 + (s_[pos_++] - '0'), 100000);
            exponent += exp_negative ? -e : e;
        }
        double f = double(significand);
        while (true) {
            const int64_t a = exponent < 0 ? -exponent : exponent;
            if (a <= 308) {
                const double pow = pow10(int(a));
                if (exponent >= 0) f *= pow;
                else f /= pow;
                break;
            }
            if (f == 0.0) break;
            if (exponent >= 0) {
                pos_ = start;
                fail("number out of range");
            }
            f /= 1e308;
            exponent += 308;
        }
        return negative ? -f : f;
    }

    static double pow10(int n) {  // 1eN correctly rounded, as Rust's literal table holds it
        static const std::vector<double> table = [] {
            std::vector<double> t;
            for (int i = 0; i <= 308; ++i) t.push_back(std::strtod(("1e" + std::to_string(i)).c_str(), nullptr));
            return t;
        }();
        return table[size_t(n)];
    }

    uint32_t hex4() {
        if (pos_ + 4 > s_.size()) fail("truncated \\u escape");
        uint32_t v = 0;
        for (int i = 0; i < 4; ++i) {
            const char c = s_[pos_++];
            v <<= 4;
            if (c >= '0' && c <= '9') v |= uint32_t(c - '0');
            else if (c >= 'a' && c <= 'f') v |= uint32_t(c - 'a' + 10);
            else if (c >= 'A' && c <= 'F') v |= uint32_t(c - 'A' + 10);
            else fail("bad \\u escape");
        }
        return v;
    }

    std::string string() {
        ++pos_;  // the opening quote
        std::string out;
        while (true) {
            if (pos_ >= s_.size()) fail("unterminated string");
            const char c = s_[pos_++];
            if (c == '"') return out;
            if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
            if (c != '\\') {
                out += c;
                continue;
            }
            if (pos_ >= s_.size()) fail("unterminated escape");
            const char e = s_[pos_++];
            switch (e) {
            case '"': out += '"'; break;
            case '\\': out += '\\'; break;
            case '/': out += '/'; break;
            case 'b': out += '\b'; break;
            case 'f': out += '\f'; break;
            case 'n': out += '\n'; break;
            case 'r': out += '\r'; break;
            case 't': out += '\t'; break;
            case 'u': {
                uint32_t cp = hex4();
                if (cp >= 0xD800 && cp < 0xDC00 && s_.substr(pos_, 2) == "\\u") {
                    const size_t save = pos_;
                    pos_ += 2;
                    const uint32_t lo = hex4();
                    if (lo >= 0xDC00 && lo < 0xE000) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    else pos_ = save;
                }
                if (cp >= 0xD800 && cp < 0xE000) cp = unicode::kReplacementChar;  // lone surrogate
                unicode::append_utf8(out, cp);
                break;
            }
            default: fail(std::string("bad escape '\\") + e + "'");
            }
        }
    }

    std::string_view s_;
    const std::string& where_;
    size_t pos_ = 0;
};

Json Json::parse(std::string_view text, const std::string& where) {
    return JsonParser(text, where).document();
}

namespace {
[[noreturn]] void wrong_type(const std::string& where, const char* expected) {
    throw FormatError(where + ": expected " + expected);
}
}  // namespace

const std::string& Json::str(const std::string& where) const {
    if (type_ != Type::kString) wrong_type(where, "a string");
    return string_;
}

double Json::num(const std::string& where) const {
    if (type_ != Type::kNumber) wrong_type(where, "a number");
    return number_;
}

const std::vector<Json>& Json::array(const std::string& where) const {
    if (type_ != Type::kArray) wrong_type(where, "an array");
    return items_;
}

const Json::Members& Json::object(const std::string& where) const {
    if (type_ != Type::kObject) wrong_type(where, "an object");
    return members_;
}

const Json& Json::get(std::string_view key) const {
    for (const auto& [k, v] : members_)
        if (k == key) return v;
    return kNull;
}

const Json& Json::at(std::string_view key, const std::string& where) const {
    if (type_ != Type::kObject) wrong_type(where, "an object");
    for (const auto& [k, v] : members_)
        if (k == key) return v;
    throw FormatError(where + ": '" + std::string(key) + "' is missing");
}

}  // namespace dasllama::pocket

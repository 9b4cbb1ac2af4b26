// A small JSON reader for the tokenizer files Pocket TTS stores (tokenizer.huggingface.json):
// the whole document as a tree, numbers as double, strings as UTF-8 (\u escapes and
// surrogate pairs decoded). Errors are FormatError naming the source and the byte offset.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dasllama::pocket {

class Json {
public:
    enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
    using Members = std::vector<std::pair<std::string, Json>>;

    static Json parse(std::string_view text, const std::string& where);

    Type type() const { return type_; }
    bool is_null() const { return type_ == Type::kNull; }
    bool is_array() const { return type_ == Type::kArray; }

    // Typed access; `where` names the field in the FormatError a wrong type raises.
    const std::string& str(const std::string& where) const;
    double num(const std::string& where) const;
    const std::vector<Json>& array(const std::string& where) const;
    const Members& object(const std::string& where) const;
    bool boolean(bool fallback) const { return type_ == Type::kBool ? bool_ : fallback; }
    double num_or(double fallback) const { return type_ == Type::kNumber ? number_ : fallback; }

    // A member of an object: get() gives null when absent (or not an object), at() throws.
    const Json& get(std::string_view key) const;
    const Json& at(std::string_view key, const std::string& where) const;

private:
    friend class JsonParser;
    Type type_ = Type::kNull;
    bool bool_ = false;
    double number_ = 0;
    std::string string_;
    std::vector<Json> items_;
    Members members_;
};

}  // namespace dasllama::pocket

// Unit tests of the tokenizers on small vocabularies built in memory: SentencePiece merge
// order and byte fallback, special-token splitting, the pre-tokenizer scanners, decoding,
// and the errors of inconsistent metadata. Parity with llama.cpp on real vocabularies is
// tests/test_tokenizer.py's job.
#include <memory>
#include <string>
#include <vector>

#include "check.h"
#include "core/byte_source.h"
#include "core/errors.h"
#include "core/gguf.h"
#include "gguf_builder.h"
#include "llm/tokenizer.h"
#include "llm/tokenizer_detail.h"
#include "llm/unicode.h"

using dasllama::GGUFError;
using dasllama::GGUFFile;
using dasllama::Tokenizer;
using gguf_test::Builder;
using Ids = std::vector<int32_t>;

namespace {

void i32s(Builder& b, const std::string& k, const std::vector<int32_t>& v) {
    b.key(k, gguf_test::ARRAY);
    gguf_test::put<uint32_t>(b.kv, gguf_test::I32);
    gguf_test::put<uint64_t>(b.kv, v.size());
    for (int32_t x : v) gguf_test::put(b.kv, x);
}

void boolean(Builder& b, const std::string& k, bool v) {
    b.key(k, gguf_test::BOOL);
    gguf_test::put<uint8_t>(b.kv, v ? 1 : 0);
}

std::shared_ptr<Tokenizer> load(const Builder& b) {
    auto keep = std::make_shared<gguf_test::Bytes>(b.build());
    auto f = GGUFFile::open_source(
        dasllama::ByteSource::wrap(keep->data(), keep->size(), keep, "tok.gguf"));
    return Tokenizer::from_gguf(*f);
}

std::string error_of(const Builder& b) {
    try {
        load(b);
    } catch (const GGUFError& e) {
        return e.what();
    }
    return "(no error)";
}

bool contains(const std::string& s, const std::string& part) {
    return s.find(part) != std::string::npos;
}

// A SentencePiece vocabulary: <unk> <s> </s>, 256 byte tokens, then `pieces` with `scores`
// (ids from 259), then "<|ctl|>" (control) and "ab" and "bcd" as user-defined tokens.
struct SpmVocab {
    std::vector<std::string> tokens{"<unk>", "<s>", "</s>"};
    std::vector<float> scores{0, 0, 0};
    std::vector<int32_t> types{2, 3, 3};
    SpmVocab(const std::vector<std::string>& pieces, const std::vector<float>& piece_scores) {
        static const char* hex = "0123456789ABCDEF";
        for (int b = 0; b < 256; ++b) {
            tokens.push_back(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">");
            scores.push_back(0);
            types.push_back(6);
        }
        for (size_t i = 0; i < pieces.size(); ++i) {
            tokens.push_back(pieces[i]);
            scores.push_back(piece_scores[i]);
            types.push_back(1);
        }
        for (auto [t, ty] : {std::pair<const char*, int>{"<|ctl|>", 3}, {"XY", 4}, {"YZW", 4}}) {
            tokens.push_back(t);
            scores.push_back(0);
            types.push_back(ty);
        }
    }
    int32_t id(const std::string& t) const {
        for (size_t i = 0; i < tokens.size(); ++i)
            if (tokens[i] == t) return static_cast<int32_t>(i);
        return -1;
    }
    Builder builder(bool space_prefix = true) const {
        Builder b;
        b.str("tokenizer.ggml.model", "llama");
        b.strings("tokenizer.ggml.tokens", tokens);
        b.floats("tokenizer.ggml.scores", scores);
        i32s(b, "tokenizer.ggml.token_type", types);
        boolean(b, "tokenizer.ggml.add_space_prefix", space_prefix);
        return b;
    }
};

const std::string kSp = "\xe2\x96\x81";  // U+2581

// GPT-2 byte tokens (ids 0..255 in byte order), then merged pieces, then control tokens.
Builder bpe_builder(const std::string& pre, const std::vector<std::string>& merges,
                    const std::vector<std::string>& extra) {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) {
        std::string s;
        dasllama::unicode::append_utf8(s, dasllama::unicode::byte_to_cp(static_cast<uint8_t>(b)));
        tokens.push_back(s);
    }
    std::vector<int32_t> types(256, 1);
    for (const std::string& e : extra) {
        tokens.push_back(e);
        types.push_back(e[0] == '<' ? 3 : 1);
    }
    Builder b;
    b.str("tokenizer.ggml.model", "gpt2");
    b.str("tokenizer.ggml.pre", pre);
    b.strings("tokenizer.ggml.tokens", tokens);
    i32s(b, "tokenizer.ggml.token_type", types);
    b.strings("tokenizer.ggml.merges", merges);
    b.u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(tokens.size() - 1));
    return b;
}

std::vector<std::string> words(dasllama::tokenizer_detail::PreType pre, const std::string& text) {
    const auto cps = dasllama::unicode::decode_utf8(text);
    std::vector<std::string> out;
    size_t at = 0;
    for (size_t len : dasllama::tokenizer_detail::pretokenize(pre, cps)) {
        std::string w;
        for (size_t i = at; i < at + len; ++i) dasllama::unicode::append_utf8(w, cps[i]);
        out.push_back(w);
        at += len;
    }
    return out;
}

}  // namespace

TEST(spm_merges_highest_score_first) {
    // "▁abc": pairs ▁a (score -3) and bc (-1) and ab (-2); bc merges first, then ▁a, and
    // "▁abc" never forms because "▁a"+"bc" is not a token.
    SpmVocab v({kSp, "a", "b", "c", kSp + "a", "ab", "bc", kSp + "ab"}, {-9, -8, -8, -8, -3, -2, -1, -0.5});
    auto t = load(v.builder());
    CHECK(t->encode("abc", false, false) == (Ids{v.id(kSp + "a"), v.id("bc")}));
    // Raising "ab" above "bc" changes the result: ab, then ▁ab.
    SpmVocab w({kSp, "a", "b", "c", kSp + "a", "ab", "bc", kSp + "ab"}, {-9, -8, -8, -8, -3, 0, -1, -0.5});
    CHECK(load(w.builder())->encode("abc", false, false) == (Ids{w.id(kSp + "ab"), w.id("c")}));
}

TEST(spm_byte_fallback_and_invalid_utf8) {
    SpmVocab v({kSp, "a"}, {-1, -1});
    auto t = load(v.builder(false));
    // "é" is no piece: its two UTF-8 bytes come out as <0xC3> <0xA9>.
    CHECK(t->encode("a\xc3\xa9", false, false) == (Ids{v.id("a"), 3 + 0xC3, 3 + 0xA9}));
    // A lone 0xFF starts a 4-byte symbol: it and the following bytes fall back together.
    CHECK(t->encode("\xff" "a", false, false) == (Ids{3 + 0xFF, 3 + 'a'}));
    CHECK(t->decode(t->encode("\xff" "a", false, false)) == "\xff" "a");
    CHECK(t->encode("", true, false) == (Ids{1}));  // BOS only
}

TEST(spm_space_prefix_and_decode) {
    SpmVocab v({kSp, "a", kSp + "a"}, {-2, -2, -1});
    auto t = load(v.builder(true));
    const int32_t sa = v.id(kSp + "a");
    CHECK(t->encode("a a", true, false) == (Ids{1, sa, sa}));
    CHECK(t->decode({sa, sa}) == "a a");          // the prefix space is removed...
    CHECK(t->decode({1, sa, sa}) == " a a");      // ...except after BOS, as llama.cpp
    CHECK(t->piece(sa) == " a");
    CHECK(t->piece(1) == "<s>");                  // control: its text in piece()
    CHECK(t->decode({1, 2}).empty());             // and nothing in decode()
    // After a special token the text gets a prefix space again.
    const int32_t ctl = v.id("<|ctl|>");
    CHECK(t->encode("a<|ctl|>a", false, true) == (Ids{sa, ctl, sa}));
    CHECK(t->is_control(ctl) && !t->is_control(sa));
    CHECK(t->is_eog(2) && !t->is_eog(1));
}

TEST(special_tokens_longest_first) {
    SpmVocab v({kSp, "a", "b"}, {-1, -1, -1});
    auto t = load(v.builder(false));
    const int32_t xy = v.id("XY"), yzw = v.id("YZW");
    // User-defined tokens split the text even without parse_special; the longer "YZW" claims
    // its bytes before "XY" is looked for, so "XYZW" is X + YZW, not XY + ZW.
    const Ids got = t->encode("XYZW", false, false);
    REQUIRE(got.size() == 2);
    CHECK(got[1] == yzw && got[0] == 3 + 'X');
    CHECK(t->encode("XYXY", false, false) == (Ids{xy, xy}));
    // A control token is text unless parse_special.
    const Ids plain = t->encode("<|ctl|>", false, false);
    CHECK(plain.size() > 1);
    CHECK(t->encode("<|ctl|>", false, true) == (Ids{v.id("<|ctl|>")}));
}

TEST(bpe_merges_by_rank) {
    // Byte-encoded "hello": merges h+e (rank 0), l+l (1), he+ll (2), hell+o (3).
    auto t = load(bpe_builder("gpt-2", {"h e", "l l", "he ll", "hell o"},
                              {"he", "ll", "hell", "hello", "<|endoftext|>"}));
    CHECK(t->encode("hello", false, false) == (Ids{259}));
    CHECK(t->encode("hellx", false, false) == (Ids{258, 'x'}));
    CHECK(t->decode({259, 'x'}) == "hellox");
    CHECK(std::string(t->kind()) == "bpe");
    CHECK(t->eog_ids() == (Ids{260}));  // <|endoftext|> by its text, also eos
    // Invalid UTF-8 becomes U+FFFD, spelt with the byte tokens of EF BF BD.
    CHECK(t->decode(t->encode("\xff", false, false)) == "\xef\xbf\xbd");
}

TEST(pretokenizer_scanners) {
    using dasllama::tokenizer_detail::PreType;
    using V = std::vector<std::string>;
    CHECK(words(PreType::kGpt2, "Hello world  x's 123\n\n") ==
          (V{"Hello", " world", " ", " x", "'s", " 123", "\n\n"}));
    CHECK(words(PreType::kLlama3, "Hello  world!!\n\n x 12345") ==
          (V{"Hello", " ", " world", "!!\n\n", " x", " ", "123", "45"}));
    CHECK(words(PreType::kQwen2, "x 12345 IT'S") ==
          (V{"x", " ", "1", "2", "3", "4", "5", " IT", "'S"}));
    CHECK(words(PreType::kLlama3, "I'LL") == (V{"I", "'LL"}));
    CHECK(words(PreType::kGpt2, "I'LL") == (V{"I", "'", "LL"}));  // GPT-2 is case-sensitive
    CHECK(words(PreType::kSmollm, "ab 12c") == (V{"ab", " ", "1", "2", "c"}));
    CHECK(words(PreType::kDefault, "a+b=12345 x") == (V{"a", "+", "b", "=", "123", "45", " x"}));
    CHECK(words(PreType::kGpt2, "日本 語") == (V{"日本", " 語"}));
    CHECK(words(PreType::kGpt2, "x\xc2\xa0y") == (V{"x", "\xc2\xa0", "y"}));  // NBSP is \s
}

TEST(unicode_classes) {
    using dasllama::unicode::classify;
    CHECK(classify('a').is_letter() && classify(0x65E5).is_letter());
    CHECK(classify('7').is_number() && classify(0x2167).is_number());  // Roman numeral Ⅷ
    CHECK(classify(0x3000).whitespace && classify(0x85).whitespace && !classify(0x1C).whitespace);
    CHECK(classify(0x300).cat == dasllama::unicode::UCat::MARK);
    CHECK(classify(0x10FFFF).cat != dasllama::unicode::UCat::LETTER);
    CHECK(dasllama::unicode::decode_utf8("a\xe2\x82") == (std::vector<uint32_t>{'a', 0xFFFD, 0xFFFD}));
}

TEST(errors_name_the_key) {
    SpmVocab v({kSp}, {-1});
    Builder short_types = v.builder();
    {
        Builder b;
        b.str("tokenizer.ggml.model", "llama");
        b.strings("tokenizer.ggml.tokens", v.tokens);
        i32s(b, "tokenizer.ggml.token_type", {1, 1, 1});
        CHECK(contains(error_of(b), "tokenizer.ggml.token_type"));
    }
    {
        Builder b;
        b.str("tokenizer.ggml.model", "llama");
        b.strings("tokenizer.ggml.tokens", v.tokens);
        b.floats("tokenizer.ggml.scores", {0.5f});
        CHECK(contains(error_of(b), "tokenizer.ggml.scores"));
    }
    {
        Builder b = v.builder();
        b.u32("tokenizer.ggml.bos_token_id", 99999);
        CHECK(contains(error_of(b), "tokenizer.ggml.bos_token_id"));
        CHECK(contains(error_of(b), "99999"));
    }
    {
        Builder b;
        b.str("tokenizer.ggml.model", "llama");
        b.strings("tokenizer.ggml.tokens", {"a", "b", "a"});
        CHECK(contains(error_of(b), "duplicate token 'a'"));
    }
    CHECK(contains(error_of(bpe_builder("gpt-2", {"h e", "he"}, {"he"})), "tokenizer.ggml.merges[1]"));
    CHECK(contains(error_of(bpe_builder("klingon", {}, {})), "tokenizer.ggml.pre"));
    {
        Builder b;
        b.str("tokenizer.ggml.model", "wordpiece");
        CHECK(contains(error_of(b), "tokenizer.ggml.model"));
    }
    CHECK(contains(error_of(Builder()), "tokenizer.ggml.model"));
    {
        Builder b;
        b.str("tokenizer.ggml.model", "llama");
        b.strings("tokenizer.ggml.tokens", {"x"});
        boolean(b, "tokenizer.ggml.add_bos_token", true);
        CHECK(contains(error_of(b), "tokenizer.ggml.add_bos_token"));
    }
    auto t = load(short_types);
    CHECK_THROWS_AS(t->piece(-1), std::out_of_range);
    CHECK_THROWS_AS(t->decode({t->n_vocab()}), std::out_of_range);
    CHECK(!t->is_eog(-5) && !t->is_control(1 << 30));
}

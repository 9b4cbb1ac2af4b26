// Pocket TTS's text tokenizer: the one the GGUF stores (pocket.tokenizer.kind), either a
// HuggingFace `tokenizers` JSON (tokenizer.huggingface.json; the released models use one,
// converted from a SentencePiece model) or a SentencePiece model proto
// (pocket.tokenizer.sentencepiece). Token ids and decoded text are those of the `tokenizers`
// and `sentencepiece` packages for the same file, which is what the pocket-tts package calls.
//
// What each kind covers (anything else raises FormatError naming the field):
// - tokenizers JSON (tokenizer_hf.cpp): models BPE (character-level merges, unk_token,
//   fuse_unk, byte_fallback, ignore_merges; no dropout or subword prefix/suffix) and Unigram
//   (Viterbi, fused unknowns, byte_fallback); normalizers Sequence, Prepend, Replace (string
//   patterns, and the regex of a run of one character, " {2,}"), Strip and Precompiled
//   (SentencePiece's charsmap; grapheme clusters approximated, see tokenizer_hf.cpp);
//   pre-tokenizers Metaspace (and Sequence of it); decoders Metaspace, Replace, ByteFallback,
//   Fuse, Strip and Sequence; a post-processor that adds nothing; added tokens matched in the
//   raw text, leftmost-longest, without lstrip/rstrip/single_word. decode() skips special
//   tokens, as Tokenizer.decode does by default. Numbers are parsed as serde_json parses them
//   (json.cpp): Unigram ties depend on the scores' last bits.
// - SentencePiece (tokenizer_sp.cpp): unigram and BPE models, the normalizer spec
//   (precompiled charsmap, dummy prefix, extra-whitespace removal, whitespace escaping), byte
//   fallback; decode() renders control tokens as nothing and unknown ones as the unk surface.
//   User-defined pieces are scored as the package scores them but are not shielded from the
//   normalizer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dasllama {
class GGUFFile;
}

namespace dasllama::pocket {

class TextTokenizer {
public:
    virtual ~TextTokenizer() = default;
    // Token ids of UTF-8 text (no special tokens added: the package's models add none).
    virtual std::vector<int32_t> encode(std::string_view text) const = 0;
    // The text of token ids (UTF-8). Ids outside [0, n_vocab) throw ShapeError.
    virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
    // A token's vocabulary text ("▁the"); ids out of range throw ShapeError.
    virtual std::string piece(int32_t id) const = 0;
    virtual int32_t n_vocab() const = 0;
    virtual int32_t unk_id() const = 0;  // -1: the tokenizer has no unknown token
    virtual const char* kind() const = 0;  // "tokenizers" or "sentencepiece"
};

// `where` names the source in error messages (a file and key).
std::shared_ptr<TextTokenizer> tokenizer_from_json(std::string_view json, const std::string& where);
std::shared_ptr<TextTokenizer> tokenizer_from_sentencepiece(std::string_view proto,
                                                            const std::string& where);
// Reads pocket.tokenizer.kind and its payload; GGUFError names a missing or mistyped key.
std::shared_ptr<TextTokenizer> tokenizer_from_gguf(const GGUFFile& f);

}  // namespace dasllama::pocket

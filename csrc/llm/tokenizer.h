// The GGUF tokenizers: SentencePiece-style ("llama": bigram merges by score, byte fallback)
// and byte-level BPE ("gpt2": ranked merges after a regex-like pre-tokenizer chosen by
// tokenizer.ggml.pre). Token ids are those llama.cpp produces for the same file and text.
//
// Behaviour chosen where llama.cpp leaves room (see also tokenizer_detail.h):
// - encode(): special tokens (control, unknown) are recognised in the text only when
//   parse_special is true; user-defined tokens always are, as in llama.cpp. Invalid UTF-8
//   never fails, and gives llama.cpp's ids: SentencePiece falls back to byte tokens for the
//   raw bytes (an invalid lead byte just before a space can swallow the escaped U+2581, which
//   then decodes as its three bytes); byte-level BPE reads each byte that starts no UTF-8
//   sequence as U+FFFD, and drops a byte whose GPT-2 character is not in the vocabulary.
// - piece(id): the token's bytes with control tokens rendered as their text ("<|im_end|>"),
//   i.e. llama_token_to_piece(special=true).
// - decode(ids): the pieces with control and unknown tokens rendered as nothing, and for a
//   SentencePiece vocabulary with add_space_prefix the one leading space of the first token
//   removed unless the first token is BOS: llama_detokenize(remove_special=false,
//   unparse_special=false) without its clean_spaces pass (which would break round trips such
//   as " ," for the gpt2/llama3 pre-tokenizers).
// - Token ids outside [0, n_vocab) in decode()/piece() throw std::out_of_range.
// - Not carried over from llama.cpp: its per-model-name LSTRIP/RSTRIP token attributes (phi-3,
//   jina), pre-tokenizers other than those listed in tokenizer_load.cpp, and tokenizer models
//   other than "llama" and "gpt2" (they raise GGUFError). Missing BOS/EOS ids of a gpt2
//   vocabulary are -1 (llama.cpp defaults them to 11).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dasllama {

class GGUFFile;
namespace tokenizer_detail { struct Vocab; }

class Tokenizer {
public:
    // Reads tokenizer.ggml.*; throws GGUFError naming the key for missing or inconsistent
    // metadata (wrong types, counts that disagree, malformed merges, ids out of range,
    // unsupported model or pre-tokenizer).
    static std::shared_ptr<Tokenizer> from_gguf(const GGUFFile& f);
    ~Tokenizer();
    Tokenizer(const Tokenizer&) = delete;
    Tokenizer& operator=(const Tokenizer&) = delete;

    std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;
    std::string decode(const std::vector<int32_t>& ids) const;  // raw bytes (may end mid-UTF-8)
    std::string piece(int32_t id) const;                          // one token's bytes

    int32_t n_vocab() const;
    int32_t bos_id() const;  // -1 when absent
    int32_t eos_id() const;
    bool add_bos() const;
    bool add_eos() const;
    bool is_eog(int32_t id) const;
    const std::vector<int32_t>& eog_ids() const;  // ascending
    bool is_control(int32_t id) const;  // control or unknown: not rendered by decode()
    const char* kind() const;           // "spm" or "bpe"
    const std::string& pre() const;     // the pre-tokenizer in use ("default", "llama3", ...)

private:
    explicit Tokenizer(std::unique_ptr<tokenizer_detail::Vocab> v);
    std::unique_ptr<tokenizer_detail::Vocab> v_;
};

}  // namespace dasllama

// Pocket TTS text handling as the pocket-tts package (4.0.1, models/text_chunking.py) does it:
// prepare_text normalizes a prompt, split_into_chunks cuts a long text at sentence ends (an
// oversized sentence also at , ; :) and packs the pieces into chunks of at most max_tokens
// tokens, and plan_text does both and tokenizes each chunk, which is what the model speaks.
//
// The rules are the package's, quirks included: a boundary needs a token that is one of the
// marks of ".!...?" (or ",;:") after the first; a period between two digits is not one;
// character classes are Python's str predicates (isspace, isdigit, isupper, upper), taken
// from text_tables.inc (gen_text_tables.py) and applied to code points.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dasllama::pocket {

class TextTokenizer;

// The GGUF's pocket.text.* options.
struct TextRules {
    bool pad_with_spaces = false;
    bool remove_semicolons = false;
    bool append_terminal_punctuation = true;
    bool capitalize_first_letter = true;
    // replace_characters: one code point (UTF-8) -> any text; a later entry for the same
    // character wins, as in a Python dict.
    std::vector<std::pair<std::string, std::string>> replace;
};

struct PreparedText {
    std::string text;
    int frames_after_eos_guess;  // 3 for at most four words, else 1 (callers add 2)
};

// The package's prepare_text_prompt. Throws std::invalid_argument for text that is empty
// after stripping and replacing (the package's ValueError), and for a replace key that is not
// one character.
PreparedText prepare_text(std::string_view text, const TextRules& rules);

// The package's split_into_best_sentences: the chunk texts (not yet prepared).
std::vector<std::string> split_into_chunks(std::string_view text, const TextTokenizer& tok,
                                           const TextRules& rules, int64_t max_tokens);

struct TextChunk {
    std::string text;            // prepared
    std::vector<int32_t> ids;    // its tokens
    int frames_after_eos_guess;  // as prepare_text
};

// Each chunk of split_into_chunks, prepared again and tokenized, as the package generates it.
std::vector<TextChunk> plan_text(std::string_view text, const TextTokenizer& tok,
                                 const TextRules& rules, int64_t max_tokens);

}  // namespace dasllama::pocket

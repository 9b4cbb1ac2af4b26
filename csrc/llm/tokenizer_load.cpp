// Tokenizer::from_gguf: reads and checks tokenizer.ggml.*, and derives what llama.cpp derives
// at load time (defaults per model type, end-of-generation tokens recognised by their text,
// the special-token order used to split text).
#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/errors.h"
#include "core/gguf.h"
#include "llm/tokenizer.h"
#include "llm/tokenizer_detail.h"

namespace dasllama {

using namespace tokenizer_detail;

namespace {

[[noreturn]] void fail(const GGUFFile& f, const std::string& key, const std::string& what) {
    throw GGUFError(f.path() + ": " + key + ": " + what);
}

const GGUFValue* find_value(const GGUFFile& f, const std::string& key) {
    const GGUFEntry* e = f.find(key);
    return e ? &e->value : nullptr;
}

const GGUFValue& require_array(const GGUFFile& f, const std::string& key, const GGUFValue* v,
                               uint64_t n_expected) {
    if (v->type != GGUFType::ARRAY)
        fail(f, key, std::string("expected an array, got ") + gguf_type_name(v->type));
    if (n_expected != 0 && v->count != n_expected)
        fail(f, key, "has " + std::to_string(v->count) + " entries but tokenizer.ggml.tokens has " +
                         std::to_string(n_expected));
    return *v;
}

template <typename T>
T element(const GGUFFile& f, const GGUFValue& v, uint64_t i) {
    T x;
    std::memcpy(&x, f.array_data(v) + i * sizeof(T), sizeof(T));
    return x;
}

// An optional token id; absent keeps `fallback`. Out of range is an error.
int32_t read_id(const GGUFFile& f, const std::string& key, int32_t fallback, int32_t n_vocab) {
    const GGUFValue* v = find_value(f, key);
    if (!v) return fallback;
    const int64_t id = f.as_int(*v);
    if (id < 0 || id >= n_vocab)
        fail(f, key, "token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                         std::to_string(n_vocab) + ")");
    return static_cast<int32_t>(id);
}

bool read_bool(const GGUFFile& f, const std::string& key, bool fallback) {
    const GGUFValue* v = find_value(f, key);
    return v ? f.as_bool(*v) : fallback;
}

uint32_t attr_of_type(int32_t type) {
    switch (type) {  // llama.cpp's token types
        case 1: return kNormal;
        case 2: return kUnknown;
        case 3: return kControl;
        case 4: return kUserDefined;
        case 5: return kUnused;
        case 6: return kByte;
        default: return kUndefined;
    }
}

struct PreSpec {
    const char* name;
    PreType type;
};

// The tokenizer.ggml.pre names implemented here (llama.cpp's spelling; "gpt2" is accepted as
// well as llama.cpp's "gpt-2").
constexpr PreSpec kPreNames[] = {
    {"default", PreType::kDefault}, {"gpt-2", PreType::kGpt2},      {"gpt2", PreType::kGpt2},
    {"llama3", PreType::kLlama3},   {"llama-v3", PreType::kLlama3}, {"llama-bpe", PreType::kLlama3},
    {"qwen2", PreType::kQwen2},     {"deepseek-r1-qwen", PreType::kQwen2},
    {"smollm", PreType::kSmollm},   {"starcoder", PreType::kSmollm}, {"refact", PreType::kSmollm},
};

// Texts llama.cpp treats as end-of-generation tokens whatever the metadata says.
constexpr const char* kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", "[e~[",
};
// Texts that make a token the end-of-turn token when tokenizer.ggml.eot_token_id is absent.
constexpr const char* kEotTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "[EOT]", "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    "<end_of_utterance>",
};
// Fill-in-the-middle pad / repo / file-separator tokens: llama.cpp stops generation on them.
constexpr const char* kFimPadTexts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"};
constexpr const char* kFimRepTexts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
                                        "<reponame>"};
constexpr const char* kFimSepTexts[] = {"<|file_sep|>"};

template <size_t N>
int32_t first_with_text(const Vocab& v, const char* const (&texts)[N]) {
    int32_t best = -1;
    for (const char* t : texts) {
        const int32_t id = v.find(t);
        if (id >= 0 && (best < 0 || id < best)) best = id;
    }
    return best;
}

void load_tokens(const GGUFFile& f, Vocab& v) {
    const std::string key = "tokenizer.ggml.tokens";
    const GGUFValue* tv = find_value(f, key);
    if (!tv) fail(f, key, "missing");
    require_array(f, key, tv, 0);
    if (tv->elem_type != GGUFType::STRING)
        fail(f, key, std::string("expected strings, got ") + gguf_type_name(tv->elem_type));
    if (tv->count == 0 || tv->count > 0x7FFFFFFF)
        fail(f, key, "vocabulary size " + std::to_string(tv->count) + " is not usable");
    const std::vector<std::string_view> texts = f.array_strings(*tv);
    const auto n = static_cast<int32_t>(texts.size());

    v.offsets.reserve(n + 1);
    v.offsets.push_back(0);
    for (int32_t i = 0; i < n; ++i) {
        // llama.cpp renames an empty token, so no text maps to it by accident.
        if (texts[i].empty()) v.arena += "[EMPTY_" + std::to_string(i) + "]";
        else v.arena += texts[i];
        v.offsets.push_back(static_cast<uint32_t>(v.arena.size()));
    }
    v.token_of.build(n, [&v](int32_t id) { return v.text(id); }, [&](int32_t first, int32_t id) {
        fail(f, key, "duplicate token '" + std::string(v.text(id)) + "' at ids " +
                         std::to_string(first) + " and " + std::to_string(id));
    });

    v.scores.assign(n, 0.0f);
    const std::string skey = "tokenizer.ggml.scores";
    if (const GGUFValue* sv = find_value(f, skey)) {
        require_array(f, skey, sv, n);
        for (int32_t i = 0; i < n; ++i) {
            if (sv->elem_type == GGUFType::F32) v.scores[i] = element<float>(f, *sv, i);
            else if (sv->elem_type == GGUFType::I32) v.scores[i] = float(element<int32_t>(f, *sv, i));
            else fail(f, skey, std::string("expected f32 or i32, got ") + gguf_type_name(sv->elem_type));
        }
    }

    v.attrs.assign(n, kNormal);
    const std::string tkey = "tokenizer.ggml.token_type";
    if (const GGUFValue* yv = find_value(f, tkey)) {
        require_array(f, tkey, yv, n);
        if (yv->elem_type != GGUFType::I32)
            fail(f, tkey, std::string("expected i32, got ") + gguf_type_name(yv->elem_type));
        for (int32_t i = 0; i < n; ++i) v.attrs[i] = attr_of_type(element<int32_t>(f, *yv, i));
    }
}

void load_merges(const GGUFFile& f, Vocab& v) {
    const std::string key = "tokenizer.ggml.merges";
    const GGUFValue* mv = find_value(f, key);
    if (!mv) fail(f, key, "missing (a gpt2 tokenizer needs its merges)");
    require_array(f, key, mv, 0);
    if (mv->elem_type != GGUFType::STRING)
        fail(f, key, std::string("expected strings, got ") + gguf_type_name(mv->elem_type));
    const std::vector<std::string_view> lines = f.array_strings(*mv);
    size_t total = 0;
    for (std::string_view s : lines) total += s.size();
    v.merge_arena.reserve(total);
    v.merge_offsets.reserve(lines.size() + 1);
    v.merge_offsets.push_back(0);
    for (size_t i = 0; i < lines.size(); ++i) {
        const std::string_view s = lines[i];
        const size_t sp = s.size() > 1 ? s.find(' ', 1) : std::string_view::npos;
        if (sp == std::string_view::npos || sp + 1 >= s.size())
            fail(f, key + "[" + std::to_string(i) + "]",
                 "'" + std::string(s) + "' is not two tokens separated by a space");
        v.merge_arena += s;
        v.merge_offsets.push_back(static_cast<uint32_t>(v.merge_arena.size()));
    }
    // The first of duplicate merges keeps its rank, as in llama.cpp.
    v.merge_rank.build(static_cast<int32_t>(lines.size()),
                       [&v](int32_t r) { return v.merge(r); }, [](int32_t, int32_t) {});
}

void choose_pre(const GGUFFile& f, Vocab& v) {
    const std::string key = "tokenizer.ggml.pre";
    const GGUFValue* pv = find_value(f, key);
    v.pre_name = pv ? std::string(f.as_string(*pv)) : "default";
    for (const PreSpec& p : kPreNames) {
        if (v.pre_name == p.name) {
            v.pre = p.type;
            if (p.type == PreType::kLlama3) {
                v.ignore_merges = true;
                v.add_bos = true;
            }
            return;
        }
    }
    std::string names;
    for (const PreSpec& p : kPreNames) names += std::string(names.empty() ? "" : ", ") + p.name;
    fail(f, key, "pre-tokenizer '" + v.pre_name + "' is not supported (supported: " + names + ")");
}

// llama.cpp's end-of-generation set, and the attribute fixes that come with it.
void derive_eog(const GGUFFile& f, Vocab& v) {
    const int32_t n = v.size();
    const int32_t eot = read_id(f, "tokenizer.ggml.eot_token_id", first_with_text(v, kEotTexts), n);
    const int32_t eom = read_id(f, "tokenizer.ggml.eom_token_id", v.find("<|eom_id|>"), n);
    const int32_t fim_pad = read_id(f, "tokenizer.ggml.fim_pad_token_id", first_with_text(v, kFimPadTexts), n);
    const int32_t fim_rep = read_id(f, "tokenizer.ggml.fim_rep_token_id", first_with_text(v, kFimRepTexts), n);
    const int32_t fim_sep = read_id(f, "tokenizer.ggml.fim_sep_token_id", first_with_text(v, kFimSepTexts), n);
    // Tokens found by their text are control tokens whatever their declared type.
    for (int32_t id : {eot, eom, fim_pad, fim_rep, fim_sep})
        if (id >= 0) v.attrs[id] |= kControl;
    // Control tokens named "...unused..." are placeholders.
    for (int32_t i = 0; i < n; ++i)
        if ((v.attrs[i] & kControl) && v.text(i).find("unused") != std::string_view::npos)
            v.attrs[i] |= kUnused;

    std::vector<int32_t> eog;
    for (int32_t id : {fim_pad, fim_rep, fim_sep})
        if (id >= 0) eog.push_back(id);
    for (const char* t : kEogTexts) {
        const int32_t id = v.find(t);
        if (id < 0) continue;
        eog.push_back(id);
        v.attrs[id] |= kControl;
    }
    // gpt-oss: these are always rendered.
    for (const char* t : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})
        if (int32_t id = v.find(t); id >= 0) v.attrs[id] = kUserDefined;
    for (int32_t id : {v.eos, eot, eom})
        if (id >= 0) eog.push_back(id);
    std::sort(eog.begin(), eog.end());
    eog.erase(std::unique(eog.begin(), eog.end()), eog.end());

    auto has = [&](const char* t) {
        const int32_t id = v.find(t);
        return id >= 0 && std::binary_search(eog.begin(), eog.end(), id) ? id : -1;
    };
    auto drop = [&](int32_t id, uint32_t attr) {
        eog.erase(std::find(eog.begin(), eog.end(), id));
        v.attrs[id] = attr;
    };
    // Harmony-style vocabularies end a message with <|end|> but keep generating after it.
    const int32_t end = has("<|end|>");
    const bool ret = has("<|return|>") >= 0, call = has("<|call|>") >= 0 || has("<|calls|>") >= 0;
    if (end >= 0 && ((ret && call) || (call && has("<|flush|>") >= 0))) drop(end, kUserDefined);
    // Where <|tool_response> exists, </s> is ordinary text.
    const int32_t s_end = has("</s>");
    if (s_end >= 0 && has("<|tool_response>") >= 0) drop(s_end, kNormal);
    v.eog = std::move(eog);
}

void index_special_tokens(Vocab& v) {
    std::vector<int32_t> special;
    for (int32_t i = 0; i < v.size(); ++i)
        if (v.attrs[i] & (kControl | kUserDefined | kUnknown)) special.push_back(i);
    // Longest text first, as llama.cpp splits; equal lengths by id (llama.cpp's order among
    // them is unspecified and only matters for overlapping texts of equal length).
    std::stable_sort(special.begin(), special.end(), [&](int32_t a, int32_t b) {
        return v.text(a).size() > v.text(b).size();
    });
    v.special_rank.assign(v.size(), -1);
    for (size_t r = 0; r < special.size(); ++r) {
        v.special_rank[special[r]] = static_cast<int32_t>(r);
        v.special_trie.insert(v.text(special[r]), special[r]);
    }
}

}  // namespace

namespace tokenizer_detail {

void SpecialTrie::insert(std::string_view text, int32_t id) {
    int32_t node = 0;
    for (char c : text) {
        const uint64_t key = (uint64_t(uint32_t(node)) << 8) | uint8_t(c);
        auto it = edges.find(key);
        if (it == edges.end()) {
            it = edges.emplace(key, static_cast<int32_t>(token.size())).first;
            token.push_back(-1);
        }
        node = it->second;
    }
    token[node] = id;
}

int32_t Vocab::byte_token(uint8_t b) const {
    static const char* hex = "0123456789ABCDEF";
    const char name[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
    int32_t id = find(std::string_view(name, 6));
    if (id < 0) id = find(std::string_view(reinterpret_cast<const char*>(&b), 1));
    return id >= 0 ? id : unk;
}

}  // namespace tokenizer_detail

std::shared_ptr<Tokenizer> Tokenizer::from_gguf(const GGUFFile& f) {
    auto v = std::make_unique<Vocab>();
    const std::string mkey = "tokenizer.ggml.model";
    const GGUFValue* mv = find_value(f, mkey);
    if (!mv) fail(f, mkey, "missing");
    const std::string model(f.as_string(*mv));
    if (model != "llama" && model != "gpt2")
        fail(f, mkey, "tokenizer model '" + model + "' is not supported (supported: llama, gpt2)");
    v->spm = model == "llama";

    load_tokens(f, *v);
    const int32_t n = v->size();
    if (v->spm) {
        // llama.cpp's defaults for SentencePiece vocabularies (ids only where they exist).
        v->add_space_prefix = true;
        v->add_bos = true;
        v->bos = n > 1 ? 1 : -1;
        v->eos = n > 2 ? 2 : -1;
        v->unk = 0;
    } else {
        load_merges(f, *v);
        choose_pre(f, *v);
    }
    v->add_space_prefix = read_bool(f, "tokenizer.ggml.add_space_prefix", v->add_space_prefix);
    v->bos = read_id(f, "tokenizer.ggml.bos_token_id", v->bos, n);
    v->eos = read_id(f, "tokenizer.ggml.eos_token_id", v->eos, n);
    v->unk = read_id(f, "tokenizer.ggml.unknown_token_id", v->unk, n);
    v->add_bos = read_bool(f, "tokenizer.ggml.add_bos_token", v->add_bos);
    v->add_eos = read_bool(f, "tokenizer.ggml.add_eos_token", v->add_eos);
    if (v->add_bos && v->bos < 0)
        fail(f, "tokenizer.ggml.add_bos_token", "is true but tokenizer.ggml.bos_token_id is not set");
    if (v->add_eos && v->eos < 0)
        fail(f, "tokenizer.ggml.add_eos_token", "is true but tokenizer.ggml.eos_token_id is not set");

    derive_eog(f, *v);
    index_special_tokens(*v);
    return std::shared_ptr<Tokenizer>(new Tokenizer(std::move(v)));
}

}  // namespace dasllama

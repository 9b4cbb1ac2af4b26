#include "tts/kokoro/weights.h"

#include <cstring>

#include "core/formats.h"
#include "core/gguf.h"

namespace dasllama::kokoro {

namespace {

std::string shape_text(const std::vector<int64_t>& s) {
    std::string t = "[";
    for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
    return t + "]";
}

bool shape_matches(const std::vector<int64_t>& have, const std::vector<int64_t>& want) {
    if (want.empty()) return true;
    if (have.size() != want.size()) return false;
    for (size_t i = 0; i < want.size(); ++i)
        if (want[i] >= 0 && want[i] != have[i]) return false;
    return true;
}

// The integers of a numeric array value (any integer element type).
std::vector<int64_t> int_array(const GGUFFile& f, const GGUFEntry& e) {
    if (e.value.type != GGUFType::ARRAY)
        throw GGUFError(f.path() + ": metadata key '" + std::string(e.key) +
                        "' is not an array");
    std::vector<int64_t> out;
    for (const GGUFValue& v : f.array_items(e.value)) out.push_back(f.as_int(v));
    return out;
}

}  // namespace

int64_t TensorView::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

KokoroWeights::KokoroWeights(const std::string& path) : file_(GGUFFile::open(path)) {
    const GGUFFile& f = *file_;
    const GGUFEntry* arch = f.find("general.architecture");
    if (!arch) throw MissingField(f.path() + ": metadata key 'general.architecture' is missing");
    if (f.as_string(arch->value) != "kokoro")
        throw GGUFError(f.path() + ": general.architecture is '" +
                        std::string(f.as_string(arch->value)) + "', expected 'kokoro'");
    const GGUFEntry* split = f.find("kokoro.style_split");
    if (!split) throw MissingField(f.path() + ": metadata key 'kokoro.style_split' is missing");
    const std::vector<int64_t> parts = int_array(f, *split);
    if (parts.size() != 2 || parts[0] <= 0 || parts[1] <= 0)
        throw GGUFError(f.path() + ": kokoro.style_split is " + shape_text(parts) +
                        ", expected two positive sizes");
    cfg_.style_decoder = parts[0];
    cfg_.style_predictor = parts[1];
    cfg_.n_fft = meta_int("kokoro.n_fft");
    cfg_.hop = meta_int("kokoro.hop");
    cfg_.harmonics = meta_int("kokoro.harmonics");
    cfg_.sample_rate = meta_int("kokoro.sample_rate");
    cfg_.upsample_scale = meta_int("kokoro.upsample_scale");
    cfg_.voiced_threshold = static_cast<float>(meta_float("kokoro.voiced_threshold"));
    cfg_.sine_amp = static_cast<float>(meta_float("kokoro.sine_amp"));
    cfg_.bert_layers = meta_int("kokoro.bert.layers");
    cfg_.bert_heads = meta_int("kokoro.bert.heads");
    if (const GGUFEntry* e = f.find("kokoro.bert.max_positions"))
        cfg_.bert_max_positions = f.as_int(e->value);
    if (const GGUFEntry* e = f.find("kokoro.quantized")) cfg_.quantized = f.as_bool(e->value);
    if (const GGUFEntry* e = f.find("kokoro.bert.activation")) {
        const std::string act(f.as_string(e->value));
        if (act != "gelu_new" && act != "gelu")
            throw GGUFError(f.path() + ": kokoro.bert.activation is '" + act +
                            "', expected 'gelu_new' (tanh form) or 'gelu' (erf form)");
        cfg_.bert_gelu_erf = act == "gelu";
    }
    if (cfg_.bert_layers < 1 || cfg_.bert_heads < 1)
        throw GGUFError(f.path() + ": kokoro.bert.layers / heads must be positive");

    const GGUFEntry* syms = f.find("kokoro.vocab.symbols");
    const GGUFEntry* ids = f.find("kokoro.vocab.ids");
    if (!syms || !ids)
        throw MissingField(f.path() + ": metadata key 'kokoro.vocab.symbols' or "
                           "'kokoro.vocab.ids' is missing");
    const std::vector<std::string_view> s = f.array_strings(syms->value);
    const std::vector<int64_t> i = int_array(f, *ids);
    if (s.size() != i.size())
        throw GGUFError(f.path() + ": kokoro.vocab.symbols has " + std::to_string(s.size()) +
                        " entries but kokoro.vocab.ids " + std::to_string(i.size()));
    for (size_t k = 0; k < s.size(); ++k) vocab_[std::string(s[k])] = i[k];
    if (const GGUFEntry* v = f.find("kokoro.voices"))
        for (std::string_view name : f.array_strings(v->value)) voices_.emplace_back(name);
}

KokoroWeights::~KokoroWeights() = default;

const std::string& KokoroWeights::path() const { return file_->path(); }

bool KokoroWeights::has(const std::string& name) const {
    return file_->find_tensor(name) != nullptr;
}

TensorView KokoroWeights::view(const std::string& name, const char* type,
                               const std::vector<int64_t>& shape) const {
    const GGUFTensor* t = file_->find_tensor(name);
    if (!t) throw MissingTensor(path() + ": tensor '" + name + "' is missing");
    if (std::strcmp(t->traits->name, type) != 0)
        throw FormatError(path() + ": tensor '" + name + "' is " + t->traits->name +
                          ", expected " + type);
    TensorView v;
    v.name = name;
    for (uint32_t d = t->n_dims; d-- > 0;) v.shape.push_back(t->ne[d]);
    if (!shape_matches(v.shape, shape))
        throw ShapeError(path() + ": tensor '" + name + "' has shape " + shape_text(v.shape) +
                         ", expected " + shape_text(shape));
    v.data = file_->tensor_data(*t);
    return v;
}

TensorView KokoroWeights::f32(const std::string& name, const std::vector<int64_t>& shape) const {
    return view(name, "F32", shape);
}

TensorView KokoroWeights::i8(const std::string& name, const std::vector<int64_t>& shape) const {
    return view(name, "I8", shape);
}

std::string KokoroWeights::type_of(const std::string& name) const {
    const GGUFTensor* t = file_->find_tensor(name);
    if (!t) throw MissingTensor(path() + ": tensor '" + name + "' is missing");
    return t->traits->name;
}

std::vector<float> KokoroWeights::floats(const std::string& name,
                                         const std::vector<int64_t>& shape) const {
    const TensorView v = f32(name, shape);
    return std::vector<float>(v.f32(), v.f32() + v.numel());
}

int64_t KokoroWeights::meta_int(const std::string& key) const {
    const GGUFEntry* e = file_->find(key);
    if (!e) throw MissingField(path() + ": metadata key '" + key + "' is missing");
    return file_->as_int(e->value);
}

double KokoroWeights::meta_float(const std::string& key) const {
    const GGUFEntry* e = file_->find(key);
    if (!e) throw MissingField(path() + ": metadata key '" + key + "' is missing");
    return file_->as_float(e->value);
}

float KokoroWeights::eps(const std::string& module) const {
    return static_cast<float>(meta_float("kokoro.eps." + module));
}

bool KokoroWeights::has_conv(const std::string& module) const {
    return file_->find("kokoro.conv." + module) != nullptr;
}

ConvAttrs KokoroWeights::conv(const std::string& module) const {
    const std::string key = "kokoro.conv." + module;
    const GGUFEntry* e = file_->find(key);
    if (!e) throw MissingField(path() + ": metadata key '" + key + "' is missing");
    const std::vector<int64_t> a = int_array(*file_, *e);
    if (a.size() < 5 || a.size() > 6)
        throw GGUFError(path() + ": " + key + " has " + std::to_string(a.size()) +
                        " values, expected [stride, pad_left, pad_right, dilation, groups, "
                        "output_padding]");
    ConvAttrs c;
    c.stride = a[0];
    c.pad_left = a[1];
    c.pad_right = a[2];
    c.dilation = a[3];
    c.groups = a[4];
    c.output_padding = a.size() > 5 ? a[5] : 0;
    if (c.stride < 1 || c.dilation < 1 || c.groups < 1 || c.pad_left < 0 || c.pad_right < 0 ||
        c.output_padding < 0)
        throw GGUFError(path() + ": " + key + " = " + shape_text(a) + " is out of range");
    return c;
}

TensorView KokoroWeights::voice(const std::string& name) const {
    const std::string t = "voice." + name;
    if (!has(t)) {
        std::string list;
        for (const std::string& v : voices_) list += (list.empty() ? "" : ", ") + v;
        throw MissingTensor(path() + ": no voice '" + name + "' (voices: " + list + ")");
    }
    return f32(t, {-1, cfg_.style_width()});
}

int64_t conv_out_length(const std::string& name, int64_t n, int64_t k, const ConvAttrs& a) {
    const int64_t span = (k - 1) * a.dilation + 1;
    const int64_t padded = n + a.pad_left + a.pad_right;
    if (n < 1 || padded < span)
        throw ShapeError(name + ": an input of " + std::to_string(n) +
                         " positions gives no output (kernel span " + std::to_string(span) + ")");
    return (padded - span) / a.stride + 1;
}

}  // namespace dasllama::kokoro

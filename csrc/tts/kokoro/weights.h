// Kokoro's (and Kitten TTS's) weights and settings, read from the GGUF that
// dasllama.convert.kokoro writes (its module text is the contract: tensor names, layouts,
// metadata keys). Tensors stay in the file's mapping; this class hands out typed, shape-checked
// views of them by name, and the model's settings read once from the kokoro.* metadata.
//
// Shapes are NumPy order (outermost first): the GGUF lists dimensions innermost first, and
// every view here has them reversed. Lookups that fail throw MissingTensor / MissingField
// (both GGUFError, so Python sees dasllama.errors.GGUFError) naming the file and the tensor or
// key; a tensor of the wrong type or shape throws FormatError / ShapeError naming it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/errors.h"

namespace dasllama {
class GGUFFile;
}

namespace dasllama::kokoro {

// A tensor the model needs is not in the file.
struct MissingTensor : GGUFError {
    using GGUFError::GGUFError;
};

// A metadata key the model needs is not in the file.
struct MissingField : GGUFError {
    using GGUFError::GGUFError;
};

// A convolution's attributes as the converter writes them (kokoro.conv.NAME):
// [stride, pad_left, pad_right, dilation, groups, output_padding].
struct ConvAttrs {
    int64_t stride = 1, pad_left = 0, pad_right = 0, dilation = 1, groups = 1,
            output_padding = 0;
};

// Output positions of a k-tap convolution over n input positions; ShapeError naming `name`
// when the padded input is shorter than the kernel's span.
int64_t conv_out_length(const std::string& name, int64_t n, int64_t k, const ConvAttrs& a);

struct KokoroConfig {
    int64_t style_decoder = 128;     // kokoro.style_split[0]: the style row's first part
    int64_t style_predictor = 128;   // kokoro.style_split[1]: its second part
    int64_t n_fft = 20, hop = 5;
    int64_t harmonics = 9;           // sine harmonics of the source (fundamental included)
    int64_t sample_rate = 24000;
    int64_t upsample_scale = 300;    // samples per F0 frame
    float voiced_threshold = 10.0f;
    float sine_amp = 0.1f;
    int64_t bert_layers = 12;        // applications of ALBERT's one shared layer
    int64_t bert_heads = 12;
    int64_t bert_max_positions = 512;
    // ALBERT's feed-forward activation (kokoro.bert.activation): the tanh form ("gelu_new", the
    // int8 graph's FastGelu; the default) or the erf form ("gelu").
    bool bert_gelu_erf = false;
    bool quantized = true;

    int64_t style_width() const { return style_decoder + style_predictor; }
};

// A view of one tensor in the mapping. shape is NumPy order.
struct TensorView {
    std::string name;
    std::vector<int64_t> shape;
    const void* data = nullptr;

    int64_t numel() const;
    int64_t dim(size_t i) const { return shape.at(i); }
    const float* f32() const { return static_cast<const float*>(data); }
    const int8_t* i8() const { return static_cast<const int8_t*>(data); }
};

class KokoroWeights {
public:
    // Opens and validates the file: general.architecture must be "kokoro" and the settings
    // above present. Throws GGUFError (MissingField) / FormatError naming what is wrong.
    explicit KokoroWeights(const std::string& path);
    ~KokoroWeights();
    KokoroWeights(const KokoroWeights&) = delete;
    KokoroWeights& operator=(const KokoroWeights&) = delete;

    const std::string& path() const;
    const KokoroConfig& config() const { return cfg_; }

    bool has(const std::string& name) const;
    // F32 and I8 tensors by name. shape (NumPy order) is checked when given: a dimension of -1
    // matches any size. Throws MissingTensor, FormatError (type), ShapeError (shape).
    TensorView f32(const std::string& name, const std::vector<int64_t>& shape = {}) const;
    TensorView i8(const std::string& name, const std::vector<int64_t>& shape = {}) const;
    // The tensor's GGUF type name ("F32", "F16", "I8", ...); MissingTensor when absent.
    std::string type_of(const std::string& name) const;
    // The floats of an F32 tensor, copied.
    std::vector<float> floats(const std::string& name,
                              const std::vector<int64_t>& shape = {}) const;

    // kokoro.eps.MODULE (a LayerNorm's epsilon) and kokoro.conv.MODULE; MissingField if absent.
    float eps(const std::string& module) const;
    ConvAttrs conv(const std::string& module) const;
    bool has_conv(const std::string& module) const;
    // Any metadata integer / float by key; MissingField if absent.
    int64_t meta_int(const std::string& key) const;
    double meta_float(const std::string& key) const;

    // The phoneme vocabulary (symbol as UTF-8 -> id) and the voice packs.
    const std::map<std::string, int64_t>& vocab() const { return vocab_; }
    const std::vector<std::string>& voices() const { return voices_; }
    // A voice pack (rows, style_width): row n - 1 is the style for n phonemes. Throws
    // MissingTensor naming the voice (and listing the file's voices) when there is none.
    TensorView voice(const std::string& name) const;

private:
    TensorView view(const std::string& name, const char* type,
                    const std::vector<int64_t>& shape) const;

    std::shared_ptr<const GGUFFile> file_;
    KokoroConfig cfg_;
    std::map<std::string, int64_t> vocab_;
    std::vector<std::string> voices_;
};

}  // namespace dasllama::kokoro

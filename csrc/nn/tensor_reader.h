// Reading a model's tensors from its GGUF with the checks every loader makes: a tensor that is
// missing, of another shape, or of a type that cannot be read as float is an error naming the
// file and the tensor. Shapes are in NumPy order (GGUF lists dimensions innermost first; they
// are reversed here). Model loaders (asr/whisper, tts/pocket) build their own readers on it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dasllama {
class GGUFFile;
struct GGUFTensor;
}  // namespace dasllama

namespace dasllama::nn {

// "(2, 3)", "(5,)": a shape as NumPy prints it.
std::string shape_text(const std::vector<int64_t>& shape);

class TensorReader {
public:
    explicit TensorReader(std::shared_ptr<const GGUFFile> f) : f_(std::move(f)) {}

    const GGUFFile& file() const { return *f_; }
    const std::shared_ptr<const GGUFFile>& file_ptr() const { return f_; }
    bool has(const std::string& name) const;
    // The tensor `name`; GGUFError when it is missing, ShapeError when its shape is not `shape`.
    const GGUFTensor& get(const std::string& name, const std::vector<int64_t>& shape) const;
    // Its values widened to float32 (core/formats.h's dequantization); FormatError for a type
    // without a dequantizer or an element count that does not fill its blocks. The tensor's
    // pages of a mapped file are released afterwards (the copy is what a loader keeps), so a
    // model converted at load does not also hold its file resident.
    std::vector<float> floats(const std::string& name, const std::vector<int64_t>& shape) const;

protected:
    std::shared_ptr<const GGUFFile> f_;
};

}  // namespace dasllama::nn

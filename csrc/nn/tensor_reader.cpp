#include "nn/tensor_reader.h"

#include "core/errors.h"
#include "core/formats.h"
#include "core/gguf.h"

namespace dasllama::nn {

std::string shape_text(const std::vector<int64_t>& s) {
    std::string out = "(";
    for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + (s.size() == 1 ? ",)" : ")");
}

bool TensorReader::has(const std::string& name) const { return f_->find_tensor(name) != nullptr; }

const GGUFTensor& TensorReader::get(const std::string& name,
                                    const std::vector<int64_t>& shape) const {
    const GGUFTensor* t = f_->find_tensor(name);
    if (!t) throw GGUFError(f_->path() + ": tensor '" + name + "' is missing");
    std::vector<int64_t> have;
    for (uint32_t d = t->n_dims; d-- > 0;) have.push_back(t->ne[d]);
    if (have != shape)
        throw ShapeError(f_->path() + ": tensor '" + name + "' has shape " + shape_text(have) +
                         ", expected " + shape_text(shape));
    return *t;
}

std::vector<float> TensorReader::floats(const std::string& name,
                                        const std::vector<int64_t>& shape) const {
    const GGUFTensor& t = get(name, shape);
    const int64_t n = t.n_elements();
    if (t.traits->dequantize == nullptr || n % t.traits->block_size)
        throw FormatError(f_->path() + ": tensor '" + name + "' of type " + t.traits->name +
                          " cannot be read as float");
    std::vector<float> out(static_cast<size_t>(n));
    dequantize(*t.traits, f_->tensor_data(t), out.data(), n);
    // The copy is what the model keeps: the file's pages of this tensor need not stay
    // resident (a view of the same tensor elsewhere faults back in what it reads).
    f_->source(t.file)->release(f_->tensor_data(t), t.nbytes);
    return out;
}

}  // namespace dasllama::nn

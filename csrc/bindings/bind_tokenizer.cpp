#include "bindings/bindings.h"

namespace py = pybind11;

namespace dasllama::bindings {

void bind_tokenizer(py::module_& m) { (void)m; }

}  // namespace dasllama::bindings

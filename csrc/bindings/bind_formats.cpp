#include <pybind11/numpy.h>

#include <string>

#include "bindings/bindings.h"
#include "core/errors.h"
#include "core/formats.h"

namespace py = pybind11;

namespace dasllama::bindings {

namespace {

using U8Array = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>;
using F32Array = py::array_t<float, py::array::c_style | py::array::forcecast>;

const TypeTraits& traits_named(const std::string& name) {
    const TypeTraits* t = type_traits(name);
    if (!t) throw FormatError("unknown tensor type '" + name + "'");
    return *t;
}

py::array_t<float> dequantize_py(const std::string& type, const U8Array& raw, int64_t n) {
    const TypeTraits& t = traits_named(type);
    const int64_t need = row_bytes(t, n);
    if (raw.size() < need)
        throw FormatError(type + ": " + std::to_string(n) + " elements need " +
                          std::to_string(need) + " bytes, got " + std::to_string(raw.size()));
    py::array_t<float> out(n);
    const uint8_t* src = raw.data();
    float* dst = out.mutable_data();
    {
        py::gil_scoped_release release;
        dequantize(t, src, dst, n);
    }
    return out;
}

py::array_t<uint8_t> quantize_py(const std::string& type, const F32Array& x) {
    const TypeTraits& t = traits_named(type);
    const int64_t n = x.size();
    py::array_t<uint8_t> out(row_bytes(t, n));
    const float* src = x.data();
    uint8_t* dst = out.mutable_data();
    {
        py::gil_scoped_release release;
        quantize(t, src, dst, n);
    }
    return out;
}

}  // namespace

void bind_formats(py::module_& m) {
    m.def("dequantize", &dequantize_py, py::arg("type"), py::arg("raw"), py::arg("n"));
    m.def("quantize", &quantize_py, py::arg("type"), py::arg("x"));
    m.def("format_table", [] {
        py::list rows;
        size_t count = 0;
        const TypeTraits* const* all = all_type_traits(&count);
        for (size_t i = 0; i < count; ++i)
            rows.append(py::make_tuple(all[i]->name, static_cast<uint32_t>(all[i]->type),
                                       all[i]->block_size, all[i]->type_size,
                                       all[i]->dequantize != nullptr,
                                       all[i]->quantize != nullptr));
        return rows;
    });
}

}  // namespace dasllama::bindings

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <string>

#include "bindings/bindings.h"
#include "core/errors.h"
#include "core/gguf.h"

namespace py = pybind11;

namespace dasllama::bindings {

namespace {

py::object numpy_dtype(GGUFType t) {
    static const char* const names[] = {"<u1", "<i1", "<u2", "<i2", "<u4", "<i4", "<f4",
                                        "?",   "",    "",    "<u8", "<i8", "<f8"};
    return py::dtype(names[static_cast<uint32_t>(t)]);
}

py::str decode(std::string_view s) {
    // Metadata strings are UTF-8 by the specification; a broken one is shown, not fatal.
    PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
    if (!o) throw py::error_already_set();
    return py::reinterpret_steal<py::str>(o);
}

py::object to_python(const GGUFFile& f, const GGUFValue& v) {
    switch (v.type) {
        case GGUFType::STRING: return decode(f.as_string(v));
        case GGUFType::BOOL: return py::bool_(f.as_bool(v));
        case GGUFType::F32: case GGUFType::F64: return py::float_(f.as_float(v));
        case GGUFType::U64: {
            uint64_t u;
            std::memcpy(&u, f.source(0)->data() + v.offset, 8);
            return py::int_(u);
        }
        case GGUFType::ARRAY: break;
        default: return py::int_(f.as_int(v));
    }
    py::list out;
    if (v.elem_type == GGUFType::STRING) {
        for (std::string_view s : f.array_strings(v)) out.append(decode(s));
        return std::move(out);
    }
    if (v.elem_type == GGUFType::ARRAY) {
        for (const GGUFValue& item : f.array_items(v)) out.append(to_python(f, item));
        return std::move(out);
    }
    // Numeric arrays go through NumPy in one step (vocabulary scores can be 262k long).
    py::array a(numpy_dtype(v.elem_type), {static_cast<py::ssize_t>(v.count)}, {},
                f.array_data(v));
    return a.attr("tolist")();
}

// A NumPy view of file bytes; the array holds the mapping alive through its base.
py::array byte_view(const std::shared_ptr<const ByteSource>& src, const uint8_t* p, uint64_t n) {
    auto* keep = new std::shared_ptr<const ByteSource>(src);
    py::capsule base(keep, [](void* k) { delete static_cast<std::shared_ptr<const ByteSource>*>(k); });
    py::array_t<uint8_t> a({static_cast<py::ssize_t>(n)}, {1}, p, base);
    py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
    return std::move(a);
}

const GGUFTensor& tensor_named(const GGUFFile& f, const std::string& name) {
    const GGUFTensor* t = f.find_tensor(name);
    if (!t) throw py::key_error(f.path() + ": no tensor named '" + name + "'");
    return *t;
}

std::vector<py::ssize_t> numpy_shape(const GGUFTensor& t) {
    // GGUF lists dimensions innermost first; NumPy wants them outermost first.
    std::vector<py::ssize_t> shape;
    for (uint32_t d = t.n_dims; d-- > 0;) shape.push_back(t.ne[d]);
    return shape;
}

std::shared_ptr<GGUFFile> open_buffer(const py::buffer& buffer, const std::string& name) {
    py::buffer_info info = buffer.request();
    if (info.ndim != 1 || info.itemsize != 1 || (info.ndim == 1 && info.strides[0] != 1))
        throw py::value_error("open_buffer: need a contiguous buffer of bytes");
    // The Python object owns the bytes; release it with the GIL held, whoever drops it last.
    auto* held = new py::object(buffer);
    std::shared_ptr<const void> owner(held, [](const void* o) {
        py::gil_scoped_acquire gil;
        delete static_cast<const py::object*>(o);
    });
    return GGUFFile::open_source(ByteSource::wrap(static_cast<const uint8_t*>(info.ptr),
                                                  static_cast<uint64_t>(info.size),
                                                  std::move(owner), name));
}

}  // namespace

void bind_gguf(py::module_& m) {
    py::class_<GGUFFile, std::shared_ptr<GGUFFile>>(m, "GGUFFile")
        .def_static("open", &GGUFFile::open, py::arg("path"),
                    py::call_guard<py::gil_scoped_release>())
        .def_static("open_buffer", &open_buffer, py::arg("buffer"), py::arg("name") = "<memory>")
        .def_property_readonly("version", &GGUFFile::version)
        .def_property_readonly("alignment", &GGUFFile::alignment)
        .def_property_readonly("path", &GGUFFile::path)
        .def_property_readonly("file_count", &GGUFFile::file_count)
        .def_property_readonly("record_bytes", &GGUFFile::record_bytes)
        .def("metadata", [](const GGUFFile& f) {
            py::dict out;
            for (const GGUFEntry& e : f.metadata()) out[decode(e.key)] = to_python(f, e.value);
            return out;
        })
        .def("tensor_infos", [](const GGUFFile& f) {
            py::list out;
            for (const GGUFTensor& t : f.tensors())
                out.append(py::make_tuple(decode(t.name), py::tuple(py::cast(numpy_shape(t))),
                                          t.traits->name, t.nbytes, t.offset, t.file));
            return out;
        })
        .def("raw", [](const GGUFFile& f, const std::string& name) {
            const GGUFTensor& t = tensor_named(f, name);
            return byte_view(f.source(t.file), f.tensor_data(t), t.nbytes);
        }, py::arg("name"))
        .def("tensor", [](const GGUFFile& f, const std::string& name) {
            const GGUFTensor& t = tensor_named(f, name);
            py::array_t<float> out(numpy_shape(t));
            const uint8_t* src = f.tensor_data(t);
            float* dst = out.mutable_data();
            {
                py::gil_scoped_release release;
                dequantize(*t.traits, src, dst, t.n_elements());
            }
            return out;
        }, py::arg("name"));
}

}  // namespace dasllama::bindings

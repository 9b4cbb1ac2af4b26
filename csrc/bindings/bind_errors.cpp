// C++ errors become the classes of the same name in dasllama.errors.
#include "bindings/bindings.h"
#include <string>

#include "core/errors.h"

namespace py = pybind11;

namespace dasllama::bindings {

namespace {

void raise_as(const char* class_name, const std::exception& e) {
    py::object cls = py::module_::import("dasllama.errors").attr(class_name);
    // Messages are ASCII by construction; decode leniently all the same.
    const std::string msg = e.what();
    PyObject* text = PyUnicode_DecodeUTF8(msg.data(), static_cast<Py_ssize_t>(msg.size()), "replace");
    PyErr_SetObject(cls.ptr(), text);
    Py_XDECREF(text);
}

}  // namespace

void bind_errors(py::module_&) {
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const GGUFError& e) {
            raise_as("GGUFError", e);
        } catch (const FormatError& e) {
            raise_as("FormatError", e);
        } catch (const ShapeError& e) {
            raise_as("ShapeError", e);
        } catch (const DeviceError& e) {
            raise_as("DeviceError", e);
        } catch (const Error& e) {
            raise_as("DasllamaError", e);
        }
    });
}

}  // namespace dasllama::bindings

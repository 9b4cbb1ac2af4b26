// The tuning knob registry (core/tuning.h) as _core.tuning_*; dasllama.bench.tuning wraps it.
#include <pybind11/stl.h>

#include <string>

#include "bindings/bindings.h"
#include "core/tuning.h"

namespace py = pybind11;

namespace dasllama::bindings {

void bind_tuning(py::module_& m) {
    // TuningError is a ValueError as well as a DasllamaError (dasllama.bench.tuning).
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const tuning::TuningError& e) {
            py::object cls = py::module_::import("dasllama.bench.tuning").attr("TuningError");
            PyErr_SetString(cls.ptr(), e.what());
        }
    });
    m.def("tuning_get", [](const std::string& name) { return tuning::get(name); },
          py::arg("name"), "The value of a tuning knob (TuningError: unknown name).");
    m.def("tuning_set", [](const std::string& name, int64_t value) { tuning::set(name, value); },
          py::arg("name"), py::arg("value"),
          "Set a tuning knob (TuningError: unknown name or a value outside its range; the "
          "knob is then left as it was).");
    m.def("tuning_reset", [](const std::string& name) { tuning::reset(name); }, py::arg("name"),
          "Put a tuning knob back to its default.");
    m.def("tuning_reset_all", &tuning::reset_all, "Put every tuning knob back to its default.");
    m.def("tuning_knobs", [] {
        py::list out;
        for (const tuning::KnobInfo& k : tuning::list()) {
            py::dict d;
            d["name"] = k.name;
            d["value"] = k.value;
            d["default"] = k.default_value;
            d["min"] = k.min;
            d["max"] = k.max;
            d["description"] = k.description;
            out.append(d);
        }
        return out;
    }, "Every tuning knob: name, value, default, min, max, description (sorted by name).");
}

}  // namespace dasllama::bindings

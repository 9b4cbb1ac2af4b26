// _core.SileroVad and _core.VadStream: Silero VAD on the CPU (csrc/asr/vad/vad_model.h).
// Audio in is float32 (copied by forcecast when it is another dtype); probabilities out are
// float32. Every call that runs the model releases the GIL.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "asr/vad/vad_model.h"
#include "bindings/bindings.h"
#include "core/errors.h"

namespace py = pybind11;

namespace dasllama::bindings {

namespace {

using vad::SileroVad;
using vad::VadStream;
using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

const float* samples_of(const FloatArray& a, const char* what, int64_t& n) {
    if (a.ndim() != 1)
        throw ShapeError(std::string(what) + ": expected a 1-D float32 array, got " +
                         std::to_string(a.ndim()) + " dimensions");
    n = a.shape(0);
    return a.data();
}

py::array_t<float> to_array(const std::vector<float>& v) {
    py::array_t<float> out(py::ssize_t(v.size()));
    std::copy(v.begin(), v.end(), out.mutable_data());
    return out;
}

// A stream with the model it belongs to, so Python cannot mix them up or outlive the model.
struct PyVadStream {
    std::shared_ptr<SileroVad> model;
    VadStream state;
};

}  // namespace

void bind_vad(py::module_& m) {
    py::class_<SileroVad, std::shared_ptr<SileroVad>>(m, "SileroVad",
        "Silero VAD v6 (16 kHz) on the CPU: one speech probability per 512-sample window.")
        .def(py::init([](const std::string& path, int n_threads) {
                 py::gil_scoped_release nogil;
                 return std::make_shared<SileroVad>(path, n_threads);
             }),
             py::arg("path"), py::arg("n_threads") = 1)
        .def_property_readonly("config", [](const SileroVad& v) {
            const vad::VadConfig& c = v.config();
            py::dict d;
            d["sample_rate"] = c.sample_rate;
            d["window"] = c.window;
            d["context"] = c.context;
            d["n_fft"] = c.n_fft;
            d["hop"] = c.hop;
            d["hidden"] = c.hidden;
            return d;
        })
        .def("probabilities",
             [](SileroVad& v, const FloatArray& audio) {
                 int64_t n = 0;
                 const float* p = samples_of(audio, "audio", n);
                 std::vector<float> out;
                 {
                     py::gil_scoped_release nogil;
                     out = v.probabilities(p, n);
                 }
                 return to_array(out);
             },
             py::arg("audio"),
             "Probabilities of a whole clip from a fresh state (last window zero-padded).")
        .def("stream", [](std::shared_ptr<SileroVad> v) {
            auto s = std::make_unique<PyVadStream>();
            s->state = v->new_stream();
            s->model = std::move(v);
            return s;
        });

    py::class_<PyVadStream>(m, "VadStream", "One audio stream's VAD state (context, LSTM h, c).")
        .def("process",
             [](PyVadStream& s, const FloatArray& samples) {
                 int64_t n = 0;
                 const float* p = samples_of(samples, "samples", n);
                 const int64_t W = s.model->config().window;
                 if (n % W)
                     throw ShapeError("samples: " + std::to_string(n) +
                                      " values are not a multiple of the window of " +
                                      std::to_string(W));
                 std::vector<float> out(size_t(n / W));
                 {
                     py::gil_scoped_release nogil;
                     s.model->process(p, n, s.state, out.data());
                 }
                 return to_array(out);
             },
             py::arg("samples"),
             "Probabilities of whole windows, continuing this stream's state.")
        .def("reset", [](PyVadStream& s) { s.model->reset(s.state); })
        .def_property_readonly("windows", [](const PyVadStream& s) { return s.state.windows; })
        .def_property_readonly("state", [](const PyVadStream& s) {
            std::vector<float> hc(s.state.lstm.h);
            hc.insert(hc.end(), s.state.lstm.c.begin(), s.state.lstm.c.end());
            py::array_t<float> out({py::ssize_t(2), py::ssize_t(s.state.lstm.h.size())});
            std::copy(hc.begin(), hc.end(), out.mutable_data());
            return out;
        }, "The LSTM state as [2, hidden]: h, then c.");
}

}  // namespace dasllama::bindings

// _core.Sampler: the token sampler of llm/sampler.h.
#include <pybind11/numpy.h>

#include <string>

#include "bindings/bindings.h"
#include "llm/sampler.h"

namespace py = pybind11;

namespace dasllama::bindings {

namespace {

using Logits = py::array_t<float, py::array::c_style | py::array::forcecast>;

// One row of logits: shape [n] or [1, n] (what LLMModel.eval returns for the last position).
const float* row_of(const Logits& a, size_t& n) {
    if (a.ndim() == 1 || (a.ndim() == 2 && a.shape(0) == 1)) {
        n = static_cast<size_t>(a.shape(a.ndim() - 1));
        return a.data();
    }
    std::string shape;
    for (py::ssize_t i = 0; i < a.ndim(); ++i) shape += (i ? ", " : "") + std::to_string(a.shape(i));
    throw py::value_error("logits must have shape [n_vocab] or [1, n_vocab], got [" + shape + "]");
}

}  // namespace

void bind_sampler(py::module_& m) {
    py::class_<Sampler>(m, "Sampler", R"doc(
Turns logits into token ids: penalties -> greedy (temperature 0) | top_k -> top_p -> min_p ->
temperature -> draw, seeded by std::mt19937(seed). Bad settings raise ValueError naming them.)doc")
        .def(py::init([](float temperature, int32_t top_k, float top_p, float min_p,
                         float repeat_penalty, float presence_penalty, float frequency_penalty,
                         int32_t penalty_last_n, int64_t seed) {
                 SamplerParams p;
                 p.temperature = temperature;
                 p.top_k = top_k;
                 p.top_p = top_p;
                 p.min_p = min_p;
                 p.repeat_penalty = repeat_penalty;
                 p.presence_penalty = presence_penalty;
                 p.frequency_penalty = frequency_penalty;
                 p.penalty_last_n = penalty_last_n;
                 p.seed = seed;
                 return Sampler(p);
             }),
             py::arg("temperature") = 0.8f, py::arg("top_k") = 40, py::arg("top_p") = 0.95f,
             py::arg("min_p") = 0.05f, py::arg("repeat_penalty") = 1.0f,
             py::arg("presence_penalty") = 0.0f, py::arg("frequency_penalty") = 0.0f,
             py::arg("penalty_last_n") = 64, py::arg("seed") = 0)
        .def("sample", [](Sampler& s, const Logits& logits) {
                 size_t n = 0;
                 const float* row = row_of(logits, n);
                 py::gil_scoped_release unlocked;
                 return s.sample(row, n);
             }, py::arg("logits"), "The next token id (not recorded: call accept).")
        .def("probabilities", [](const Sampler& s, const Logits& logits) {
                 size_t n = 0;
                 const float* row = row_of(logits, n);
                 py::array_t<float> out(static_cast<py::ssize_t>(n));
                 s.probabilities(row, n, out.mutable_data());
                 return out;
             }, py::arg("logits"),
             "The distribution sample() draws from (zeros where the chain removed a token).")
        .def("accept", &Sampler::accept, py::arg("token"),
             "Record a token in the penalty history.")
        .def("reset", &Sampler::reset, "Forget the history and reseed.")
        .def_property_readonly("history_size", &Sampler::history_size)
        .def_property_readonly("seed", [](const Sampler& s) { return s.params().seed; })
        .def("__repr__", [](const Sampler& s) {
            const SamplerParams& p = s.params();
            return "Sampler(temperature=" + std::to_string(p.temperature) +
                   ", top_k=" + std::to_string(p.top_k) + ", top_p=" + std::to_string(p.top_p) +
                   ", min_p=" + std::to_string(p.min_p) +
                   ", repeat_penalty=" + std::to_string(p.repeat_penalty) +
                   ", presence_penalty=" + std::to_string(p.presence_penalty) +
                   ", frequency_penalty=" + std::to_string(p.frequency_penalty) +
                   ", penalty_last_n=" + std::to_string(p.penalty_last_n) +
                   ", seed=" + std::to_string(p.seed) + ")";
        });
}

}  // namespace dasllama::bindings

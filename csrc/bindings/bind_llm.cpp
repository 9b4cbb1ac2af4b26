// _core.LLMModel: a GGUF text model on the CPU (csrc/llm/model.h).
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bindings/bindings.h"
#include "llm/gpu_forward.h"
#include "llm/model.h"
#include "llm/tokenizer.h"

namespace py = pybind11;

namespace dasllama::bindings {

namespace {

// Thrown from the forward pass (no GIL held) to unwind after Ctrl-C; the Python error itself
// is kept aside and raised once the GIL is back.
struct Interrupted {};

// Prompts at least this long check for Ctrl-C after every layer; shorter calls return soon.
constexpr size_t kInterruptibleTokens = 64;

bool on_main_thread() {
    py::module_ threading = py::module_::import("threading");
    const py::object main_ident = threading.attr("main_thread")().attr("ident");
    return main_ident.equal(threading.attr("get_ident")());
}

py::array_t<float> eval(LLMModel& m, const std::vector<int64_t>& ids, bool all_logits) {
    if (ids.empty()) throw py::value_error("eval: ids is empty");
    std::vector<int32_t> ids32(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] < 0 || ids[i] >= m.n_vocab())
            throw py::value_error("eval: token id " + std::to_string(ids[i]) + " at index " +
                                  std::to_string(i) + " is outside [0, " +
                                  std::to_string(m.n_vocab()) + ")");
        ids32[i] = int32_t(ids[i]);
    }
    const int64_t rows = LLMModel::logits_rows(int64_t(ids.size()), all_logits);
    py::array_t<float> out({py::ssize_t(rows), py::ssize_t(m.n_vocab())});
    float* dst = out.mutable_data();

    std::optional<py::error_already_set> pending;
    std::function<void()> check;
    if (ids.size() >= kInterruptibleTokens && on_main_thread()) {
        check = [&pending] {
            py::gil_scoped_acquire gil;
            if (PyErr_CheckSignals() != 0) {
                pending.emplace();  // takes the raised error (KeyboardInterrupt)
                throw Interrupted{};
            }
        };
    }
    try {
        py::gil_scoped_release nogil;
        m.eval(ids32.data(), int64_t(ids32.size()), all_logits, dst, check);
    } catch (const Interrupted&) {
        throw *pending;
    }
    return out;
}

}  // namespace

void bind_llm(py::module_& m) {
    m.def("gpu_decode_attention_splits", &decode_attention_splits, py::arg("n"),
          py::arg("n_head"), py::arg("n_keys") = 0,
          "Key chunks of each head's attention in a GPU call of `n` query rows of `n_head` heads "
          "over `n_keys` cached keys (0: unsplit; the knob vulkan.attention.decode_split "
          "included).");
    m.def("gpu_decode_glu_pass", &decode_glu_pass, py::arg("n"),
          "Whether a GPU call of `n` token rows forms the gated FFN activation in its own pass "
          "before the down projection (the knob vulkan.llm.decode_glu_pass included; skipped "
          "where the down projection takes the integer-dot path).");
    m.def("gpu_prefill_attention_coopmat", &prefill_attention_coopmat, py::arg("n"),
          py::arg("head_dim"), py::arg("head_dim_v"), py::arg("coopmat"),
          "The cooperative-matrix attention stamp a GPU prompt call of `n` query rows takes "
          "(\"\" for the portable one), given the head sizes and whether the device offers "
          "cooperative matrices; the knob vulkan.attention.prefill_coopmat included.");
    py::class_<LLMModel>(m, "LLMModel",
                         "A GGUF text model (llama, qwen2, qwen3, qwen3moe, gemma3) on the CPU "
                         "or a GPU, with its tokenizer and KV cache. Calls are serialized; eval "
                         "releases the GIL.")
        .def(py::init([](const std::string& path, int64_t n_ctx, int n_threads,
                         const std::string& kv_type, const std::string& device) {
                 const KVType kv = kv_type_from_string(kv_type);
                 py::gil_scoped_release nogil;
                 return std::make_unique<LLMModel>(path, n_ctx, n_threads, kv, device);
             }),
             py::arg("path"), py::arg("n_ctx") = 4096, py::arg("n_threads") = 0,
             py::arg("kv_type") = "f16", py::arg("device") = "cpu",
             "Opens the model. n_threads 0 uses the physical cores; kv_type f16|f32|q8_0; "
             "device cpu|vulkan|vulkan:N|vulkan:NAME.")
        .def_property_readonly("device_name", &LLMModel::device_name)
        .def("seat_stats", [](const LLMModel& s) { return seat_stats_dict(s.seat_stats()); },
             "Per seat (prefill, decode): served, declined by reason, dispatches, uploads, replays.")
        .def("set_seat_enabled", &LLMModel::set_seat_enabled, py::arg("seat"), py::arg("on"),
             "Turns a GPU seat on or off; a seat that is off declines with reason 'knob'.")
        .def("set_profiling", &LLMModel::set_profiling, py::arg("on"),
             "Times every GPU dispatch of later calls (see last_profile).")
        .def("last_profile", [](const LLMModel& s) {
                 py::list out;
                 for (const gpu::KernelTime& t : s.last_profile())
                     out.append(py::make_tuple(t.stamp, t.microseconds));
                 return out;
             },
             "[(stamp, microseconds)] of each dispatch of the last GPU call, when profiling.")
        .def_property_readonly("arch", &LLMModel::arch)
        .def_property_readonly("n_vocab", &LLMModel::n_vocab)
        .def_property_readonly("n_ctx", &LLMModel::n_ctx)
        .def_property_readonly("n_ctx_train", [](const LLMModel& s) { return s.config().n_ctx_train; })
        .def_property_readonly("n_embd", [](const LLMModel& s) { return s.config().n_embd; })
        .def_property_readonly("n_layer", [](const LLMModel& s) { return s.config().n_layer; })
        // Calls that take the model's lock release the GIL while they wait: an eval on the main
        // thread takes the GIL back between layers (Ctrl-C) while it holds the lock.
        .def_property_readonly("n_past", py::cpp_function(&LLMModel::n_past, py::call_guard<py::gil_scoped_release>()),
                               "Positions held in the KV cache.")
        .def_property_readonly("n_threads", py::cpp_function(&LLMModel::n_threads, py::call_guard<py::gil_scoped_release>()))
        .def_property_readonly("kv_type", [](const LLMModel& s) { return kv_type_name(s.kv_type()); })
        .def_property_readonly("precision", py::cpp_function(&LLMModel::precision, py::call_guard<py::gil_scoped_release>()))
        .def_property_readonly("tokenizer", &LLMModel::tokenizer)
        .def("eval", &eval, py::arg("ids"), py::arg("all_logits") = false,
             "Appends ids at positions n_past.. and returns float32 logits of shape "
             "[len(ids), n_vocab] if all_logits else [1, n_vocab] (the last position).")
        .def("hidden_states", [](LLMModel& s, const std::vector<int32_t>& ids) {
                 py::array_t<float> out({py::ssize_t(ids.size()), py::ssize_t(s.config().n_embd)});
                 float* dst = out.mutable_data();
                 py::gil_scoped_release nogil;
                 s.hidden_states(ids.data(), int64_t(ids.size()), dst);
                 return out;
             },
             py::arg("ids"),
             "Final hidden states (after the output norm) of ids evaluated alone from position "
             "0, float32 [len(ids), n_embd]; the model's cache is untouched.")
        .def("truncate", &LLMModel::truncate, py::arg("n"), py::call_guard<py::gil_scoped_release>(),
             "Forgets cache positions >= n (0 <= n <= n_past).")
        .def("reset", &LLMModel::reset, py::call_guard<py::gil_scoped_release>(),
             "Empties the KV cache.")
        .def("set_precision", &LLMModel::set_precision, py::arg("precision"),
             py::call_guard<py::gil_scoped_release>(),
             "'fast' (8-bit activations, the default) or 'f32' (float32 activations).")
        .def("close", &LLMModel::close, py::call_guard<py::gil_scoped_release>(),
             "Releases the weights, cache and file mapping.")
        .def("__enter__", [](LLMModel& s) -> LLMModel& { return s; },
             py::return_value_policy::reference)
        .def("__exit__", [](LLMModel& s, py::args) {
            py::gil_scoped_release nogil;
            s.close();
        });
}

}  // namespace dasllama::bindings

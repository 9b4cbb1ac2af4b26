// _core.BatchEngine: the batching engine of serve/batch_engine.h (the Python scheduler over it
// is dasllama.batch).
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <vector>

#include "bindings/bindings.h"
#include "llm/model.h"
#include "serve/batch_engine.h"

namespace py = pybind11;

namespace dasllama::bindings {

using serve::BatchEngine;

void bind_serve(py::module_& m) {
    py::class_<BatchEngine>(m, "BatchEngine",
                            "Several sequences of one LLMModel decoded together: slots over one "
                            "KV pool, a sampler each, prompts prefilled in chunks. One caller at "
                            "a time; step releases the GIL.")
        .def(py::init([](LLMModel& model, int n_slots, int64_t n_ctx, int64_t prefill_chunk,
                         bool sliding_rings) {
                 py::gil_scoped_release nogil;
                 return std::make_unique<BatchEngine>(model, n_slots, n_ctx, prefill_chunk,
                                                      sliding_rings);
             }),
             py::arg("model"), py::arg("n_slots"), py::arg("n_ctx"), py::arg("prefill_chunk"),
             py::arg("sliding_rings") = false, py::keep_alive<1, 2>(),
             "n_ctx: positions of each slot. sliding_rings: sliding-window layers keep a ring "
             "of window + min(prefill_chunk, 128) - 1 rows per slot instead of n_ctx.")
        .def("start", [](BatchEngine& e, const std::vector<int32_t>& prompt, const Sampler& sampler,
                         int top_logprobs, const std::vector<int32_t>& banned) {
                 const BatchEngine::Started s = e.start(prompt.data(), int64_t(prompt.size()),
                                                        sampler.params(), top_logprobs, banned);
                 return py::make_tuple(s.slot, s.cached);
             },
             py::arg("prompt"), py::arg("sampler"), py::arg("top_logprobs") = -1,
             py::arg("banned") = std::vector<int32_t>{},
             "Starts a sequence with a sampler of sampler's settings (a fresh one, its seed); "
             "banned tokens are never sampled. Returns (slot, cached prompt tokens).")
        .def("set_mask", [](BatchEngine& e, int slot,
                            const py::array_t<uint32_t, py::array::c_style | py::array::forcecast>& words) {
                 e.set_mask(slot, words.data(), int64_t(words.size()));
             },
             py::arg("slot"), py::arg("words"),
             "Allowed tokens of the slot's next sample: bit t % 32 of words[t // 32].")
        .def("finish", &BatchEngine::finish, py::arg("slot"))
        .def("step", [](BatchEngine& e) {
                 std::vector<serve::Sampled> out;
                 {
                     py::gil_scoped_release nogil;
                     out = e.step();
                 }
                 py::list result;
                 for (const serve::Sampled& s : out) {
                     py::list top;
                     for (const serve::TokenLogprob& t : s.top) top.append(py::make_tuple(t.token, t.logprob));
                     result.append(py::make_tuple(s.slot, s.token, s.logprob, top,
                                                  s.error.empty() ? py::object(py::none())
                                                                  : py::object(py::str(s.error))));
                 }
                 return result;
             },
             "One forward step; [(slot, token, logprob, [(token, logprob)], error)] of the "
             "sequences that sampled (logprob nan unless asked for; error None, or why that "
             "slot could not sample).")
        .def_property_readonly("n_slots", &BatchEngine::n_slots)
        .def_property_readonly("n_ctx", &BatchEngine::n_ctx)
        .def_property_readonly("kv_pool_bytes", &BatchEngine::kv_pool_bytes)
        .def_property_readonly("scratch_bytes", &BatchEngine::scratch_bytes,
                               "Bytes the engine holds beyond weights and pool (step logits, "
                               "sampler scratch, slot histories).")
        .def_property_readonly("forward_scratch_bytes", &BatchEngine::forward_scratch_bytes,
                               "Bytes of the forward pass's row buffers the steps run on (the "
                               "model's own, shared).")
        .def_property_readonly("max_step_rows", &BatchEngine::max_step_rows)
        .def_property_readonly("sliding_rings", &BatchEngine::sliding_rings)
        .def("kv_layer_rows", &BatchEngine::kv_layer_rows, py::arg("layer"),
             "Rows each slot keeps for the layer: n_ctx, or a sliding layer's ring.")
        .def_property_readonly("n_active", &BatchEngine::n_active)
        .def("active", &BatchEngine::active, py::arg("slot"))
        .def("n_past", &BatchEngine::n_past, py::arg("slot"))
        .def("pending", &BatchEngine::pending, py::arg("slot"))
        .def("seat_stats", [](const BatchEngine& e) {
            py::dict out = seat_stats_dict(e.seat_stats());
            if (out.contains("batch")) {
                py::dict b = out["batch"];
                b["reason"] = e.seat_reason();
                b["device_kv_bytes"] = e.device_kv_bytes();
            }
            return out;
        }, "{'batch': served, declined by reason, dispatches, uploads, replays, reason (why the "
           "last decline), device_kv_bytes} on a model opened on a GPU; {} on the CPU.")
        .def_property_readonly("stats", [](const BatchEngine& e) {
            const serve::EngineStats& s = e.stats();
            py::dict d;
            d["steps"] = s.steps;
            d["rows"] = s.rows;
            d["prompt_tokens"] = s.prompt_tokens;
            d["cached_tokens"] = s.cached_tokens;
            d["prompt_cache_hits"] = s.prefix_hits;
            d["generated_tokens"] = s.generated;
            return d;
        });
    m.attr("MAX_TOP_LOGPROBS") = serve::kMaxTopLogprobs;
}

}  // namespace dasllama::bindings

// Each bind_*.cpp adds one area of the core to the _core module.
#pragma once

#include <pybind11/pybind11.h>

#include <map>
#include <string>

#include "gpu/seat.h"

namespace dasllama::bindings {

// A model's seat counters as Python sees them (model.stats["seats"]):
// {seat: {"served", "declined": {reason: n}, "dispatches", "uploads"}}.
pybind11::dict seat_stats_dict(const std::map<std::string, gpu::SeatStats>& seats);

void bind_errors(pybind11::module_& m);
void bind_formats(pybind11::module_& m);
void bind_gguf(pybind11::module_& m);
void bind_cpu(pybind11::module_& m);
void bind_tokenizer(pybind11::module_& m);
void bind_llm(pybind11::module_& m);
void bind_sampler(pybind11::module_& m);
void bind_tuning(pybind11::module_& m);
void bind_gpu(pybind11::module_& m);
void bind_tts(pybind11::module_& m);
void bind_asr(pybind11::module_& m);
void bind_vad(pybind11::module_& m);
void bind_kokoro(pybind11::module_& m);
void bind_serve(pybind11::module_& m);

}  // namespace dasllama::bindings

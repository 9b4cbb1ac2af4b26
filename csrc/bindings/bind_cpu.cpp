#include <pybind11/stl.h>

#include "bindings/bindings.h"
#include "core/cpu_features.h"
#include "cpu/dot.h"

namespace py = pybind11;

namespace dasllama::bindings {

void bind_cpu(py::module_& m) {
    m.def("cpu_features", [] {
        const CpuFeatures& f = cpu_features();
        py::dict d;
#define DASLLAMA_FEATURE(name) d[#name] = f.name;
        DASLLAMA_FEATURE(sse42) DASLLAMA_FEATURE(avx) DASLLAMA_FEATURE(avx2)
        DASLLAMA_FEATURE(fma) DASLLAMA_FEATURE(f16c) DASLLAMA_FEATURE(bmi2)
        DASLLAMA_FEATURE(avx512f) DASLLAMA_FEATURE(avx512bw) DASLLAMA_FEATURE(avx512vl)
        DASLLAMA_FEATURE(avx512dq) DASLLAMA_FEATURE(avx512_vnni) DASLLAMA_FEATURE(avx512_bf16)
        DASLLAMA_FEATURE(avx512_fp16) DASLLAMA_FEATURE(amx_tile) DASLLAMA_FEATURE(amx_int8)
        DASLLAMA_FEATURE(amx_bf16) DASLLAMA_FEATURE(amx_usable) DASLLAMA_FEATURE(neon)
        DASLLAMA_FEATURE(dotprod) DASLLAMA_FEATURE(fp16) DASLLAMA_FEATURE(i8mm)
#undef DASLLAMA_FEATURE
        d["isa"] = f.isa();
        d["best_isa"] = f.best_isa();
        d["isa_request"] = f.isa_request;
        return d;
    }, "The probed CPU features and the kernel level in use.");
    m.def("dot_variants", &cpu::dot::available_variants,
          "The dot-product kernel variants this process may run, best first.");
}

}  // namespace dasllama::bindings

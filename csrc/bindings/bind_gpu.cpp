// The GPU layer as _core.gpu_*: the devices there are, why there are none, the stamp table,
// the validation report, and GpuDebug, a test-only dispatcher that runs any stamp over NumPy
// arrays so every kernel can be checked against NumPy. dasllama.gpu wraps the public part.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bindings/bindings.h"
#include "core/errors.h"
#include "gpu/device.h"
#include "gpu/matrix.h"
#include "gpu/stamps.h"

namespace py = pybind11;

namespace dasllama::bindings {

namespace {

py::dict device_dict(const gpu::DeviceInfo& d) {
    py::dict out;
    out["backend"] = d.backend;
    out["index"] = d.index;
    out["name"] = d.name;
    out["type"] = gpu::device_type_name(d.type);
    out["driver"] = d.driver;
    out["api_version"] = d.api_version;
    out["vendor_id"] = d.vendor_id;
    out["device_id"] = d.device_id;
    out["subgroup_size"] = d.subgroup_size;
    out["memory_bytes"] = d.memory_bytes;
    out["max_allocation_bytes"] = d.max_allocation_bytes;
    out["max_shared_bytes"] = d.max_shared_bytes;
    out["max_push_constant_bytes"] = d.max_push_constant_bytes;
    out["max_storage_range"] = d.max_storage_range;
    out["fp16"] = d.fp16;
    out["int8"] = d.int8;
    out["int16"] = d.int16;
    out["storage_16bit"] = d.storage_16bit;
    out["storage_8bit"] = d.storage_8bit;
    out["subgroup_arithmetic"] = d.subgroup_arithmetic;
    out["subgroup_shuffle"] = d.subgroup_shuffle;
    out["coopmat_khr"] = d.coopmat_khr;
    out["coopmat_nv"] = d.coopmat_nv;
    out["timestamps"] = d.timestamps;
    return out;
}

const gpu::StampInfo& stamp_named(const std::string& name) {
    if (const gpu::StampInfo* s = gpu::find_stamp(name)) return *s;
    std::string known;
    for (const gpu::StampInfo* s = gpu::stamps_begin(); s != gpu::stamps_end(); ++s)
        known += (known.empty() ? "" : ", ") + std::string(s->name);
    throw DeviceError("unknown stamp '" + name + "'; this build has: " + known);
}

// One dispatch of GpuDebug.run_many, converted while the GIL is held.
struct Dispatch {
    const gpu::StampInfo* stamp;
    std::vector<size_t> buffers;  // indices into the arrays
    std::string args;
    uint32_t groups[3] = {1, 1, 1};
};

Dispatch convert_dispatch(const py::handle& item, size_t n_arrays) {
    auto t = py::reinterpret_borrow<py::tuple>(item);
    if (!py::isinstance<py::tuple>(item) || t.size() != 4)
        throw py::value_error("a dispatch is a tuple (stamp_name, buffer_indices, args, groups)");
    Dispatch d;
    d.stamp = &stamp_named(t[0].cast<std::string>());
    for (auto i : t[1].cast<std::vector<int64_t>>()) {
        if (i < 0 || static_cast<size_t>(i) >= n_arrays)
            throw ShapeError("stamp '" + std::string(d.stamp->name) + "': buffer index " +
                             std::to_string(i) + " outside the " + std::to_string(n_arrays) +
                             " arrays");
        d.buffers.push_back(static_cast<size_t>(i));
    }
    if (d.buffers.size() != d.stamp->n_buffers)
        throw ShapeError("stamp '" + std::string(d.stamp->name) + "' binds " +
                         std::to_string(d.stamp->n_buffers) + " buffers, got " +
                         std::to_string(d.buffers.size()));
    py::buffer_info args = py::buffer(t[2]).request();
    d.args.assign(static_cast<const char*>(args.ptr), static_cast<size_t>(args.size * args.itemsize));
    if (d.args.size() != d.stamp->args_bytes)
        throw ShapeError("stamp '" + std::string(d.stamp->name) + "' takes " +
                         std::to_string(d.stamp->args_bytes) + " bytes of arguments, got " +
                         std::to_string(d.args.size()));
    std::vector<int64_t> g = py::isinstance<py::int_>(t[3]) ? std::vector<int64_t>{t[3].cast<int64_t>()}
                                                            : t[3].cast<std::vector<int64_t>>();
    if (g.empty() || g.size() > 3)
        throw ShapeError("groups is 1 to 3 counts, got " + std::to_string(g.size()));
    for (size_t i = 0; i < g.size(); ++i) {
        if (g[i] < 0 || g[i] > 0xffffffffll) throw ShapeError("group count " + std::to_string(g[i]));
        d.groups[i] = static_cast<uint32_t>(g[i]);
    }
    return d;
}

class GpuDebug {
public:
    explicit GpuDebug(const std::string& spec) : device_(gpu::open_device(spec)) {}

    gpu::Device& device() {
        if (!device_) throw DeviceError("this GpuDebug is closed");
        return *device_;
    }

    py::list run_many(const py::list& arrays, const py::list& dispatches, bool barriers,
                      int repeat) {
        if (repeat < 1) throw py::value_error("repeat must be at least 1");
        // With the GIL: contiguous inputs, fresh outputs of the same dtype and shape.
        std::vector<py::array> inputs, outputs;
        for (const py::handle& a : arrays) {
            py::array in = py::array::ensure(a, py::array::c_style);
            if (!in) throw py::type_error("GpuDebug: every buffer must be a NumPy array");
            std::vector<py::ssize_t> shape(in.shape(), in.shape() + in.ndim());
            outputs.emplace_back(in.dtype(), shape);
            inputs.push_back(std::move(in));
        }
        std::vector<Dispatch> work;
        for (const py::handle& d : dispatches) work.push_back(convert_dispatch(d, inputs.size()));
        std::vector<const void*> src(inputs.size());
        std::vector<void*> dst(inputs.size());
        std::vector<size_t> bytes(inputs.size());
        for (size_t i = 0; i < inputs.size(); ++i) {
            src[i] = inputs[i].data();
            dst[i] = outputs[i].mutable_data();
            bytes[i] = static_cast<size_t>(inputs[i].nbytes());
        }
        gpu::Device& dev = device();
        {
            py::gil_scoped_release unlocked;
            std::vector<std::unique_ptr<gpu::Buffer>> bufs;
            for (size_t i = 0; i < src.size(); ++i) {
                bufs.push_back(dev.alloc(bytes[i], ("array " + std::to_string(i)).c_str()));
                dev.upload(*bufs.back(), 0, src[i], bytes[i]);
            }
            auto enc = dev.encoder();
            for (size_t k = 0; k < work.size(); ++k) {
                if (k && barriers) enc->barrier();
                std::vector<gpu::Buffer*> bound;
                for (size_t i : work[k].buffers) bound.push_back(bufs[i].get());
                enc->dispatch(*work[k].stamp, bound, work[k].args.data(), work[k].args.size(),
                              work[k].groups[0], work[k].groups[1], work[k].groups[2]);
            }
            for (int r = 0; r < repeat; ++r) dev.submit(*enc);  // the same recording again
            for (size_t i = 0; i < src.size(); ++i) dev.download(*bufs[i], 0, dst[i], bytes[i]);
        }
        py::list out;
        for (auto& a : outputs) out.append(a);
        return out;
    }

    py::list run(const std::string& stamp, const py::list& arrays, const py::object& args,
                 const py::object& groups) {
        py::list indices;
        for (size_t i = 0; i < arrays.size(); ++i) indices.append(i);
        py::list one;
        one.append(py::make_tuple(stamp, indices, args, groups));
        return run_many(arrays, one, true, 1);
    }

    void close() { device_.reset(); }
    std::shared_ptr<gpu::Device> device_;
    bool profile_ = false;
};

}  // namespace

py::dict seat_stats_dict(const std::map<std::string, gpu::SeatStats>& seats) {
    py::dict out;
    for (const auto& [name, st] : seats) {
        py::dict declined;
        for (int i = 0; i < gpu::kDeclineKinds; ++i)
            declined[gpu::decline_name(gpu::Decline(i))] = st.declined[size_t(i)];
        py::dict d;
        d["served"] = st.served;
        d["declined"] = declined;
        d["dispatches"] = st.dispatches;
        d["uploads"] = st.uploads;
        d["replays"] = st.replays;
        out[name.c_str()] = d;
    }
    return out;
}

void bind_gpu(py::module_& m) {
    m.def("gpu_devices", [] {
        py::list out;
        for (const auto& d : gpu::list_devices()) out.append(device_dict(d));
        return out;
    }, "Every GPU device this build can use, as dicts (empty when there is none).");
    m.def("gpu_inject_submit_fault", &gpu::inject_submit_fault, py::arg("nth"),
          "Tests: the nth encoder submit from now (1: the next) on any GPU device fails with "
          "DeviceError('injected fault'); 0 disarms. DASLLAMA_GPU_FAIL_SUBMIT=N arms it at "
          "start.");
    m.def("gpu_unavailable_reason", &gpu::unavailable_reason,
          "Why there are no GPU devices (empty when there are).");
    m.def("vulkan_stamps_built", &gpu::vulkan_stamps_built,
          "Whether this build carries SPIR-V for its kernel stamps.");
    m.def("vulkan_stamps_missing_reason",
          [] { return std::string(gpu::vulkan_stamps_missing_reason()); },
          "Why this build has no SPIR-V for its stamps (empty when it has).");
    m.def("gpu_staged_panel", &gpu::staged_panel, py::arg("format"), py::arg("cols"),
          py::arg("n_tok"), py::arg("in_mode"), py::arg("coopmat"),
          "Whether a prefill projection (stamp suffix `format`, rows `cols` wide, `n_tok` "
          "token rows, input stage `in_mode`) on a device with cooperative matrices when "
          "`coopmat` reads a staged float16 input panel (the knob "
          "vulkan.project.coopmat_staged and this build's stamps included).");
    m.def("gpu_staged_tile", [](int64_t rows, int64_t n_tok, int64_t cols) {
              const gpu::StagedTile t = gpu::staged_tile(rows, cols, n_tok);
              return py::make_tuple(std::string(t.suffix), t.rows, t.toks);
          }, py::arg("rows"), py::arg("n_tok"), py::arg("cols") = 576,
          "(stamp suffix, tile rows, tile tokens) of a staged prefill product of `rows` weight "
          "rows `cols` wide and `n_tok` token rows (the knobs vulkan.project.coopmat_tile, "
          "vulkan.project.coopmat_fill_groups, vulkan.project.coopmat_large_min_cols and "
          "vulkan.project.coopmat_large_fill_groups included).");
    m.def("gpu_matvec_sub_family",
          [](int64_t rows, int64_t cols, int64_t form, int64_t sub4_min_cols,
             int64_t sub4_min_rows, int64_t split_min_cols, int64_t split_max_rows) {
              return gpu::matvec_sub_family(
                  {form, sub4_min_cols, sub4_min_rows, split_min_cols, split_max_rows}, rows, cols);
          },
          py::arg("rows"), py::arg("cols"), py::arg("form"), py::arg("sub4_min_cols"),
          py::arg("sub4_min_rows"), py::arg("split_min_cols"), py::arg("split_max_rows"),
          "The subgroup stamp family (\"\", \"matvec_sub_\", \"matvec_sub2_\", \"matvec_sub4_\", "
          "\"matvec_split4_\") of a decode product of rows x cols under the given knob values.");
    m.def("gpu_matvec_sub_family_now", [](int64_t rows, int64_t cols) {
              return gpu::matvec_sub_family(gpu::MatvecSubKnobs::now(), rows, cols);
          }, py::arg("rows"), py::arg("cols"),
          "gpu_matvec_sub_family with the vulkan.project.matvec_sub* knobs as set now.");
    m.def("gpu_matvec_q8_rows",
          [](const std::string& format, int64_t rows, int64_t cols, int64_t n_tok,
             uint32_t in_mode, int64_t on, int64_t min_cols, int64_t rows_log2) {
              return gpu::matvec_q8_rows({on, min_cols, rows_log2}, format, rows, cols, n_tok,
                                         in_mode);
          },
          py::arg("format"), py::arg("rows"), py::arg("cols"), py::arg("n_tok"),
          py::arg("in_mode"), py::arg("on"), py::arg("min_cols"), py::arg("rows_log2"),
          "Rows a subgroup (1, 2, 4) of the integer-dot decode product of a format matrix rows x "
          "cols against n_tok token rows of input stage in_mode under the given knob values, or "
          "0 where it does not apply.");
    m.def("gpu_matvec_q8_rows_now",
          [](const std::string& format, int64_t rows, int64_t cols, int64_t n_tok,
             uint32_t in_mode) {
              return gpu::matvec_q8_rows(gpu::MatvecQ8Knobs::now(), format, rows, cols, n_tok,
                                         in_mode);
          },
          py::arg("format"), py::arg("rows"), py::arg("cols"), py::arg("n_tok"),
          py::arg("in_mode"),
          "gpu_matvec_q8_rows with the vulkan.project.matvec_q8* knobs as set now.");
    m.def("gpu_stamps", [] {
        py::list out;
        for (const gpu::StampInfo* s = gpu::stamps_begin(); s != gpu::stamps_end(); ++s) {
            py::dict d;
            d["name"] = s->name;
            d["family"] = s->family;
            d["n_buffers"] = s->n_buffers;
            d["args_bytes"] = s->args_bytes;
            d["wg_size"] = s->wg_size;
            d["spirv_words"] = s->spirv ? s->spirv_words : 0;
            d["msl"] = s->msl != nullptr;
            out.append(d);
        }
        return out;
    }, "The kernel stamps of this build.");
    m.def("gpu_validation", [] {
        const gpu::ValidationReport r = gpu::validation_report();
        py::dict d;
        d["requested"] = r.requested;
        d["enabled"] = r.enabled;
        d["reason"] = r.reason;
        d["errors"] = r.errors;
        d["warnings"] = r.warnings;
        return d;
    }, "The Vulkan validation layer's state and messages (DASLLAMA_VULKAN_VALIDATION=1).");

    py::class_<GpuDebug>(m, "GpuDebug",
        "Test-only: run kernel stamps over NumPy arrays on a device. Each array goes to its own "
        "device buffer (its bytes, whatever the dtype); after the dispatches every buffer comes "
        "back as a new array of the same dtype and shape.")
        .def(py::init<const std::string&>(), py::arg("spec"))
        .def_property_readonly("info", [](GpuDebug& g) { return device_dict(g.device().info()); })
        .def_property("profile", [](GpuDebug& g) { return g.profile_; },
                      [](GpuDebug& g, bool on) {
                          g.device().set_profiling(on);
                          g.profile_ = on;
                      }, "Time each dispatch (see last_profile).")
        .def_property_readonly("last_profile", [](GpuDebug& g) {
            py::list out;
            for (const auto& t : g.device().last_profile())
                out.append(py::make_tuple(t.stamp, t.microseconds));
            return out;
        }, "[(stamp, microseconds)] of the last profiled run, one per dispatch.")
        .def("run", &GpuDebug::run, py::arg("stamp"), py::arg("arrays"), py::arg("args"),
             py::arg("groups"),
             "Bind arrays[i] to binding i, dispatch once over `groups` (an int or 1-3 counts) "
             "with `args` (bytes) as the argument block; return every buffer.")
        .def("run_many", &GpuDebug::run_many, py::arg("arrays"), py::arg("dispatches"),
             py::arg("barriers") = true, py::arg("repeat") = 1,
             "Dispatch each (stamp, buffer_indices, args, groups) in order, over the same "
             "arrays, with a barrier between dispatches (unless barriers=False); submit the "
             "one recording `repeat` times; return every buffer.")
        .def("close", &GpuDebug::close)
        .def("__enter__", [](GpuDebug& g) -> GpuDebug& { return g; })
        .def("__exit__", [](GpuDebug& g, py::args) { g.close(); });
}

}  // namespace dasllama::bindings

// _core.KokoroModel: Kokoro / Kitten TTS on the CPU (csrc/tts/kokoro/). The stage methods
// mirror dasllama.reference.kokoro.ReferenceKokoro's methods of the same names, for parity
// tests; module-level kokoro_* functions expose the int8 and float helpers alone. Arrays in are
// float32 (forcecast) or int64 ids; arrays out are float32 in NumPy order. Calls that run the
// model release the GIL. A model runs one call at a time (its stages share one thread pool).
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings/bindings.h"
#include "core/errors.h"
#include "tts/kokoro/int8_ops.h"
#include "tts/kokoro/kokoro_model.h"
#include "tts/kokoro/onnx_math.h"
#include "tts/kokoro/qlstm.h"
#include "tts/kokoro/style_blocks.h"

namespace py = pybind11;

namespace dasllama::bindings {

namespace {

using kokoro::KokoroModel;
using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;
using IdArray = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

py::array_t<float> to_array(const std::vector<float>& v, std::vector<py::ssize_t> shape) {
    py::array_t<float> out(shape);
    std::copy(v.begin(), v.end(), out.mutable_data());
    return out;
}

py::array_t<int64_t> to_ids(const std::vector<int64_t>& v) {
    py::array_t<int64_t> out(py::ssize_t(v.size()));
    std::copy(v.begin(), v.end(), out.mutable_data());
    return out;
}

// A 2-D float32 array's data, checking its width when want >= 0.
const float* rows_of(const FloatArray& a, const char* what, int64_t want, int64_t& rows) {
    if (a.ndim() != 2)
        throw ShapeError(std::string(what) + ": expected a 2-D float32 array, got " +
                         std::to_string(a.ndim()) + " dimensions");
    if (want >= 0 && a.shape(1) != want)
        throw ShapeError(std::string(what) + ": rows of " + std::to_string(a.shape(1)) +
                         " values, expected " + std::to_string(want));
    rows = a.shape(0);
    return a.data();
}

const float* vector_of(const FloatArray& a, const char* what, int64_t want) {
    if (a.ndim() != 1 || (want >= 0 && a.shape(0) != want))
        throw ShapeError(std::string(what) + ": expected a 1-D float32 array of " +
                         std::to_string(want) + " values");
    return a.data();
}

std::vector<int64_t> ids_of(const IdArray& a, const char* what) {
    if (a.ndim() != 1 || a.shape(0) < 1)
        throw ShapeError(std::string(what) + ": expected a non-empty 1-D array of ids");
    return std::vector<int64_t>(a.data(), a.data() + a.shape(0));
}

std::vector<float> copy_of(const FloatArray& a) {
    return std::vector<float>(a.data(), a.data() + a.size());
}

}  // namespace

void bind_kokoro(py::module_& m) {
    m.def("kokoro_int8_levels", &kokoro::int8_kernel_levels,
          "The int8 product kernels this CPU runs, best first.");
    m.def("kokoro_int8_gemm",
          [](py::array_t<uint8_t, py::array::c_style> a, py::array_t<int8_t, py::array::c_style> b,
             const std::string& isa) {
              if (a.ndim() != 2 || b.ndim() != 2 || a.shape(1) != b.shape(1))
                  throw ShapeError("kokoro_int8_gemm: a [m, k] uint8 and b [n, k] int8");
              const int64_t m_ = a.shape(0), n = b.shape(0), k = a.shape(1);
              const int64_t kp = kokoro::int8_padded(k);
              std::vector<uint8_t> ap(size_t(m_ * kp), 0);
              std::vector<int8_t> bp(size_t(n * kp), 0);
              for (int64_t i = 0; i < m_; ++i) std::copy(a.data() + i * k, a.data() + (i + 1) * k, &ap[size_t(i * kp)]);
              for (int64_t i = 0; i < n; ++i) std::copy(b.data() + i * k, b.data() + (i + 1) * k, &bp[size_t(i * kp)]);
              const kokoro::Int8Kernels& kern = kokoro::int8_kernels(isa);
              std::vector<int8_t> packed(size_t(kern.padded_rows(n) * kp));
              kern.pack(bp.data(), n, kp, packed.data());
              py::array_t<int32_t> c({py::ssize_t(m_), py::ssize_t(n)});
              kern.gemm(ap.data(), kp, packed.data(), m_, n, kp, c.mutable_data(), n);
              return c;
          },
          py::arg("a"), py::arg("b"), py::arg("isa"),
          "a [m, k] uint8 times b [n, k] int8 transposed -> [m, n] int32 with one kernel level.");
    m.def("kokoro_dynamic_quantize", [](const FloatArray& x) {
        std::vector<uint8_t> q(size_t(x.size()));
        const kokoro::QuantParams p = kokoro::dynamic_quantize(x.data(), x.size(), q.data());
        py::array_t<uint8_t> out(py::ssize_t(q.size()));
        std::copy(q.begin(), q.end(), out.mutable_data());
        return py::make_tuple(out, p.scale, p.zero_point);
    }, py::arg("x"), "DynamicQuantizeLinear of x (flattened): (q uint8, scale, zero point).");
    m.def("kokoro_activation_levels", [] {
        std::vector<std::string> out{kokoro::activation_kernels().isa};
        if (out[0] != "generic") out.emplace_back("generic");
        return out;
    }, "The logistic / tanh kernel levels this CPU runs, best first.");
    m.def("kokoro_logistic", [](const FloatArray& x, const std::string& isa) {
        std::vector<float> out(size_t(x.size()));
        const kokoro::ActivationKernels& k =
            isa.empty() ? kokoro::activation_kernels() : kokoro::activation_kernels(isa.c_str());
        k.logistic(x.data(), x.size(), out.data());
        return to_array(out, {py::ssize_t(out.size())});
    }, py::arg("x"), py::arg("isa") = "", "MLAS's logistic of x (flattened).");
    m.def("kokoro_tanh", [](const FloatArray& x, const std::string& isa) {
        std::vector<float> out(size_t(x.size()));
        const kokoro::ActivationKernels& k =
            isa.empty() ? kokoro::activation_kernels() : kokoro::activation_kernels(isa.c_str());
        k.tanh(x.data(), x.size(), out.data());
        return to_array(out, {py::ssize_t(out.size())});
    }, py::arg("x"), py::arg("isa") = "", "MLAS's tanh of x (flattened).");
    m.def("kokoro_layer_norm", [](const FloatArray& x, const FloatArray& w, const FloatArray& b,
                                  float eps) {
        int64_t rows = 0;
        const float* p = rows_of(x, "x", -1, rows);
        const int64_t n = x.shape(1);
        std::vector<float> out(size_t(rows * n));
        kokoro::layer_norm_lanes(p, vector_of(w, "weight", n), vector_of(b, "bias", n), rows, n,
                                 eps, out.data());
        return to_array(out, {py::ssize_t(rows), py::ssize_t(n)});
    }, py::arg("x"), py::arg("weight"), py::arg("bias"), py::arg("eps"));
    m.def("kokoro_instance_norm", [](const FloatArray& x, float eps) {
        int64_t rows = 0;
        const float* p = rows_of(x, "x", -1, rows);
        std::vector<float> out(size_t(x.size()));
        kokoro::instance_norm(p, rows, x.shape(1), eps, out.data());
        return to_array(out, {py::ssize_t(rows), py::ssize_t(x.shape(1))});
    }, py::arg("x"), py::arg("eps") = kokoro::kAdaInEps);
    m.def("kokoro_fast_gelu", [](const FloatArray& x, const FloatArray& bias) {
        int64_t rows = 0;
        const float* p = rows_of(x, "x", -1, rows);
        const int64_t n = x.shape(1);
        std::vector<float> out(size_t(rows * n));
        kokoro::fast_gelu(p, vector_of(bias, "bias", n), rows, n, out.data());
        return to_array(out, {py::ssize_t(rows), py::ssize_t(n)});
    }, py::arg("x"), py::arg("bias"));
    m.def("kokoro_softmax", [](const FloatArray& x) {
        int64_t rows = 0;
        rows_of(x, "x", -1, rows);
        std::vector<float> out = copy_of(x);
        kokoro::softmax_rows(out.data(), rows, x.shape(1));
        return to_array(out, {py::ssize_t(rows), py::ssize_t(x.shape(1))});
    }, py::arg("x"));

    py::class_<KokoroModel, std::shared_ptr<KokoroModel>>(m, "KokoroModel",
        "Kokoro / Kitten TTS (converted GGUF) on the CPU, stage by stage.")
        .def(py::init([](const std::string& path, int n_threads) {
                 py::gil_scoped_release nogil;
                 return std::make_shared<KokoroModel>(path, n_threads);
             }),
             py::arg("path"), py::arg("n_threads") = 0)
        .def_property_readonly("config", [](const KokoroModel& k) {
            const kokoro::KokoroConfig& c = k.config();
            py::dict d;
            d["style_split"] = py::make_tuple(c.style_decoder, c.style_predictor);
            d["n_fft"] = c.n_fft;
            d["hop"] = c.hop;
            d["harmonics"] = c.harmonics;
            d["sample_rate"] = c.sample_rate;
            d["upsample_scale"] = c.upsample_scale;
            d["voiced_threshold"] = c.voiced_threshold;
            d["sine_amp"] = c.sine_amp;
            d["bert_layers"] = c.bert_layers;
            d["bert_heads"] = c.bert_heads;
            d["bert_max_positions"] = c.bert_max_positions;
            d["quantized"] = c.quantized;
            return d;
        })
        .def_property_readonly("vocab", [](const KokoroModel& k) { return k.weights().vocab(); })
        .def_property_readonly("voices", [](const KokoroModel& k) { return k.weights().voices(); })
        .def("voice", [](const KokoroModel& k, const std::string& name) {
            const kokoro::TensorView v = k.weights().voice(name);
            std::vector<float> rows(v.f32(), v.f32() + v.numel());
            return to_array(rows, {py::ssize_t(v.dim(0)), py::ssize_t(v.dim(1))});
        }, py::arg("name"), "A voice pack (rows, style): row n - 1 is the style for n phonemes.")
        // ---- single ops by module name (loaded per call; for tests)
        .def("linear", [](const KokoroModel& k, const std::string& module, const FloatArray& x) {
            const kokoro::QLinear l = kokoro::QLinear::load(k.weights(), module);
            int64_t rows = 0;
            const float* p = rows_of(x, "x", l.in(), rows);
            std::vector<float> out(size_t(rows * l.out()));
            {
                py::gil_scoped_release nogil;
                l.forward(p, rows, out.data(), &k.pool());
            }
            return to_array(out, {py::ssize_t(rows), py::ssize_t(l.out())});
        }, py::arg("module"), py::arg("x"), "A MatMulInteger linear: x [m, K] -> [m, N].")
        .def("qconv", [](const KokoroModel& k, const std::string& module, const FloatArray& x) {
            const kokoro::QConv c = kokoro::QConv::load(k.weights(), module);
            int64_t rows = 0;
            const float* p = rows_of(x, "x", -1, rows);
            if (rows != c.c_in()) throw ShapeError("qconv: x has " + std::to_string(rows) +
                                                   " channels, expected " + std::to_string(c.c_in()));
            const int64_t n = x.shape(1), lo = c.out_length(n);
            std::vector<float> out(size_t(c.c_out() * lo));
            {
                py::gil_scoped_release nogil;
                c.forward(p, n, out.data(), &k.pool());
            }
            return to_array(out, {py::ssize_t(c.c_out()), py::ssize_t(lo)});
        }, py::arg("module"), py::arg("x"), "A ConvInteger convolution: x [C_in, L] -> [C_out, L'].")
        .def("lstm", [](const KokoroModel& k, const std::string& module, const FloatArray& x,
                        bool swap_directions) {
            const kokoro::QLstm l = kokoro::QLstm::load(k.weights(), module);
            int64_t t = 0;
            const float* p = rows_of(x, "x", l.input(), t);
            std::vector<float> out(size_t(t * 2 * l.hidden()));
            {
                py::gil_scoped_release nogil;
                l.forward(p, t, out.data(), &k.pool(), swap_directions);
            }
            return to_array(out, {py::ssize_t(t), py::ssize_t(2 * l.hidden())});
        }, py::arg("module"), py::arg("x"), py::arg("swap_directions") = false,
           "An integer BiLSTM: x [T, In] -> [T, 2H]. swap_directions: a negative control.")
        .def("ada_in", [](const KokoroModel& k, const std::string& module, const FloatArray& x,
                          const FloatArray& style) {
            const kokoro::AdaIN1d a = kokoro::AdaIN1d::load(k.weights(), module);
            int64_t c = 0;
            const float* p = rows_of(x, "x", -1, c);
            if (c != a.channels()) throw ShapeError("ada_in: channel count");
            std::vector<float> out(size_t(x.size()));
            a.forward(p, x.shape(1), vector_of(style, "style", a.style_width()), out.data(),
                      &k.pool());
            return to_array(out, {py::ssize_t(c), py::ssize_t(x.shape(1))});
        }, py::arg("module"), py::arg("x"), py::arg("style"))
        .def("adain_resblock", [](const KokoroModel& k, const std::string& module,
                                  const FloatArray& x, const FloatArray& style) {
            const kokoro::AdainResBlk1d b = kokoro::AdainResBlk1d::load(k.weights(), module);
            int64_t c = 0;
            rows_of(x, "x", -1, c);
            const std::vector<float> in = copy_of(x);
            std::vector<float> out;
            const int64_t l = x.shape(1);
            const float* s = vector_of(style, "style", k.config().style_predictor);
            {
                py::gil_scoped_release nogil;
                b.forward(in, l, s, out, &k.pool());
            }
            return to_array(out, {py::ssize_t(b.c_out()), py::ssize_t(b.out_length(l))});
        }, py::arg("module"), py::arg("x"), py::arg("style"))
        // ---- stages 1-5 (ReferenceKokoro's methods of the same names)
        .def("albert", [](const KokoroModel& k, const IdArray& ids, int64_t layers) {
            const std::vector<int64_t> v = ids_of(ids, "ids");
            std::vector<float> out;
            {
                py::gil_scoped_release nogil;
                out = k.albert().forward(v.data(), int64_t(v.size()), &k.pool(), layers);
            }
            return to_array(out, {py::ssize_t(v.size()), py::ssize_t(k.albert().out_width())});
        }, py::arg("ids"), py::arg("layers") = -1, "ids [T] -> d_en [T, 512].")
        .def("albert_embed", [](const KokoroModel& k, const IdArray& ids) {
            const std::vector<int64_t> v = ids_of(ids, "ids");
            const std::vector<float> out = k.albert().embed(v.data(), int64_t(v.size()), &k.pool());
            return to_array(out, {py::ssize_t(v.size()), py::ssize_t(k.albert().hidden())});
        }, py::arg("ids"), "The embeddings mapped to the hidden width: [T, 768].")
        .def("albert_layer", [](const KokoroModel& k, const FloatArray& h) {
            int64_t t = 0;
            const float* p = rows_of(h, "h", k.albert().hidden(), t);
            std::vector<float> out;
            {
                py::gil_scoped_release nogil;
                out = k.albert().layer(p, t, &k.pool());
            }
            return to_array(out, {py::ssize_t(t), py::ssize_t(k.albert().hidden())});
        }, py::arg("h"), "One application of the shared layer: [T, 768] -> [T, 768].")
        .def("duration_encoder", [](const KokoroModel& k, const FloatArray& d_en,
                                    const FloatArray& s_pred, int64_t rounds) {
            int64_t t = 0;
            const float* p = rows_of(d_en, "d_en", k.albert().out_width(), t);
            const float* s = vector_of(s_pred, "s_pred", k.prosody().style_width());
            std::vector<float> out;
            {
                py::gil_scoped_release nogil;
                out = k.prosody().duration_encoder(p, t, s, &k.pool(), rounds);
            }
            const int64_t w = int64_t(out.size()) / t;
            return to_array(out, {py::ssize_t(t), py::ssize_t(w)});
        }, py::arg("d_en"), py::arg("s_pred"), py::arg("rounds") = -1)
        .def("durations", [](const KokoroModel& k, const FloatArray& d, float speed) {
            int64_t t = 0;
            const float* p = rows_of(d, "d", k.prosody().d_width(), t);
            std::vector<int64_t> out;
            std::vector<float> totals;
            {
                py::gil_scoped_release nogil;
                out = k.prosody().durations(p, t, speed, &k.pool(), &totals);
            }
            return py::make_tuple(to_ids(out), to_array(totals, {py::ssize_t(t)}));
        }, py::arg("d"), py::arg("speed") = 1.0f,
           "(frames per id, the unrounded totals / speed).")
        .def("f0_energy", [](const KokoroModel& k, const FloatArray& en, const FloatArray& s_pred,
                             bool swap_lstm) {
            int64_t c = 0;
            const float* p = rows_of(en, "en", -1, c);
            if (c != k.prosody().d_width())
                throw ShapeError("en: " + std::to_string(c) + " rows, expected " +
                                 std::to_string(k.prosody().d_width()));
            const float* s = vector_of(s_pred, "s_pred", k.prosody().style_width());
            std::vector<float> f0, n;
            {
                py::gil_scoped_release nogil;
                k.prosody().f0_energy(p, en.shape(1), s, f0, n, &k.pool(), swap_lstm);
            }
            return py::make_tuple(to_array(f0, {py::ssize_t(f0.size())}),
                                  to_array(n, {py::ssize_t(n.size())}));
        }, py::arg("en"), py::arg("s_pred"), py::arg("swap_lstm") = false,
           "en [640, F] -> (F0 [2F], N [2F]).")
        .def("text_encoder", [](const KokoroModel& k, const IdArray& ids) {
            const std::vector<int64_t> v = ids_of(ids, "ids");
            std::vector<float> out;
            {
                py::gil_scoped_release nogil;
                out = k.text_encoder().forward(v.data(), int64_t(v.size()), &k.pool());
            }
            return to_array(out, {py::ssize_t(v.size()), py::ssize_t(k.text_encoder().width())});
        }, py::arg("ids"), "ids [T] -> [T, 512].")
        .def("predict", [](const KokoroModel& k, const IdArray& ids, const FloatArray& style,
                           float speed, std::optional<IdArray> durations,
                           std::optional<FloatArray> d_en) {
            const std::vector<int64_t> v = ids_of(ids, "ids");
            const float* s = vector_of(style, "style", k.config().style_width());
            std::vector<int64_t> dur;
            if (durations) dur = ids_of(*durations, "durations");
            std::vector<float> de;
            if (d_en) de = copy_of(*d_en);
            kokoro::KokoroPrediction p;
            {
                py::gil_scoped_release nogil;
                p = k.predict(v, s, speed, durations ? &dur : nullptr, d_en ? &de : nullptr);
            }
            const py::ssize_t t = py::ssize_t(p.ids.size()), f = py::ssize_t(p.frames);
            py::dict out;
            out["durations"] = to_ids(p.durations);
            out["frames"] = p.frames;
            out["d_en"] = to_array(p.d_en, {t, py::ssize_t(p.d_en.size()) / t});
            out["d"] = to_array(p.d, {t, py::ssize_t(p.d.size()) / t});
            out["asr"] = to_array(p.asr, {py::ssize_t(p.asr.size()) / f, f});
            out["f0"] = to_array(p.f0, {py::ssize_t(p.f0.size())});
            out["n"] = to_array(p.n, {py::ssize_t(p.n.size())});
            return out;
        }, py::arg("ids"), py::arg("style"), py::arg("speed") = 1.0f,
           py::arg("durations") = py::none(), py::arg("d_en") = py::none(),
           "Stages 1-5 for phoneme ids (boundaries added): durations, d_en, d, asr [512, F], "
           "f0 and n [2F]. durations / d_en: use these instead of the predicted ones.")
        // ---- decoder and generator stages (kokoro-back) ----
        ;
}

}  // namespace dasllama::bindings

// _core.KokoroModel: Kokoro / Kitten TTS on the CPU (csrc/tts/kokoro/). The stage methods
// mirror dasllama.reference.kokoro.ReferenceKokoro's methods of the same names, for parity
// tests; module-level kokoro_* functions expose the int8 and float helpers alone. Arrays in are
// float32 (forcecast) or int64 ids; arrays out are float32 in NumPy order. Calls that run the
// model release the GIL. A model runs one call at a time (its stages share one thread pool).
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings/bindings.h"
#include "core/errors.h"
#include "tts/kokoro/gpu_admission.h"
#include "tts/kokoro/gpu_vocoder.h"
#include "tts/kokoro/int8_ops.h"
#include "tts/kokoro/kokoro_model.h"
#include "tts/kokoro/onnx_math.h"
#include "tts/kokoro/bilstm.h"
#include "tts/kokoro/style_blocks.h"
#include "core/thread_pool.h"
#include "nn/conv_transpose1d.h"
#include "nn/stft.h"
#include "tts/kokoro/harmonic_source.h"
#include "tts/kokoro/snake_resblock.h"
#include "tts/kokoro/vocoder.h"

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
        .def(py::init([](const std::string& path, int n_threads, const std::string& device) {
                 py::gil_scoped_release nogil;
                 return std::make_shared<KokoroModel>(path, n_threads, device);
             }),
             py::arg("path"), py::arg("n_threads") = 0, py::arg("device") = "cpu",
             "device: cpu, or vulkan|vulkan:N|vulkan:NAME (the decoder and generator on the "
             "GPU: the vocoder seat; the predictor stays on the CPU).")
        .def_property_readonly("device_name", [](const KokoroModel& k) {
            return k.gpu() ? k.gpu()->device_name() : std::string("cpu");
        })
        .def("seat_stats", [](const KokoroModel& k) {
            std::map<std::string, gpu::SeatStats> seats;
            if (k.gpu()) seats["vocoder"] = k.gpu()->stats();
            py::dict out = seat_stats_dict(seats);
            if (k.gpu()) {
                py::dict v = out["vocoder"];
                v["bytes_up"] = k.gpu()->bytes_up();
                v["bytes_down"] = k.gpu()->bytes_down();
                v["weight_bytes"] = k.gpu()->weight_bytes();
                v["reason"] = k.gpu()->last_reason();
            }
            return out;
        }, "{'vocoder': served, declined by reason, dispatches, uploads, bytes_up, bytes_down, "
           "weight_bytes, reason (why the last call declined, '' when it was served)} on a GPU; "
           "{} on the CPU.")
        .def("set_seat_enabled", [](KokoroModel& k, const std::string& seat, bool on) {
            if (!k.gpu() || seat != "vocoder")
                throw std::invalid_argument("no seat '" + seat + "' on this model (seats: "
                                            "vocoder on a GPU device, none on the CPU)");
            k.gpu()->set_enabled(on);
        }, py::arg("seat"), py::arg("on"),
           "Turns the vocoder seat on or off; a seat that is off declines with reason 'knob'.")
        .def("set_profiling", [](KokoroModel& k, bool on) {
                 if (k.gpu()) k.gpu()->set_profiling(on);
             }, py::arg("on"),
             "Times every dispatch of the vocoder seat's next calls (see last_profile); nothing "
             "on the CPU.")
        .def("last_profile", [](const KokoroModel& k) {
                 py::list out;
                 if (k.gpu())
                     for (const gpu::KernelTime& t : k.gpu()->last_profile())
                         out.append(py::make_tuple(t.stamp, t.microseconds));
                 return out;
             },
             "[(stamp, microseconds)] of each dispatch of the seat's last call, when profiling; "
             "[] on the CPU.")
        .def_property_readonly("pool_jobs", [](const KokoroModel& k) {
            return k.pool().jobs_run();
        }, "Jobs the model's thread pool has handed to its workers since the model was made "
           "(a profile's count of parallel sections; 0 on one thread).")
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
            d["bert_activation"] = c.bert_gelu_erf ? "gelu" : "gelu_new";
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
            const kokoro::Linear l = kokoro::Linear::load(k.weights(), module);
            int64_t rows = 0;
            const float* p = rows_of(x, "x", l.in(), rows);
            std::vector<float> out(size_t(rows * l.out()));
            {
                py::gil_scoped_release nogil;
                l.forward(p, rows, out.data(), &k.pool());
            }
            return to_array(out, {py::ssize_t(rows), py::ssize_t(l.out())});
        }, py::arg("module"), py::arg("x"), "A linear in the weights' lane (MatMulInteger for I8, float32 for F32): x [m, K] -> [m, N].")
        .def("qconv", [](const KokoroModel& k, const std::string& module, const FloatArray& x) {
            const kokoro::Conv c = kokoro::Conv::load(k.weights(), module);
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
        }, py::arg("module"), py::arg("x"), "A convolution in the weights' lane (ConvInteger for I8, float32 for F32): x [C_in, L] -> [C_out, L'].")
        .def("lstm", [](const KokoroModel& k, const std::string& module, const FloatArray& x,
                        bool swap_directions) {
            const kokoro::BiLstm l = kokoro::BiLstm::load(k.weights(), module);
            int64_t t = 0;
            const float* p = rows_of(x, "x", l.input(), t);
            std::vector<float> out(size_t(t * 2 * l.hidden()));
            {
                py::gil_scoped_release nogil;
                l.forward(p, t, out.data(), &k.pool(), swap_directions);
            }
            return to_array(out, {py::ssize_t(t), py::ssize_t(2 * l.hidden())});
        }, py::arg("module"), py::arg("x"), py::arg("swap_directions") = false,
           "A BiLSTM in the weights' lane: x [T, In] -> [T, 2H]. swap_directions: a negative control.")
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
        // ---- the decoder and generator stages ----
        .def("harmonic_source", [](const KokoroModel& k, const FloatArray& f0, bool noise,
                                   uint64_t seed) {
            const std::shared_ptr<kokoro::KokoroVocoder> v = kokoro::vocoder_for(k);
            const kokoro::HarmonicSource& s = v->generator().source();
            const float* p = vector_of(f0, "f0", -1);
            const int64_t frames = f0.shape(0);
            if (frames < 1) throw ShapeError("f0: an empty curve");
            kokoro::SourceNoise sn;
            sn.enabled = noise;
            sn.seed = seed;
            std::vector<float> out(size_t(s.samples(frames)));
            {
                py::gil_scoped_release nogil;
                s.forward(p, frames, out.data(), k.pool(), sn);
            }
            return to_array(out, {py::ssize_t(out.size())});
        }, py::arg("f0"), py::arg("noise") = false, py::arg("seed") = 0,
           "SineGen + merge + tanh: F0 [2F] -> source [600 F]. noise: SineGen's seeded "
           "initial phases and noise (off: the exported graph's deterministic form).")
        .def("stft", [](const KokoroModel& k, const FloatArray& x) {
            const std::shared_ptr<kokoro::KokoroVocoder> v = kokoro::vocoder_for(k);
            const nn::NaiveStft& st = v->generator().stft();
            const float* p = vector_of(x, "x", -1);
            const int64_t n = x.shape(0), frames = st.frames(n);
            std::vector<float> out(size_t(2 * st.bins() * std::max<int64_t>(frames, 0)));
            {
                py::gil_scoped_release nogil;
                st.forward(p, n, out.data(), k.pool());
            }
            return to_array(out, {py::ssize_t(2 * st.bins()), py::ssize_t(frames)});
        }, py::arg("x"), "The graph's STFT: signal [n] -> [magnitudes; phases] [2 bins, frames].")
        .def("istft", [](const KokoroModel& k, const FloatArray& spec, const FloatArray& phase) {
            const std::shared_ptr<kokoro::KokoroVocoder> v = kokoro::vocoder_for(k);
            const int64_t bins = v->generator().bins();
            int64_t rows = 0, prow = 0;
            const float* s = rows_of(spec, "spec", -1, rows);
            const float* p = rows_of(phase, "phase", -1, prow);
            if (rows != bins || prow != bins || spec.shape(1) != phase.shape(1))
                throw ShapeError("istft: spec and phase must both be [" + std::to_string(bins) +
                                 ", frames]");
            std::vector<float> out;
            {
                py::gil_scoped_release nogil;
                v->generator().istft(s, p, spec.shape(1), out, k.pool());
            }
            return to_array(out, {py::ssize_t(out.size())});
        }, py::arg("spec"), py::arg("phase"),
           "The graph's inverse STFT: spec, phase [bins, frames] -> audio.")
        .def("source_spectrum", [](const KokoroModel& k, const FloatArray& f0) {
            const std::shared_ptr<kokoro::KokoroVocoder> v = kokoro::vocoder_for(k);
            const float* p = vector_of(f0, "f0", -1);
            const int64_t curve = f0.shape(0);
            if (curve < 1) throw ShapeError("f0: an empty curve");
            std::vector<float> har;
            {
                py::gil_scoped_release nogil;
                v->generator().source_spectrum(p, curve, har, k.pool());
            }
            const py::ssize_t rows = py::ssize_t(2 * v->generator().bins());
            return to_array(har, {rows, py::ssize_t(har.size()) / rows});
        }, py::arg("f0"), "The STFT of the harmonic source of F0 [2F]: [2 bins, 120 F + 1].")
        .def("snake_resblock", [](const KokoroModel& k, const std::string& module,
                                  const FloatArray& x, const FloatArray& style) {
            const kokoro::SnakeResBlock b = kokoro::SnakeResBlock::load(k.weights(), module);
            int64_t c = 0;
            const float* p = rows_of(x, "x", -1, c);
            if (c != b.channels())
                throw ShapeError("snake_resblock: x has " + std::to_string(c) +
                                 " channels, expected " + std::to_string(b.channels()));
            const float* s = vector_of(style, "style", k.config().style_decoder);
            const int64_t l = x.shape(1);
            std::vector<float> out;
            kokoro::SnakeResBlock::Scratch scratch;
            {
                py::gil_scoped_release nogil;
                b.forward(p, l, s, out, scratch, k.pool());
            }
            return to_array(out, {py::ssize_t(c), py::ssize_t(l)});
        }, py::arg("module"), py::arg("x"), py::arg("style"),
           "A Snake AdaIN residual block by module name: x [C, L] -> [C, L].")
        .def("decoder", [](const KokoroModel& k, const FloatArray& asr, const FloatArray& f0,
                           const FloatArray& n, const FloatArray& s_dec) {
            const std::shared_ptr<kokoro::KokoroVocoder> v = kokoro::vocoder_for(k);
            const kokoro::Decoder& d = v->decoder();
            int64_t c = 0;
            const float* a = rows_of(asr, "asr", -1, c);
            if (c != d.asr_channels())
                throw ShapeError("asr: " + std::to_string(c) + " rows, expected " +
                                 std::to_string(d.asr_channels()));
            const int64_t frames = asr.shape(1);
            const float* pf = vector_of(f0, "f0", 2 * frames);
            const float* pn = vector_of(n, "n", 2 * frames);
            const float* s = vector_of(s_dec, "s_dec", v->style_width());
            std::vector<float> out;
            int64_t l = 0;
            {
                py::gil_scoped_release nogil;
                l = d.forward(a, frames, pf, pn, s, out, k.pool());
            }
            return to_array(out, {py::ssize_t(d.out_channels()), py::ssize_t(l)});
        }, py::arg("asr"), py::arg("f0"), py::arg("n"), py::arg("s_dec"),
           "asr [512, F], F0 and N [2F], the style's decoder part -> [512, 2F].")
        .def("generator", [](const KokoroModel& k, const FloatArray& x, const FloatArray& s_dec,
                             const FloatArray& f0, std::optional<FloatArray> har) {
            const std::shared_ptr<kokoro::KokoroVocoder> v = kokoro::vocoder_for(k);
            kokoro::Generator& g = v->generator();
            int64_t c = 0;
            const float* px = rows_of(x, "x", -1, c);
            if (c != g.in_channels())
                throw ShapeError("x: " + std::to_string(c) + " rows, expected " +
                                 std::to_string(g.in_channels()));
            const int64_t curve = x.shape(1);
            const float* pf = vector_of(f0, "f0", curve);
            const float* s = vector_of(s_dec, "s_dec", v->style_width());
            const float* ph = nullptr;
            if (har) {
                if (har->ndim() != 2 || har->shape(0) != 2 * g.bins() ||
                    har->shape(1) != g.spectrum_frames(curve))
                    throw ShapeError("har: expected [" + std::to_string(2 * g.bins()) + ", " +
                                     std::to_string(g.spectrum_frames(curve)) + "]");
                ph = har->data();
            }
            std::vector<float> audio;
            {
                py::gil_scoped_release nogil;
                g.forward(px, curve, s, pf, audio, k.pool(), ph);
            }
            return to_array(audio, {py::ssize_t(audio.size())});
        }, py::arg("x"), py::arg("s_dec"), py::arg("f0"), py::arg("har") = py::none(),
           "The decoder's output x [512, 2F] and F0 [2F] -> audio [600 F]. har: a peer's "
           "source spectrum [22, 120 F + 1] instead of the generator's own.")
        .def("synthesize", [](const KokoroModel& k, const IdArray& ids, const FloatArray& style,
                              float speed, std::optional<IdArray> durations,
                              std::optional<FloatArray> d_en, std::optional<FloatArray> har,
                              std::optional<uint64_t> noise_seed) {
            const std::vector<int64_t> v = ids_of(ids, "ids");
            const float* s = vector_of(style, "style", k.config().style_width());
            if (!(speed > 0.0f)) throw ShapeError("speed: " + std::to_string(speed) +
                                                  " (must be positive)");
            std::vector<int64_t> dur;
            if (durations) dur = ids_of(*durations, "durations");
            std::vector<float> de;
            if (d_en) de = copy_of(*d_en);
            std::vector<float> hv;
            if (har) hv = copy_of(*har);
            kokoro::SourceNoise noise;
            if (noise_seed) {
                noise.enabled = true;
                noise.seed = *noise_seed;
            }
            kokoro::KokoroAudio a;
            {
                py::gil_scoped_release nogil;
                a = kokoro::synthesize(k, v, s, speed, durations ? &dur : nullptr,
                                       d_en ? &de : nullptr, har ? &hv : nullptr, noise);
            }
            py::dict out;
            out["audio"] = to_array(a.audio, {py::ssize_t(a.audio.size())});
            out["durations"] = to_ids(a.durations);
            out["frames"] = a.frames;
            return out;
        }, py::arg("ids"), py::arg("style"), py::arg("speed") = 1.0f,
           py::arg("durations") = py::none(), py::arg("d_en") = py::none(),
           py::arg("har") = py::none(), py::arg("noise_seed") = py::none(),
           "The whole chain: phoneme ids (boundaries added), a style row and a speed -> "
           "{audio (24 kHz float32), durations (frames per id, predicted), frames}. "
           "durations / d_en / har: a peer's, to compare from the same point. noise_seed: "
           "SineGen's seeded noise (None: the exported graph's deterministic form).")
        ;
    m.def("kokoro_gpu_unfit", [](const py::dict& d, int64_t frames, uint64_t max_binding_bytes) {
        auto get = [&](const char* key) { return d[key].cast<int64_t>(); };
        kokoro::VocoderGpuDims v;
        v.decoder_rows = get("decoder_rows");
        v.decoder_out = get("decoder_out");
        v.stage_channels = d["stage_channels"].cast<std::vector<int64_t>>();
        v.stage_strides = d["stage_strides"].cast<std::vector<int64_t>>();
        v.resblocks = get("resblocks");
        v.bins = get("bins");
        v.hop = get("hop");
        v.harmonics = get("harmonics");
        v.upsample = get("upsample");
        v.largest_weight = get("largest_weight");
        return kokoro::gpu_vocoder_unfit(v, frames, max_binding_bytes);
    }, py::arg("dims"), py::arg("frames"), py::arg("max_binding_bytes"),
       "The vocoder seat's admission rule (csrc/tts/kokoro/gpu_admission.h): '' when a call of "
       "`frames` frames fits, else why not. dims: decoder_rows, decoder_out, stage_channels, "
       "stage_strides, resblocks, bins, hop, harmonics, upsample, largest_weight.");
    m.def("conv_transpose1d", [](const FloatArray& x, const FloatArray& w,
                                 std::optional<FloatArray> bias, int64_t stride, int64_t pad_left,
                                 int64_t pad_right, int64_t dilation, int64_t groups,
                                 int64_t output_padding, int n_threads) {
        if (x.ndim() != 2 || w.ndim() != 3)
            throw ShapeError("conv_transpose1d: x [C_in, N] and weight [C_in, C_out / groups, K]");
        if (w.shape(0) != x.shape(0))
            throw ShapeError("conv_transpose1d: weight for " + std::to_string(w.shape(0)) +
                             " input channels, x has " + std::to_string(x.shape(0)));
        nn::ConvTransposeAttrs a;
        a.stride = stride;
        a.pad_left = pad_left;
        a.pad_right = pad_right;
        a.dilation = dilation;
        a.groups = groups;
        a.output_padding = output_padding;
        std::vector<float> b;
        if (bias) b = copy_of(*bias);
        nn::ConvTranspose1d conv(w.data(), w.shape(0), w.shape(1) * groups, w.shape(2), b, a);
        const int64_t n = x.shape(1);
        std::vector<float> out;
        {
            py::gil_scoped_release nogil;
            ThreadPool pool(n_threads);
            conv.forward(x.data(), n, out, pool);
        }
        return to_array(out, {py::ssize_t(conv.c_out()), py::ssize_t(conv.out_length(n))});
    }, py::arg("x"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1,
       py::arg("pad_left") = 0, py::arg("pad_right") = 0, py::arg("dilation") = 1,
       py::arg("groups") = 1, py::arg("output_padding") = 0, py::arg("n_threads") = 1,
       "csrc/nn's float ConvTranspose1d: x [C_in, N], weight [C_in, C_out / groups, K] -> "
       "[C_out, L] (torch.nn.functional.conv_transpose1d's semantics, padding per side).");

}

}  // namespace dasllama::bindings

// _core.WhisperModel: Whisper on the CPU (csrc/asr/whisper/whisper_model.h), its encoder
// optionally a GPU seat (csrc/asr/whisper/gpu_encoder.h). Arrays in and
// out are float32 in NumPy order; every long call releases the GIL.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "asr/whisper/gpu_admission.h"
#include "asr/whisper/gpu_encoder.h"
#include "asr/whisper/whisper_model.h"
#include "bindings/bindings.h"
#include "core/errors.h"
#include "core/thread_pool.h"
#include "nn/linear_s8.h"

namespace py = pybind11;

namespace dasllama::bindings {

namespace {

using whisper::WhisperModel;
using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

py::array_t<float> to_array(const std::vector<float>& v, std::vector<py::ssize_t> shape) {
    py::array_t<float> out(shape);
    std::copy(v.begin(), v.end(), out.mutable_data());
    return out;
}

void expect_shape(const FloatArray& a, const std::vector<int64_t>& shape, const char* what) {
    bool ok = a.ndim() == py::ssize_t(shape.size());
    for (size_t i = 0; ok && i < shape.size(); ++i) ok = a.shape(i) == shape[i];
    if (!ok) {
        std::string want, have;
        for (int64_t s : shape) want += (want.empty() ? "" : ", ") + std::to_string(s);
        for (py::ssize_t i = 0; i < a.ndim(); ++i)
            have += (have.empty() ? "" : ", ") + std::to_string(a.shape(i));
        throw ShapeError(std::string(what) + ": expected float32 [" + want + "], got [" + have +
                         "]");
    }
}

py::dict config_dict(const whisper::WhisperConfig& c) {
    py::dict d;
    d["n_mels"] = c.n_mels;
    d["n_audio_ctx"] = c.n_audio_ctx;
    d["n_audio_state"] = c.n_audio_state;
    d["n_audio_head"] = c.n_audio_head;
    d["n_audio_layer"] = c.n_audio_layer;
    d["n_text_ctx"] = c.n_text_ctx;
    d["n_text_state"] = c.n_text_state;
    d["n_text_head"] = c.n_text_head;
    d["n_text_layer"] = c.n_text_layer;
    d["n_vocab"] = c.n_vocab;
    d["sample_rate"] = c.sample_rate;
    d["n_fft"] = c.n_fft;
    d["hop_length"] = c.hop_length;
    d["chunk_seconds"] = c.chunk_seconds;
    d["n_frames"] = c.n_frames();
    d["multilingual"] = c.multilingual();
    py::dict t;
    t["eot"] = c.tok.eot;
    t["sot"] = c.tok.sot;
    t["translate"] = c.tok.translate;
    t["transcribe"] = c.tok.transcribe;
    t["sot_lm"] = c.tok.sot_lm;
    t["sot_prev"] = c.tok.sot_prev;
    t["no_speech"] = c.tok.no_speech;
    t["no_timestamps"] = c.tok.no_timestamps;
    t["timestamp_begin"] = c.tok.timestamp_begin;
    d["tokens"] = t;
    d["suppress_ids"] = c.suppress_ids;
    d["suppress_ids_begin"] = c.suppress_ids_begin;
    d["lang_ids"] = c.lang_ids;
    d["alignment_heads"] = c.alignment_heads;
    return d;
}

}  // namespace

void bind_asr(py::module_& m) {
    py::class_<WhisperModel>(m, "WhisperModel",
                             "Whisper on the CPU from a GGUF (dasllama.convert.whisper's layout). "
                             "Not thread-safe: one call at a time.")
        .def(py::init([](const std::string& path, int n_threads, const std::string& compute,
                         const std::string& device) {
                 const auto lane = whisper::compute_type_from_string(compute);
                 py::gil_scoped_release nogil;
                 return new WhisperModel(path, n_threads, lane, device);
             }),
             py::arg("path"), py::arg("n_threads") = 0, py::arg("compute_type") = "f32",
             py::arg("device") = "cpu",
             "compute_type: 'f32' (float32 linears) or 'int8' (Q8_0 weights, 8-bit activations). "
             "device: cpu, or vulkan|vulkan:N|vulkan:NAME (the encoder on the GPU: the encoder "
             "seat; mel and decoder stay on the CPU).")
        .def_property_readonly("device_name", [](const WhisperModel& w) {
            return w.gpu() ? w.gpu()->device_name() : std::string("cpu");
        })
        .def("seat_stats", [](const WhisperModel& w) {
            std::map<std::string, gpu::SeatStats> seats;
            if (w.gpu()) seats["encoder"] = w.gpu()->stats();
            py::dict out = seat_stats_dict(seats);
            if (w.gpu()) {
                py::dict v = out["encoder"];
                v["bytes_up"] = w.gpu()->bytes_up();
                v["bytes_down"] = w.gpu()->bytes_down();
                v["weight_bytes"] = w.gpu()->weight_bytes();
                v["reason"] = w.gpu()->last_reason();
            }
            return out;
        }, "{'encoder': served, declined by reason, dispatches, replays, uploads, bytes_up, "
           "bytes_down, weight_bytes, reason (why the last call declined, '' when it was "
           "served)} on a GPU; {} on the CPU.")
        .def("set_profiling", [](WhisperModel& w, bool on) {
                 if (w.gpu()) w.gpu()->set_profiling(on);
             }, py::arg("on"),
             "Times every dispatch of the encoder seat's next windows (see last_profile); "
             "nothing on the CPU.")
        .def("last_profile", [](const WhisperModel& w) {
                 py::list out;
                 if (w.gpu())
                     for (const gpu::KernelTime& t : w.gpu()->last_profile())
                         out.append(py::make_tuple(t.stamp, t.microseconds));
                 return out;
             },
             "[(stamp, microseconds)] of each dispatch of the seat's last window, when "
             "profiling; [] on the CPU.")
        .def("set_seat_enabled", [](WhisperModel& w, const std::string& seat, bool on) {
            if (!w.gpu() || seat != "encoder")
                throw std::invalid_argument("no seat '" + seat + "' on this model (seats: "
                                            "encoder on a GPU device, none on the CPU)");
            w.gpu()->set_enabled(on);
        }, py::arg("seat"), py::arg("on"),
           "Turns the encoder seat on or off; a seat that is off declines with reason 'knob'.")
        .def_property_readonly("config",
                               [](const WhisperModel& w) { return config_dict(w.config()); })
        .def_property_readonly("n_threads", &WhisperModel::n_threads)
        .def("log_mel",
             [](WhisperModel& w, const FloatArray& audio) {
                 if (audio.ndim() != 1)
                     throw ShapeError("log_mel: audio must be 1-D float32 samples, got " +
                                      std::to_string(audio.ndim()) + "-D");
                 std::vector<float> mel;
                 {
                     py::gil_scoped_release nogil;
                     w.log_mel(audio.data(), int64_t(audio.size()), mel);
                 }
                 const int64_t n_mels = w.config().n_mels;
                 return to_array(mel, {py::ssize_t(n_mels), py::ssize_t(mel.size() / n_mels)});
             },
             py::arg("audio"), "audio [n] at 16 kHz -> log-mel [n_mels, n // hop + 1]")
        .def("log_mel_frames",
             [](WhisperModel& w, const FloatArray& span, int64_t offset, int64_t n, int64_t f0,
                int64_t nf, std::optional<float> top) {
                 if (span.ndim() != 1)
                     throw ShapeError("log_mel_frames: span must be 1-D float32 samples, got " +
                                      std::to_string(span.ndim()) + "-D");
                 std::vector<float> out;
                 {
                     py::gil_scoped_release nogil;
                     w.log_mel_frames(span.data(), offset, int64_t(span.size()), n, f0, nf,
                                      top.has_value(), top.value_or(0.0f), out);
                 }
                 return to_array(out, {py::ssize_t(w.config().n_mels), py::ssize_t(nf)});
             },
             py::arg("span"), py::arg("offset"), py::arg("n"), py::arg("f0"), py::arg("nf"),
             py::arg("top") = py::none(),
             "frames [f0, f0 + nf) of log_mel's output for a clip of n samples, from span: "
             "samples [offset, offset + len(span)) of the clip -> [n_mels, nf]. top=None: the "
             "values before the clamp (log10); else clamped as log_mel clamps a clip whose "
             "largest such value is top. Frames in log_mel's stretches of 3000 are equal to it.")
        .def("encode",
             [](WhisperModel& w, const FloatArray& window, bool set_window) {
                 const auto& c = w.config();
                 expect_shape(window, {c.n_mels, c.n_frames()}, "encode: window");
                 std::vector<float> out;
                 {
                     py::gil_scoped_release nogil;
                     w.encode(window.data(), out, set_window);
                 }
                 return to_array(out, {py::ssize_t(c.n_audio_ctx), py::ssize_t(c.n_audio_state)});
             },
             py::arg("window"), py::arg("set_window") = true,
             "window [n_mels, 2 * n_audio_ctx] -> encoder output [n_audio_ctx, d]; "
             "set_window: make it the decoder's window")
        .def("set_window",
             [](WhisperModel& w, const FloatArray& enc) {
                 const auto& c = w.config();
                 expect_shape(enc, {c.n_audio_ctx, c.n_audio_state}, "set_window: enc");
                 py::gil_scoped_release nogil;
                 w.set_window(enc.data());
             },
             py::arg("enc"), "make enc [n_audio_ctx, d] the decoder's window")
        .def("decoder_logits",
             [](WhisperModel& w, const std::vector<int32_t>& tokens) {
                 std::vector<float> out;
                 {
                     py::gil_scoped_release nogil;
                     w.decoder_logits(tokens.data(), int64_t(tokens.size()), out);
                 }
                 return to_array(out, {py::ssize_t(tokens.size()),
                                       py::ssize_t(w.config().n_vocab)});
             },
             py::arg("tokens"), "logits [n, n_vocab] of tokens from position 0 on the window")
        .def("generate",
             [](WhisperModel& w, const std::vector<int32_t>& prompt,
                const std::vector<int32_t>& suppress_tokens, bool suppress_blank,
                int64_t max_initial_timestamp_index, int64_t max_length,
                const std::vector<int32_t>& prefix, int beam_size, float patience,
                float length_penalty, float temperature, int best_of, uint64_t seed) {
                 whisper::DecodeOptions o;
                 o.suppress_tokens = suppress_tokens;
                 o.suppress_blank = suppress_blank;
                 o.max_initial_timestamp_index = max_initial_timestamp_index;
                 o.max_length = max_length;
                 o.prefix = prefix;
                 whisper::BeamOptions b{beam_size, patience, length_penalty};
                 if (beam_size < 1)
                     throw ShapeError("generate: beam_size " + std::to_string(beam_size) +
                                      " < 1");
                 whisper::DecodeResult r;
                 if (temperature > 0.0f) {
                     whisper::SampleOptions so{temperature, best_of, length_penalty, seed};
                     py::gil_scoped_release nogil;
                     r = w.sample(prompt, o, so);
                 } else {
                     py::gil_scoped_release nogil;
                     r = w.generate(prompt, o, b);
                 }
                 return py::make_tuple(r.tokens, r.sum_logprob, r.no_speech_prob);
             },
             py::arg("prompt"), py::arg("suppress_tokens"), py::arg("suppress_blank") = true,
             py::arg("max_initial_timestamp_index") = 50, py::arg("max_length") = 0,
             py::arg("prefix") = std::vector<int32_t>{}, py::arg("beam_size") = 1,
             py::arg("patience") = 1.0f, py::arg("length_penalty") = 1.0f,
             py::arg("temperature") = 0.0f, py::arg("best_of") = 1, py::arg("seed") = 0,
             "greedy decoding (beam search when beam_size > 1) on the window: (tokens, "
             "sum_logprob, no_speech_prob); prefix: tokens forced first (part of the output, "
             "scored 0; not with beams). temperature > 0: best_of candidates sampled from "
             "softmax(logits / temperature) with a generator seeded by seed (beam_size is "
             "then not used); the best by sum_logprob / length^length_penalty is returned")
        .def("align",
             [](WhisperModel& w, const std::vector<int32_t>& sot_sequence,
                const std::vector<int32_t>& text_tokens, int64_t num_frames,
                int median_filter_width, const std::vector<int32_t>& heads) {
                 whisper::AlignOptions o;
                 o.median_filter_width = median_filter_width;
                 o.heads = heads;
                 whisper::AlignmentResult r;
                 {
                     py::gil_scoped_release nogil;
                     r = w.align(sot_sequence, text_tokens, num_frames, o);
                 }
                 py::array_t<int32_t> text(py::ssize_t(r.text_indices.size()));
                 std::copy(r.text_indices.begin(), r.text_indices.end(), text.mutable_data());
                 py::array_t<int32_t> time(py::ssize_t(r.time_indices.size()));
                 std::copy(r.time_indices.begin(), r.time_indices.end(), time.mutable_data());
                 py::dict out;
                 out["text_indices"] = text;
                 out["time_indices"] = time;
                 out["text_token_probs"] = to_array(r.text_token_probs,
                                                    {py::ssize_t(r.text_token_probs.size())});
                 const py::ssize_t rows = r.n_frames > 0 ? py::ssize_t(text_tokens.size() + 1) : 0;
                 out["matrix"] = to_array(r.matrix, {rows, py::ssize_t(r.n_frames)});
                 return out;
             },
             py::arg("sot_sequence"), py::arg("text_tokens"), py::arg("num_frames"),
             py::arg("median_filter_width") = int(whisper::kMedianFilterWidth),
             py::arg("heads") = std::vector<int32_t>{},
             "word alignment of text_tokens (ids below <|endoftext|>) on the window whose first "
             "num_frames mel frames are audio: dict of text_indices and time_indices (the DTW "
             "path: rows, 0 = <|notimestamps|>, and encoder frames of 20 ms), "
             "text_token_probs [n_text] and matrix [n_text + 1, num_frames // 2] (the heads' "
             "normalized, filtered mean that DTW aligned). heads: flat (layer, head) pairs, "
             "empty for the file's whisper.alignment_heads; raises when there are none")
        .def_static("negative_dtw",
             [](const FloatArray& x) {
                 if (x.ndim() != 2)
                     throw ShapeError("negative_dtw: expected a 2-D float32 matrix, got " +
                                      std::to_string(x.ndim()) + "-D");
                 std::vector<std::pair<int32_t, int32_t>> path;
                 {
                     py::gil_scoped_release nogil;
                     path = whisper::negative_dtw(x.data(), x.shape(0), x.shape(1));
                 }
                 py::array_t<int32_t> out({py::ssize_t(path.size()), py::ssize_t(2)});
                 for (size_t k = 0; k < path.size(); ++k) {
                     out.mutable_at(py::ssize_t(k), 0) = path[k].first;
                     out.mutable_at(py::ssize_t(k), 1) = path[k].second;
                 }
                 return out;
             },
             py::arg("x"), "DTW of the cost -x over x [n, m]: the path's (row, column) pairs")
        .def_static("median_filter",
             [](const FloatArray& x, int width) {
                 if (x.ndim() != 2)
                     throw ShapeError("median_filter: expected a 2-D float32 array, got " +
                                      std::to_string(x.ndim()) + "-D");
                 std::vector<float> v(x.data(), x.data() + x.size());
                 whisper::median_filter_rows(v.data(), x.shape(0), x.shape(1), width);
                 return to_array(v, {x.shape(0), x.shape(1)});
             },
             py::arg("x"), py::arg("width") = int(whisper::kMedianFilterWidth),
             "median of width (odd) neighbours along each row, the edges reflected");
    // The int8 lane's arithmetic (csrc/nn/linear_s8.h), for tests against a NumPy form of the
    // rule: the row quantizer, the activation rule and the whole product.
    m.def("int8_quantize_rows", [](const FloatArray& w) {
        if (w.ndim() != 2 || w.shape(0) == 0 || w.shape(1) == 0)
            throw ShapeError("int8_quantize_rows: expected a non-empty 2-D float32 array");
        const nn::S8Matrix m = nn::quantize_s8(w.data(), w.shape(0), w.shape(1));
        py::array_t<int8_t> q({w.shape(0), w.shape(1)});
        py::array_t<float> scale(w.shape(0));
        for (int64_t r = 0; r < m.rows; ++r) {
            nn::s8_row(m, r, q.mutable_data() + r * m.cols);
            scale.mutable_data()[r] = m.scale[size_t(r)];
        }
        return py::make_tuple(q, scale);
    }, py::arg("w"), "(q int8 [rows, cols], scale float32 [rows]): W quantized row by row");
    m.def("int8_quantize_activations", [](const FloatArray& x) {
        if (x.ndim() != 2 || x.shape(1) == 0)
            throw ShapeError("int8_quantize_activations: expected a 2-D float32 array");
        py::array_t<uint8_t> u({x.shape(0), x.shape(1)});
        py::array_t<float> inv(x.shape(0));
        nn::quantize_activations_u8(x.data(), x.shape(0), x.shape(1), u.mutable_data(),
                                    inv.mutable_data());
        return py::make_tuple(u, inv);
    }, py::arg("x"), "(u uint8 [n, cols], 1 / scale float32 [n]): the activation rule");
    m.def("int8_linear", [](const FloatArray& w, std::optional<FloatArray> bias,
                            const FloatArray& x, int n_threads) {
        if (w.ndim() != 2 || x.ndim() != 2 || x.shape(1) != w.shape(1) || w.shape(0) == 0 ||
            w.shape(1) == 0)
            throw ShapeError("int8_linear: expected w [rows, cols] and x [n, cols] float32");
        if (bias && (bias->ndim() != 1 || bias->shape(0) != w.shape(0)))
            throw ShapeError("int8_linear: bias must have w.shape[0] values");
        const nn::S8Matrix m = nn::quantize_s8(w.data(), w.shape(0), w.shape(1));
        ThreadPool pool(n_threads);
        nn::S8Scratch scratch;
        py::array_t<float> y({x.shape(0), w.shape(0)});
        nn::linear_s8(m, bias ? bias->data() : nullptr, x.data(), x.shape(0), y.mutable_data(),
                      pool, scratch);
        return py::make_tuple(y, std::string(nn::linear_s8_kernel(x.shape(0))));
    }, py::arg("w"), py::arg("bias"), py::arg("x"), py::arg("n_threads") = 1,
       "(y [n, rows], kernel name): x W^T + bias through the int8 lane's product");
    m.def("whisper_gpu_unfit", [](int64_t n_mels, int64_t n_ctx, int64_t d, int64_t heads,
                                  int64_t ff, int64_t layers, uint64_t max_binding_bytes) {
        whisper::EncoderGpuDims e;
        e.n_mels = n_mels;
        e.n_ctx = n_ctx;
        e.d = d;
        e.heads = heads;
        e.ff = ff;
        e.layers = layers;
        return whisper::gpu_encoder_unfit(e, max_binding_bytes);
    }, py::arg("n_mels"), py::arg("n_ctx"), py::arg("d"), py::arg("heads"), py::arg("ff"),
       py::arg("layers"), py::arg("max_binding_bytes"),
       "The encoder seat's admission rule (csrc/asr/whisper/gpu_admission.h): '' when an "
       "encoder of these widths fits buffers of max_binding_bytes each, else the limit it "
       "passes.");
}

}  // namespace dasllama::bindings

// _core.PocketModel: Pocket TTS on the CPU or a GPU (csrc/tts/pocket/pocket_model.h),
// _core.PocketState, a backbone K/V state for the stage-by-stage tests, and
// _core.pocket_gpu_unfit, the GPU seats' admission rules (csrc/tts/pocket/gpu_admission.h).
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings/bindings.h"
#include "core/errors.h"
#include "gpu/seat.h"
#include "llm/kv_cache.h"
#include "tts/pocket/gpu_admission.h"
#include "tts/pocket/pocket_model.h"
#include "tts/pocket/text.h"
#include "tts/pocket/tokenizer.h"
#include "core/gguf.h"

namespace py = pybind11;

namespace dasllama::bindings {

namespace {

using pocket::PocketModel;
using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

struct PocketState {
    std::unique_ptr<KVCache> cache;
};

py::array_t<float> to_array(const std::vector<float>& v, std::vector<py::ssize_t> shape) {
    py::array_t<float> out(shape);
    std::copy(v.begin(), v.end(), out.mutable_data());
    return out;
}

// A float32 array of `cols` columns (1-D counts as one row when rows_1d); returns its rows.
int64_t rows_of(const FloatArray& a, int64_t cols, const char* what) {
    const int64_t total = int64_t(a.size());
    const bool ok = (a.ndim() == 2 && a.shape(1) == cols) || (a.ndim() == 1 && total == cols);
    if (!ok || cols <= 0)
        throw ShapeError(std::string(what) + ": expected [n, " + std::to_string(cols) +
                         "] float32, got " + std::to_string(a.ndim()) + "-D of " +
                         std::to_string(total) + " values");
    return total / cols;
}

std::vector<int32_t> ids_of(const std::vector<int64_t>& ids) {
    std::vector<int32_t> out;
    for (int64_t id : ids) {
        if (id < INT32_MIN || id > INT32_MAX)
            throw ShapeError("pocket: token id " + std::to_string(id) + " is out of range");
        out.push_back(int32_t(id));
    }
    return out;
}

py::dict config_dict(const pocket::PocketConfig& c) {
    py::dict d;
    d["sample_rate"] = c.sample_rate;
    d["frame_rate"] = c.frame_rate;
    d["frame_size"] = c.frame_size;
    d["latent_dim"] = c.latent_dim;
    d["temperature"] = c.temperature;
    d["lsd_decode_steps"] = c.lsd_decode_steps;
    d["eos_threshold"] = c.eos_threshold;
    d["chunk_tokens"] = c.chunk_tokens;
    d["min_frames_before_eos"] = c.min_frames_before_eos;
    d["frames_after_eos"] = c.frames_after_eos;
    d["tokens_per_second"] = c.tokens_per_second;
    d["gen_seconds_padding"] = c.gen_seconds_padding;
    d["voice_cloning"] = c.voice_cloning;
    d["n_bins"] = c.n_bins;
    d["d_model"] = c.lm.d_model;
    d["num_layers"] = c.lm.num_layers;
    d["num_kv_heads"] = c.lm.num_kv_heads;
    d["head_dim"] = c.lm.head_dim;
    d["cond_dim"] = c.cond_dim();
    d["inner_dim"] = c.inner_dim;
    return d;
}

}  // namespace

void bind_pocket_text(py::module_& m);  // below: Pocket TTS text handling
void bind_pocket_gpu(py::module_& m);   // below: the GPU seats' admission rules

void bind_tts(py::module_& m) {
    bind_pocket_text(m);
    bind_pocket_gpu(m);
    m.def("pocket_noise", [](uint64_t seed, int64_t n, int64_t width) {
              pocket::NoiseSource src;
              src.seed(seed);
              std::vector<float> rows(size_t(n * width));
              for (int64_t r = 0; r < n; ++r) src.next(rows.data() + r * width, width);
              return to_array(rows, {n, width});
          }, py::arg("seed"), py::arg("n"), py::arg("width"),
          "The first n rows of Pocket TTS's seeded noise (csrc/tts/pocket/noise.h).");

    py::class_<PocketState>(m, "PocketState",
                            "A Pocket TTS backbone state: the K/V rows of every position so far.")
        .def_property_readonly("n_past", [](const PocketState& s) { return s.cache->n_past(); })
        .def_property_readonly("n_ctx", [](const PocketState& s) { return s.cache->n_ctx(); })
        .def("kv", [](const PocketState& s, int layer) {
                const KVCache& c = *s.cache;
                const int64_t n = c.n_past(), h = c.n_head_kv(), d = c.head_dim_k();
                std::vector<float> k(size_t(n * h * d)), v(size_t(n * h * d));
                c.read_layer_rows(layer, 0, n, k.data(), v.data());
                return py::make_tuple(to_array(k, {n, h, d}), to_array(v, {n, h, d}));
            }, py::arg("layer"),
            "(keys, values) of one layer, float32 [n_past, kv_heads, head_dim] (keys rotated).")
        .def("truncate", [](PocketState& s, int64_t n) { s.cache->truncate(n); }, py::arg("n"));

    py::class_<PocketModel>(m, "PocketModel",
                            "Pocket TTS on the CPU. Calls are serialized; long ones release the "
                            "GIL. Text comes in as token ids of one chunk.")
        .def(py::init([](const std::string& path, int n_threads, const std::string& device) {
                 py::gil_scoped_release nogil;
                 return std::make_unique<PocketModel>(path, n_threads, device);
             }),
             py::arg("path"), py::arg("n_threads") = 0, py::arg("device") = "cpu",
             "device cpu|vulkan|vulkan:N|vulkan:NAME: on a GPU the prompt, frames and codec "
             "stages are seats that fall back to the CPU when they decline.")
        .def_property_readonly("device_name", &PocketModel::device_name)
        .def("seat_stats", [](const PocketModel& s) { return seat_stats_dict(s.seat_stats()); },
             "Per seat (prompt, frames, codec): served, declined by reason, dispatches, uploads, replays.")
        .def("set_seat_enabled", &PocketModel::set_seat_enabled, py::arg("seat"), py::arg("on"),
             "Turns a GPU seat on or off; a seat that is off declines with reason 'knob'.")
        .def("set_profiling", &PocketModel::set_profiling, py::arg("on"),
             "Times every GPU dispatch of encoders recorded later (turn the "
             "vulkan.pocket.replay knob off to time every call; see last_profile).")
        .def("last_profile", [](const PocketModel& s) {
                 py::list out;
                 for (const gpu::KernelTime& t : s.last_profile())
                     out.append(py::make_tuple(t.stamp, t.microseconds));
                 return out;
             },
             "[(stamp, microseconds)] of each dispatch of the last GPU submit, when profiling.")
        .def_property_readonly("config", [](const PocketModel& s) { return config_dict(s.config()); })
        .def_property_readonly("n_threads", &PocketModel::n_threads)
        .def_property_readonly("precision", &PocketModel::precision)
        .def("set_precision", &PocketModel::set_precision, py::arg("precision"),
             "'f32' (float32 activations, the default) or 'fast' (8-bit activations in the "
             "backbone's quantized matrices).")
        .def("frames_cap", [](const PocketModel& s, int64_t n) { return s.config().frames_cap(n); },
             py::arg("n_tokens"))
        .def("seed_noise", &PocketModel::seed_noise, py::arg("seed"),
             "Noise from the seeded generator (xoshiro256** + Box-Muller, csrc/tts/pocket/noise.h).")
        .def("set_noise", [](PocketModel& s, const FloatArray& rows) {
                const int64_t n = rows_of(rows, s.config().latent_dim, "noise");
                s.set_noise_rows(std::vector<float>(rows.data(), rows.data() + n * s.config().latent_dim));
            }, py::arg("rows"), "Noise rows [n, latent_dim] used in order, one per frame.")
        .def("encode_voice", [](PocketModel& s, const FloatArray& audio) {
                if (audio.ndim() != 1) throw ShapeError("encode_voice: expected mono audio [n]");
                std::vector<float> rows;
                int64_t n = 0;
                {
                    py::gil_scoped_release nogil;
                    rows = s.encode_voice(audio.data(), int64_t(audio.size()), &n);
                }
                return to_array(rows, {n, s.config().lm.d_model});
            }, py::arg("audio"),
            "Mono float32 audio at the model's rate -> the voice's prompt rows [n, d_model].")
        .def("add_voice", [](PocketModel& s, const std::string& name, const FloatArray& rows) {
                const int64_t n = rows_of(rows, s.config().lm.d_model, "voice rows");
                py::gil_scoped_release nogil;
                s.add_voice(name, rows.data(), n);
            }, py::arg("name"), py::arg("rows"))
        .def("add_voice_state", [](PocketModel& s, const std::string& name,
                                   const FloatArray& keys, const FloatArray& values) {
                const auto& lm = s.config().lm;
                const std::vector<int64_t> want{lm.num_layers, -1, lm.num_kv_heads, lm.head_dim};
                for (const FloatArray* a : {&keys, &values}) {
                    bool ok = a->ndim() == 4;
                    for (int d = 0; ok && d < 4; ++d)
                        ok = want[size_t(d)] < 0 || a->shape(d) == want[size_t(d)];
                    if (!ok || a->shape(1) != keys.shape(1) || a->shape(1) == 0) {
                        std::string got;
                        for (int d = 0; d < a->ndim(); ++d)
                            got += (d ? ", " : "") + std::to_string(a->shape(d));
                        throw ShapeError("voice state " + std::string(a == &keys ? "keys" : "values") +
                                         ": expected [" + std::to_string(lm.num_layers) + ", n >= 1, " +
                                         std::to_string(lm.num_kv_heads) + ", " +
                                         std::to_string(lm.head_dim) + "] matching the other, got [" +
                                         got + "]");
                    }
                }
                py::gil_scoped_release nogil;
                s.add_voice_state(name, keys.data(), values.data(), keys.shape(1));
            }, py::arg("name"), py::arg("keys"), py::arg("values"),
            "Registers a voice from its backbone state: keys (rotated) and values of every "
            "layer, float32 [num_layers, n, kv_heads, head_dim] each.")
        .def("remove_voice", &PocketModel::remove_voice, py::arg("name"))
        .def_property_readonly("voices", &PocketModel::voices)
        .def("voice_rows", &PocketModel::voice_rows, py::arg("name"))
        .def("begin_chunk", [](PocketModel& s, const std::vector<int64_t>& ids,
                               const std::string& voice, float temperature, float eos_threshold,
                               int64_t frames_after_eos, int64_t lsd_steps) {
                const std::vector<int32_t> ids32 = ids_of(ids);
                pocket::ChunkParams p;
                p.temperature = temperature;
                p.eos_threshold = eos_threshold;
                p.frames_after_eos = frames_after_eos;
                p.lsd_steps = lsd_steps;
                py::gil_scoped_release nogil;
                s.begin_chunk(ids32.data(), int64_t(ids32.size()), voice, p);
            }, py::arg("ids"), py::arg("voice"), py::arg("temperature"), py::arg("eos_threshold"),
            py::arg("frames_after_eos"), py::arg("lsd_steps") = 0,
            "Prompt stage of one chunk (voice '' for none).")
        .def("step", [](PocketModel& s, int64_t max_frames) {
                std::vector<float> audio;
                int64_t n = 0;
                {
                    py::gil_scoped_release nogil;
                    n = s.step(max_frames, audio);
                }
                return py::make_tuple(to_array(audio, {py::ssize_t(audio.size())}), n);
            }, py::arg("max_frames"),
            "Up to max_frames more frames: (audio float32, frames made); 0 frames: done.")
        .def_property_readonly("chunk_done", &PocketModel::chunk_done)
        .def("stage_times", [](const PocketModel& s) {
                const pocket::StageTimes t = s.stage_times();
                py::dict d;
                d["prompt_ms"] = t.prompt_ms;
                d["backbone_ms"] = t.backbone_ms;
                d["flow_ms"] = t.flow_ms;
                d["frames_gpu_ms"] = t.frames_gpu_ms;
                d["mimi_ms"] = t.mimi_ms;
                d["prompt_rows"] = t.prompt_rows;
                d["frames"] = t.frames;
                d["frames_overlapped"] = t.frames_overlapped;
                d["step_jobs"] = t.step_jobs;
                return d;
            }, "Wall milliseconds per stage since the model was opened (prompt, backbone, flow, "
               "frames_gpu, mimi) and the rows and frames they ran (frames_overlapped: decoded "
               "by Mimi on a worker beside the frame loop; step_jobs: the pool jobs of the "
               "frame loop and Mimi).")
        .def("record", [](const PocketModel& s) {
                const pocket::ChunkRecord& r = s.record();
                const int64_t n = int64_t(r.eos_logits.size());
                py::dict d;
                d["conditioning"] = to_array(r.conditioning, {n, s.config().cond_dim()});
                d["eos_logits"] = to_array(r.eos_logits, {n});
                d["latents"] = to_array(r.latents, {n, s.config().latent_dim});
                d["eos_frame"] = r.eos_frame < 0 ? py::object(py::none()) : py::int_(r.eos_frame);
                d["frames_cap"] = r.frames_cap;
                return d;
            }, "What the current chunk produced per frame (for tests).")
        // --- stages ---
        .def("text_rows", [](PocketModel& s, const std::vector<int64_t>& ids) {
                const std::vector<int32_t> ids32 = ids_of(ids);
                const std::vector<float> r = s.text_rows(ids32.data(), int64_t(ids32.size()));
                return to_array(r, {py::ssize_t(ids32.size()), s.config().lm.d_model});
            }, py::arg("ids"))
        .def("new_state", [](const PocketModel& s, int64_t n_ctx) {
                return PocketState{s.new_state(n_ctx)};
            }, py::arg("n_ctx"))
        .def("prompt", [](PocketModel& s, PocketState& st, const FloatArray& rows,
                          bool full_last_layer) {
                const int64_t n = rows_of(rows, s.config().lm.d_model, "prompt rows");
                py::gil_scoped_release nogil;
                s.prompt(*st.cache, rows.data(), n, full_last_layer);
            }, py::arg("state"), py::arg("rows"), py::arg("full_last_layer") = false)
        .def("frame_step", [](PocketModel& s, PocketState& st, std::optional<FloatArray> latent) {
                if (latent) rows_of(*latent, s.config().latent_dim, "latent");
                std::vector<float> c;
                {
                    py::gil_scoped_release nogil;
                    c = s.frame_step(*st.cache, latent ? latent->data() : nullptr);
                }
                return to_array(c, {s.config().cond_dim()});
            }, py::arg("state"), py::arg("latent"))
        .def("eos_logit", [](PocketModel& s, const FloatArray& cond) {
                rows_of(cond, s.config().cond_dim(), "conditioning");
                return s.eos_logit(cond.data());
            }, py::arg("cond"))
        .def("flow_head", [](PocketModel& s, const FloatArray& cond, std::optional<FloatArray> eps,
                             float temperature, int64_t steps) {
                rows_of(cond, s.config().cond_dim(), "conditioning");
                if (eps) rows_of(*eps, s.config().latent_dim, "eps");
                const std::vector<float> x =
                    s.flow_head(cond.data(), eps ? eps->data() : nullptr, temperature, steps);
                return to_array(x, {s.config().latent_dim});
            }, py::arg("cond"), py::arg("eps"), py::arg("temperature"), py::arg("steps") = 0)
        .def("denormalize", [](const PocketModel& s, const FloatArray& latents) {
                const int64_t n = rows_of(latents, s.config().latent_dim, "latents");
                return to_array(s.denormalize(latents.data(), n), {n, s.config().latent_dim});
            }, py::arg("latents"))
        .def("mimi_decode", [](PocketModel& s, const FloatArray& latents,
                               std::optional<std::vector<int64_t>> sizes) {
                const int64_t n = rows_of(latents, s.config().latent_dim, "latents");
                std::vector<int64_t> pieces = sizes ? *sizes : std::vector<int64_t>{n};
                int64_t total = 0;
                for (int64_t p : pieces) {
                    if (p < 0) throw ShapeError("mimi_decode: a negative piece size");
                    total += p;
                }
                if (total != n)
                    throw ShapeError("mimi_decode: sizes add up to " + std::to_string(total) +
                                     ", latents have " + std::to_string(n) + " frames");
                std::vector<float> audio;
                {
                    py::gil_scoped_release nogil;
                    audio = s.mimi_decode(latents.data(), pieces);
                }
                return to_array(audio, {py::ssize_t(audio.size())});
            }, py::arg("latents"), py::arg("sizes") = py::none(),
            "De-normalized latents [n, L] -> audio, a fresh decoder fed piece by piece.")
        .def("close", &PocketModel::close, py::call_guard<py::gil_scoped_release>())
        .def("__enter__", [](PocketModel& s) -> PocketModel& { return s; },
             py::return_value_policy::reference)
        .def("__exit__", [](PocketModel& s, py::args) {
            py::gil_scoped_release nogil;
            s.close();
        });
}

// ---------------------------------------------------------------------------------------------
// _core.PocketTokenizer, _core.PocketTextRules and the pocket_* text functions
// (csrc/tts/pocket/text.h, tokenizer.h)
// ---------------------------------------------------------------------------------------------

namespace {

py::str utf8_str(const std::string& s) {
    return py::reinterpret_steal<py::str>(
        PyUnicode_DecodeUTF8(s.data(), py::ssize_t(s.size()), "replace"));
}

}  // namespace

void bind_pocket_text(py::module_& m) {
    using pocket::TextRules;
    using pocket::TextTokenizer;
    py::class_<TextTokenizer, std::shared_ptr<TextTokenizer>>(m, "PocketTokenizer",
        "A Pocket TTS GGUF's tokenizer (a tokenizers JSON or a SentencePiece model); ids and "
        "text as the tokenizers / sentencepiece packages give them.")
        .def_static("from_gguf", [](const std::string& path) {
                return pocket::tokenizer_from_gguf(*GGUFFile::open(path));
            }, py::arg("path"), "Reads pocket.tokenizer.kind and its payload from a GGUF.")
        .def_static("from_json", [](const std::string& json) {
                return pocket::tokenizer_from_json(json, "<tokenizers json>");
            }, py::arg("json"), "A tokenizers JSON (text).")
        .def_static("from_sentencepiece", [](const py::bytes& proto) {
                return pocket::tokenizer_from_sentencepiece(std::string(proto),
                                                            "<sentencepiece model>");
            }, py::arg("proto"), "A SentencePiece model proto (bytes).")
        .def("encode", [](const TextTokenizer& t, const std::string& text) {
                py::gil_scoped_release nogil;
                return t.encode(text);
            }, py::arg("text"), "Token ids of text (no special tokens added).")
        .def("decode", [](const TextTokenizer& t, const std::vector<int32_t>& ids) {
                std::string s;
                {
                    py::gil_scoped_release nogil;
                    s = t.decode(ids);
                }
                return utf8_str(s);
            }, py::arg("ids"), "Text of token ids (special tokens skipped).")
        .def("piece", [](const TextTokenizer& t, int32_t id) { return utf8_str(t.piece(id)); },
             py::arg("id"), "A token's vocabulary text.")
        .def_property_readonly("n_vocab", &TextTokenizer::n_vocab)
        .def_property_readonly("unk_id", [](const TextTokenizer& t) -> py::object {
                if (t.unk_id() < 0) return py::none();
                return py::int_(t.unk_id());
            }, "The unknown token's id (None: none).")
        .def_property_readonly("kind", &TextTokenizer::kind);

    py::class_<TextRules>(m, "PocketTextRules", "The pocket.text.* options of a Pocket TTS GGUF.")
        .def(py::init([](bool pad, bool semicolons, bool terminal, bool capitalize,
                         const py::dict& replace) {
                 TextRules r;
                 r.pad_with_spaces = pad;
                 r.remove_semicolons = semicolons;
                 r.append_terminal_punctuation = terminal;
                 r.capitalize_first_letter = capitalize;
                 for (const auto& [k, v] : replace)
                     r.replace.emplace_back(k.cast<std::string>(), v.cast<std::string>());
                 return r;
             }),
             py::arg("pad_with_spaces") = false, py::arg("remove_semicolons") = false,
             py::arg("append_terminal_punctuation") = true,
             py::arg("capitalize_first_letter") = true, py::arg("replace") = py::dict());

    m.def("pocket_prepare_text", [](const std::string& text, const TextRules& rules) {
              const pocket::PreparedText p = pocket::prepare_text(text, rules);
              return py::make_tuple(utf8_str(p.text), p.frames_after_eos_guess);
          }, py::arg("text"), py::arg("rules"),
          "(normalized text, frames-after-EOS guess) as the package's prepare_text_prompt; "
          "ValueError for empty text.");
    m.def("pocket_split_into_chunks",
          [](const std::string& text, const TextTokenizer& tok, const TextRules& rules,
             int64_t max_tokens) {
              std::vector<std::string> chunks;
              {
                  py::gil_scoped_release nogil;
                  chunks = pocket::split_into_chunks(text, tok, rules, max_tokens);
              }
              py::list out;
              for (const auto& c : chunks) out.append(utf8_str(c));
              return out;
          }, py::arg("text"), py::arg("tokenizer"), py::arg("rules"), py::arg("max_tokens"),
          "Chunk texts as the package's split_into_best_sentences.");
    m.def("pocket_plan_text",
          [](const std::string& text, const TextTokenizer& tok, const TextRules& rules,
             int64_t max_tokens) {
              std::vector<pocket::TextChunk> plan;
              {
                  py::gil_scoped_release nogil;
                  plan = pocket::plan_text(text, tok, rules, max_tokens);
              }
              py::list out;
              for (const auto& c : plan)
                  out.append(py::make_tuple(utf8_str(c.text), c.ids, c.frames_after_eos_guess));
              return out;
          }, py::arg("text"), py::arg("tokenizer"), py::arg("rules"), py::arg("max_tokens"),
          "[(prepared chunk text, its token ids, frames-after-EOS guess)] for each chunk.");
}

// ---------------------------------------------------------------------------------------------
// _core.pocket_gpu_unfit: the GPU seats' admission rules (csrc/tts/pocket/gpu_admission.h)
// ---------------------------------------------------------------------------------------------

namespace {

// A config for the admission rules from a dict of the few fields they read (the English
// model's values by default).
pocket::PocketConfig admission_config(const py::dict& d) {
    auto get = [&](const std::string& key, int64_t fallback) {
        return d.contains(key) ? d[py::str(key)].cast<int64_t>() : fallback;
    };
    pocket::PocketConfig c;
    for (auto [tf, prefix] : {std::pair{&c.lm, std::string("lm_")},
                              std::pair{&c.dec_tf, std::string("dec_")}}) {
        tf->head_dim = get(prefix + "head_dim", 64);
        tf->num_heads = get(prefix + "num_heads", prefix == "lm_" ? 16 : 8);
        tf->num_kv_heads = get(prefix + "num_kv_heads", tf->num_heads);
        tf->context = get(prefix + "context", prefix == "lm_" ? 0 : 250);
    }
    const std::string flow = d.contains("flow_type") ? d["flow_type"].cast<std::string>() : "lsd";
    c.flow_type = flow == "lsd"             ? pocket::FlowType::kLSD
                  : flow == "flow_matching" ? pocket::FlowType::kFlowMatching
                  : flow == "drifting"      ? pocket::FlowType::kDrifting
                                            : pocket::FlowType::kPointwise;
    c.upsample_stride = get("upsample_stride", 16);
    c.dec.kernel_size = get("kernel_size", 7);
    c.dec.residual_kernel_size = get("residual_kernel_size", 3);
    c.dec.last_kernel_size = get("last_kernel_size", 3);
    c.dec.n_residual_layers = get("n_residual_layers", 1);
    c.dec.dilation_base = get("dilation_base", 2);
    c.dec.ratios = d.contains("ratios") ? d["ratios"].cast<std::vector<int64_t>>()
                                        : std::vector<int64_t>{6, 5, 4};
    return c;
}

}  // namespace

void bind_pocket_gpu(py::module_& m) {
    m.def("pocket_gpu_unfit", [](const std::string& seat, const py::dict& shape, int64_t n_past,
                                 int64_t rows, int64_t capacity) {
              const pocket::PocketConfig c = admission_config(shape);
              if (seat == "prompt") return pocket::gpu_prompt_unfit(c, n_past, rows, capacity);
              if (seat == "frames") return pocket::gpu_frames_unfit(c, n_past, rows, capacity);
              if (seat == "codec") return pocket::gpu_codec_unfit(c, n_past, rows);
              throw std::invalid_argument("no seat '" + seat + "' (prompt, frames, codec)");
          }, py::arg("seat"), py::arg("shape"), py::arg("n_past"), py::arg("rows"),
          py::arg("capacity") = 0,
          "The admission rule of a Pocket GPU seat: '' when its kernels cover the call, else "
          "why not. shape: lm_/dec_ head_dim, num_heads, num_kv_heads, context; flow_type; "
          "upsample_stride; kernel_size, residual_kernel_size, last_kernel_size, ratios, "
          "n_residual_layers, dilation_base (the English model's values by default). rows: "
          "the call's rows (frames for frames and codec); capacity: the slot's positions.");
}

}  // namespace dasllama::bindings

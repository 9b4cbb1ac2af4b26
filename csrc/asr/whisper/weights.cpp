#include "asr/whisper/weights.h"

#include <memory>
#include <string>

#include "core/errors.h"
#include "core/formats.h"
#include "core/gguf.h"
#include "nn/linear_s8.h"
#include "nn/tensor_reader.h"

namespace dasllama::whisper {

namespace {

class Reader : public nn::TensorReader {
public:
    Reader(const std::shared_ptr<const GGUFFile>& f, ComputeType compute)
        : nn::TensorReader(f), compute_(compute) {}

    [[noreturn]] void fail(const std::string& what) const {
        throw GGUFError(f_->path() + ": " + what);
    }

    int64_t int_key(const std::string& key, int64_t lo, int64_t hi) const {
        const GGUFEntry* e = f_->find(key);
        if (!e) fail("metadata key '" + key + "' is missing");
        const int64_t v = f_->as_int(e->value);
        if (v < lo || v > hi)
            fail("metadata key '" + key + "' is " + std::to_string(v) + ", expected " +
                 std::to_string(lo) + ".." + std::to_string(hi));
        return v;
    }

    std::vector<int32_t> ids_key(const std::string& key, int64_t n_vocab) const {
        std::vector<int32_t> out;
        const GGUFEntry* e = f_->find(key);
        if (!e) return out;
        for (const GGUFValue& item : f_->array_items(e->value)) {
            const int64_t v = f_->as_int(item);
            if (v < 0 || v >= n_vocab)
                fail("metadata key '" + key + "' holds " + std::to_string(v) +
                     ", outside the vocabulary of " + std::to_string(n_vocab));
            out.push_back(int32_t(v));
        }
        return out;
    }

    // A matrix for the float32 kernels: F32 views the mapping; any other type is widened to
    // float32 once here, so no product converts its rows again (the F16 weights of a
    // CTranslate2 model would otherwise be widened row by row at every call). few_rows: the
    // matrix only meets a few rows at a time (decoding steps), where reading F16 from the
    // mapping (widened 16 rows at a time with F16C, the same products) halves the bytes
    // each step streams; F16 then stays a view. In the int8 lane the float matrix only
    // serves a GPU seat (the CPU multiplies int8(): nn::Linear::s8), so it stays a view of
    // the mapping wherever its type allows.
    cpu::WeightMatrix matrix(const std::string& name, int64_t rows, int64_t cols,
                             bool few_rows = false) const {
        const GGUFTensor& t = get(name, {rows, cols});
        try {
            if (t.traits->type == GgmlType::F32 ||
                ((few_rows || compute_ == ComputeType::kInt8) && t.traits->type == GgmlType::F16))
                return cpu::prepare_weight(*t.traits, rows, cols, f_->tensor_data(t), f_);
            auto wide = std::make_shared<std::vector<float>>(matrix_floats(name, rows, cols));
            return cpu::prepare_weight(*type_traits(uint32_t(GgmlType::F32)), rows, cols,
                                       reinterpret_cast<const uint8_t*>(wide->data()), wide);
        } catch (const FormatError& e) {
            throw FormatError(f_->path() + ": tensor '" + name + "': " + e.what());
        }
    }

    // An I8 matrix (a CTranslate2 int8 model's weights, kept as stored by the converter)
    // comes with NAME_scale [rows]: weight = q / scale.
    bool stored_int8(const std::string& name) const {
        const GGUFTensor* t = f_->find_tensor(name);
        return t && t->traits->type == GgmlType::I8;
    }
    const int8_t* int8_rows(const std::string& name, int64_t rows, int64_t cols,
                            std::vector<float>& scale) const {
        const GGUFTensor& t = get(name, {rows, cols});
        scale = floats(name + "_scale", {rows});
        return reinterpret_cast<const int8_t*>(f_->tensor_data(t));
    }

    // A matrix's float32 values: its type's widening, or for I8 float(q) * (1 / scale) (how
    // CTranslate2 dequantizes an int8 weight).
    std::vector<float> matrix_floats(const std::string& name, int64_t rows, int64_t cols) const {
        if (!stored_int8(name)) return floats(name, {rows, cols});
        std::vector<float> scale;
        const int8_t* q = int8_rows(name, rows, cols, scale);
        std::vector<float> out(size_t(rows * cols));
        for (int64_t r = 0; r < rows; ++r) {
            const float inv = 1.f / scale[size_t(r)];
            for (int64_t c = 0; c < cols; ++c)
                out[size_t(r * cols + c)] = float(q[r * cols + c]) * inv;
        }
        return out;
    }

    // The int8 lane's form of a matrix (nn/linear_s8.h): an I8 matrix as stored (its rows and
    // scales, as CTranslate2 uses an int8 model); otherwise each row quantized with its own
    // scale from the file's values (F16 widened to float32 first, exactly), as CTranslate2
    // quantizes a float model for compute_type int8.
    std::shared_ptr<const nn::S8Matrix> int8(const std::string& name, int64_t rows,
                                             int64_t cols) const {
        try {
            if (stored_int8(name)) {
                std::vector<float> scale;
                const int8_t* q = int8_rows(name, rows, cols, scale);
                return std::make_shared<nn::S8Matrix>(nn::pack_s8(q, scale.data(), rows, cols));
            }
            const std::vector<float> values = floats(name, {rows, cols});
            return std::make_shared<nn::S8Matrix>(nn::quantize_s8(values.data(), rows, cols));
        } catch (const ShapeError& e) {
            throw ShapeError(f_->path() + ": tensor '" + name + "': " + e.what());
        }
    }

    nn::Linear linear(const std::string& p, int64_t out, int64_t in, bool few_rows = false) const {
        nn::Linear l{matrix(p + ".weight", out, in, few_rows), floats(p + ".bias", {out}),
                     nullptr, nullptr};
        if (compute_ == ComputeType::kInt8) l.s8 = int8(p + ".weight", out, in);
        return l;
    }

    Norm norm(const std::string& p, int64_t n) const {
        return {floats(p + ".weight", {n}), floats(p + ".bias", {n})};
    }

    nn::Conv1d conv(const std::string& p, int64_t c_out, int64_t c_in, int64_t stride) const {
        return nn::Conv1d(floats(p + ".weight", {c_out, c_in, 3}), floats(p + ".bias", {c_out}),
                          c_out, c_in, 3, stride, 1);
    }

private:
    ComputeType compute_;
};

// Sizes a real Whisper never exceeds by far (large-v3: d 1280, 32 layers, 51866 tokens); a
// file outside them is refused before any buffer is sized from it.
constexpr int64_t kMaxState = 8192;
constexpr int64_t kMaxLayers = 256;
constexpr int64_t kMaxVocab = 1 << 20;
constexpr int64_t kMaxCtx = 1 << 16;

WhisperConfig read_config(const Reader& r) {
    WhisperConfig c;
    auto g = [&](const char* key, int64_t lo, int64_t hi) {
        return r.int_key(std::string("whisper.") + key, lo, hi);
    };
    c.n_mels = g("n_mels", 1, 1024);
    c.n_audio_ctx = g("n_audio_ctx", 1, kMaxCtx);
    c.n_audio_state = g("n_audio_state", 1, kMaxState);
    c.n_audio_head = g("n_audio_head", 1, kMaxState);
    c.n_audio_layer = g("n_audio_layer", 1, kMaxLayers);
    c.n_text_ctx = g("n_text_ctx", 2, kMaxCtx);
    c.n_text_state = g("n_text_state", 1, kMaxState);
    c.n_text_head = g("n_text_head", 1, kMaxState);
    c.n_text_layer = g("n_text_layer", 1, kMaxLayers);
    c.n_vocab = g("n_vocab", 8, kMaxVocab);
    c.sample_rate = g("sample_rate", 1, 1 << 20);
    c.n_fft = g("n_fft", 2, 1 << 16);
    c.hop_length = g("hop_length", 1, 1 << 16);
    c.chunk_seconds = g("chunk_seconds", 1, 3600);
    if (c.n_audio_state % c.n_audio_head || c.n_text_state % c.n_text_head ||
        c.n_audio_state != c.n_text_state)
        r.fail("the widths (" + std::to_string(c.n_audio_state) + ", " +
               std::to_string(c.n_text_state) + ") do not fit the heads (" +
               std::to_string(c.n_audio_head) + ", " + std::to_string(c.n_text_head) + ")");
    if (c.chunk_seconds * c.sample_rate != c.n_frames() * c.hop_length)
        r.fail("a window of " + std::to_string(c.chunk_seconds) + " s is not 2 * n_audio_ctx "
               "hops");
    auto tok = [&](const char* key) {
        return int32_t(r.int_key(std::string("whisper.token.") + key, 0, c.n_vocab - 1));
    };
    c.tok.eot = tok("eot");
    c.tok.sot = tok("sot");
    c.tok.translate = tok("translate");
    c.tok.transcribe = tok("transcribe");
    c.tok.sot_lm = tok("sot_lm");
    c.tok.sot_prev = tok("sot_prev");
    c.tok.no_speech = tok("no_speech");
    c.tok.no_timestamps = tok("no_timestamps");
    c.tok.timestamp_begin = tok("timestamp_begin");
    if (c.tok.timestamp_begin != c.tok.no_timestamps + 1 || c.tok.eot >= c.tok.timestamp_begin)
        r.fail("whisper.token.timestamp_begin must follow no_timestamps and eot");
    c.suppress_ids = r.ids_key("whisper.suppress_ids", c.n_vocab);
    c.suppress_ids_begin = r.ids_key("whisper.suppress_ids_begin", c.n_vocab);
    c.lang_ids = r.ids_key("whisper.lang_ids", c.n_vocab);
    c.alignment_heads = r.ids_key("whisper.alignment_heads", kMaxState);
    return c;
}

}  // namespace

ComputeType compute_type_from_string(const std::string& name) {
    if (name == "f32" || name == "float32") return ComputeType::kF32;
    if (name == "int8") return ComputeType::kInt8;
    throw ShapeError("whisper: compute type '" + name + "' is not one of f32, float32, int8");
}

std::shared_ptr<WhisperWeights> load_whisper(const std::string& path, ComputeType compute) {
    std::shared_ptr<const GGUFFile> f = GGUFFile::open(path);
    Reader r(f, compute);
    const GGUFEntry* arch = f->find("general.architecture");
    if (!arch || f->as_string(arch->value) != "whisper")
        r.fail("general.architecture is not 'whisper'");
    auto w = std::make_shared<WhisperWeights>();
    w->file = f;
    w->compute = compute;
    WhisperConfig& c = w->cfg;
    c = read_config(r);
    const int64_t d = c.n_audio_state, ff = 4 * d;
    const GGUFTensor& mel = r.get("mel_filters", {c.n_mels, c.n_fft / 2 + 1});
    if (mel.traits->type != GgmlType::F32) r.fail("tensor 'mel_filters' is not F32");
    w->mel_filters = cpu::prepare_weight(*mel.traits, c.n_mels, c.n_fft / 2 + 1,
                                         f->tensor_data(mel), f);
    w->conv1 = r.conv("enc.conv1", d, c.n_mels, 1);
    w->conv2 = r.conv("enc.conv2", d, d, 2);
    w->enc_pos = r.floats("enc.pos", {c.n_audio_ctx, d});
    for (int64_t i = 0; i < c.n_audio_layer; ++i) {
        const std::string p = "enc.blk." + std::to_string(i) + ".";
        EncoderLayer l;
        l.attn_ln = r.norm(p + "attn_ln", d);
        l.qkv = r.linear(p + "attn.qkv", 3 * d, d);
        l.out = r.linear(p + "attn.out", d, d);
        l.mlp_ln = r.norm(p + "mlp_ln", d);
        l.fc1 = r.linear(p + "mlp.fc1", ff, d);
        l.fc2 = r.linear(p + "mlp.fc2", d, ff);
        w->enc.push_back(std::move(l));
    }
    w->ln_post = r.norm("enc.ln_post", d);
    w->tok_emb = r.matrix("dec.tok_emb", c.n_vocab, d, true);
    w->dec_pos = r.floats("dec.pos", {c.n_text_ctx, d});
    for (int64_t i = 0; i < c.n_text_layer; ++i) {
        const std::string p = "dec.blk." + std::to_string(i) + ".";
        DecoderLayer l;
        l.attn_ln = r.norm(p + "attn_ln", d);
        l.qkv = r.linear(p + "attn.qkv", 3 * d, d, true);
        l.out = r.linear(p + "attn.out", d, d, true);
        l.cross_ln = r.norm(p + "cross_ln", d);
        l.cross_q = r.linear(p + "cross.q", d, d, true);
        l.cross_kv = r.linear(p + "cross.kv", 2 * d, d);
        l.cross_out = r.linear(p + "cross.out", d, d, true);
        l.mlp_ln = r.norm(p + "mlp_ln", d);
        l.fc1 = r.linear(p + "mlp.fc1", ff, d, true);
        l.fc2 = r.linear(p + "mlp.fc2", d, ff, true);
        w->dec.push_back(std::move(l));
    }
    w->dec_ln = r.norm("dec.ln", d);
    w->proj = r.has("dec.proj.weight") ? r.matrix("dec.proj.weight", c.n_vocab, d) : w->tok_emb;
    if (compute == ComputeType::kInt8) {   // the lookup and the logits share one int8 matrix
        w->tok_emb_s8 = r.int8("dec.tok_emb", c.n_vocab, d);
        w->proj_s8 = r.has("dec.proj.weight") ? r.int8("dec.proj.weight", c.n_vocab, d)
                                              : w->tok_emb_s8;
    }
    return w;
}

}  // namespace dasllama::whisper

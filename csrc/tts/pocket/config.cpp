#include "tts/pocket/config.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "core/errors.h"
#include "core/gguf.h"

namespace dasllama::pocket {

namespace {

// Reads the keys under one prefix; every error names the file and the full key.
class Keys {
public:
    Keys(const GGUFFile& f, std::string prefix) : f_(f), prefix_(std::move(prefix)) {}

    const GGUFValue& value(const char* name) const {
        const GGUFEntry* e = f_.find(prefix_ + name);
        if (!e) throw GGUFError(f_.path() + ": metadata key '" + prefix_ + name + "' is missing");
        return e->value;
    }
    // A count or dimension: an integer in [low, 2^31).
    int64_t count(const char* name, int64_t low = 1) const {
        const int64_t v = f_.as_int(value(name));
        if (v < low || v > (int64_t(1) << 31))
            throw GGUFError(f_.path() + ": metadata key '" + prefix_ + name + "' = " +
                            std::to_string(v) + ": expected an integer >= " + std::to_string(low));
        return v;
    }
    int64_t integer(const char* name) const { return f_.as_int(value(name)); }
    double real(const char* name) const {
        const double v = f_.as_float(value(name));
        if (!std::isfinite(v))
            throw GGUFError(f_.path() + ": metadata key '" + prefix_ + name + "' is not finite");
        return v;
    }
    bool flag(const char* name) const { return f_.as_bool(value(name)); }
    std::string text(const char* name) const { return std::string(f_.as_string(value(name))); }
    std::vector<int64_t> counts(const char* name) const {
        std::vector<int64_t> out;
        for (const GGUFValue& item : f_.array_items(value(name))) {
            const int64_t v = f_.as_int(item);
            if (v < 1 || v > 1024)
                throw GGUFError(f_.path() + ": metadata key '" + prefix_ + name +
                                "' holds " + std::to_string(v) + ": expected 1..1024");
            out.push_back(v);
        }
        return out;
    }
    [[noreturn]] void fail(const char* name, const std::string& why) const {
        throw GGUFError(f_.path() + ": metadata key '" + prefix_ + name + "': " + why);
    }

private:
    const GGUFFile& f_;
    std::string prefix_;
};

TransformerConfig read_transformer(const GGUFFile& f, const std::string& prefix, bool backbone) {
    const Keys k(f, prefix);
    TransformerConfig t;
    t.d_model = k.count("d_model");
    t.num_heads = k.count("num_heads");
    t.num_layers = k.count("num_layers");
    t.ffn_dim = k.count("ffn_dim");
    t.rope_max_period = k.real("rope_max_period");
    t.norm_eps = k.real("norm_eps");
    if (backbone) {
        t.num_kv_heads = k.count("num_kv_heads");
        t.head_dim = k.count("head_dim");
        if (t.num_heads % t.num_kv_heads)
            k.fail("num_kv_heads", std::to_string(t.num_kv_heads) + " does not divide num_heads " +
                                       std::to_string(t.num_heads));
        t.input_dim = t.output_dim = t.d_model;
    } else {
        t.num_kv_heads = t.num_heads;
        if (t.d_model % t.num_heads)
            k.fail("num_heads", std::to_string(t.num_heads) + " does not divide d_model " +
                                    std::to_string(t.d_model));
        t.head_dim = t.d_model / t.num_heads;
        t.context = k.count("context", 0);
        t.input_dim = k.count("input_dim");
        t.output_dim = k.count("output_dim");
        t.layer_scale = k.flag("layer_scale");
    }
    if (t.head_dim % 2) k.fail("head_dim", "rotary embeddings need an even head size");
    return t;
}

SeanetConfig read_seanet(const GGUFFile& f, const std::string& prefix) {
    const Keys k(f, prefix);
    SeanetConfig s;
    s.dimension = k.count("dimension");
    s.n_filters = k.count("n_filters");
    s.n_residual_layers = k.count("n_residual_layers", 0);
    s.kernel_size = k.count("kernel_size");
    s.residual_kernel_size = k.count("residual_kernel_size");
    s.last_kernel_size = k.count("last_kernel_size");
    s.dilation_base = k.count("dilation_base");
    s.compress = k.count("compress");
    s.ratios = k.counts("ratios");
    if (s.ratios.empty() || s.ratios.size() > 8) k.fail("ratios", "expected 1..8 ratios");
    const std::string pad = k.text("pad_mode");
    if (pad != "constant" && pad != "replicate")
        k.fail("pad_mode", "'" + pad + "' is not constant or replicate");
    s.replicate_pad = pad == "replicate";
    return s;
}

}  // namespace

int64_t PocketConfig::frames_cap(int64_t n_tokens) const {
    const double seconds = double(n_tokens) / tokens_per_second + gen_seconds_padding;
    return int64_t(std::ceil(seconds * frame_rate));
}

PocketConfig read_pocket_config(const GGUFFile& f) {
    const GGUFEntry* arch = f.find("general.architecture");
    if (!arch || f.as_string(arch->value) != "pocket")
        throw GGUFError(f.path() + ": general.architecture is " +
                        (arch ? "'" + std::string(f.as_string(arch->value)) + "'" : "missing") +
                        ", not 'pocket'");
    const Keys k(f, "pocket.");
    PocketConfig c;
    c.sample_rate = k.count("sample_rate");
    c.frame_rate = k.real("frame_rate");
    if (c.frame_rate <= 0) k.fail("frame_rate", "must be positive");
    c.frame_size = int64_t(double(c.sample_rate) / c.frame_rate);
    c.latent_dim = k.count("latent_dim");
    c.temperature = k.real("temperature");
    c.lsd_decode_steps = k.count("lsd_decode_steps");
    c.eos_threshold = k.real("eos_threshold");
    c.chunk_tokens = k.count("chunk_tokens");
    c.min_frames_before_eos = k.count("min_frames_before_eos", 0);
    c.frames_after_eos = k.integer("frames_after_eos");
    c.tokens_per_second = k.real("tokens_per_second");
    if (c.tokens_per_second <= 0) k.fail("tokens_per_second", "must be positive");
    c.gen_seconds_padding = k.real("gen_seconds_padding");
    c.voice_cloning = k.flag("voice_cloning");

    const Keys t(f, "pocket.text.");
    c.n_bins = t.count("n_bins");
    c.text_dim = t.count("dim");
    c.text_rank = t.count("rank", 0);

    c.lm = read_transformer(f, "pocket.lm.", true);
    const Keys lm(f, "pocket.lm.");
    c.z_dim = lm.count("z_dim", 0);
    c.insert_bos_before_voice = lm.flag("insert_bos_before_voice");
    if (c.text_dim != c.lm.d_model)
        t.fail("dim", std::to_string(c.text_dim) + " differs from pocket.lm.d_model " +
                          std::to_string(c.lm.d_model));

    const Keys fl(f, "pocket.flow.");
    const std::string type = fl.text("type");
    if (type == "lsd") c.flow_type = FlowType::kLSD;
    else if (type == "flow_matching") c.flow_type = FlowType::kFlowMatching;
    else if (type == "drifting") c.flow_type = FlowType::kDrifting;
    else if (type == "pointwise") c.flow_type = FlowType::kPointwise;
    else fl.fail("type", "'" + type + "' is not lsd, flow_matching, drifting or pointwise");
    c.flow_dim = fl.count("dim");
    c.flow_depth = fl.count("depth", 0);
    c.flow_time_conds = fl.count("num_time_conds", 0);
    const int64_t expected_conds = c.flow_type == FlowType::kLSD ? 2
                                   : c.flow_type == FlowType::kFlowMatching ? 1 : 0;
    if (c.flow_time_conds != expected_conds)
        fl.fail("num_time_conds", std::to_string(c.flow_time_conds) + " does not fit type '" +
                                      type + "' (" + std::to_string(expected_conds) + ")");
    c.flow_freq_dim = fl.count("freq_dim", 2);
    if (c.flow_freq_dim % 2) fl.fail("freq_dim", "must be even");
    c.flow_norm_eps = fl.real("norm_eps");
    c.flow_time_norm_eps = fl.real("time_norm_eps");

    const Keys m(f, "pocket.mimi.");
    c.encoder_frame_rate = m.real("encoder_frame_rate");
    c.channels = m.count("channels");
    c.inner_dim = m.count("inner_dim");
    c.outer_dim = m.count("outer_dim");
    c.upsample_stride = m.count("upsample_stride");
    c.enc = read_seanet(f, "pocket.mimi.enc.");
    c.dec = read_seanet(f, "pocket.mimi.dec.");
    c.enc_tf = read_transformer(f, "pocket.mimi.enc_tf.", false);
    c.dec_tf = read_transformer(f, "pocket.mimi.dec_tf.", false);
    int64_t hop = c.upsample_stride;
    for (int64_t r : c.dec.ratios) hop *= r;
    if (hop != c.frame_size)
        m.fail("dec.ratios", "upsample_stride x prod(ratios) = " + std::to_string(hop) +
                                 " differs from the frame size " + std::to_string(c.frame_size) +
                                 " (sample_rate / frame_rate)");
    return c;
}

}  // namespace dasllama::pocket

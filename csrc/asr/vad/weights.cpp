#include "asr/vad/weights.h"

#include <string>

#include "core/errors.h"
#include "core/formats.h"
#include "core/gguf.h"

namespace dasllama::vad {

namespace {

std::string shape_text(const std::vector<int64_t>& s) {
    std::string t = "[";
    for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
    return t + "]";
}

struct Reader {
    const GGUFFile& f;

    [[noreturn]] void fail(const std::string& what) const {
        throw GGUFError(f.path() + ": " + what);
    }

    int64_t u(const std::string& key) const {
        const GGUFEntry* e = f.find(key);
        if (!e) fail("metadata key '" + key + "' is missing");
        return f.as_int(e->value);
    }

    std::vector<float> floats(const std::string& name, const std::vector<int64_t>& shape) const {
        const GGUFTensor* t = f.find_tensor(name);
        if (!t) fail("tensor '" + name + "' is missing");
        std::vector<int64_t> have;
        for (uint32_t d = t->n_dims; d-- > 0;) have.push_back(t->ne[d]);   // NumPy order
        if (have != shape)
            throw ShapeError(f.path() + ": tensor '" + name + "' has shape " + shape_text(have) +
                             ", expected " + shape_text(shape));
        if (t->traits->type != GgmlType::F32)
            throw FormatError(f.path() + ": tensor '" + name + "' is " + t->traits->name +
                              ", expected F32");
        const float* p = reinterpret_cast<const float*>(f.tensor_data(*t));
        return std::vector<float>(p, p + t->n_elements());
    }
};

}  // namespace

std::unique_ptr<VadWeights> load_vad_weights(const std::string& path) {
    std::shared_ptr<const GGUFFile> file = GGUFFile::open(path);
    const Reader r{*file};
    const GGUFEntry* arch = file->find("general.architecture");
    if (!arch || file->as_string(arch->value) != "silero_vad")
        r.fail("general.architecture is not 'silero_vad'");
    auto w = std::make_unique<VadWeights>();
    VadConfig& c = w->cfg;
    const VadConfig want;
    c.sample_rate = r.u("silero_vad.sample_rate");
    c.window = r.u("silero_vad.window");
    c.context = r.u("silero_vad.context");
    c.n_fft = r.u("silero_vad.n_fft");
    c.hop = r.u("silero_vad.hop");
    c.hidden = r.u("silero_vad.hidden");
    // The chain below is written for the 16 kHz model's framing: four STFT frames per step.
    if (c.sample_rate != want.sample_rate || c.window != want.window ||
        c.context != want.context || c.n_fft != want.n_fft || c.hop != want.hop ||
        c.hidden != want.hidden)
        r.fail("silero_vad.{sample_rate, window, context, n_fft, hop, hidden} = {" +
               std::to_string(c.sample_rate) + ", " + std::to_string(c.window) + ", " +
               std::to_string(c.context) + ", " + std::to_string(c.n_fft) + ", " +
               std::to_string(c.hop) + ", " + std::to_string(c.hidden) +
               "}, expected {16000, 512, 64, 256, 128, 128}");
    const int64_t bins = c.n_bins(), H = c.hidden;
    w->stft = nn::Conv1d(r.floats("stft.basis", {2 * bins, c.n_fft}), {}, 2 * bins, 1, c.n_fft,
                         c.hop, 0);
    const int64_t chans[5] = {bins, 128, 64, 64, 128};
    const int64_t strides[4] = {1, 2, 2, 1};
    for (int i = 0; i < 4; ++i) {
        const std::string p = "enc." + std::to_string(i);
        w->enc[i] = nn::Conv1d(r.floats(p + ".weight", {chans[i + 1], chans[i], 3}),
                               r.floats(p + ".bias", {chans[i + 1]}), chans[i + 1], chans[i], 3,
                               strides[i], 1);
    }
    w->lstm = nn::Lstm(r.floats("lstm.weight_ih", {4 * H, 128}),
                       r.floats("lstm.weight_hh", {4 * H, H}), r.floats("lstm.bias_ih", {4 * H}),
                       r.floats("lstm.bias_hh", {4 * H}), 128, H);
    w->out_w = r.floats("out.weight", {1, H});
    w->out_b = r.floats("out.bias", {1})[0];
    return w;
}

}  // namespace dasllama::vad

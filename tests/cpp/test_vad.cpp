// csrc/asr/vad on the shipped weights (python/dasllama/data/silero_vad_v6.gguf; ctest runs from
// the source root): the stream forms agree with the whole-clip form, state and context are
// carried (a fresh state per window changes the result), and misuse throws typed errors. The
// values themselves are checked against onnxruntime by tests/test_vad.py; this test is what
// the sanitizer build runs over the chain.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "asr/vad/vad_model.h"
#include "check.h"
#include "core/errors.h"

using namespace dasllama;

namespace {

const char* kModel = "python/dasllama/data/silero_vad_v6.gguf";

// A tone that starts and stops, over faint noise: 40 windows and a partial one.
std::vector<float> signal(int64_t n) {
    std::mt19937 rng(3);
    std::normal_distribution<float> d(0.0f, 0.003f);
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        const bool on = (i / 4000) % 2 == 1;
        x[size_t(i)] = d(rng) + (on ? 0.3f * std::sin(0.05f * float(i)) * std::sin(0.0007f * float(i)) : 0.0f);
    }
    return x;
}

}  // namespace

TEST(vad_stream_forms_agree) {
    vad::SileroVad v(kModel, 1);
    const int64_t W = v.config().window, n = 40 * W + 100;
    const auto x = signal(n);
    const std::vector<float> whole = v.probabilities(x.data(), n);
    REQUIRE(int64_t(whole.size()) == 41);
    for (float p : whole) CHECK(p >= 0.0f && p <= 1.0f);

    vad::VadStream s = v.new_stream();
    std::vector<float> part(40);
    v.process(x.data(), 40 * W, s, part.data());
    for (int i = 0; i < 40; ++i) CHECK(part[size_t(i)] == whole[size_t(i)]);
    CHECK(s.windows == 40);
    std::vector<float> last(size_t(W), 0.0f);
    std::copy(x.begin() + 40 * W, x.end(), last.begin());
    CHECK(v.process(last.data(), s) == whole[40]);   // the partial window: zero padded

    v.reset(s);
    CHECK(v.process(x.data(), s) == whole[0]);
    // Control: each window from a fresh state and context gives other values.
    double diff = 0;
    for (int i = 1; i < 40; ++i) {
        v.reset(s);
        diff = std::max(diff, double(std::fabs(v.process(x.data() + i * W, s) - whole[size_t(i)])));
    }
    std::printf("  fresh state per window: max |dp| %.3e (must be > 1e-4)\n", diff);
    CHECK(diff > 1e-4);
}

TEST(vad_misuse_throws) {
    vad::SileroVad v(kModel, 1);
    vad::VadStream s = v.new_stream();
    std::vector<float> x(1000, 0.0f), out(2);
    CHECK_THROWS_AS(v.process(x.data(), 1000, s, out.data()), ShapeError);
    vad::VadStream broken;
    CHECK_THROWS_AS(v.process(x.data(), broken), ShapeError);
    CHECK(v.probabilities(x.data(), 0).empty());
    CHECK_THROWS_AS(vad::SileroVad("no/such/file.gguf", 1), Error);
}

// No multiply-add is contracted here (no_contract.h), so every rounding below is the one
// written; the reference's "fused" multiply-adds are formed explicitly in double (fma_ref).
#include "tts/kokoro/onnx_math.h"
#include "tts/kokoro/no_contract.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/errors.h"

#include "tts/kokoro/pairwise_sum.h"

namespace dasllama::kokoro {

namespace {

// The reference's _fma: the float32 product is exact in double, the sum rounds to double and
// then to float32 (a double rounding, rarely different from a true fused multiply-add).
inline float fma_ref(float a, float b, float c) {
    return static_cast<float>(static_cast<double>(a) * static_cast<double>(b) +
                              static_cast<double>(c));
}

// MLAS's rational coefficients (the reference's _LOGISTIC_P / _Q, _TANH_P / _Q) as float32.
constexpr float kLogisticP[] = {4.37031012579801e-11f, 1.15627324459942e-07f,
                                6.08574864600143e-05f, 8.51377133304701e-03f,
                                2.48287947061529e-01f};
constexpr float kLogisticQ[] = {6.10247389755681e-13f, 5.76102136993427e-09f,
                                6.29106785017040e-06f, 1.70198817374094e-03f,
                                1.16817656904453e-01f, 9.93151921023180e-01f};
constexpr float kTanhP[] = {-2.76076847742355e-16f, 2.00018790482477e-13f,
                            -8.60467152213735e-11f, 5.12229709037114e-08f,
                            1.48572235717979e-05f, 6.37261928875436e-04f,
                            4.89352455891786e-03f};
constexpr float kTanhQ[] = {1.19825839466702e-06f, 1.18534705686654e-04f,
                            2.26843463243900e-03f, 4.89352518554385e-03f};
constexpr float kLogisticClamp = 18.0f;   // MLAS clamps the logistic's input to [-18, 18]
constexpr float kTanhClamp = 9.0f;        // and tanh's to [-9, 9]

template <size_t N>
inline float rational(float x2, const float (&c)[N]) {
    float acc = fma_ref(x2, c[0], c[1]);
    for (size_t i = 2; i < N; ++i) acc = fma_ref(acc, x2, c[i]);
    return acc;
}

constexpr int kLanes = 8;   // the x86-64 LayerNorm kernel's vector width (AVX2: 8 floats)

inline float lane_sum(const float* v) {
    float r[4], r2[2];
    for (int i = 0; i < 4; ++i) r[i] = v[i] + v[i + 4];
    for (int i = 0; i < 2; ++i) r2[i] = r[i] + r[i + 2];
    return r2[0] + r2[1];
}

}  // namespace

float mlas_logistic(float x) {
    x = std::min(std::max(x, -kLogisticClamp), kLogisticClamp);
    const float x2 = x * x;
    const float p = rational(x2, kLogisticP) * x;
    const float q = rational(x2, kLogisticQ);
    return std::min(std::max(p / q + 0.5f, 0.0f), 1.0f);
}

float mlas_tanh(float x) {
    x = std::min(std::max(x, -kTanhClamp), kTanhClamp);
    const float x2 = x * x;
    const float p = rational(x2, kTanhP) * x;
    return p / rational(x2, kTanhQ);
}

namespace {

void logistic_generic(const float* x, int64_t n, float* out) {
    for (int64_t i = 0; i < n; ++i) out[i] = mlas_logistic(x[i]);
}

void tanh_generic(const float* x, int64_t n, float* out) {
    for (int64_t i = 0; i < n; ++i) out[i] = mlas_tanh(x[i]);
}

void instance_norm_generic(const float* x, int64_t c, int64_t l, float eps, float* out);

const ActivationKernels kGenericActivations{"generic", logistic_generic, tanh_generic,
                                            instance_norm_generic, nullptr};

}  // namespace

#if !defined(__x86_64__) && !defined(_M_X64)
const ActivationKernels* activation_kernels_avx512() { return nullptr; }
#endif

const ActivationKernels& activation_kernels() {
    static const ActivationKernels* best = [] {
        const ActivationKernels* a = activation_kernels_avx512();
        return a && cpu_features().allows(a->isa) ? a : &kGenericActivations;
    }();
    return *best;
}

const ActivationKernels& activation_kernels(const char* isa) {
    const std::string want(isa);
    if (want == "generic") return kGenericActivations;
    const ActivationKernels* a = activation_kernels_avx512();
    if (a && want == a->isa && cpu_features().allows(a->isa)) return *a;
    throw Error("kokoro activation kernels: level '" + want + "' is not available here");
}

void logistic(const float* x, int64_t n, float* out) { activation_kernels().logistic(x, n, out); }

void tanh_mlas(const float* x, int64_t n, float* out) { activation_kernels().tanh(x, n, out); }

void fast_gelu(const float* x, const float* bias, int64_t rows, int64_t n, float* out) {
    const float c1 = 0.7978845608028654f, c2 = 0.035677408136300125f;
    std::vector<float> v(static_cast<size_t>(n)), t(static_cast<size_t>(n));
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < n; ++j) {
            v[size_t(j)] = x[r * n + j] + bias[j];
            const float vv = v[size_t(j)];
            t[size_t(j)] = vv * (c1 + c2 * vv * vv);
        }
        tanh_mlas(t.data(), n, t.data());
        for (int64_t j = 0; j < n; ++j) out[r * n + j] = v[size_t(j)] * 0.5f * (1.0f + t[size_t(j)]);
    }
}

void gelu_erf(const float* x, const float* bias, int64_t rows, int64_t n, float* out) {
    const double inv_sqrt2 = 1.0 / std::sqrt(2.0);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < n; ++j) {
            const float v = x[r * n + j] + bias[j];
            const float e = static_cast<float>(std::erf(static_cast<double>(v) * inv_sqrt2));
            out[r * n + j] = v * 0.5f * (1.0f + e);
        }
}

void layer_norm_lanes(const float* x, const float* weight, const float* bias, int64_t rows,
                      int64_t n, float eps, float* out) {
    const int64_t full = n - n % kLanes;
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = x + r * n;
        float vsum[kLanes] = {}, vsq[kLanes] = {};
        for (int64_t j = 0; j < full; j += kLanes)
            for (int l = 0; l < kLanes; ++l) {
                const float v = row[j + l];
                vsum[l] = vsum[l] + v;
                vsq[l] = fma_ref(v, v, vsq[l]);
            }
        float total = lane_sum(vsum), squares = lane_sum(vsq);
        for (int64_t j = full; j < n; ++j) {
            total = total + row[j];
            const float sq = row[j] * row[j];
            squares = squares + sq;
        }
        const float fn = static_cast<float>(n);
        const float mean = total / fn;
        const float m2 = mean * mean;
        const float var = squares / fn - m2;
        const float inv = 1.0f / std::sqrt(var + eps);
        float* o = out + r * n;
        for (int64_t j = 0; j < n; ++j) {
            const float y = (row[j] - mean) * inv;
            o[j] = fma_ref(y, weight[j], bias[j]);
        }
    }
}

void instance_norm(const float* x, int64_t c, int64_t l, float eps, float* out) {
    activation_kernels().instance_norm(x, c, l, eps, out);
}

namespace {

void instance_norm_generic(const float* x, int64_t c, int64_t l, float eps, float* out) {
    std::vector<double> buf(static_cast<size_t>(l));
    std::vector<float> d(static_cast<size_t>(l));
    for (int64_t i = 0; i < c; ++i) {
        const float* row = x + i * l;
        for (int64_t j = 0; j < l; ++j) buf[size_t(j)] = row[j];
        const float mean = static_cast<float>(pairwise_sum(buf.data(), l) / double(l));
        for (int64_t j = 0; j < l; ++j) {
            d[size_t(j)] = row[j] - mean;
            const float sq = d[size_t(j)] * d[size_t(j)];
            buf[size_t(j)] = sq;
        }
        const float var = static_cast<float>(pairwise_sum(buf.data(), l) / double(l));
        const float den = std::sqrt(var + eps);
        float* o = out + i * l;
        for (int64_t j = 0; j < l; ++j) o[j] = d[size_t(j)] / den;
    }
}

}  // namespace

void leaky_relu(float* x, int64_t n, float slope) {
    for (int64_t i = 0; i < n; ++i)
        if (!(x[i] >= 0.0f)) x[i] = x[i] * slope;
}

void softmax_rows(float* x, int64_t rows, int64_t n) {
    for (int64_t r = 0; r < rows; ++r) {
        float* row = x + r * n;
        float mx = row[0];
        for (int64_t j = 1; j < n; ++j) mx = std::max(mx, row[j]);
        for (int64_t j = 0; j < n; ++j) row[j] = std::exp(row[j] - mx);
        const float s = pairwise_sum(row, n);
        for (int64_t j = 0; j < n; ++j) row[j] = row[j] / s;
    }
}

}  // namespace dasllama::kokoro

// The flow head of Pocket TTS (pocket_tts modules/mlp.py SimpleMLPAdaLN): a frame's
// conditioning c [Z] and noise x0 [L] -> the frame's latent [L].
//
//   y = cond(c) + mean_j time_j(t_j);   x = input(x)
//   per block (adaLN-Zero): shift, scale, gate = ada(SiLU(y));
//                           x += gate * mlp_out(SiLU(mlp_in(LN(x) (1 + scale) + shift)))
//   final: shift, scale = final_ada(SiLU(y)); v = final_out(LN(x) (1 + scale) + shift)
//
// Lagrangian Self Distillation (arXiv:2505.18825): x0 = sqrt(temperature) eps, then `steps`
// Euler steps x += v(c, s = i/n, t = (i+1)/n, x) / n. flow_matching: x += v(c, i/n, x) / n;
// drifting: x = v(c, x0); pointwise: x = x0 + v(c, x0). The time embeddings depend only on
// the step count, so they are computed once per count.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "cpu/matmul.h"
#include "tts/pocket/config.h"
#include "tts/pocket/weights.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::pocket {

class FlowHead {
public:
    FlowHead(const PocketConfig& c, const PocketWeights& w);
    // ada_targets_ point into ada_: not copied or moved.
    FlowHead(const FlowHead&) = delete;
    FlowHead& operator=(const FlowHead&) = delete;

    // eps [L] standard-normal draws (nullptr, or temperature 0: no noise). steps <= 0: the
    // file's lsd_decode_steps.
    void run(const float* cond, const float* eps, float temperature, int64_t steps,
             float* latent, ThreadPool& pool);

    // The mean time embedding of each Euler step of a `steps`-step run, [steps, W] (the GPU
    // flow head takes it from here).
    const std::vector<float>& time_sums(int64_t steps, ThreadPool& pool);

private:
    // The velocity v(c, times, x) with the time embedding mean `tsum` (nullptr: none).
    void velocity(const float* cond_y, const float* tsum, const float* x, float* v,
                  ThreadPool& pool);
    void time_embedding(int64_t j, double t, float* out, ThreadPool& pool);

    const PocketConfig& c_;
    const PocketWeights& w_;
    std::map<int64_t, std::vector<float>> time_sums_;  // steps -> [steps, W]
    std::vector<float> y_, sy_, h_, x_, ada_, m_, v_, freq_;
    std::vector<cpu::MatmulTarget> ada_targets_;  // every block's ada, then final_ada, into ada_
};

}  // namespace dasllama::pocket

// Activations the shared blocks need beyond cpu/ops.h's dispatched kernels.
#pragma once

#include <cstdint>

namespace dasllama {
class ThreadPool;
}

namespace dasllama::nn {

// GELU, erf form (torch.nn.GELU()'s default, Whisper's): x = x/2 (1 + erf(x / sqrt 2)), in
// place, split over the pool.
void gelu_erf(float* x, int64_t n, ThreadPool& pool);

}  // namespace dasllama::nn

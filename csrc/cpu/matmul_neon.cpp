// Matmul kernels for neon: not written yet; the generic kernels serve this level.
#include "cpu/kernels_matmul.h"

namespace dasllama::cpu::mm {

const Kernels* kernels_neon() { return nullptr; }

}  // namespace dasllama::cpu::mm

// Row-parallel loops over the model's pool for the element-wise stages (quantization, the
// integer products' rescale, LayerNorm, FastGelu, instance norms). Each row's result depends
// on that row alone, so the split never changes a bit.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/thread_pool.h"

namespace dasllama::kokoro {

// Below this many values a loop stays on the calling thread (a pool hand-off costs a few
// microseconds).
constexpr int64_t kParallelValues = 1 << 14;

// fn(r0, r1) over [0, rows) in contiguous ranges, one per pool thread when rows * width is
// large enough to pay for the hand-off.
template <class Fn>
void parallel_rows(ThreadPool* pool, int64_t rows, int64_t width, const Fn& fn) {
    const int threads = pool ? pool->size() : 1;
    if (threads <= 1 || rows < 2 || rows * width < kParallelValues) {
        fn(int64_t(0), rows);
        return;
    }
    pool->run([&](int t, int nt) {
        const int64_t r0 = rows * t / nt, r1 = rows * (t + 1) / nt;
        if (r0 < r1) fn(r0, r1);
    });
}

}  // namespace dasllama::kokoro

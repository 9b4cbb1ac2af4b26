// NumPy's pairwise summation (the order np.sum and np.mean use along a contiguous axis):
// below 8 values a running sum; up to 128 values eight running sums combined as
// ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7)) plus the tail; longer runs split in two at
// a multiple of 8 below the middle. In the element type, so float32 sums round as NumPy's do.
#pragma once

#include <cstdint>

namespace dasllama::kokoro {

constexpr int64_t kPairwiseBlock = 128;   // NumPy's PW_BLOCKSIZE

template <class T>
T pairwise_sum(const T* a, int64_t n) {
    if (n < 8) {
        T res = T(0);
        for (int64_t i = 0; i < n; ++i) res = res + a[i];
        return res;
    }
    if (n <= kPairwiseBlock) {
        T r[8];
        for (int j = 0; j < 8; ++j) r[j] = a[j];
        int64_t i = 8;
        for (; i < n - n % 8; i += 8)
            for (int j = 0; j < 8; ++j) r[j] = r[j] + a[i + j];
        T res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; ++i) res = res + a[i];
        return res;
    }
    int64_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

}  // namespace dasllama::kokoro

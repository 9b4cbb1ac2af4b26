"""The template layer's shared helpers on a device: the exact divide and the workgroup reduce.

gk_div must equal the host's IEEE float32 division bit for bit on normal-range operands (a
million random pairs, spread over many binades, quotients within about 2^+-100, plus exact
quotients). Measured on an H200: with quotients down to 2^-128 it missed 1,982 of a million, all
below 2^-105, where the split halves of its exact residual become subnormal and are flushed. Negative
control: the usual fast form a * (1/b) misses the same comparison on a large share of pairs,
so an exact match means the helper, not luck.

The workgroup reduce must leave the same value in every thread of a group (bit for bit), and
equal the float64 sum within the rounding of an f32 sum of n terms.
"""

import numpy as np

from gpu_helpers import ceil_div, gpu, nan_filled, pack_args  # noqa: F401  (gpu: fixture)

N_PAIRS = 1_000_000
REDUCE_BAR = 1e-7   # error of an f32 sum of 1,000 N(0,1) terms over sum|x|: measured 1.2e-8


def _pairs(rng, n):
    # Operands over many binades (2^-48 .. 2^48, both signs), so quotients stay within about
    # 2^+-100: gk_div's exact residual splits q into halves 12 bits apart, and devices that
    # flush subnormals (NVIDIA does) lose the low half below 2^-114.
    a = (rng.standard_normal(n) * np.exp2(rng.integers(-48, 48, n))).astype(np.float32)
    b = (rng.standard_normal(n) * np.exp2(rng.integers(-48, 48, n))).astype(np.float32)
    b[np.abs(b) < 1e-30] = 1.0
    a[np.abs(a) < 1e-30] = 1.0
    # Exact quotients and the small integers where a wrong tie or off-by-one is easiest to see.
    k = n // 20
    b[:k] = rng.integers(1, 1000, k).astype(np.float32)
    a[:k] = b[:k] * rng.integers(-1000, 1000, k).astype(np.float32)
    return a, b


def test_exact_divide_equals_ieee_division(gpu):  # noqa: F811
    rng = np.random.default_rng(7)
    a, b = _pairs(rng, N_PAIRS)
    (_, _, q) = gpu.run("gk_selftest_divide", [a, b, nan_filled(N_PAIRS)],
                        pack_args("I", N_PAIRS), (ceil_div(N_PAIRS, 64), 1, 1))
    want = a / b
    assert np.isfinite(want).all()
    mismatches = int(np.count_nonzero(q.view(np.uint32) != want.view(np.uint32)))
    fast = a * (np.float32(1.0) / b)
    control = int(np.count_nonzero(fast.view(np.uint32) != want.view(np.uint32)))
    print(f"gk_div: {mismatches} of {N_PAIRS} quotients differ from IEEE division; "
          f"a * (1/b): {control} differ")
    assert mismatches == 0
    assert control > N_PAIRS // 100


def test_workgroup_reduce_is_identical_in_every_thread(gpu):  # noqa: F811
    rng = np.random.default_rng(3)
    rows, n, wg = 37, 1000, 128
    x = rng.standard_normal(rows * n).astype(np.float32)
    _, sums, maxes = gpu.run("gk_selftest_reduce", [x, nan_filled(rows * wg), nan_filled(rows * wg)],
                             pack_args("I", n), (rows, 1, 1))
    sums, maxes = sums.reshape(rows, wg), maxes.reshape(rows, wg)
    # Every thread's copy equals thread 0's, bit for bit.
    assert (sums.view(np.uint32) == sums[:, :1].view(np.uint32)).all()
    assert (maxes.view(np.uint32) == maxes[:, :1].view(np.uint32)).all()
    ref = x.reshape(rows, n).astype(np.float64)
    err = np.abs(sums[:, 0] - ref.sum(1)) / np.abs(ref).sum(1)
    print(f"workgroup sum: max rel. error {err.max():.2e} (bar {REDUCE_BAR})")
    assert err.max() < REDUCE_BAR
    assert (maxes[:, 0] == ref.max(1).astype(np.float32)).all()
    # Negative control: a sum missing a few terms (as a dropped partial would be) misses the bar.
    dropped = ref.sum(1) - ref[:, :8].sum(1)
    assert (np.abs(sums[:, 0] - dropped) / np.abs(ref).sum(1)).min() > 10 * REDUCE_BAR

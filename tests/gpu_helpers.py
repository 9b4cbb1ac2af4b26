"""Shared helpers of the kernel tests (tests/test_gpu_*.py): the device, packed arguments,
NaN-filled outputs, weight bytes as words, rel-l2.

Device: $DASLLAMA_TEST_VULKAN (default "vulkan:llvmpipe", Mesa's lavapipe, which CI installs;
"vulkan:NVIDIA" picks a real GPU by a part of its name). With CI=true a missing device or a
build without the GPU runtime fails; elsewhere the tests skip and say why.
"""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest
from parity import rel_l2  # noqa: F401  (re-exported for the kernel tests)

SPEC = os.environ.get("DASLLAMA_TEST_VULKAN", "vulkan:llvmpipe")

# ggml's names of the weight formats the kernels read, and their stamp suffixes.
WEIGHT_FORMATS = ("F32", "F16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K")


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _unavailable(why: str):
    if in_ci():
        pytest.fail(why)
    pytest.skip(why)


def open_gpu():
    """A _core.GpuDebug on the test device, or a skip (a failure under CI) saying why not."""
    from dasllama import _core
    from dasllama.errors import DeviceError
    if not hasattr(_core, "GpuDebug"):
        _unavailable("this build of dasllama._core has no GPU runtime (_core.GpuDebug)")
    try:
        return _core.GpuDebug(SPEC)
    except DeviceError as e:  # no loader, no driver, or no device of that name
        _unavailable(f"no Vulkan device matches {SPEC!r}: {e}")


@pytest.fixture(scope="module")
def gpu():
    """One device per test module, so each stamp's pipeline is built once."""
    return open_gpu()


def open_coopmat_gpu(stamps):
    """open_gpu(), skipping on a device without cooperative matrices (a true unavailability,
    also under CI) and failing when this build lacks SPIR-V for any of `stamps`."""
    from dasllama import _core
    g = open_gpu()
    if not g.info.get("coopmat_khr"):
        pytest.skip(f"{g.info.get('name')!r} offers no cooperative matrices usable by the "
                    "coopmat stamps")
    built = {s["name"]: s for s in _core.gpu_stamps()}
    for name in stamps:
        if not built.get(name, {}).get("spirv_words"):
            pytest.fail(f"this build has no SPIR-V for {name}")
    return g


def pack_args(fmt: str, *values) -> bytes:
    """The argument block of a stamp: 4-byte scalars in GK_ARGS order, e.g.
    pack_args("IIf", n, off, scale) for A(uint, n) A(uint, off) A(float, scale)."""
    return struct.pack("<" + fmt, *values)


def nan_filled(n: int) -> np.ndarray:
    """An output buffer of n float32 NaNs: whatever a kernel does not write stays NaN."""
    return np.full(n, np.nan, dtype=np.float32)


def as_words(raw: np.ndarray) -> np.ndarray:
    """GGUF bytes as the uint32 array the kernels bind (zero-padded to a whole word)."""
    raw = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1)
    pad = (-raw.size) % 4
    if pad:
        raw = np.concatenate([raw, np.zeros(pad, np.uint8)])
    return raw.view("<u4").copy()


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def random_weights(fmt: str, rows: int, cols: int, rng: np.random.Generator):
    """(raw GGUF bytes, their float64 dequantization (rows, cols)) of random normal weights,
    quantized by the C++ quantizer and decoded by the NumPy reference."""
    from dasllama import formats
    from dasllama.reference import quants
    x = rng.standard_normal(rows * cols).astype(np.float32)
    raw = formats.quantize(fmt, x)
    dense = quants.dequantize(fmt, raw, rows * cols).reshape(rows, cols).astype(np.float64)
    return raw, dense


def block_elems(fmt: str) -> int:
    """Elements per block as the kernels see it: F32/F16 rows are read in units of 16."""
    from dasllama.reference import quants
    return max(quants.BLOCK[fmt][0], 16)


def drop_last_block(dense: np.ndarray, fmt: str) -> np.ndarray:
    """A negative control: the weights with each row's last block zeroed (a loop bound off by one
    block)."""
    wrong = dense.copy()
    cols = dense.shape[1]
    bs = block_elems(fmt)
    start = (cols - 1) // bs * bs
    wrong[:, start:] = 0.0
    return wrong


def product_cols(fmt: str) -> tuple:
    """Column counts of the product tests: several blocks; for F32/F16 an odd width (a ragged
    tail, rows off word boundaries) and a multiple of 8 (rows 16-byte aligned: the wide-load
    path); for the block formats a narrow row (one subgroup a row in matvec) and one past
    matvec's 2048-column chunk (one thread a unit, two chunks)."""
    bs = block_elems(fmt)
    return {16: (101, 200), 32: (96, 2080), 256: (768, 2304)}[bs]


def run_weight_product(g, stamp: str, fmt: str, rows: int, cols: int, n_tok: int,
                       accumulate: bool, groups, seed: int, x_align: int = 1) -> dict:
    """Run a matvec/matmul stamp (buffers w, x, y, aux; args rows cols n_tok x_off x_stride
    y_off y_stride accumulate in_mode aux_off eps, in_mode 0) on random weights with nonzero
    offsets and strides, and measure it. x_align: what x_off and x_stride must be multiples of
    (the matvec_sub stamps read x in 16-byte pieces: 4); 1 picks odd ones. Returns
    {"err": rel-l2 vs float64, "err_drop": rel-l2 vs the weights with each row's last block
    dropped (negative control), "untouched_ok": bool}."""
    rng = np.random.default_rng(seed)
    raw, dense = random_weights(fmt, rows, cols, rng)
    x_off, x_stride = (5, cols + 3) if x_align == 1 else (x_align, cols + x_align)
    y_off, y_stride = 3, rows + 4
    x = rng.standard_normal(x_off + n_tok * x_stride + 2).astype(np.float32)
    n_y = y_off + n_tok * y_stride + 2
    if accumulate:
        y0 = rng.standard_normal(n_y).astype(np.float32)   # the residual the kernel adds to
    else:
        y0 = nan_filled(n_y)
    args = pack_args("IIIIIIIIIIf", rows, cols, n_tok, x_off, x_stride, y_off, y_stride,
                     1 if accumulate else 0, 0, 0, 0.0)   # in_mode 0: x as it is
    out = g.run(stamp, [as_words(raw), x, y0.copy(), np.zeros(1, np.float32)], args,
                tuple(groups))
    y = np.asarray(out[2], dtype=np.float32)

    xs = np.stack([x[x_off + t * x_stride: x_off + t * x_stride + cols] for t in range(n_tok)])
    idx = np.array([[y_off + t * y_stride + r for r in range(rows)] for t in range(n_tok)])
    base = y0[idx].astype(np.float64) if accumulate else 0.0
    got = y[idx]
    ref = base + xs.astype(np.float64) @ dense.T
    ref_drop = base + xs.astype(np.float64) @ drop_last_block(dense, fmt).T
    mask = np.ones(n_y, bool)
    mask[idx.reshape(-1)] = False
    untouched = y[mask]
    expect = y0[mask]
    untouched_ok = bool(np.array_equal(untouched, expect, equal_nan=True))
    return {"err": rel_l2(got, ref) if np.all(np.isfinite(got)) else float("inf"),
            "err_drop": rel_l2(got, ref_drop), "untouched_ok": untouched_ok}

"""The integer-dot decode products: quant_q8_1 (a projection's input to q8_1 blocks) and
matvec_q8r<R>_<fmt> (Q4_K and Q6_K weights against those blocks), against NumPy in float64,
and their pick (gpu::matvec_q8_rows), device-free.

Bars, each from the error the test measures and prints:
- quant_q8_1: the codes equal NumPy's (float32: d = amax / 127, q = floor(v * 127 / amax + 0.5))
  but for at most CODE_FLIPS of them by one (a division rounded otherwise); the decoded row
  d * q against the input stage's values in float64 within QUANT_BAR (the 8-bit rounding itself,
  about 1/(127 sqrt(12)) of a block's largest value per value: measured up to 6.8e-3 on
  lavapipe and on an H200, 9.1e-3 for the gated stage, whose products of two normal values put
  fewer of a block's values near its largest; no code off by one); s within half precision of
  d * sum(q). Input stages: plain, RMSNorm and SiLU-gated (the down projection's input).
  Negative controls: the norm weight left out (RMSNorm), the gate and up halves swapped (gated),
  the blocks one off (plain).
- matvec_q8: inputs whose scales are powers of two and whose codes stay within +-63, so that
  d * sum(q) is exact in float16 and float64 is the exact reference; the integer dots are exact
  and the float sums few: BAR as tests/test_gpu_matvec.py (5e-7; measured at most 2.4e-7).
  Negative control: each row's last block dropped (as there).
- both chained, RMSNorm input stage, against the float form of the product (float64 on the
  unquantized input): CHAIN_BAR (the input's 8-bit rounding as it reaches the sums: measured
  7.3e-3 on lavapipe); negative control: the weights' last block dropped.
Rows are odd (67: a partial last workgroup), outputs start NaN (or a known residual when
accumulating) and what the kernel must not write is checked unchanged.
"""

import zlib

import numpy as np
import pytest

from dasllama import _core
from gpu_helpers import (as_words, ceil_div, drop_last_block, gpu, nan_filled,  # noqa: F401
                         pack_args, random_weights, rel_l2)

ROWS = 67
BAR = 5e-7
QUANT_BAR = 1.2e-2
CHAIN_BAR = 1.5e-2
CODE_FLIPS = 2e-3   # the share of codes that may differ from NumPy's by one
WG_SUBGROUPS = 4    # the host's workgroup of four 32-wide subgroups (matrix.cpp)
MAX_TOK = 8         # GK_Q8_MAX_TOK
WG_BLOCKS = 32      # GK_Q8_WG_BLOCKS: blocks a workgroup of quant_q8_1 quantizes
FORMATS = ("Q4_K", "Q6_K")
COLS = (256, 768, 2304)


def _quant_args(cols, n_tok, x_off, x_stride, in_mode, aux_off, eps):
    return pack_args("IIIIIIIf", cols, n_tok, x_off, x_stride, n_tok * cols // 4, in_mode,
                     aux_off, eps)


def _q8_unpack(words: np.ndarray, cols: int, n_tok: int):
    """(codes int (n_tok, cols), d float32 (n_tok, cols/32), s float32 (n_tok, cols/32)) of a
    q8_1 buffer as quant_q8_1 lays it out."""
    codes = np.asarray(words[:n_tok * cols // 4], "<u4").view(np.int8).astype(np.int64)
    ds = np.asarray(words[n_tok * cols // 4: n_tok * cols // 4 + n_tok * cols // 32], "<u4")
    d = (ds & 0xFFFF).astype(np.uint16).view(np.float16).astype(np.float32)
    s = (ds >> 16).astype(np.uint16).view(np.float16).astype(np.float32)
    return codes.reshape(n_tok, cols), d.reshape(n_tok, -1), s.reshape(n_tok, -1)


def _q8_pack(codes: np.ndarray, d: np.ndarray, s: np.ndarray) -> np.ndarray:
    """The q8_1 buffer of codes (n_tok, cols) and per-block d, s (n_tok, cols/32)."""
    qw = np.ascontiguousarray(codes.astype(np.int8).reshape(-1)).view("<u4")
    dh = d.astype(np.float16).reshape(-1).view(np.uint16).astype(np.uint32)
    sh = s.astype(np.float16).reshape(-1).view(np.uint16).astype(np.uint32)
    return np.concatenate([qw, dh | (sh << 16)]).astype("<u4")


def _numpy_codes(v32: np.ndarray) -> np.ndarray:
    """quant_q8_1's codes of float32 values (…, cols), computed in float32 as the kernel."""
    b = v32.reshape(v32.shape[0], -1, 32)
    amax = np.abs(b).max(axis=2, keepdims=True).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(amax > 0, np.float32(127.0) / amax, np.float32(0.0)).astype(np.float32)
    q = np.floor(b * inv + np.float32(0.5)).clip(-127, 127)
    return q.reshape(v32.shape).astype(np.int64)


@pytest.mark.parametrize("in_mode", [0, 1, 2], ids=["plain", "rmsnorm", "silu_gated"])
@pytest.mark.parametrize("n_tok", [1, 3])
def test_quant_q8_1_matches_numpy(gpu, n_tok, in_mode):  # noqa: F811
    cols, x_off, eps = 2304, 4, 1e-5
    gated = in_mode == 2     # a row holds the gate half, then the up half (aux_off = cols)
    x_stride = (2 * cols if gated else cols) + 8
    rng = np.random.default_rng(zlib.crc32(f"quant {n_tok} {in_mode}".encode()))
    x = rng.standard_normal(x_off + n_tok * x_stride + 3).astype(np.float32)
    x[x_off + 64: x_off + 96] = 0.0   # an all-zero block: d = 0, codes 0
    aux_off = cols if gated else 2
    norm_w = (1.0 + 0.5 * rng.standard_normal(aux_off + cols)).astype(np.float32)
    n_words = n_tok * cols // 4 + n_tok * cols // 32
    out = gpu.run("quant_q8_1", [x, np.full(n_words + 4, 0xFFFFFFFF, np.uint32), norm_w],
                  _quant_args(cols, n_tok, x_off, x_stride, in_mode, aux_off, eps),
                  (ceil_div(cols // 32, WG_BLOCKS), n_tok, 1))
    words = np.asarray(out[1], np.uint32)
    assert np.all(words[n_words:] == 0xFFFFFFFF), "quant_q8_1 wrote past its output"
    codes, d, s = _q8_unpack(words, cols, n_tok)

    rows = np.stack([x[x_off + t * x_stride: x_off + t * x_stride + cols] for t in range(n_tok)])
    rows64 = rows.astype(np.float64)
    if in_mode == 1:
        inv = 1.0 / np.sqrt((rows64 ** 2).mean(axis=1, keepdims=True) + eps)
        want = rows64 * inv * norm_w[aux_off:aux_off + cols]
        wrong = rows64 * inv     # control: the norm weight left out
    elif gated:
        up = np.stack([x[x_off + t * x_stride + cols: x_off + t * x_stride + 2 * cols]
                       for t in range(n_tok)]).astype(np.float64)
        want = rows64 / (1.0 + np.exp(-rows64)) * up
        wrong = up / (1.0 + np.exp(-up)) * rows64   # control: the halves swapped
    else:
        want, wrong = rows64, np.roll(rows64, 32, axis=1)   # control: blocks off by one
    decoded = codes * np.repeat(d, 32, axis=1)
    err, control = rel_l2(decoded, want), rel_l2(decoded, wrong)
    flips = np.abs(codes - _numpy_codes(want.astype(np.float32)))
    sums = d * codes.reshape(n_tok, -1, 32).sum(axis=2)
    s_err = np.abs(s - sums).max() / np.abs(sums).max()
    print(f"quant_q8_1 n_tok={n_tok} mode={in_mode}: rel-l2 {err:.3g} (bar {QUANT_BAR}), "
          f"control {control:.3g}; codes off by one {(flips == 1).mean():.2e}; s {s_err:.2e}")
    assert flips.max() <= 1 and (flips == 1).mean() <= CODE_FLIPS
    assert np.all(codes[0, 64:96] == 0) and d[0, 2] == 0
    assert np.all(np.abs(codes) <= 127)
    assert s_err < 2e-3
    assert err < QUANT_BAR
    assert control > 10 * QUANT_BAR


def _exact_input(rng, n_tok, cols):
    """Codes within +-63 and power-of-two block scales: d * sum(q) is exact in float16."""
    codes = rng.integers(-63, 64, size=(n_tok, cols))
    d = np.exp2(-rng.integers(3, 8, size=(n_tok, cols // 32))).astype(np.float32)
    s = d * codes.reshape(n_tok, -1, 32).sum(axis=2)
    return codes, d, s


def _run_q8(g, stamp, raw, rows, cols, n_tok, q8, y0, y_off, y_stride, accumulate, groups):
    args = pack_args("IIIIIII", rows, cols, n_tok, n_tok * cols // 4, y_off, y_stride,
                     1 if accumulate else 0)
    out = g.run(stamp, [as_words(raw), q8, y0.copy()], args, (groups, 1, 1))
    return np.asarray(out[2], np.float32)


def _check_product(y, y0, dense, xd, y_off, y_stride, rows, n_tok, accumulate, fmt):
    idx = np.array([[y_off + t * y_stride + r for r in range(rows)] for t in range(n_tok)])
    base = y0[idx].astype(np.float64) if accumulate else 0.0
    got = y[idx]
    err = rel_l2(got, base + xd @ dense.T) if np.all(np.isfinite(got)) else float("inf")
    err_drop = rel_l2(got, base + xd @ drop_last_block(dense, fmt).T)
    mask = np.ones(y.size, bool)
    mask[idx.reshape(-1)] = False
    untouched = bool(np.array_equal(y[mask], y0[mask], equal_nan=True))
    return err, err_drop, untouched


@pytest.mark.parametrize("accumulate", [False, True], ids=["store", "accumulate"])
@pytest.mark.parametrize("n_tok", [1, 3])
@pytest.mark.parametrize("r", [1, 2, 4])
@pytest.mark.parametrize("fmt", FORMATS)
def test_matvec_q8_matches_numpy(gpu, fmt, r, n_tok, accumulate):  # noqa: F811
    stamp = f"matvec_q8r{r}_{fmt.lower()}"
    for cols in COLS:
        seed = zlib.crc32(f"q8 {fmt} {r} {cols} {n_tok} {accumulate}".encode())
        rng = np.random.default_rng(seed)
        raw, dense = random_weights(fmt, ROWS, cols, rng)
        codes, d, s = _exact_input(rng, n_tok, cols)
        xd = codes * np.repeat(d.astype(np.float64), 32, axis=1)
        y_off, y_stride = 3, ROWS + 4
        n_y = y_off + n_tok * y_stride + 2
        y0 = rng.standard_normal(n_y).astype(np.float32) if accumulate else nan_filled(n_y)
        y = _run_q8(gpu, stamp, raw, ROWS, cols, n_tok, _q8_pack(codes, d, s), y0, y_off,
                    y_stride, accumulate, ceil_div(ROWS, WG_SUBGROUPS * r))
        err, err_drop, untouched = _check_product(y, y0, dense, xd, y_off, y_stride, ROWS, n_tok,
                                                  accumulate, fmt)
        print(f"{stamp} cols={cols} n_tok={n_tok} accumulate={accumulate}: rel-l2 {err:.3g}, "
              f"last block dropped {err_drop:.3g}")
        assert untouched, "the kernel wrote outside its outputs"
        assert err < BAR
        assert err_drop > 10 * BAR


@pytest.mark.parametrize("fmt", FORMATS)
def test_matvec_q8_strides_over_row_groups(gpu, fmt):  # noqa: F811
    """Fewer workgroups than row groups (the host caps a dispatch at 65535): each strides."""
    cols = 768
    rng = np.random.default_rng(zlib.crc32(f"q8 stride {fmt}".encode()))
    raw, dense = random_weights(fmt, ROWS, cols, rng)
    codes, d, s = _exact_input(rng, 1, cols)
    xd = codes * np.repeat(d.astype(np.float64), 32, axis=1)
    y0 = nan_filled(ROWS + 2)
    y = _run_q8(gpu, f"matvec_q8r2_{fmt.lower()}", raw, ROWS, cols, 1, _q8_pack(codes, d, s), y0,
                1, ROWS, False, 3)
    err, err_drop, untouched = _check_product(y, y0, dense, xd, 1, ROWS, ROWS, 1, False, fmt)
    print(f"matvec_q8r2_{fmt.lower()} over 3 workgroups: rel-l2 {err:.3g}")
    assert untouched and err < BAR and err_drop > 10 * BAR


@pytest.mark.parametrize("fmt", FORMATS)
def test_quantized_chain_near_the_float_product(gpu, fmt):  # noqa: F811
    """quant_q8_1 with the RMSNorm stage, then matvec_q8r2: the float form's result (float64 on
    the unquantized normed input) within the input's 8-bit rounding."""
    cols, rows, eps, aux_off = 2304, ROWS, 1e-5, 4
    rng = np.random.default_rng(zlib.crc32(f"q8 chain {fmt}".encode()))
    raw, dense = random_weights(fmt, rows, cols, rng)
    x = rng.standard_normal(cols).astype(np.float32)
    norm_w = (1.0 + 0.5 * rng.standard_normal(aux_off + cols)).astype(np.float32)
    n_words = cols // 4 + cols // 32
    q8 = gpu.run("quant_q8_1", [x, np.zeros(n_words, np.uint32), norm_w],
                 _quant_args(cols, 1, 0, cols, 1, aux_off, eps),
                 (ceil_div(cols // 32, WG_BLOCKS), 1, 1))[1]
    y0 = nan_filled(rows)
    y = _run_q8(gpu, f"matvec_q8r2_{fmt.lower()}", raw, rows, cols, 1,
                np.asarray(q8, np.uint32), y0, 0, rows, False, ceil_div(rows, WG_SUBGROUPS * 2))
    x64 = x.astype(np.float64)
    xn = x64 / np.sqrt((x64 ** 2).mean() + eps) * norm_w[aux_off:]
    err, err_drop, untouched = _check_product(y, y0, dense, xn[None, :], 0, rows, rows, 1, False,
                                              fmt)
    print(f"quant_q8_1 + matvec_q8r2_{fmt.lower()} vs the float product: rel-l2 {err:.3g} "
          f"(bar {CHAIN_BAR}), last block dropped {err_drop:.3g}")
    assert untouched
    assert err < CHAIN_BAR
    assert err_drop > 10 * CHAIN_BAR


# --- the pick, device-free ---------------------------------------------------------------------

def pick(fmt="q4_k", rows=4096, cols=4096, n_tok=1, in_mode=1, on=1, min_cols=1024, log2=1):
    return _core.gpu_matvec_q8_rows(fmt, rows, cols, n_tok, in_mode, on, min_cols, log2)


def test_pick_formats_and_the_switch():
    assert pick() == 2
    assert pick("q6_k") == 2
    for fmt in ("q4_0", "q8_0", "q5_k", "f16", "f32"):
        assert pick(fmt) == 0
    assert pick(on=0) == 0


def test_pick_width_tokens_and_modes_at_their_bounds():
    assert pick(cols=1024, min_cols=1024) == 2
    assert pick(cols=768, min_cols=1024) == 0
    assert pick(cols=768, min_cols=768) == 2
    assert pick(cols=1000, min_cols=256) == 0          # not whole 256-value blocks
    assert pick(n_tok=MAX_TOK) == 2 and pick(n_tok=MAX_TOK + 1) == 0 and pick(n_tok=0) == 0
    for mode in range(8):
        assert pick(in_mode=mode) == 2
    assert pick(in_mode=8) == 0 and pick(in_mode=11) == 0   # the LayerNorm stages


def test_pick_rows_a_subgroup_from_the_knob():
    assert [pick(log2=k) for k in (0, 1, 2)] == [1, 2, 4]


@pytest.fixture
def q8_knobs():
    yield
    for k in ("matvec_q8", "matvec_q8_min_cols", "matvec_q8_rows_log2"):
        _core.tuning_reset("vulkan.project." + k)


def test_pick_follows_the_knobs_as_set(q8_knobs):
    assert _core.gpu_matvec_q8_rows_now("q4_k", 4096, 4096, 1, 1) == 2
    _core.tuning_set("vulkan.project.matvec_q8_rows_log2", 2)
    assert _core.gpu_matvec_q8_rows_now("q4_k", 4096, 4096, 1, 1) == 4
    _core.tuning_set("vulkan.project.matvec_q8_min_cols", 8192)
    assert _core.gpu_matvec_q8_rows_now("q4_k", 4096, 4096, 1, 1) == 0
    _core.tuning_set("vulkan.project.matvec_q8", 0)
    assert _core.gpu_matvec_q8_rows_now("q6_k", 4096, 14336, 1, 1) == 0

"""The element-wise stamps of the LLM forward pass against NumPy in float64: rmsnorm, the rope
table and rotation, eltwise_* and kv_store_f16 (attention: tests/test_gpu_attention.py).

Every buffer has an odd size and an offset; outputs start NaN (or random, for in-place kernels)
and everything a kernel must not write is checked unchanged; grid-stride kernels run on fewer
workgroups than elements so the stride loop is exercised. Each test prints its measured error
next to its bar, and carries a negative control (a plausible bug: eps or weight dropped,
positions off by one, operands swapped, truncating rounding) that must miss the bar tenfold.
"""

import math
import zlib

import numpy as np
import pytest

from gpu_helpers import ceil_div, gpu, nan_filled, pack_args, rel_l2  # noqa: F401


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


# --- rmsnorm -----------------------------------------------------------------------------------

# Bar: float32 sum of squares (strided, then the workgroup reduce) and three roundings per
# output, against float64: 6.6e-8 measured on lavapipe; the order of the sum follows the
# subgroup size.
RMSNORM_BAR = 3e-7


@pytest.mark.parametrize("rows,n", [(5, 203), (37, 64), (3, 1152)],
                         ids=["block-odd", "heads", "wide"])
def test_rmsnorm_matches_numpy(gpu, rows, n):  # noqa: F811
    rng = _rng(f"rmsnorm {rows} {n}")
    x_off, y_off, w_off, eps = 3, 7, 2, 1e-5
    x = rng.standard_normal(x_off + rows * n + 4).astype(np.float32)
    w = (1.0 + 0.5 * rng.standard_normal(w_off + n + 1)).astype(np.float32)
    n_y = y_off + rows * n + 5
    args = pack_args("IIIIIf", n, rows, x_off, y_off, w_off, eps)
    out = gpu.run("rmsnorm", [x, w, nan_filled(n_y)], args, (rows, 1, 1))
    y = np.asarray(out[2], dtype=np.float32)

    xs = x[x_off:x_off + rows * n].reshape(rows, n).astype(np.float64)
    ws = w[w_off:w_off + n].astype(np.float64)

    def ref(eps_, weight):
        return xs / np.sqrt(np.mean(xs * xs, axis=1, keepdims=True) + eps_) * weight

    got = y[y_off:y_off + rows * n].reshape(rows, n)
    err = rel_l2(got, ref(eps, ws))
    err_eps = rel_l2(got, ref(10 * eps, ws))
    err_w = rel_l2(got, ref(eps, 1.0))
    print(f"rmsnorm rows={rows} n={n}: rel-l2 {err:.3g} (bar {RMSNORM_BAR}); controls: eps x10 "
          f"{err_eps:.3g}, weight dropped {err_w:.3g}")
    assert np.all(np.isnan(y[:y_off])) and np.all(np.isnan(y[y_off + rows * n:]))
    assert err < RMSNORM_BAR
    assert err_eps > 10 * RMSNORM_BAR and err_w > 10 * RMSNORM_BAR


def test_rmsnorm_in_place(gpu):  # noqa: F811
    """y bound to x's own buffer (the per-head q/k norms): the same values as out of place."""
    rng = _rng("rmsnorm in place")
    rows, n, off, eps = 7, 96, 5, 1e-6
    x = rng.standard_normal(off + rows * n + 3).astype(np.float32)
    w = (1.0 + 0.5 * rng.standard_normal(n)).astype(np.float32)
    args = pack_args("IIIIIf", n, rows, off, off, 0, eps)
    out = gpu.run_many([x, w], [("rmsnorm", [0, 1, 0], args, (rows, 1, 1))], True)
    y = np.asarray(out[0], dtype=np.float32)
    xs = x[off:off + rows * n].reshape(rows, n).astype(np.float64)
    ref = xs / np.sqrt(np.mean(xs * xs, axis=1, keepdims=True) + eps) * w
    err = rel_l2(y[off:off + rows * n].reshape(rows, n), ref)
    err_w = rel_l2(y[off:off + rows * n].reshape(rows, n), ref / w)
    print(f"rmsnorm in place rows={rows} n={n}: rel-l2 {err:.3g} (bar {RMSNORM_BAR}); "
          f"weight dropped {err_w:.3g}")
    end = off + rows * n
    assert np.array_equal(y[:off], x[:off]) and np.array_equal(y[end:], x[end:])
    assert err < RMSNORM_BAR
    assert err_w > 10 * RMSNORM_BAR


# --- rope table --------------------------------------------------------------------------------

# Bar (max abs error of cos and sin): the angle is reduced in extended precision and sin/cos are
# polynomials, so the error is float rounding at any position: 8e-8 measured on lavapipe at
# positions 5 to 131k (what the forward pass needs there is ~1e-6).
ROPE_TABLE_BAR = 3e-7


def rope_freqs(n_rot: int, base: float, scale: float = 1.0, factors=None) -> np.ndarray:
    """The host's frequencies in float64: base^(-2i / n_rot) * scale / factor_i."""
    half = n_rot // 2
    f = base ** (-2.0 * np.arange(half, dtype=np.float64) / n_rot) * scale
    if factors is not None:
        f = f / np.asarray(factors, np.float64)
    return f


def freq_pairs(f: np.ndarray) -> np.ndarray:
    """The kernel's input: each frequency as float(f), float(f - float(f))."""
    hi = f.astype(np.float32)
    lo = (f - hi.astype(np.float64)).astype(np.float32)
    return np.stack([hi, lo], axis=1).reshape(-1)


def run_rope_table(g, f: np.ndarray, n_tok: int, pos0: int, row0: int = 0) -> np.ndarray:
    half = f.size
    n = n_tok * half * 2
    skip = row0 * half * 2
    # The position is the base read from memory plus the argument: split it between the two.
    base = pos0 // 2
    out = g.run("rope_table", [freq_pairs(f), nan_filled(skip + n + 3),
                               np.array([base], np.uint32)],
                pack_args("IIII", half, n_tok, pos0 - base, row0),
                (ceil_div(n_tok * half, 64), 1, 1))
    tab = np.asarray(out[1], dtype=np.float32)
    assert np.all(np.isnan(tab[:skip])), "rope_table wrote before its first row"
    assert np.all(np.isnan(tab[skip + n:])), "rope_table wrote past its table"
    return tab[skip:skip + n].reshape(n_tok, half, 2)


@pytest.mark.parametrize("n_rot,base,scale,pos0,n_tok,row0", [
    (64, 10000.0, 1.0, 5, 37, 0),            # llama-like, early positions
    (64, 10000.0, 1.0, 40, 3, 5),            # a batched call's sequence at row 5
    (256, 1e6, 1.0, 100000, 17, 0),          # gemma3 global layers, far positions
    (128, 500000.0, 0.25, 131000, 9, 0),     # linear scaling, near 128k
], ids=["early", "rows-from-5", "pos100k", "pos131k-scaled"])
def test_rope_table_matches_float64(gpu, n_rot, base, scale, pos0, n_tok, row0):  # noqa: F811
    factors = None
    if n_rot == 128:   # llama3-style per-pair factors
        factors = 1.0 + np.linspace(0.0, 7.0, n_rot // 2)
    f = rope_freqs(n_rot, base, scale, factors)
    tab = run_rope_table(gpu, f, n_tok, pos0, row0)
    angle = (pos0 + np.arange(n_tok, dtype=np.float64))[:, None] * f[None, :]
    ref = np.stack([np.cos(angle), np.sin(angle)], axis=2)
    shifted = (pos0 + 1 + np.arange(n_tok, dtype=np.float64))[:, None] * f[None, :]
    ref_shifted = np.stack([np.cos(shifted), np.sin(shifted)], axis=2)
    err = float(np.max(np.abs(tab - ref)))
    err_shift = float(np.max(np.abs(tab - ref_shifted)))
    print(f"rope_table n_rot={n_rot} pos0={pos0}: max abs error {err:.3g} (bar {ROPE_TABLE_BAR}); "
          f"positions off by one: {err_shift:.3g}")
    assert err < ROPE_TABLE_BAR
    assert err_shift > 10 * ROPE_TABLE_BAR


# --- rope ---------------------------------------------------------------------------------------

# Bar: two products and a sum per output against float64 with the same float32 table: 4e-8
# measured on lavapipe.
ROPE_BAR = 2e-7


@pytest.mark.parametrize("neox", [False, True], ids=["norm", "neox"])
@pytest.mark.parametrize("head_dim,n_rot", [(64, 64), (64, 48)], ids=["full", "partial"])
def test_rope_matches_numpy(gpu, neox, head_dim, n_rot):  # noqa: F811
    rng = _rng(f"rope {neox} {head_dim} {n_rot}")
    n_tok, n_head = 5, 3
    half = n_rot // 2
    x_off, x_stride, tab_off = 3, n_head * head_dim + 5, 4
    x0 = rng.standard_normal(x_off + n_tok * x_stride + 2).astype(np.float32)
    # One spare token row after the used ones, for the off-by-one control.
    angle = rng.uniform(-math.pi, math.pi, (n_tok + 1, half))
    cs = np.stack([np.cos(angle), np.sin(angle)], axis=2).astype(np.float32)
    tab = np.concatenate([np.full(tab_off, np.nan, np.float32), cs.reshape(-1)])
    total = n_tok * n_head * half
    args = pack_args("IIIIIII", n_tok, n_head, head_dim, n_rot, x_off, x_stride, tab_off)
    out = gpu.run("rope_neox" if neox else "rope_norm", [x0.copy(), tab], args,
                  (max(1, ceil_div(total, 256) // 2), 1, 1))
    x = np.asarray(out[0], dtype=np.float32)

    def rotated(c):
        ref = x0.astype(np.float64).copy()
        for t in range(n_tok):
            for h in range(n_head):
                b = x_off + t * x_stride + h * head_dim
                i = np.arange(half)
                a_idx, b_idx = (b + i, b + i + half) if neox else (b + 2 * i, b + 2 * i + 1)
                xa, xb = x0[a_idx].astype(np.float64), x0[b_idx].astype(np.float64)
                cos, sin = c[t, :, 0].astype(np.float64), c[t, :, 1].astype(np.float64)
                ref[a_idx] = xa * cos - xb * sin
                ref[b_idx] = xa * sin + xb * cos
        return ref

    ref = rotated(cs[:n_tok])
    err = rel_l2(x, ref)
    err_shift = rel_l2(x, rotated(cs[1:]))
    changed = ref != x0.astype(np.float64)
    print(f"rope {'neox' if neox else 'norm'} head_dim={head_dim} n_rot={n_rot}: rel-l2 "
          f"{err:.3g} (bar {ROPE_BAR}); positions off by one: {err_shift:.3g}")
    # Dims past n_rot, the gaps between rows and the offset are left bit for bit.
    assert np.array_equal(x[~changed], x0[~changed])
    assert err < ROPE_BAR
    assert err_shift > 10 * ROPE_BAR


# --- eltwise ------------------------------------------------------------------------------------

def _silu(g):
    return g / (1.0 + np.exp(-g))


def _gelu_tanh(g):
    return 0.5 * g * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (g + 0.044715 * g ** 3)))


# op: (stamp, reference(y, x, s), control(y, x, s), bar, why the bar)
ELTWISE = {
    "add": ("eltwise_add", lambda y, x, s: y + x, lambda y, x, s: y + np.roll(x, 1), 1e-7,
            "one float32 add: 2.6e-8 measured"),
    "scale": ("eltwise_scale", lambda y, x, s: y * s, lambda y, x, s: y / s, 1e-7,
              "one float32 product: 2.9e-8 measured"),
    "glu_silu": ("eltwise_glu_silu", lambda y, x, s: _silu(y) * x, lambda y, x, s: _silu(x) * y,
                 3e-7, "the native exp and three roundings: 5e-8 measured"),
    "glu_gelu": ("eltwise_glu_gelu", lambda y, x, s: _gelu_tanh(y) * x,
                 lambda y, x, s: _silu(y) * x, 3e-7,
                 "the native exp and the cubic's roundings: 4e-8 measured"),
    "softcap": ("eltwise_softcap", lambda y, x, s: s * np.tanh(y / s), lambda y, x, s: y, 3e-7,
                "gk_tanh (~2 ulp) and two roundings: 3e-8 measured"),
}


@pytest.mark.parametrize("op", list(ELTWISE))
def test_eltwise_matches_numpy(gpu, op):  # noqa: F811
    stamp, ref_fn, control_fn, bar, why = ELTWISE[op]
    rng = _rng(f"eltwise {op}")
    n, y_off, x_off = 1003, 5, 2
    s = 30.0 if op == "softcap" else 0.37
    y0 = rng.standard_normal(y_off + n + 3).astype(np.float32)
    x = rng.standard_normal(x_off + n + 1).astype(np.float32)
    if op == "softcap":
        # Logits from 1e-3 (tanh's polynomial branch) to 300 (saturated), both signs.
        y0 = (np.sign(y0) * 10.0 ** rng.uniform(-3, 2.5, y0.size)).astype(np.float32)
    else:
        y0 *= 3.0   # gates into the tails of silu and gelu
    args = pack_args("IIIf", n, y_off, x_off, s)
    # Two workgroups of 256 for 1003 elements: the grid-stride loop runs twice.
    out = gpu.run(stamp, [y0.copy(), x], args, (2, 1, 1))
    y = np.asarray(out[0], dtype=np.float32)
    ys = y0[y_off:y_off + n].astype(np.float64)
    xs = x[x_off:x_off + n].astype(np.float64)
    got = y[y_off:y_off + n]
    err = rel_l2(got, ref_fn(ys, xs, s))
    err_control = rel_l2(got, control_fn(ys, xs, s))
    print(f"{stamp} n={n}: rel-l2 {err:.3g} (bar {bar}: {why}); control {err_control:.3g}")
    assert np.array_equal(y[:y_off], y0[:y_off]) and np.array_equal(y[y_off + n:], y0[y_off + n:])
    assert err < bar
    assert err_control > 10 * bar


def test_softcap_small_values_keep_relative_accuracy(gpu):  # noqa: F811
    """Per element, not only in rel-l2: tanh near zero computed from exponentials would lose
    every digit of x / s; gk_tanh must keep ~2 ulp. Bar: 4e-7 relative per element (1.3e-7
    measured on lavapipe)."""
    rng = _rng("softcap small")
    n, s = 257, 30.0
    y0 = (np.sign(rng.standard_normal(n)) * 10.0 ** rng.uniform(-6, 1.5, n)).astype(np.float32)
    out = gpu.run("eltwise_softcap", [y0.copy(), y0.copy()], pack_args("IIIf", n, 0, 0, s),
                  (1, 1, 1))
    got = np.asarray(out[0], dtype=np.float64)
    ref = s * np.tanh(y0.astype(np.float64) / s)
    rel = float(np.max(np.abs(got - ref) / np.abs(ref)))
    print(f"eltwise_softcap: max relative error {rel:.3g} per element (bar 4e-7)")
    assert rel < 4e-7


# --- kv_store ------------------------------------------------------------------------------------

def _f16_truncated(v: np.ndarray) -> np.ndarray:
    """f16 bits of float32 values in the f16 normal range, rounded toward zero: the control."""
    u = v.astype(np.float32).view(np.uint32).astype(np.int64)
    sign = (u >> 16) & 0x8000
    e = ((u >> 23) & 0xFF) - 127 + 15
    return (sign | (e << 10) | ((u & 0x7FFFFF) >> 13)).astype(np.uint16)


def test_kv_store_rounds_like_numpy_float16(gpu):  # noqa: F811
    rng = _rng("kv_store")
    n_tok, width = 9, 74   # 333 pairs: one workgroup of 256 strides twice
    src_off, src_stride, dst_off = 3, width + 5, 6
    src = rng.standard_normal(src_off + n_tok * src_stride + 2).astype(np.float32)
    rows = [src_off + t * src_stride + np.arange(width) for t in range(n_tok)]
    idx = np.concatenate(rows)
    # Edge cases in the first row: exact ties (1 + 2^-11 ties down to even, 1 + 3 * 2^-11 up),
    # f16 subnormals (and a tie among them), the largest finite, overflow, zeros, NaN.
    special = np.array([1 + 2 ** -11, 1 + 3 * 2 ** -11, -(1 + 2 ** -11), 3e-8, 6e-5, 2 ** -25,
                        1.25 * 2 ** -24, 1.5 * 2 ** -24, 2.5 * 2 ** -24, 65504.0, 65519.0,
                        65520.0, -1e6, 0.0, -0.0, 1e-30, np.nan, np.inf], dtype=np.float32)
    src[rows[0][:special.size]] = special
    # Everything else over several binades, so most rounding cases occur.
    spread = 10.0 ** rng.uniform(-4, 3, idx.size - special.size)
    src[idx[special.size:]] *= spread.astype(np.float32)
    n_words = (dst_off + n_tok * width) // 2 + 3
    cache0 = rng.integers(0, 2 ** 32, n_words, dtype=np.uint64).astype(np.uint32)
    args = pack_args("IIIII", n_tok, width, src_off, src_stride, dst_off)
    out = gpu.run("kv_store_f16", [src, cache0.copy()], args, (1, 1, 1))
    cache = np.asarray(out[1], dtype=np.uint32)

    halves = cache.view(np.uint16)
    halves0 = cache0.view(np.uint16)
    span = slice(dst_off, dst_off + n_tok * width)
    got = halves[span]
    with np.errstate(over="ignore"):   # 1e6 and 65520 overflow to infinity, as they should
        want = src[idx].astype(np.float16).view(np.uint16)
    nan_in = np.isnan(src[idx])
    got_nan = np.isnan(got.view(np.float16))
    mism = int(np.sum((got != want) & ~nan_in)) + int(np.sum(nan_in != got_nan))
    normal = (np.abs(src[idx]) >= 2 ** -14) & (np.abs(src[idx]) < 65504.0)
    trunc_mism = int(np.sum(got[normal] != _f16_truncated(src[idx][normal])))
    print(f"kv_store_f16: {mism} of {got.size} f16 values differ from numpy float16 (bar: 0); "
          f"truncating rounding differs in {trunc_mism} of {int(normal.sum())}")
    outside = np.ones(halves.size, bool)
    outside[span] = False
    assert np.array_equal(halves[outside], halves0[outside]), "kv_store wrote outside its rows"
    assert mism == 0
    assert trunc_mism > normal.sum() // 10

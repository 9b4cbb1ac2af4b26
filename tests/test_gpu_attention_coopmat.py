"""The prefill attention on cooperative matrices (attention_prefill_cm_<d> stamps,
shaders/kernels/attention_coopmat.gk.h) against the NumPy reference
(dasllama.reference.llm.attention) in float64, over an f16 K/V cache laid out as the device's
(row p holds n_head_kv heads of head_dim f16 values), its rows padded with zeros to a multiple
of 16 as the host allocates them.

Cases: head sizes 64, 128 and 256 (one stamp each), grouped-query heads, queries that start
mid-cache (pos0 > 0) and at 0, partial 16-query tiles, sliding windows that cut inside a 16-key
granule and leave early queries of a tile without keys of a granule. q, the caches and the
output have offsets and strides; the output starts NaN and what the kernel must not write is
checked still NaN.

Bar: the queries and the softmax weights are rounded to float16 for the matrix products (unit
roundoff 2^-11 each), the keys and values are the f16 ones both sides use. Measured on an H200
over these cases: at most 3.1e-4 (printed); BAR = 1e-3 is a few times that (the smallest
control measured 0.066). Negative controls, each of
which must miss the bar tenfold: the queries one position earlier (causal bound off by one),
the window one wider, the wrong GQA mapping (h % n_head_kv instead of h / group).

The bidirectional stamp (attention_full_cm_64, GK_ACM_ALL_KEYS: Whisper's encoder) is checked
the same way with every query seeing every key, the cache's padding rows holding large finite
values that must get weight zero; its controls are the causal form and one key fewer.

Runs only on a device with cooperative matrices of the shape the stamps use (lavapipe has none:
the tests skip there, also under CI=true, a true unavailability).
"""

import zlib

import numpy as np
import pytest

from gpu_helpers import ceil_div, nan_filled, open_coopmat_gpu, pack_args, rel_l2
from test_gpu_attention import _attend

BAR = 1e-3
GRANULE = 16      # query rows a workgroup holds and keys a granule reads
STAMPS = ("attention_prefill_cm_64", "attention_prefill_cm_128", "attention_prefill_cm_256",
          "attention_full_cm_64")


@pytest.fixture(scope="module")
def gpu():
    return open_coopmat_gpu(STAMPS)


CASES = {
    # name: (n_tok, n_head, n_head_kv, head_dim, pos0, window)
    "gqa3-d64": (37, 9, 3, 64, 150, 0),
    "from-zero-d64": (70, 4, 2, 64, 0, 0),
    "d128-gqa4": (33, 8, 2, 128, 21, 0),
    "d256-window": (40, 4, 1, 256, 130, 24),
    "d256-from-zero-window": (75, 4, 1, 256, 0, 37),
    "d64-window-granule": (50, 4, 2, 64, 300, 120),
}


@pytest.mark.parametrize("case", list(CASES))
def test_attention_coopmat_matches_reference(gpu, case):
    n_tok, n_head, n_head_kv, D, pos0, window = CASES[case]
    rng = np.random.default_rng(zlib.crc32(f"attention coopmat {case}".encode()))
    P = pos0 + n_tok
    rows = ceil_div(P, GRANULE) * GRANULE       # as the host allocates the caches
    scale = 1.0 / np.sqrt(D)
    group = n_head // n_head_kv

    q_off, q_stride = 3, n_head * D + 5
    q = rng.standard_normal(q_off + n_tok * q_stride + 2).astype(np.float32)
    k16 = (1.5 * rng.standard_normal((P, n_head_kv, D))).astype(np.float16)
    v16 = rng.standard_normal((P, n_head_kv, D)).astype(np.float16)
    k_off, v_off = 8, 16                         # f16 elements, multiples of eight
    pad = np.zeros((rows - P) * n_head_kv * D, np.float16)
    kc = np.concatenate([np.zeros(k_off, np.float16), k16.reshape(-1), pad])
    vc = np.concatenate([np.zeros(v_off, np.float16), v16.reshape(-1), pad])
    out_off, out_stride = 5, n_head * D + 3
    n_out = out_off + n_tok * out_stride + 2

    base = pos0 - pos0 // 3
    args = pack_args("IIIIIIIIIIIIIf", n_tok, n_head, n_head_kv, D, D, pos0 - base, window,
                     q_off, q_stride, k_off, v_off, out_off, out_stride, scale)
    stamp = f"attention_prefill_cm_{D}"
    res = gpu.run(stamp, [q, kc.view(np.uint32), vc.view(np.uint32), nan_filled(n_out),
                          np.array([base], np.uint32)], args,
                  (n_head, ceil_div(n_tok, GRANULE), 1))
    o = np.asarray(res[3], dtype=np.float32)

    idx = out_off + np.arange(n_tok)[:, None] * out_stride + np.arange(n_head * D)[None, :]
    got = o[idx]
    q_idx = q_off + np.arange(n_tok)[:, None] * q_stride + np.arange(n_head * D)[None, :]
    qs = q[q_idx].reshape(n_tok, n_head, D).astype(np.float64)
    k64, v64 = k16.astype(np.float64), v16.astype(np.float64)
    pos = pos0 + np.arange(n_tok)

    ref = _attend(qs, k64, v64, pos, scale, window, lambda h: h // group)
    err = rel_l2(got, ref) if np.all(np.isfinite(got)) else float("inf")
    controls = {
        "gqa h % n_head_kv": _attend(qs, k64, v64, pos, scale, window, lambda h: h % n_head_kv),
        "positions - 1": _attend(qs, k64, v64, np.maximum(pos - 1, 0), scale, window,
                                 lambda h: h // group),
    }
    if window:
        controls["window + 1"] = _attend(qs, k64, v64, pos, scale, window + 1,
                                         lambda h: h // group)
    if n_head_kv == 1 or group == 1:
        del controls["gqa h % n_head_kv"]
    errs = {name: rel_l2(got, r) for name, r in controls.items()}
    print(f"{stamp} {case}: rel-l2 {err:.3g} (bar {BAR}); controls: "
          + ", ".join(f"{n} {e:.3g}" for n, e in errs.items()))

    mask = np.ones(n_out, bool)
    mask[idx.reshape(-1)] = False
    assert np.all(np.isnan(o[mask])), "attention wrote outside its outputs"
    assert err < BAR
    for name, e in errs.items():
        assert e > 10 * BAR, f"control {name!r} is within reach of the bar"


@pytest.mark.parametrize("n_tok,n_keys,n_head", [(1500, 1500, 6), (45, 75, 2), (16, 3, 1)])
def test_attention_full_cm_sees_every_key(gpu, n_tok, n_keys, n_head):
    D = 64
    rng = np.random.default_rng(zlib.crc32(f"attention full {n_tok} {n_keys}".encode()))
    rows = ceil_div(n_keys, GRANULE) * GRANULE
    scale = 1.0 / np.sqrt(D)
    q_stride = 3 * n_head * D                    # the queries of Whisper's q/k/v rows
    q = rng.standard_normal(n_tok * q_stride).astype(np.float32)
    k16 = (1.5 * rng.standard_normal((n_keys, n_head, D))).astype(np.float16)
    v16 = rng.standard_normal((n_keys, n_head, D)).astype(np.float16)
    # padding rows that would dominate every score if they were not cut off
    pad = np.full((rows - n_keys) * n_head * D, 30.0, np.float16)
    kc = np.concatenate([k16.reshape(-1), pad])
    vc = np.concatenate([v16.reshape(-1), pad])
    n_out = n_tok * n_head * D
    args = pack_args("IIIIIIIIIIIIIf", n_tok, n_head, n_head, D, D, n_keys - 1, 0, 0, q_stride,
                     0, 0, 0, n_head * D, scale)
    res = gpu.run("attention_full_cm_64", [q, kc.view(np.uint32), vc.view(np.uint32),
                                           nan_filled(n_out), np.array([0], np.uint32)], args,
                  (n_head, ceil_div(n_tok, GRANULE), 1))
    got = np.asarray(res[3], dtype=np.float32).reshape(n_tok, n_head * D)
    qs = q.reshape(n_tok, 3, n_head, D)[:, 0].astype(np.float64)
    k64, v64 = k16.astype(np.float64), v16.astype(np.float64)
    same = lambda h: h
    ref = _attend(qs, k64, v64, np.full(n_tok, n_keys - 1), scale, 0, same)
    err = rel_l2(got, ref) if np.all(np.isfinite(got)) else float("inf")
    controls = {"one key fewer": _attend(qs, k64, v64, np.full(n_tok, n_keys - 2), scale, 0,
                                         same)}
    if n_tok > 1 and n_keys >= n_tok:
        causal = n_keys - n_tok + np.arange(n_tok)
        controls["causal"] = _attend(qs, k64, v64, causal, scale, 0, same)
    errs = {name: rel_l2(got, r) for name, r in controls.items()}
    print(f"attention_full_cm_64 {n_tok} queries x {n_keys} keys: rel-l2 {err:.3g} (bar {BAR});"
          " controls: " + ", ".join(f"{n} {e:.3g}" for n, e in errs.items()))
    assert err < BAR
    for name, e in errs.items():
        assert e > 10 * BAR, f"control {name!r} is within reach of the bar"


def test_prefill_attention_pick():
    """Device-free: the coopmat attention for prompt calls (more than 8 rows) of head sizes with
    a stamp, with head_dim = head_dim_v, on devices with cooperative matrices, knob on."""
    from dasllama import _core
    built = {s["name"]: s for s in _core.gpu_stamps()}
    if not all(built.get(f"attention_prefill_cm_{d}", {}).get("spirv_words")
               for d in (64, 128, 256)):
        pytest.skip("this build has no SPIR-V for the attention_prefill_cm stamps")
    pick = _core.gpu_prefill_attention_coopmat
    try:
        assert pick(9, 64, 64, True) == "attention_prefill_cm_64"
        assert pick(512, 256, 256, True) == "attention_prefill_cm_256"
        assert pick(512, 128, 128, True) == "attention_prefill_cm_128"
        assert pick(8, 64, 64, True) == "", "decode rows keep attention_decode"
        assert pick(512, 64, 64, False) == "", "no cooperative matrices"
        assert pick(512, 80, 80, True) == "", "no stamp of that head size"
        assert pick(512, 64, 128, True) == "", "head_dim != head_dim_v"
        _core.tuning_set("vulkan.attention.prefill_coopmat", 0)
        assert pick(512, 64, 64, True) == ""
    finally:
        _core.tuning_reset("vulkan.attention.prefill_coopmat")


def test_attention_coopmat_spirv_passes_spirv_val(tmp_path):
    """The four stamps, stamped again here, pass spirv-val (no device needed)."""
    from test_gpu_matmul_coopmat import assert_spirv_val
    assert_spirv_val(tmp_path, list(STAMPS))

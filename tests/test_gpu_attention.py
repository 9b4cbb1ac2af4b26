"""The attention stamps (attention_decode; attention_prefill, _8, _4: 16, 8 or 4 query rows a
workgroup) against the NumPy reference
(dasllama.reference.llm.attention) in float64, over an f16 K/V cache laid out as the device's:
row p of a layer holds n_head_kv heads of head_dim f16 values, two to a 32-bit word.

Cases: grouped-query heads (2, 3 and 4 query heads per K/V head), head_dim 64, 80 (value pairs
that do not divide the workgroup) and 256 (gemma3), keys over several blocks of 128, queries
that start mid-cache (pos0 > 0), prefill tiles that are partial (n_tok not a multiple of 16),
sliding windows that cut inside a block, and blocks in which some queries of a tile see no key.
q, the caches and the output all have offsets and strides; the output starts NaN and what the
kernel must not write is checked still NaN.

Bar: BAR = 2e-6 (rel-l2): float32 dot products over at most 256 terms, the native exp and
float32 sums over at most ~430 keys (5.3e-7 measured on lavapipe); the K/V values are the f16
ones both sides use.
Negative controls, each of which must miss the bar tenfold: the reference with the window one
wider (windowed cases), with the wrong GQA mapping (h % n_head_kv instead of h / group), and
with the queries one position earlier (the causal bound off by one).
"""

import zlib

import numpy as np
import pytest

from gpu_helpers import ceil_div, gpu, nan_filled, pack_args, rel_l2  # noqa: F401
from dasllama.reference.llm import attention as reference_attention

BAR = 2e-6
# Query rows a prefill workgroup holds (GK_ATTN_PREFILL of shaders/kernels/attention.gk.h): stamp.
PREFILL_STAMPS = {16: "attention_prefill", 8: "attention_prefill_8", 4: "attention_prefill_4"}


def _attend(q, k, v, pos, scale, window, kv_of_head):
    """Reference attention with an explicit head -> kv head map (for the GQA control) and a
    causal bound that may be shifted (for the off-by-one control)."""
    T, H, D = q.shape
    out = np.empty((T, H, v.shape[2]))
    for h in range(H):
        g = kv_of_head(h)
        out[:, h] = reference_attention(q[:, h:h + 1], k[:, g:g + 1], v[:, g:g + 1], pos, scale,
                                        window).reshape(T, -1)
    return out.reshape(T, -1)


CASES = {
    # name: (prefill, n_tok, n_head, n_head_kv, head_dim, head_dim_v, pos0, window)
    "decode-gqa2-d64": (False, 1, 4, 2, 64, 64, 200, 0),
    "decode-3tok-d256-window": (False, 3, 4, 1, 256, 256, 300, 50),
    "decode-d80": (False, 2, 2, 2, 80, 80, 130, 0),
    "prefill-gqa3-d64": (True, 37, 6, 2, 64, 64, 150, 0),
    # Two key blocks per tile, the second past the first queries' windows (no key for them).
    "prefill-window120": (True, 40, 4, 2, 64, 64, 300, 120),
    "prefill-d256-window": (True, 40, 4, 1, 256, 256, 130, 24),
    "prefill-from-zero-d80": (True, 21, 2, 1, 80, 80, 0, 0),
}


RUNS = [(case, tile) for case, spec in CASES.items() for tile in (PREFILL_STAMPS if spec[0] else [1])]


@pytest.mark.parametrize("case,tile", RUNS, ids=[f"{c}-{t}" for c, t in RUNS])
def test_attention_matches_reference(gpu, case, tile):  # noqa: F811
    prefill, n_tok, n_head, n_head_kv, D, DV, pos0, window = CASES[case]
    rng = np.random.default_rng(zlib.crc32(f"attention {case}".encode()))
    P = pos0 + n_tok                       # positions in the cache, the new tokens' included
    scale = 1.0 / np.sqrt(D)
    group = n_head // n_head_kv

    q_off, q_stride = 3, n_head * D + 5
    q = rng.standard_normal(q_off + n_tok * q_stride + 2).astype(np.float32)
    # Keys and values as f16; the reference reads the very values the kernel decodes.
    k16 = (1.5 * rng.standard_normal((P, n_head_kv, D))).astype(np.float16)
    v16 = rng.standard_normal((P, n_head_kv, DV)).astype(np.float16)
    k_off, v_off = 6, 4                    # f16 elements, even
    kc = np.concatenate([np.zeros(k_off, np.float16), k16.reshape(-1), np.zeros(2, np.float16)])
    vc = np.concatenate([np.zeros(v_off, np.float16), v16.reshape(-1), np.zeros(4, np.float16)])
    out_off, out_stride = 5, n_head * DV + 3
    n_out = out_off + n_tok * out_stride + 2

    # The position is the base read from memory plus the argument: split it between the two.
    base = pos0 - pos0 // 3
    args = pack_args("IIIIIIIIIIIIIf", n_tok, n_head, n_head_kv, D, DV, pos0 - base, window,
                     q_off, q_stride, k_off, v_off, out_off, out_stride, scale)
    stamp = PREFILL_STAMPS[tile] if prefill else "attention_decode"
    res = gpu.run(stamp, [q, kc.view(np.uint32), vc.view(np.uint32), nan_filled(n_out),
                          np.array([base], np.uint32)], args, (n_head, ceil_div(n_tok, tile), 1))
    o = np.asarray(res[3], dtype=np.float32)

    idx = out_off + np.arange(n_tok)[:, None] * out_stride + np.arange(n_head * DV)[None, :]
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
        controls["window + 1"] = _attend(qs, k64, v64, pos, scale, window + 1, lambda h: h // group)
    if n_head_kv == 1 or group == 1:
        del controls["gqa h % n_head_kv"]   # every mapping is the same one
    errs = {name: rel_l2(got, r) for name, r in controls.items()}
    print(f"{stamp} {case}: rel-l2 {err:.3g} (bar {BAR}); controls: "
          + ", ".join(f"{n} {e:.3g}" for n, e in errs.items()))

    mask = np.ones(n_out, bool)
    mask[idx.reshape(-1)] = False
    assert np.all(np.isnan(o[mask])), "attention wrote outside its outputs"
    assert err < BAR
    for name, e in errs.items():
        assert e > 10 * BAR, f"control {name!r} is within reach of the bar"

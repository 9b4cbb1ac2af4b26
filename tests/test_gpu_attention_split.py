"""The split decode attention (attention_decode_split: each head's keys cut into gz chunks, one
workgroup a chunk; attention_merge: the chunks added) against the NumPy reference
(dasllama.reference.llm.attention) in float64, over an f16 K/V cache laid out as the device's.

Cases: grouped-query heads, head_dim 64 and 256, several decode rows, a sliding window, and
chunk counts of 1, 3, 8 and 40 (more chunks than some queries have keys: empty chunks). The
chunks buffer and the output start NaN; what the merge must not write is checked still NaN.
Bar: BAR = 2e-6 (rel-l2), as test_gpu_attention.py's: float32 sums, the native exp, and one
rescale a chunk (measured at most 3e-7 on lavapipe, printed). Negative controls, each of which
must miss the bar tenfold: the queries one position earlier, the window one wider, and the
merge told one chunk fewer than there are (where no chunk is empty).
"""

import zlib

import numpy as np
import pytest

from gpu_helpers import gpu, nan_filled, pack_args, rel_l2  # noqa: F401
from test_gpu_attention import _attend

BAR = 2e-6

CASES = {
    # name: (n_tok, n_head, n_head_kv, head_dim, pos0, window)
    "gqa3-d64": (1, 6, 2, 64, 150, 0),
    "rows3-d256-window": (3, 4, 1, 256, 300, 50),
    "rows2-d64-short": (2, 4, 4, 64, 5, 0),
}


@pytest.mark.parametrize("n_split", [1, 3, 8, 40])
@pytest.mark.parametrize("case", list(CASES))
def test_split_attention_matches_reference(gpu, case, n_split):  # noqa: F811
    n_tok, n_head, n_head_kv, D, pos0, window = CASES[case]
    rng = np.random.default_rng(zlib.crc32(f"attention split {case} {n_split}".encode()))
    P = pos0 + n_tok
    scale = 1.0 / np.sqrt(D)
    group = n_head // n_head_kv
    q_off, q_stride = 3, n_head * D + 5
    q = rng.standard_normal(q_off + n_tok * q_stride + 2).astype(np.float32)
    k16 = (1.5 * rng.standard_normal((P, n_head_kv, D))).astype(np.float16)
    v16 = rng.standard_normal((P, n_head_kv, D)).astype(np.float16)
    k_off, v_off = 6, 4
    kc = np.concatenate([np.zeros(k_off, np.float16), k16.reshape(-1), np.zeros(2, np.float16)])
    vc = np.concatenate([np.zeros(v_off, np.float16), v16.reshape(-1), np.zeros(4, np.float16)])
    out_off, out_stride = 5, n_head * D + 3
    n_out = out_off + n_tok * out_stride + 2
    n_parts = n_tok * n_head * n_split * (D + 2)

    base = pos0 - pos0 // 3
    args = pack_args("IIIIIIIIIIIIIf", n_tok, n_head, n_head_kv, D, D, pos0 - base, window,
                     q_off, q_stride, k_off, v_off, 0, 0, scale)
    arrays = [q, kc.view(np.uint32), vc.view(np.uint32), nan_filled(n_parts),
              np.array([base], np.uint32), nan_filled(n_out)]

    def merged(splits_read):
        margs = pack_args("IIIIII", n_tok, n_head, D, splits_read, out_off, out_stride)
        out = gpu.run_many(arrays, [
            ("attention_decode_split", [0, 1, 2, 3, 4], args, (n_head, n_tok, n_split)),
            ("attention_merge", [3, 5], margs, (n_head, n_tok, 1))])
        return np.asarray(out[5], dtype=np.float32)

    o = merged(n_split)
    idx = out_off + np.arange(n_tok)[:, None] * out_stride + np.arange(n_head * D)[None, :]
    got = o[idx]
    q_idx = q_off + np.arange(n_tok)[:, None] * q_stride + np.arange(n_head * D)[None, :]
    qs = q[q_idx].reshape(n_tok, n_head, D).astype(np.float64)
    k64, v64 = k16.astype(np.float64), v16.astype(np.float64)
    pos = pos0 + np.arange(n_tok)
    ref = _attend(qs, k64, v64, pos, scale, window, lambda h: h // group)
    err = rel_l2(got, ref) if np.all(np.isfinite(got)) else float("inf")
    controls = {"positions - 1": _attend(qs, k64, v64, np.maximum(pos - 1, 0), scale, window,
                                         lambda h: h // group)}
    if window:
        controls["window + 1"] = _attend(qs, k64, v64, pos, scale, window + 1,
                                         lambda h: h // group)
    errs = {name: rel_l2(got, r) for name, r in controls.items()}
    # Keys each query sees; the merge-count control bites only when no chunk is empty (empty
    # chunks add nothing wherever they are read).
    totals = [min(p + 1, window) if window else p + 1 for p in pos]
    no_empty = all((n_split - 1) * -(-t // n_split) < t for t in totals)
    if n_split > 1 and no_empty:
        short = merged(n_split - 1)[idx]
        # The merge told one chunk fewer: it drops a chunk and misreads the others' places.
        errs["one chunk fewer"] = rel_l2(short, ref) if np.all(np.isfinite(short)) else np.inf
    print(f"attention_decode_split {case} n_split={n_split}: rel-l2 {err:.3g} (bar {BAR}); "
          "controls: " + ", ".join(f"{n} {e:.3g}" for n, e in errs.items()))
    mask = np.ones(n_out, bool)
    mask[idx.reshape(-1)] = False
    assert np.all(np.isnan(o[mask])), "the merge wrote outside its outputs"
    assert err < BAR
    for name, e in errs.items():
        assert e > 10 * BAR, f"control {name!r} is within reach of the bar"

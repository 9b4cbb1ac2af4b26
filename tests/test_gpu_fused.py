"""The fused LLM stamps against NumPy: qkv_rope_store (bias, q/k RMSNorm, rope, K/V rows into the
f16 caches) and rmsnorm_add (a post-norm added to the residual).

The reference composes the separate steps in float64 from the same inputs (the rope table is
the exact cos/sin of float64 angles); the f16 cache rows are compared after float16 rounding of
the reference. Bars are a few times the measured error (printed); each test has a negative
control: positions off by one for the rope, the k-norm weight dropped, the row added twice.
"""

import numpy as np
import pytest

from gpu_helpers import gpu, nan_filled, pack_args, rel_l2  # noqa: F401  (gpu: fixture)

FUSED_BAR = 3e-7     # q rows: measured up to 7.5e-8 on lavapipe
CACHE_BAR = 8e-4     # f16 rows (rounding to f16 is ~2e-4 rel-l2): measured up to 2.3e-4
NORM_ADD_BAR = 2e-7  # measured 5.4e-8


def _table(n_rot, pos0, n_tok, base=10000.0):
    half = n_rot // 2
    freqs = base ** (-2.0 * np.arange(half) / n_rot)
    ang = (pos0 + np.arange(n_tok))[:, None] * freqs[None, :]
    tab = np.stack([np.cos(ang), np.sin(ang)], -1).astype(np.float32)   # [t][half][cos, sin]
    return tab, ang


def _rope(x, ang, n_rot, neox):
    x = x.copy()
    half = n_rot // 2
    c, s = np.cos(ang), np.sin(ang)
    a_idx = np.arange(half) if neox else 2 * np.arange(half)
    b_idx = a_idx + (half if neox else 1)
    xa, xb = x[..., a_idx].copy(), x[..., b_idx].copy()
    x[..., a_idx] = xa * c - xb * s
    x[..., b_idx] = xa * s + xb * c
    return x


def _reference(qkv, bias, qn, kn, n_head, n_kv, hd, n_rot, pos0, neox, flags, eps, shift=0):
    n_tok = qkv.shape[0]
    x = qkv.astype(np.float64) + (bias if flags & 2 else 0.0)
    q = x[:, :n_head * hd].reshape(n_tok, n_head, hd)
    k = x[:, n_head * hd:(n_head + n_kv) * hd].reshape(n_tok, n_kv, hd)
    v = x[:, (n_head + n_kv) * hd:].reshape(n_tok, n_kv, hd)
    if flags & 1:
        q = q / np.sqrt((q * q).mean(-1, keepdims=True) + eps) * qn
        k = k / np.sqrt((k * k).mean(-1, keepdims=True) + eps) * kn
    _, ang = _table(n_rot, pos0 + shift, n_tok)
    q = _rope(q, ang[:, None, :], n_rot, neox)
    k = _rope(k, ang[:, None, :], n_rot, neox)
    return q.reshape(n_tok, -1), k.reshape(n_tok, -1), v.reshape(n_tok, -1)


def _f16_rows(cache_words, start, n):
    return cache_words.view(np.float16)[start:start + n].astype(np.float64)


@pytest.mark.parametrize("neox,flags,hd,n_rot", [(False, 0, 64, 64), (True, 1, 64, 64),
                                                 (True, 3, 256, 256), (False, 2, 48, 32)])
def test_qkv_rope_store_matches_numpy(gpu, neox, flags, hd, n_rot):  # noqa: F811
    rng = np.random.default_rng(hd + flags)
    n_head, n_kv, n_tok, pos0, n_ctx, eps = 6, 2, 3, 5, 16, 1e-6
    width = (n_head + 2 * n_kv) * hd
    qkv = rng.standard_normal((n_tok, width)).astype(np.float32)
    bias = rng.standard_normal(width).astype(np.float32)
    qn = (1 + 0.1 * rng.standard_normal(hd)).astype(np.float32)
    kn = (1 + 0.1 * rng.standard_normal(hd)).astype(np.float32)
    tab, _ = _table(n_rot, pos0, n_tok)
    kv_dim = n_kv * hd
    kc = np.zeros(n_ctx * kv_dim // 2, np.uint32)
    vc = np.zeros(n_ctx * kv_dim // 2, np.uint32)
    # The cache row is the base read from memory plus the argument: split it between the two.
    base = 2
    args = pack_args("IIIIIIIIIf", n_head, n_kv, hd, n_rot, 0, width, pos0 - base, 0, flags, eps)
    out, _, kc_out, vc_out, _, _, _, _ = gpu.run(
        "qkv_rope_store_neox" if neox else "qkv_rope_store_norm",
        [qkv.copy(), tab.reshape(-1), kc, vc, qn, kn, bias, np.array([base], np.uint32)], args,
        (n_head + 2 * n_kv, n_tok, 1))
    q_ref, k_ref, v_ref = _reference(qkv, bias, qn, kn, n_head, n_kv, hd, n_rot, pos0, neox,
                                     flags, eps)
    q_err = rel_l2(out[:, :n_head * hd], q_ref)
    k_got = _f16_rows(kc_out, pos0 * kv_dim, n_tok * kv_dim).reshape(n_tok, kv_dim)
    v_got = _f16_rows(vc_out, pos0 * kv_dim, n_tok * kv_dim).reshape(n_tok, kv_dim)
    k_err, v_err = rel_l2(k_got, k_ref), rel_l2(v_got, v_ref)
    # Rows outside [pos0, pos0 + n_tok) stay untouched; k and v parts of qkv are not rewritten.
    assert not kc_out[:pos0 * kv_dim // 2].any() and not kc_out[(pos0 + n_tok) * kv_dim // 2:].any()
    assert np.array_equal(out[:, n_head * hd:], qkv[:, n_head * hd:])
    shifted, k_shift, _ = _reference(qkv, bias, qn, kn, n_head, n_kv, hd, n_rot, pos0, neox,
                                     flags, eps, shift=1)
    control = rel_l2(out[:, :n_head * hd], shifted)
    print(f"qkv_rope_store neox={neox} flags={flags} hd={hd}: q {q_err:.1e} k {k_err:.1e} "
          f"v {v_err:.1e}; positions off by one {control:.2e}")
    assert q_err < FUSED_BAR and k_err < CACHE_BAR and v_err < CACHE_BAR
    assert control > 10 * FUSED_BAR
    if flags & 1:
        _, k_plain, _ = _reference(qkv, bias, qn, np.ones_like(kn), n_head, n_kv, hd, n_rot,
                                   pos0, neox, flags, eps)
        assert rel_l2(k_got, k_plain) > 10 * CACHE_BAR


def test_rmsnorm_add_adds_the_normed_row(gpu):  # noqa: F811
    rng = np.random.default_rng(11)
    rows, n, eps = 5, 640, 1e-6
    x = rng.standard_normal(rows * n).astype(np.float32)
    w = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(rows * n).astype(np.float32)
    args = pack_args("IIIIIf", n, rows, 0, 0, 0, eps)
    _, _, got = gpu.run("rmsnorm_add", [x, w, y.copy()], args, (rows, 1, 1))
    xr = x.reshape(rows, n).astype(np.float64)
    normed = xr / np.sqrt((xr * xr).mean(1, keepdims=True) + eps) * w
    want = y.reshape(rows, n) + normed
    err = rel_l2(got.reshape(rows, n), want)
    control = rel_l2(got.reshape(rows, n), want + normed)
    print(f"rmsnorm_add: {err:.1e}; added twice {control:.1e}")
    assert err < NORM_ADD_BAR
    assert control > 10 * NORM_ADD_BAR

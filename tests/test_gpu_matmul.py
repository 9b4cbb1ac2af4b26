"""The prefill-time weight product (matmul_<fmt> stamps, the portable tiled path) against NumPy
in float64.

Weights are random normals quantized by the C++ quantizer and decoded by the NumPy reference,
whose decode the kernels reproduce exactly, so the only difference is the f32 summation order
(one running fused sum per output).

Bar: BAR = 2e-6 (rel-l2) over at most 768 terms of mixed sign; measured at most 6.4e-7 on
lavapipe and 5.5e-7 on an H200 (printed). Negative control: the same output against the weights
with each row's last block dropped must miss the bar at least tenfold (measured >= 0.08). Rows
are odd (67: a partial row tile), token counts 1, 17 and 70 (partial token tiles, more than one
tile), F32/F16 run an odd width and a multiple of 8, every buffer has an offset and a stride,
outputs start NaN (or a known residual when accumulating) and everything the kernel must not
write is checked unchanged.
"""

import zlib

import pytest

from gpu_helpers import (WEIGHT_FORMATS, ceil_div, gpu, product_cols,  # noqa: F401
                         run_weight_product)

# GK_MATMUL_TILE_ROWS and GK_MATMUL_TILE_TOKS of shaders/kernels/matmul.gk.h.
TILE_ROWS = 64
TILE_TOKS = 64
BAR = 2e-6
ROWS = 67


@pytest.mark.parametrize("accumulate", [False, True], ids=["store", "accumulate"])
@pytest.mark.parametrize("n_tok", [1, 17, 70])
@pytest.mark.parametrize("fmt", WEIGHT_FORMATS)
def test_matmul_matches_numpy(gpu, fmt, n_tok, accumulate):  # noqa: F811
    groups = (ceil_div(ROWS, TILE_ROWS), ceil_div(n_tok, TILE_TOKS), 1)
    for cols in product_cols(fmt):
        seed = zlib.crc32(f"matmul {fmt} {cols} {n_tok} {accumulate}".encode())
        m = run_weight_product(gpu, f"matmul_{fmt.lower()}", fmt, ROWS, cols, n_tok, accumulate,
                               groups, seed)
        print(f"matmul {fmt} rows={ROWS} cols={cols} n_tok={n_tok} accumulate={accumulate}: "
              f"rel-l2 {m['err']:.3g}, last block dropped {m['err_drop']:.3g}")
        assert m["untouched_ok"], "the kernel wrote outside its outputs"
        assert m["err"] < BAR
        assert m["err_drop"] > 10 * BAR

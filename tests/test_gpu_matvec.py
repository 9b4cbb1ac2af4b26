"""The decode-time weight product (matvec_<fmt> and matvec_tall_<fmt> stamps) against NumPy in
float64.

Weights are random normals quantized by the C++ quantizer and decoded by the NumPy reference,
whose decode the kernels reproduce exactly, so the only difference is the f32 summation order
(fused sums of 16 per thread and unit, then subgroup and workgroup sums).

Bar: BAR = 5e-7 (rel-l2) over at most 768 terms of mixed sign; measured at most 1.3e-7 on
lavapipe and 1.1e-7 on an H200 (printed). Negative control: the same output against the weights
with each row's last block dropped must miss the bar at least tenfold (measured >= 0.08). Rows
are odd (67: the last workgroup is partial), F32/F16 run an odd width and a multiple of 8 (the
two load paths), every buffer has an offset and a stride, outputs start NaN (or a known residual
when accumulating) and everything the kernel must not write is checked unchanged.
"""

import zlib

import pytest

from gpu_helpers import (WEIGHT_FORMATS, ceil_div, gpu, product_cols,  # noqa: F401
                         run_weight_product)

MATVEC_ROWS = 4   # GK_MATVEC_ROWS of shaders/kernels/matvec.gk.h: rows per workgroup
TALL_ROWS = 64    # GK_MATVEC_TALL_ROWS: rows per workgroup of the matvec_tall_<fmt> stamps
CHUNK = 2048      # GK_MATVEC_CHUNK: the tall stamps take rows narrower than this
BAR = 5e-7
ROWS = 67


@pytest.mark.parametrize("accumulate", [False, True], ids=["store", "accumulate"])
@pytest.mark.parametrize("n_tok", [1, 3])
@pytest.mark.parametrize("fmt", WEIGHT_FORMATS)
@pytest.mark.parametrize("tall", [False, True], ids=["matvec", "tall"])
def test_matvec_matches_numpy(gpu, fmt, n_tok, accumulate, tall):  # noqa: F811
    stamp = f"matvec_{'tall_' if tall else ''}{fmt.lower()}"
    per_group = TALL_ROWS if tall else MATVEC_ROWS
    # The tall stamps serve narrow rows only (the host's rule: cols < CHUNK).
    for cols in [c for c in product_cols(fmt) if not tall or c < CHUNK]:
        seed = zlib.crc32(f"matvec {fmt} {cols} {n_tok} {accumulate}".encode())
        m = run_weight_product(gpu, stamp, fmt, ROWS, cols, n_tok, accumulate,
                               (ceil_div(ROWS, per_group), 1, 1), seed)
        print(f"{stamp} rows={ROWS} cols={cols} n_tok={n_tok} accumulate={accumulate}: "
              f"rel-l2 {m['err']:.3g}, last block dropped {m['err_drop']:.3g}")
        assert m["untouched_ok"], "the kernel wrote outside its outputs"
        assert m["err"] < BAR
        assert m["err_drop"] > 10 * BAR

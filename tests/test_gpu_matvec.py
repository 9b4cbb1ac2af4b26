"""The decode-time weight product (matvec_<fmt>, matvec_tall_<fmt> and the subgroup stamps
matvec_sub_<fmt>, matvec_sub2_<fmt>, matvec_sub4_<fmt>, matvec_split4_<fmt>) against NumPy in
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
SUB_ROWS = 4      # GK_MATVEC_SUB_ROWS: rows per workgroup of the matvec_sub_<fmt> stamps
SUB2_ROWS = 8     # GK_MATVEC_SUB2_ROWS: rows per workgroup of the matvec_sub2_<fmt> stamps
SUB4_ROWS = 16    # GK_MATVEC_SUB4_ROWS: rows per workgroup of the matvec_sub4_<fmt> stamps
SPLIT4_ROWS = 4   # GK_MATVEC_SPLIT4_ROWS: rows per workgroup of the matvec_split4_<fmt> stamps
# The block formats: the subgroup stamps exist for these only.
BLOCK_FORMATS = tuple(f for f in WEIGHT_FORMATS if f not in ("F32", "F16"))
CHUNK = 2048      # GK_MATVEC_CHUNK: the tall stamps take rows narrower than this
BAR = 5e-7
ROWS = 67


SUB_FORMS = ("sub", "sub2", "sub4", "split4")
FORMS = [(form, fmt) for form in ("matvec", "tall") + SUB_FORMS for fmt in WEIGHT_FORMATS
         if form not in SUB_FORMS or fmt in BLOCK_FORMATS]


@pytest.mark.parametrize("accumulate", [False, True], ids=["store", "accumulate"])
@pytest.mark.parametrize("n_tok", [1, 3])
@pytest.mark.parametrize("form,fmt", FORMS)
def test_matvec_matches_numpy(gpu, form, fmt, n_tok, accumulate):  # noqa: F811
    prefix = {"matvec": "matvec_", "tall": "matvec_tall_", "sub": "matvec_sub_",
              "sub2": "matvec_sub2_", "sub4": "matvec_sub4_", "split4": "matvec_split4_"}[form]
    stamp = prefix + fmt.lower()
    per_group = {"matvec": MATVEC_ROWS, "tall": TALL_ROWS, "sub": SUB_ROWS,
                 "sub2": SUB2_ROWS, "sub4": SUB4_ROWS, "split4": SPLIT4_ROWS}[form]
    # The tall stamps serve narrow rows only (the host's rule: cols < CHUNK).
    for cols in [c for c in product_cols(fmt) if form != "tall" or c < CHUNK]:
        seed = zlib.crc32(f"matvec {fmt} {cols} {n_tok} {accumulate}".encode())
        m = run_weight_product(gpu, stamp, fmt, ROWS, cols, n_tok, accumulate,
                               (ceil_div(ROWS, per_group), 1, 1), seed,
                               x_align=4 if form in SUB_FORMS else 1)
        print(f"{stamp} rows={ROWS} cols={cols} n_tok={n_tok} accumulate={accumulate}: "
              f"rel-l2 {m['err']:.3g}, last block dropped {m['err_drop']:.3g}")
        assert m["untouched_ok"], "the kernel wrote outside its outputs"
        assert m["err"] < BAR
        assert m["err_drop"] > 10 * BAR


@pytest.mark.parametrize("prefix", ["matvec_sub_", "matvec_sub2_", "matvec_sub4_",
                                    "matvec_split4_"])
@pytest.mark.parametrize("fmt", ["Q4_1", "Q6_K"])
def test_matvec_sub_strides_over_row_groups(gpu, fmt, prefix):  # noqa: F811
    """Fewer workgroups than row groups (the host caps a dispatch at 65535): each workgroup
    strides over the rest, so every row is still written once (outputs start NaN)."""
    cols = product_cols(fmt)[0]
    m = run_weight_product(gpu, prefix + fmt.lower(), fmt, ROWS, cols, 1, False,
                           (3, 1, 1), zlib.crc32(f"stride {fmt}".encode()), x_align=4)
    print(f"{prefix}{fmt.lower()} rows={ROWS} over 3 workgroups: rel-l2 {m['err']:.3g}")
    assert m["untouched_ok"], "the kernel wrote outside its outputs"
    assert m["err"] < BAR
    assert m["err_drop"] > 10 * BAR

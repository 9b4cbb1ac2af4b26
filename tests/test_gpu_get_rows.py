"""The embedding gather (get_rows_<fmt> stamps) against the NumPy reference decode.

Each output is one f32 product scale * w of an exactly decoded weight, so the kernel must match
the reference bit for bit (bar: exact; measured exact on lavapipe and on an H200). Negative
control: the same output against the rows of ids rotated by one must be off by a rel-l2 above
0.1. The table has odd row sizes where the format allows (rows starting off a word boundary),
ids repeat and start at an offset, the output at an offset; it starts NaN and everything outside
the gathered rows must stay NaN.
"""

import zlib

import numpy as np
import pytest

from gpu_helpers import (WEIGHT_FORMATS, as_words, block_elems, gpu, nan_filled,  # noqa: F401
                         pack_args, random_weights, rel_l2)

TABLE_ROWS = 11
IDS = [3, 0, 10, 3, 7]
IDS_OFF = 2
OUT_OFF = 5
SCALE = 0.75
NEG_BAR = 0.1


def _cols(fmt):
    # F32/F16: an odd width (a ragged last unit); blocks: three of them.
    return {16: 37, 32: 96, 256: 768}[block_elems(fmt)]


@pytest.mark.parametrize("fmt", WEIGHT_FORMATS)
def test_get_rows_matches_reference(gpu, fmt):  # noqa: F811
    cols = _cols(fmt)
    rng = np.random.default_rng(zlib.crc32(f"get_rows {fmt}".encode()))
    raw, dense = random_weights(fmt, TABLE_ROWS, cols, rng)
    ids = np.array([-1] * IDS_OFF + IDS + [-1], dtype=np.int32)   # -1: never read
    n_ids = len(IDS)
    n_out = OUT_OFF + n_ids * cols + 3
    args = pack_args("IIIIf", cols, n_ids, IDS_OFF, OUT_OFF, SCALE)
    out = gpu.run(f"get_rows_{fmt.lower()}", [as_words(raw), ids, nan_filled(n_out)], args,
                  (n_ids, 1, 1))
    got_all = np.asarray(out[2], dtype=np.float32)
    got = got_all[OUT_OFF:OUT_OFF + n_ids * cols].reshape(n_ids, cols)
    ref = (np.float32(SCALE) * dense.astype(np.float32))[IDS]
    wrong = (np.float32(SCALE) * dense.astype(np.float32))[np.roll(IDS, 1)]
    mism = int(np.sum(got != ref))
    err_wrong = rel_l2(got, wrong)
    print(f"get_rows {fmt} cols={cols}: {mism} of {got.size} values differ from the reference; "
          f"rotated ids: rel-l2 {err_wrong:.3g}")
    outside = np.concatenate([got_all[:OUT_OFF], got_all[OUT_OFF + n_ids * cols:]])
    assert np.all(np.isnan(outside)), "the kernel wrote outside its rows"
    assert mism == 0
    assert err_wrong > NEG_BAR

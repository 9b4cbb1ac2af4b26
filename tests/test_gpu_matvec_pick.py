"""The pick of the decode products' subgroup form (gpu::matvec_sub_family), device-free: the
knob vulkan.project.matvec_sub (0 staged, 1 one row a subgroup, 2 up to two), and under form 2
the four-row forms for wide rows: matvec_split4 (from a width, up to a row count) before
matvec_sub4 (from a width and a row count), each at the boundaries of its predicates; the
knob-reading form follows the knobs as set. Which stamps then serve an LLM's decode step is
tests/test_llm_vulkan_decode_forms.py."""

import pytest

from dasllama import _core

P = "vulkan.project."
KNOBS = ("matvec_sub", "matvec_sub4_min_cols", "matvec_sub4_min_rows", "matvec_split_min_cols",
         "matvec_split_max_rows")
PREFETCH_COLS_2 = 1024   # GK_MATVEC_SUB_PREFETCH_COLS_2: the widest rows two a subgroup take
OFF = 1 << 30            # the knobs' top value: a form turned off


def pick(rows, cols, form=2, sub4_cols=OFF, sub4_rows=1, split_cols=OFF, split_rows=OFF):
    return _core.gpu_matvec_sub_family(rows, cols, form, sub4_cols, sub4_rows, split_cols,
                                       split_rows)


@pytest.fixture
def knobs():
    yield
    for k in KNOBS:
        _core.tuning_reset(P + k)


def test_form_zero_and_one_ignore_the_shape():
    for rows, cols in ((64, 16), (2048, PREFETCH_COLS_2), (16384, 14336)):
        assert pick(rows, cols, form=0, sub4_cols=16, split_cols=16) == ""
        assert pick(rows, cols, form=1, sub4_cols=16, split_cols=16) == "matvec_sub_"


def test_two_rows_up_to_the_prefetch_width_then_one():
    assert pick(576, PREFETCH_COLS_2) == "matvec_sub2_"
    assert pick(576, PREFETCH_COLS_2 + 1) == "matvec_sub_"
    assert pick(4096, 8192) == "matvec_sub_"


def test_sub4_by_width_and_rows():
    assert pick(2048, 2047, sub4_cols=2048) == "matvec_sub_"
    assert pick(2048, 2048, sub4_cols=2048) == "matvec_sub4_"
    assert pick(2047, 2048, sub4_cols=2048, sub4_rows=2048) == "matvec_sub_"
    assert pick(2048, 2048, sub4_cols=2048, sub4_rows=2048) == "matvec_sub4_"
    assert pick(640, 640, sub4_cols=16) == "matvec_sub4_"      # narrow rows too, when asked


def test_split4_by_width_and_rows_before_sub4():
    assert pick(640, 2047, split_cols=2048) == "matvec_sub_"
    assert pick(640, 2048, split_cols=2048) == "matvec_split4_"
    assert pick(4097, 2048, split_cols=2048, split_rows=4096) == "matvec_sub_"
    assert pick(4096, 2048, split_cols=2048, split_rows=4096) == "matvec_split4_"
    both = dict(sub4_cols=1025, sub4_rows=1, split_cols=1025)
    assert pick(16384, 2048, **both) == "matvec_split4_"
    assert pick(16384, 2048, split_rows=8192, **both) == "matvec_sub4_"


def test_the_knob_form_reads_the_knobs(knobs):
    now = _core.gpu_matvec_sub_family_now
    defaults = {k: _core.tuning_get(P + k) for k in KNOBS}
    want = pick(640, 2048, defaults["matvec_sub"], defaults["matvec_sub4_min_cols"],
                defaults["matvec_sub4_min_rows"], defaults["matvec_split_min_cols"],
                defaults["matvec_split_max_rows"])
    assert now(640, 2048) == want
    _core.tuning_set(P + "matvec_split_min_cols", OFF)
    _core.tuning_set(P + "matvec_sub4_min_cols", OFF)
    assert now(640, 2048) == "matvec_sub_" and now(640, 640) == "matvec_sub2_"
    _core.tuning_set(P + "matvec_split_min_cols", 512)
    assert now(640, 640) == "matvec_split4_" and now(640, 511) == "matvec_sub2_"
    _core.tuning_set(P + "matvec_sub", 0)
    assert now(640, 640) == ""
    with pytest.raises(ValueError, match="matvec_split_min_cols"):
        _core.tuning_set(P + "matvec_split_min_cols", 8)

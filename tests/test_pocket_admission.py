"""The admission rules of the Pocket TTS GPU seats (csrc/tts/pocket/gpu_admission.h): pure
functions of the config's shapes and the call's sizes, checked here without a model or a
device. '' means the kernels cover the call; anything else names the limit, and the seat
declines with `shape` (the CPU chain serves the call)."""

from __future__ import annotations

import pytest

from dasllama import _core

ENGLISH = {}  # the binding's defaults are the English model's shapes


def unfit(seat, n_past, rows, capacity=0, **shape):
    return _core.pocket_gpu_unfit(seat, {**ENGLISH, **shape}, n_past, rows, capacity)


def test_english_model_fits_every_seat():
    assert unfit("prompt", 0, 50, 400) == ""
    assert unfit("prompt", 120, 50, 400) == ""
    assert unfit("frames", 170, 8, 400) == ""
    assert unfit("codec", 0, 1) == ""
    assert unfit("codec", 3000, 8) == ""   # the window bounds the keys, not the positions


def test_rows_within_the_slot():
    assert unfit("prompt", 350, 50, 400) == ""
    assert "exceed the slot's 400" in unfit("prompt", 351, 50, 400)
    assert "exceed the slot's 400" in unfit("frames", 395, 8, 400)
    assert "rows" in unfit("prompt", 0, 0, 400)


def test_head_size():
    assert unfit("frames", 0, 8, 64, lm_head_dim=128, lm_num_heads=8) == ""
    assert "head_dim 192" in unfit("frames", 0, 8, 64, lm_head_dim=192)
    assert "head_dim 63" in unfit("prompt", 0, 8, 64, lm_head_dim=63)
    assert "kv heads" in unfit("prompt", 0, 8, 64, lm_num_heads=16, lm_num_kv_heads=5)
    assert "head_dim 256" in unfit("codec", 0, 4, dec_head_dim=256)


def test_attention_key_limit():
    # 4096 keys per query at most; a window bounds them however long the cache is.
    assert unfit("prompt", 4000, 96, 5000) == ""
    assert "4097 keys" in unfit("prompt", 4000, 97, 5000)
    assert unfit("frames", 9000, 8, 10000, lm_context=250) == ""
    assert "keys" in unfit("codec", 0, 8, dec_context=5000, upsample_stride=600)


def test_flow_types():
    assert unfit("frames", 0, 8, 64, flow_type="flow_matching") == ""
    for kind in ("drifting", "pointwise"):
        assert "flow head" in unfit("frames", 0, 8, 64, flow_type=kind)


def test_codec_widths_on_the_lattice():
    # Every convolution must be handed at least kernel - 1 rows (its history lives in them).
    assert unfit("codec", 0, 1, upsample_stride=1, kernel_size=2) == ""
    assert "first convolution" in unfit("codec", 0, 1, upsample_stride=1, kernel_size=7)
    assert unfit("codec", 0, 6, upsample_stride=1, kernel_size=7) == ""
    assert "dilated" in unfit("codec", 0, 1, n_residual_layers=2, dilation_base=2)
    assert unfit("codec", 0, 1, n_residual_layers=2, dilation_base=1) == ""
    assert "ratio 0" in unfit("codec", 0, 1, ratios=[6, 0, 4])
    assert "last convolution" in unfit("codec", 0, 1, upsample_stride=1, kernel_size=1,
                                       residual_kernel_size=1, ratios=[1], last_kernel_size=3)


def test_unknown_seat():
    with pytest.raises(ValueError, match="no seat 'decode'"):
        unfit("decode", 0, 1)

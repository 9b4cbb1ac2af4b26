"""Two decode knobs of the Vulkan LLM.

vulkan.llm.decode_glu_pass: one-token decode on the GPU forms the gated FFN activation in a
pass of its own (eltwise_glu_silu / eltwise_glu_gelu over the gate half) and the down projection
reads it plain, instead of every subgroup of the down projection forming it again. The pick is a
pure function (one-token calls only, knob on); a decode step gives the same logits either way
to rounding (the separate pass rounds as the input stage does; the down projection then takes
another matrix-vector form), for SiLU (llama) and GELU (gemma3) models; negative control: the
step of another token. Bar: measured 2.1e-7 on lavapipe and up to 8.7e-6 on an H200 (printed),
where the subgroup matrix-vector stamps of the two forms round their sums differently (their
forms differ by 2e-5 there in test_gpu_tuning.py's comparison); GLU_BAR = 5e-5.

vulkan.attention.decode_split: each head's decode attention in key chunks (attention_decode_split
and attention_merge, tested against NumPy in test_gpu_attention_split.py); the pick by
workgroups at its boundaries, and a decode step split and unsplit to rounding."""

from __future__ import annotations

import os

import numpy as np
import pytest

from dasllama import _core
from dasllama.testing import write_random_model

SPEC = os.environ.get("DASLLAMA_TEST_VULKAN", "vulkan:llvmpipe")
KNOB = "vulkan.llm.decode_glu_pass"
BAR = 2e-6
GLU_BAR = 5e-5


def test_decode_glu_pass_pick():
    try:
        assert _core.tuning_get(KNOB) == 1
        assert _core.gpu_decode_glu_pass(1)
        assert not _core.gpu_decode_glu_pass(2), "several rows' gate halves are not contiguous"
        assert not _core.gpu_decode_glu_pass(512)
        _core.tuning_set(KNOB, 0)
        assert not _core.gpu_decode_glu_pass(1)
        with pytest.raises(ValueError, match=KNOB):
            _core.tuning_set(KNOB, 2)
    finally:
        _core.tuning_reset(KNOB)


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_decode_glu_pass_gives_the_same_logits(tmp_path, arch):
    if not _core.gpu_devices():
        why = f"no Vulkan device ({_core.gpu_unavailable_reason()})"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    path = write_random_model(tmp_path / "m.gguf", arch, weight_type="Q8_0", seed=11)
    m = _core.LLMModel(str(path), n_ctx=64, n_threads=2, device=SPEC)
    try:
        m.set_precision("f32")
        prompt = [(5 * i + 3) % 500 for i in range(5)]

        def step(token, glu_pass):
            _core.tuning_set(KNOB, glu_pass)
            m.reset()
            m.eval(prompt)
            return np.asarray(m.eval([token]), np.float64)

        fused = step(17, 0)
        before = m.seat_stats()["decode"]["served"]
        separate = step(17, 1)
        assert m.seat_stats()["decode"]["served"] > before, "the GPU did not decode the step"
        other = step(18, 1)
        err = float(np.linalg.norm(separate - fused) / np.linalg.norm(fused))
        ctl = float(np.linalg.norm(other - fused) / np.linalg.norm(fused))
        print(f"{arch}: {KNOB}=1 vs 0: rel-l2 {err:.2e} (bar {GLU_BAR}); other token {ctl:.3g}")
        assert err < GLU_BAR
        assert ctl > 10 * GLU_BAR
    finally:
        m.close()
        _core.tuning_reset(KNOB)


SPLIT = "vulkan.attention.decode_split"


def test_decode_attention_split_pick():
    """By default 8 chunks where heads x rows make fewer than 8 workgroups (Gemma-3's 4 heads
    at one row: 4), none from 8 (SmolLM2's 9 heads; 4 heads at 2 rows); from 1024 cached keys
    at least the power of two of chunks that leaves at most 256 keys each (at most 64); the knob
    forces."""
    pick = _core.gpu_decode_attention_splits
    try:
        assert _core.tuning_get(SPLIT) == 0
        assert pick(1, 4) == 8
        assert pick(1, 7) == 8
        assert pick(1, 8) == 0
        assert pick(2, 4) == 0
        assert pick(1, 9) == 0
        assert pick(9, 1) == 0, "prompt rows keep the prefill attention"
        assert pick(1, 9, 1023) == 0 and pick(1, 9, 1024) == 4 and pick(1, 9, 1025) == 8
        assert pick(1, 9, 4096) == 16 and pick(1, 9, 4097) == 32
        assert pick(1, 4, 1024) == 8 and pick(1, 4, 4096) == 16
        assert pick(1, 9, 1 << 20) == 64
        assert pick(9, 4, 4096) == 0, "prompt rows keep the prefill attention"
        _core.tuning_set(SPLIT, 1)
        assert pick(1, 4) == 0 and pick(1, 9, 4096) == 0
        _core.tuning_set(SPLIT, 5)
        assert pick(1, 9) == 5 and pick(8, 32) == 5 and pick(1, 9, 4096) == 5
        assert pick(9, 4) == 0
        with pytest.raises(ValueError, match=SPLIT):
            _core.tuning_set(SPLIT, 65)
    finally:
        _core.tuning_reset(SPLIT)


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_decode_attention_split_gives_the_same_logits(tmp_path, arch):
    """vulkan.attention.decode_split: a decode step with each head's keys in 5 chunks gives the
    logits of the unsplit attention (knob 1) to rounding (BAR = 2e-6; measured 3.9e-7 on lavapipe
    and 4.0e-7 on an H200, printed);
    negative control: the step of another token."""
    if not _core.gpu_devices():
        why = f"no Vulkan device ({_core.gpu_unavailable_reason()})"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    path = write_random_model(tmp_path / "m.gguf", arch, weight_type="Q8_0", seed=13)
    m = _core.LLMModel(str(path), n_ctx=64, n_threads=2, device=SPEC)
    try:
        m.set_precision("f32")
        prompt = [(7 * i + 2) % 500 for i in range(20)]

        def step(token, splits):
            _core.tuning_set(SPLIT, splits)
            m.reset()
            m.eval(prompt)
            return np.asarray(m.eval([token]), np.float64)

        whole = step(17, 1)
        split = step(17, 5)
        other = step(18, 5)
        err = float(np.linalg.norm(split - whole) / np.linalg.norm(whole))
        ctl = float(np.linalg.norm(other - whole) / np.linalg.norm(whole))
        print(f"{arch}: {SPLIT}=5 vs 1: rel-l2 {err:.2e} (bar {BAR}); other token {ctl:.3g}")
        assert err < BAR
        assert ctl > 10 * BAR
    finally:
        m.close()
        _core.tuning_reset(SPLIT)


def test_a_deep_cache_splits_by_default_and_gives_the_unsplit_logits(tmp_path):
    """Past 1024 cached keys a decode step splits each head's attention by default (SmolLM2's
    9 heads included): its profile names attention_decode_split, its logits are the unsplit
    attention's (knob 1) to rounding (BAR), and a recording made before the cache crossed the
    line is made again (the split count is part of what a recording depends on). Negative
    control: the step of another token."""
    if not _core.gpu_devices():
        why = f"no Vulkan device ({_core.gpu_unavailable_reason()})"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    path = write_random_model(tmp_path / "m.gguf", "llama", weight_type="Q8_0", n_layer=1,
                              n_head=9, n_head_kv=3, n_embd=288, n_ff=128, seed=17)
    m = _core.LLMModel(str(path), n_ctx=1100, n_threads=2, device=SPEC)
    try:
        m.set_precision("f32")
        prompt = [(7 * i + 2) % 500 for i in range(1030)]

        def step(token, splits):
            _core.tuning_set(SPLIT, splits)
            m.set_profiling(True)             # from the start: only the position changes below
            m.reset()
            m.eval(prompt[:1000])
            m.eval([token])                   # recorded below the line: unsplit
            m.eval(prompt[1001:1030])
            out = np.asarray(m.eval([token]), np.float64)
            stamps = {s for s, _ in m.last_profile()}
            m.set_profiling(False)
            return out, stamps

        whole, whole_stamps = step(17, 1)
        auto, auto_stamps = step(17, 0)
        other, _ = step(18, 0)
        err = float(np.linalg.norm(auto - whole) / np.linalg.norm(whole))
        ctl = float(np.linalg.norm(other - whole) / np.linalg.norm(whole))
        print(f"1031 keys, 9 heads: auto split vs unsplit rel-l2 {err:.2e} (bar {BAR}); "
              f"other token {ctl:.3g}")
        assert "attention_decode_split" in auto_stamps and "attention_merge" in auto_stamps
        assert "attention_decode_split" not in whole_stamps
        assert err < BAR
        assert ctl > 10 * BAR
    finally:
        m.close()
        _core.tuning_reset(SPLIT)

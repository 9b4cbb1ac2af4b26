"""vulkan.llm.decode_glu_pass: one-token decode on the GPU forms the gated FFN activation in a
pass of its own (eltwise_glu_silu / eltwise_glu_gelu over the gate half) and the down projection
reads it plain, instead of every subgroup of the down projection forming it again. The pick is a
pure function (one-token calls only, knob on); a decode step gives the same logits either way
to rounding (the separate pass rounds as the input stage does; the down projection then takes
another matrix-vector form), for SiLU (llama) and GELU (gemma3) models; negative control: the
step of another token. Bar: measured 0 on lavapipe and 3e-7 on an H200 (printed); BAR = 2e-6,
as test_gpu_tuning.py's knobs."""

from __future__ import annotations

import os

import numpy as np
import pytest

from dasllama import _core
from dasllama.testing import write_random_model

SPEC = os.environ.get("DASLLAMA_TEST_VULKAN", "vulkan:llvmpipe")
KNOB = "vulkan.llm.decode_glu_pass"
BAR = 2e-6


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
        print(f"{arch}: {KNOB}=1 vs 0: rel-l2 {err:.2e} (bar {BAR}); other token {ctl:.3g}")
        assert err < BAR
        assert ctl > 10 * BAR
    finally:
        m.close()
        _core.tuning_reset(KNOB)

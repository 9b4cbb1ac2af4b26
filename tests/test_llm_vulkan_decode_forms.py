"""The LLM's decode products on each matrix-vector form the knob vulkan.project.matvec_sub
picks (0 the staged stamps, 1 one row a subgroup, 2 two rows), against the CPU chain.

The profile of the last decode step proves which stamps served it: the host's choice is what is
under test, so each knob value must reach the kernels it names. Bar and negative control as
tests/test_llm_vulkan.py (RANDOM_BAR, the prompt rotated by one token). Device:
$DASLLAMA_TEST_VULKAN (default lavapipe); with CI=true a missing device fails.
"""

import os

import numpy as np
import pytest

from dasllama import _core
from dasllama.testing import write_random_model
from parity import rel_l2

SPEC = os.environ.get("DASLLAMA_TEST_VULKAN", "vulkan:llvmpipe")
RANDOM_BAR = 2e-4    # as tests/test_llm_vulkan.py (measured up to 4.8e-5 there)
KNOB = "vulkan.project.matvec_sub"
# Stamp prefixes of the decode products each knob value must (and must not) use.
FORMS = {0: ("matvec_q", ("matvec_sub_", "matvec_sub2_")),
         1: ("matvec_sub_", ("matvec_sub2_",)),
         2: ("matvec_sub2_", ())}


@pytest.fixture(scope="module")
def device_spec():
    names = [d["name"] for d in _core.gpu_devices()]
    want = SPEC.split(":", 1)[1] if ":" in SPEC else ""
    if not names or (want and not want.isdigit() and not any(want.lower() in n.lower() for n in names)):
        why = f"no Vulkan device matches {SPEC!r} (devices: {names or 'none'})"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    return SPEC


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    # Rows of 128 (narrow: two rows a subgroup) and an FFN-down of 256 with a gated input.
    return write_random_model(tmp_path_factory.mktemp("m") / "llama.gguf", "llama",
                              weight_type="Q4_1", n_layer=2, n_embd=128, n_ff=256, seed=5)


def _decode(model, prompt, steps):
    model.reset()
    rows = [model.eval(prompt, all_logits=True)]
    tok = int(np.argmax(rows[-1][-1]))
    for _ in range(steps):
        rows.append(model.eval([tok]))
        tok = int(np.argmax(rows[-1][-1]))
    return np.concatenate(rows)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_decode_form_matches_the_cpu_chain(device_spec, model_path, form):
    prompt = [(11 * i + 2) % 500 for i in range(12)]
    cpu = _core.LLMModel(str(model_path), n_ctx=64, n_threads=2, device="cpu")
    cpu.set_precision("f32")
    want = _decode(cpu, prompt, 3)
    cpu.close()
    _core.tuning_set(KNOB, form)
    try:
        gpu = _core.LLMModel(str(model_path), n_ctx=64, n_threads=2, device=device_spec)
        gpu.set_precision("f32")
        gpu.set_profiling(True)
        got = _decode(gpu, prompt, 3)
        stamps = {s for s, _ in gpu.last_profile()}   # the last decode step
        gpu.reset()
        control = rel_l2(gpu.eval(prompt[1:] + prompt[:1], all_logits=True), want[:len(prompt)])
        gpu.close()
    finally:
        _core.tuning_reset(KNOB)
    used, banned = FORMS[form]
    err = rel_l2(got, want)
    print(f"matvec_sub={form}: rel-l2 {err:.2e} (bar {RANDOM_BAR}); rotated prompt "
          f"{control:.2e}; stamps {sorted(s for s in stamps if s.startswith('matvec'))}")
    assert any(s.startswith(used) for s in stamps), f"no {used}* stamp served the decode step"
    assert not any(s.startswith(b) for s in stamps for b in banned)
    assert np.isfinite(got).all()
    assert err < RANDOM_BAR
    assert control > 10 * RANDOM_BAR

"""The LLM's decode products on each matrix-vector form the knob vulkan.project.matvec_sub
picks (0 the staged stamps, 1 one row a subgroup, 2 two rows; with the widths and row counts
of the knobs vulkan.project.matvec_sub4_* or matvec_split_* at or below the matrices', four rows
a subgroup or four a workgroup split over its subgroups), against the CPU chain.

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
P = "vulkan.project."
WIDE = ("matvec_sub4_", "matvec_split4_")
OFF = 1 << 30        # a four-row form's width knob turned off
# Knob settings, then the stamp prefixes of the decode products they must (and must not) use;
# by default this model's products (at most 512 rows) take split4.
FORMS = {"staged": ({KNOB: 0}, "matvec_q", ("matvec_sub_", "matvec_sub2_") + WIDE),
         "one": ({KNOB: 1}, "matvec_sub_", ("matvec_sub2_",) + WIDE),
         "two": ({KNOB: 2, P + "matvec_split_min_cols": OFF}, "matvec_sub2_", WIDE),
         "sub4": ({P + "matvec_sub4_min_cols": 16, P + "matvec_sub4_min_rows": 1,
                   P + "matvec_split_min_cols": OFF},
                  "matvec_sub4_", ("matvec_sub2_", "matvec_sub_", "matvec_split4_")),
         "split4": ({}, "matvec_split4_", ("matvec_sub2_", "matvec_sub_", "matvec_sub4_"))}


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


@pytest.mark.parametrize("form", list(FORMS))
def test_decode_form_matches_the_cpu_chain(device_spec, model_path, form):
    prompt = [(11 * i + 2) % 500 for i in range(12)]
    cpu = _core.LLMModel(str(model_path), n_ctx=64, n_threads=2, device="cpu")
    cpu.set_precision("f32")
    want = _decode(cpu, prompt, 3)
    cpu.close()
    knobs, used, banned = FORMS[form]
    for name, value in knobs.items():
        _core.tuning_set(name, value)
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
        for name in knobs:
            _core.tuning_reset(name)
    err = rel_l2(got, want)
    print(f"{form}: rel-l2 {err:.2e} (bar {RANDOM_BAR}); rotated prompt "
          f"{control:.2e}; stamps {sorted(s for s in stamps if s.startswith('matvec'))}")
    assert any(s.startswith(used) for s in stamps), f"no {used}* stamp served the decode step"
    assert not any(s.startswith(b) for s in stamps for b in banned)
    assert np.isfinite(got).all()
    assert err < RANDOM_BAR
    assert control > 10 * RANDOM_BAR

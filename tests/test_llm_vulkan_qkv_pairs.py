"""q, k and v projections of which only two neighbours share a format (Gemma-3-270M: q and k
Q5_0, v Q8_0) run as two products on the GPU, the pair stacked in one matrix: logits against the
CPU chain (prefill and decode), and the decode step's profile shows one product fewer per layer
than three separate ones would make. Bar and negative control as tests/test_llm_vulkan.py
(RANDOM_BAR, the prompt rotated by one token). Device: $DASLLAMA_TEST_VULKAN (default lavapipe);
with CI=true a missing device fails."""

import os

import numpy as np
import pytest

from dasllama import _core
from dasllama.testing import write_random_model
from parity import rel_l2

SPEC = os.environ.get("DASLLAMA_TEST_VULKAN", "vulkan:llvmpipe")
RANDOM_BAR = 2e-4    # as tests/test_llm_vulkan.py (measured up to 4.8e-5 there)
N_LAYER = 2
# (base type, the odd one out, products a layer in a decode step: q/k/v as two, o, gate+up, down)
CASES = {"qk+v": ("Q5_0", {"*attn_v*": "Q8_0"}, 5),
         "q+kv": ("Q4_0", {"*attn_q.*": "Q8_0"}, 5),
         "q+k+v": ("Q4_0", {"*attn_q.*": "Q8_0", "*attn_v*": "Q5_0"}, 6)}


@pytest.fixture(scope="module")
def device_spec():
    names = [d["name"] for d in _core.gpu_devices()]
    want = SPEC.split(":", 1)[1] if ":" in SPEC else ""
    if not names or (want and not want.isdigit() and
                     not any(want.lower() in n.lower() for n in names)):
        why = f"no Vulkan device matches {SPEC!r} (devices: {names or 'none'})"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    return SPEC


def _decode(model, prompt, steps):
    model.reset()
    rows = [model.eval(prompt, all_logits=True)]
    tok = int(np.argmax(rows[-1][-1]))
    for _ in range(steps):
        rows.append(model.eval([tok]))
        tok = int(np.argmax(rows[-1][-1]))
    return np.concatenate(rows)


@pytest.mark.parametrize("case", list(CASES))
def test_neighbouring_pairs_match_the_cpu_chain(device_spec, tmp_path, case):
    base, types, per_layer = CASES[case]
    path = write_random_model(tmp_path / "m.gguf", "llama", weight_type=base, n_layer=N_LAYER,
                              tensor_types=types, seed=7)
    prompt = [(13 * i + 5) % 500 for i in range(12)]
    cpu = _core.LLMModel(str(path), n_ctx=64, n_threads=2, device="cpu")
    cpu.set_precision("f32")
    want = _decode(cpu, prompt, 3)
    cpu.close()
    gpu = _core.LLMModel(str(path), n_ctx=64, n_threads=2, device=device_spec)
    try:
        gpu.set_precision("f32")
        gpu.set_profiling(True)
        got = _decode(gpu, prompt, 3)
        products = [s for s, _ in gpu.last_profile() if s.startswith("matvec")]
        gpu.reset()
        control = rel_l2(gpu.eval(prompt[1:] + prompt[:1], all_logits=True), want[:len(prompt)])
    finally:
        gpu.close()
    err = rel_l2(got, want)
    print(f"{case}: rel-l2 {err:.2e} (bar {RANDOM_BAR}); rotated prompt {control:.2e}; "
          f"{len(products)} products in a decode step")
    assert len(products) == N_LAYER * per_layer + 1        # + the output head
    assert np.isfinite(got).all()
    assert err < RANDOM_BAR
    assert control > 10 * RANDOM_BAR

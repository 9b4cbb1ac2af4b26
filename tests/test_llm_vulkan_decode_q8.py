"""The LLM's one-token decode on the integer-dot products (quant_q8_1 + matvec_q8r<R>_<fmt>),
picked by the knobs vulkan.project.matvec_q8*, against the CPU chain in float32.

The profile of the last decode step proves the pick reaches the kernels: with the products on
(and their width knob at or below the model's rows) the step runs quant_q8_1 and a matvec_q8
stamp of the knob's row count for every K-quant product, and no gated-activation pass (the
quantizer forms the down projection's input); off, or under precision "f32" (the exact lane keeps
float inputs), it runs neither, and the pass. Bar: the 8-bit input rounding through the
model's two layers and its head: Q8_BAR, measured up to 1.6e-2 on lavapipe (printed). With the
products off, the bars of tests/test_llm_vulkan.py: RANDOM_BAR (2e-4) under "f32", FAST_BAR
(4e-3) under "fast", whose prompt rows run float16 cooperative-matrix products where the device
has them (the decode reads the cache they wrote: 9.1e-4 on an H200, 4e-6 on lavapipe, where fast
equals f32). Negative control: the prompt
rotated by one token must miss the bar tenfold. Device: $DASLLAMA_TEST_VULKAN (default lavapipe);
with CI=true a missing device fails.
"""

import os

import numpy as np
import pytest

from dasllama import _core
from dasllama.testing import write_random_model
from parity import rel_l2

SPEC = os.environ.get("DASLLAMA_TEST_VULKAN", "vulkan:llvmpipe")
RANDOM_BAR = 2e-4
FAST_BAR = 4e-3
Q8_BAR = 4e-2
P = "vulkan.project."


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


@pytest.fixture(scope="module", params=["Q4_K", "Q6_K"])
def model_path(request, tmp_path_factory):
    # 256-wide rows (one K-quant block), an FFN of 512: its down projection 512 wide.
    return request.param, write_random_model(
        tmp_path_factory.mktemp("m") / "llama.gguf", "llama", weight_type=request.param,
        n_layer=2, n_embd=256, head_dim=64, n_ff=512, seed=9)


def _decode(model, prompt, steps):
    model.reset()
    rows = [model.eval(prompt, all_logits=True)]
    tok = int(np.argmax(rows[-1][-1]))
    for _ in range(steps):
        rows.append(model.eval([tok]))
        tok = int(np.argmax(rows[-1][-1]))
    return np.concatenate(rows)


CASES = {"on_r2": ({P + "matvec_q8_min_cols": 256}, "fast", "matvec_q8r2_"),
         "on_r4": ({P + "matvec_q8_min_cols": 256, P + "matvec_q8_rows_log2": 2}, "fast",
                   "matvec_q8r4_"),
         "off": ({P + "matvec_q8_min_cols": 256, P + "matvec_q8": 0}, "fast", None),
         "f32": ({P + "matvec_q8_min_cols": 256}, "f32", None)}


@pytest.mark.parametrize("case", list(CASES))
def test_decode_q8_pick_reaches_the_kernels_and_matches_the_cpu(device_spec, model_path, case):
    fmt, path = model_path
    prompt = [(13 * i + 5) % 500 for i in range(10)]
    cpu = _core.LLMModel(str(path), n_ctx=64, n_threads=2, device="cpu")
    cpu.set_precision("f32")
    want = _decode(cpu, prompt, 3)
    cpu.close()
    knobs, precision, used = CASES[case]
    for name, value in knobs.items():
        _core.tuning_set(name, value)
    try:
        gpu = _core.LLMModel(str(path), n_ctx=64, n_threads=2, device=device_spec)
        gpu.set_precision(precision)
        gpu.set_profiling(True)
        got = _decode(gpu, prompt, 3)
        stamps = [s for s, _ in gpu.last_profile()]   # the last decode step
        gpu.reset()
        control = rel_l2(gpu.eval(prompt[1:] + prompt[:1], all_logits=True), want[:len(prompt)])
        gpu.close()
    finally:
        for name in knobs:
            _core.tuning_reset(name)
    # The decode step's error alone: the prompt's rows run the tiled products.
    err = rel_l2(got[len(prompt):], want[len(prompt):])
    bar = Q8_BAR if used else FAST_BAR if precision == "fast" else RANDOM_BAR
    q8 = [s for s in stamps if s.startswith("matvec_q8") or s == "quant_q8_1"]
    print(f"{fmt} {case}: decode rel-l2 {err:.2e} (bar {bar}); rotated prompt {control:.2e}; "
          f"q8 dispatches {len(q8)}")
    if used:
        products = [s for s in stamps if s.startswith("matvec")]
        assert products and all(s.startswith(used) and s.endswith(fmt.lower()) for s in products)
        assert "quant_q8_1" in stamps
        # the quantizer forms the gated activation of the down projection's input itself
        assert not any(s.startswith("eltwise_glu") for s in stamps)
    else:
        assert not q8 and "eltwise_glu_silu" in stamps
    assert np.isfinite(got).all()
    assert err < bar
    assert control > 10 * bar

"""Shared fixtures. Real model files come from `dasllama pull smollm2 gemma3` (CI runs it);
without them the tests that need one skip, saying so, except under CI=true, where they fail."""

import json
import os
import signal
from pathlib import Path

# NumPy's BLAS threads busy-wait for cores; on small shared machines that makes the reference
# chain many times slower. Set before NumPy is first imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import pytest  # noqa: E402

# A shell without job control starts background commands with SIGINT ignored, and Python then
# installs no KeyboardInterrupt handler (nor do the commands the tests start, which inherit the
# disposition): the Ctrl-C tests need the default one, however the run was launched.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

import dasllama  # noqa: E402
from dasllama.errors import ModelNotFoundError


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def real_model():
    """real_model("smollm2") -> path of that packaged model file."""

    def get(name: str):
        try:
            return dasllama.models.find(name)
        except ModelNotFoundError as e:
            if _in_ci():
                pytest.fail(f"CI needs the real model {name!r}: {e}")
            pytest.skip(f"real model {name!r} is not here ({e})")

    return get


@pytest.fixture(scope="session")
def llama_cpp_run():
    """llama_cpp_run("SmolLM2") -> the recorded llama.cpp run whose file name holds that
    text (tests/fixtures/llm/*SmolLM2*.json), as a dict; skips when there is none."""
    folder = Path(__file__).parent / "fixtures" / "llm"

    def get(name: str):
        hits = sorted(folder.glob(f"*{name}*.json")) if folder.is_dir() else []
        if not hits:
            pytest.skip(f"no llama.cpp fixture for {name}")
        return json.loads(hits[0].read_text())

    return get

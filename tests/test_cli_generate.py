"""`dasllama generate` and `dasllama chat`, run as a user runs them (subprocesses), on a
random-weight model and on the real SmolLM2 against llama.cpp's greedy continuation."""

import os
import re
import signal
import subprocess
import sys

import pytest

import dasllama
from dasllama import _core
from dasllama.testing.random_gguf import write_random_model
from parity import LLAMA_CPP_NOISE_BOUND

pytestmark = pytest.mark.skipif(not hasattr(_core, "LLMModel"), reason="no _core.LLMModel")
STATS = re.compile(r"^prompt: (\d+) tokens( \(\d+ cached\))?, [\d.]+ tok/s; "
                   r"generation: (\d+) tokens, [\d.]+ tok/s$")


def cli(*args, stdin=None, prelude=""):
    """Runs the command line; stdout comes back as text decoded without newline translation
    (random models print carriage returns)."""
    code = f"{prelude}\nimport sys\nfrom dasllama.cli import main\nsys.exit(main(sys.argv[1:]))"
    out = subprocess.run([sys.executable, "-c", code, *args], input=stdin, capture_output=True,
                         timeout=300, env={**os.environ, "PYTHONIOENCODING": "utf-8"})
    return out.returncode, out.stdout.decode("utf-8"), out.stderr.decode("utf-8")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return write_random_model(tmp_path_factory.mktemp("cli") / "llama.gguf", "llama", n_ctx=256,
                              chat_template=True)


def test_generate_streams_what_the_api_generates(model):
    rc, out, err = cli("generate", "-m", str(model), "hello world", "--temperature", "0",
                       "--max-tokens", "12", "--ctx", "256", "--threads", "1")
    assert rc == 0, err
    with dasllama.LLM(model, n_ctx=256) as llm:
        want = llm.generate("hello world", temperature=0, max_tokens=12)
        n_prompt = len(llm.tokenize("hello world"))
    assert out == want + "\n"
    last = err.strip().splitlines()[-1]
    m = STATS.match(last)
    assert m, last
    assert int(m.group(1)) == n_prompt and int(m.group(3)) == 12


def test_generate_sampling_options_and_stop(model):
    args = ["generate", "-m", str(model), "hello", "--max-tokens", "20", "--seed", "5",
            "--temperature", "0.9", "--top-k", "20", "--top-p", "0.9"]
    rc, first, _ = cli(*args)
    rc2, again, _ = cli(*args)
    assert rc == rc2 == 0 and first == again
    with dasllama.LLM(model) as llm:
        want = llm.generate("hello", max_tokens=20, seed=5, temperature=0.9, top_k=20, top_p=0.9)
    assert first == want + "\n"
    cut = next(want[i:i + 2] for i in range(3, len(want) - 1) if want[i:i + 2].isalnum())
    rc, out, _ = cli(*args, "--stop", cut, "--stop", "@@never@@")
    assert rc == 0 and out == want[:want.index(cut)] + "\n"


def test_generate_errors_are_one_line(model):
    rc, out, err = cli("generate", "-m", str(model), "hi", "--temperature", "-1")
    assert rc == 1 and err.startswith("dasllama: error: temperature must be") and "Traceback" not in err
    rc, out, err = cli("generate", "-m", str(model), "")
    assert rc == 1 and "prompt is empty" in err
    rc, out, err = cli("generate", "-m", str(model), "hello " * 100, "--ctx", "16")
    assert rc == 1 and re.search(r"the prompt has \d+ tokens but the context holds n_ctx=16", err)


def test_chat_repl_keeps_the_conversation(model):
    rc, out, err = cli("chat", "-m", str(model), "--temperature", "0", "--max-tokens", "6",
                       "--stats", stdin=b"hi\n\nmore\n/exit\nnot read\n")
    assert rc == 0, err
    msgs = [{"role": "user", "content": "hi"}]
    with dasllama.LLM(model) as llm:
        first = llm.chat(msgs, temperature=0, max_tokens=6)
        msgs += [{"role": "assistant", "content": first}, {"role": "user", "content": "more"}]
        second = llm.chat(msgs, temperature=0, max_tokens=6)
    assert out == first + "\n" + second + "\n"
    lines = [l for l in err.splitlines() if STATS.match(l)]
    assert len(lines) == 2 and "cached" in lines[1]   # the second turn reused the first
    rc, out, _ = cli("chat", "-m", str(model), "--max-tokens", "2", stdin=b"")   # EOF at once
    assert rc == 0 and out == ""


def test_ctrl_c_stops_generation_cleanly(model):
    code = "import sys\nfrom dasllama.cli import main\nsys.exit(main(sys.argv[1:]))"
    p = subprocess.Popen([sys.executable, "-c", code, "generate", "-m", str(model), "hello",
                          "--temperature", "0", "--max-tokens", "4000", "--ctx", "4096"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.read(1)   # generation has started
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    err = err.decode()
    assert p.returncode == 130, err
    assert "Traceback" not in err and STATS.match(err.strip().splitlines()[-1])


def test_smollm2_greedy_through_the_cli(real_model, llama_cpp_run):
    real_model("smollm2")   # skips when absent; the command itself uses the default model
    case = llama_cpp_run("SmolLM2")["greedy"][0]
    n = 16
    rc, out, err = cli("generate", case["prompt"], "--temperature", "0", "--max-tokens", str(n),
                       "--ctx", "512")
    assert rc == 0, err
    with dasllama.LLM("smollm2", n_ctx=512) as llm:
        api = llm.generate(case["prompt"], max_tokens=n, temperature=0)
        # llama.cpp's tokens up to its first step the engines may legitimately part at (the
        # margin bar of test_llm_greedy: their 8-bit activations round differently)
        decided = next((i for i, m in enumerate(case["margins"]) if m < LLAMA_CPP_NOISE_BOUND),
                       len(case["margins"]))
        theirs = llm.detokenize(case["greedy_ids"][:decided])
    print(f"{n} tokens: {out!r}")
    assert out == str(api) + "\n"            # the command prints what the API generates
    assert decided >= 1 and out.startswith(theirs) and out.startswith(" Paris")
    rc, out, err = cli("chat", "--temperature", "0", "--max-tokens", "16", "--ctx", "512",
                       stdin=b"What is the capital of France?\n")
    assert rc == 0, err
    with dasllama.LLM("smollm2", n_ctx=512) as llm:
        reply = llm.chat([{"role": "user", "content": "What is the capital of France?"}],
                         temperature=0, max_tokens=16)
    assert reply.strip() and reply in out  # the REPL says what the API says

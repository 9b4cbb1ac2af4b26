"""The command line, run as a user would run it (a subprocess of the installed entry point)."""

import subprocess
import sys

from dasllama.testing.random_gguf import write_random_model


def run(*args, env=None):
    return subprocess.run([sys.executable, "-m", "dasllama.cli", *args], capture_output=True,
                          text=True, env=env, timeout=120)


def test_info_on_a_random_model(tmp_path):
    path = write_random_model(tmp_path / "m.gguf", "qwen3", weight_type="Q8_0", n_ctx=512)
    out = run("info", str(path))
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "architecture    qwen3" in text
    assert "context length  512" in text
    assert "byte-level BPE (gpt2), 512 tokens" in text
    rows = {line.split()[0]: line.split() for line in text.splitlines()[10:] if line.strip()}
    assert "Q8_0" in rows and "F32" in rows and "total" in rows
    import dasllama
    with dasllama.gguf.open(path) as f:
        n_q8 = sum(t.type == "Q8_0" for t in f.tensors.values())
        params = sum(t.n_elements for t in f.tensors.values())
    assert int(rows["Q8_0"][1]) == n_q8
    assert f"({params:,})" in text


def test_info_on_the_real_models(real_model):
    out = run("info", str(real_model("smollm2")))
    assert out.returncode == 0, out.stderr
    assert "architecture    llama" in out.stdout and "49152 tokens" in out.stdout
    assert "134.52M" in out.stdout
    out = run("info", str(real_model("gemma3")))
    assert "architecture    gemma3" in out.stdout and "SentencePiece" in out.stdout
    q4k = [line for line in out.stdout.splitlines() if line.startswith("Q4_K")]
    assert q4k and q4k[0].split()[1] == "27"


def test_errors_are_one_line_messages(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 16)
    out = run("info", str(bad))
    assert out.returncode == 1
    assert out.stderr.startswith("dasllama: error: ") and "Traceback" not in out.stderr
    assert "offset" in out.stderr
    out = run("info", "no-such-model")
    assert out.returncode == 1 and "neither a file nor a known model" in out.stderr
    out = run("pull", "llama-70b")
    assert out.returncode == 2 and "invalid choice" in out.stderr

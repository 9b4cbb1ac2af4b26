"""The references' GGUF reader (dasllama.reference.gguf_file: the gguf package plus the NumPy
dequantizers of dasllama.reference.quants) against dasllama's own (C++) reader, on random
models of every block format the writer makes and on the packaged SmolLM2: the same metadata,
the same tensor table and bit-identical float32 tensors. Two readers that share no code agree,
so a reference reading a file sees what the C++ chain sees."""

from __future__ import annotations

import numpy as np
import pytest

from requires import require

require("gguf")

from dasllama import gguf as dasllama_gguf  # noqa: E402
from dasllama.errors import GGUFError  # noqa: E402
from dasllama.reference import gguf_file  # noqa: E402
from dasllama.testing.random_gguf import write_random_model  # noqa: E402

FORMATS = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K")


def _same(path, names=None):
    ours, theirs = dasllama_gguf.open(path), gguf_file.open(path)
    assert ours.metadata == theirs.metadata
    assert {n: (tuple(t.shape), t.type) for n, t in ours.tensors.items()} == \
        {n: (t.shape, t.type) for n, t in theirs.tensors.items()}
    checked = 0
    for name in names or ours.tensors:
        assert np.array_equal(ours.tensor(name), theirs.tensor(name)), name
        checked += 1
    return checked, theirs


@pytest.mark.parametrize("fmt", FORMATS)
def test_random_model_reads_alike(tmp_path, fmt):
    # Rows of 256: the K-quants' block.
    path = write_random_model(tmp_path / f"{fmt}.gguf", "llama", weight_type=fmt, n_embd=256,
                              n_ff=512, n_ctx=64, seed=3)
    checked, theirs = _same(path)
    assert checked > 5
    assert fmt in {t.type for t in theirs.tensors.values()}
    # Negative control: a tensor read as another format's bytes does not decode alike.
    name = next(n for n, t in theirs.tensors.items() if t.type == fmt and len(t.shape) == 2)
    good = theirs.tensor(name)
    raw = theirs.raw(name).copy()
    raw[: max(1, raw.size // 4)] ^= 0x5A
    from dasllama.reference import quants
    with np.errstate(invalid="ignore", over="ignore"):   # flipped scale bytes may be NaN
        bad = quants.dequantize(fmt, raw, good.size).reshape(good.shape)
    assert not np.array_equal(bad, good)


def test_packaged_model_reads_alike(real_model):
    path = real_model("smollm2")
    checked, _ = _same(path, ["token_embd.weight", "blk.0.attn_q.weight", "blk.0.ffn_down.weight",
                              "blk.29.attn_norm.weight", "output_norm.weight"])
    assert checked == 5


def test_missing_tensor_and_bad_file_are_named(tmp_path):
    path = write_random_model(tmp_path / "m.gguf", "llama", n_ctx=64, seed=1)
    with gguf_file.open(path) as f, pytest.raises(GGUFError, match="'nope' is missing"):
        f.tensor("nope")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF" + b"\0" * 12)
    with pytest.raises(GGUFError, match="junk.gguf"):
        gguf_file.open(junk)

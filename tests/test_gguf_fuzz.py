"""Mutation fuzzing of the GGUF reader through the Python API, seeded with the real models'
headers: every mutant opens or raises GGUFError (never another exception, never a crash), and
a mutant that opens converts to Python values without error. The C++ side runs the same kind
of mutations under the sanitizers with an allocation count (tests/cpp/test_gguf_fuzz.cpp);
this one covers the bindings' conversions too.

The mutants are applied in place to one copy of each file (and undone), truncations are
zero-copy memoryview slices, so a 250 MB seed costs one read."""

import os

import numpy as np
import pytest

import dasllama
from dasllama.errors import GGUFError
from dasllama.testing.random_gguf import write_all_types_gguf

# Mutants per seed; the sum over both real headers is over 20,000 (the fuzz bar of the reader).
MUTANTS_PER_REAL_SEED = int(os.environ.get("DASLLAMA_PY_FUZZ_MUTANTS", "11000"))
INTERESTING = [0, 1, 2, 7, 8, 12, 13, 31, 32, 33, 255, 2**16 - 1, 2**32 - 1, 2**32,
               2**63 - 1, 2**63, 2**64 - 1]


def header_end(buf) -> int:
    with dasllama.gguf.open_buffer(buf) as f:
        return min(t.offset for t in f.tensors.values())


def fuzz(buf: bytearray, n: int, seed: int) -> tuple:
    rng = np.random.default_rng(seed)
    end = header_end(buf)
    view = memoryview(buf)
    opened = rejected = 0
    for i in range(n):
        kind = i % 3
        undo = None
        if kind == 0:  # bit flips in the header
            at = rng.integers(0, end, size=int(rng.integers(1, 9)))
            bits = (1 << rng.integers(0, 8, size=at.size)).astype(np.uint8)
            for a, b in zip(at, bits):
                buf[a] ^= int(b)
            undo = (at, bits)
            data = view
        elif kind == 1:  # truncation, mostly in the header
            cut = int(rng.integers(0, end + 1)) if rng.random() < 0.8 else int(rng.integers(0, len(buf)))
            data = view[:cut]
        else:  # an interesting 8-byte value at a random header position
            at = int(rng.integers(0, end - 8))
            saved = bytes(buf[at:at + 8])
            value = INTERESTING[int(rng.integers(len(INTERESTING)))]
            buf[at:at + 8] = value.to_bytes(8, "little")
            undo = (at, saved)
            data = view
        try:
            with dasllama.gguf.open_buffer(data) as f:
                f.metadata, f.tensors  # noqa: B018 - converts every value to Python
            opened += 1
        except GGUFError:
            rejected += 1
        finally:
            if kind == 0:
                for a, b in zip(*undo):
                    buf[a] ^= int(b)
            elif kind == 2:
                buf[undo[0]:undo[0] + 8] = undo[1]
    return opened, rejected


@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_fuzz_real_headers(real_model, name):
    buf = bytearray(real_model(name).read_bytes())
    original = bytes(buf[:header_end(buf)])
    opened, rejected = fuzz(buf, MUTANTS_PER_REAL_SEED, seed=len(name))
    print(f"{name}: {opened + rejected} mutants, {opened} opened, {rejected} rejected")
    assert opened + rejected == MUTANTS_PER_REAL_SEED
    assert rejected > MUTANTS_PER_REAL_SEED // 10  # the mutations do reach the checks
    assert bytes(buf[:len(original)]) == original  # every mutation was undone


def test_fuzz_all_types_file(tmp_path):
    buf = bytearray(write_all_types_gguf(tmp_path / "all.gguf").read_bytes())
    opened, rejected = fuzz(buf, 3000, seed=7)
    assert opened + rejected == 3000 and rejected > 300

"""Embedding lookups read the packed copy of the token embedding, not the model file's pages.

A matrix with an integer kernel is repacked at load and the file's pages are let go. A tied
embedding is also the logits' matrix, so it is packed; lookups that read rows from the mapped
file would fault its pages back in until the table sat in memory twice (16 MiB of SmolLM2's
28.7 MiB table after a serving run). The check: the resident bytes of the file's mapping
(/proc/self/smaps) grow by well under the table's size while every row of the vocabulary is
looked up (hidden states only: no logits product). Control: with F16 weights there is no packed copy (the float path reads the file),
and the same lookups make the mapping's resident bytes grow by most of the table, so the probe
does see pages faulted in by lookups. (That get_row's rows equal dequantize's, from either copy,
is tests/cpp/test_matmul.cpp's get_row_and_packing_equal_dequantize.)
"""

from __future__ import annotations

import os
import sys

import pytest

from dasllama import LLM
from dasllama.testing.random_gguf import write_random_model

N_VOCAB = 16384
N_EMBD = 256
PAGE = 4096

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="reads /proc/self/smaps (Linux only)")


def _mapping_rss(path: str) -> int:
    """Resident bytes of this process's mappings of `path`."""
    real = os.path.realpath(path)
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            fields = line.split()
            if fields and "-" in fields[0] and len(fields) >= 5 and ":" in fields[3]:
                inside = len(fields) >= 6 and os.path.realpath(fields[5]) == real
            elif inside and fields[0] == "Rss:":
                total += int(fields[1]) * 1024
    return total


def _grow_while_looking_up_every_row(path: str) -> tuple:
    with LLM(path, n_ctx=512, threads=1) as llm:
        before = _mapping_rss(path)
        assert before >= 0
        # hidden_states: the layers without the logits' product, which on the unpacked control
        # would read the whole table from the file by itself.
        for start in range(0, N_VOCAB, 256):
            llm.model.hidden_states(list(range(start, min(start + 256, N_VOCAB))))
        return before, _mapping_rss(path)


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    d = tmp_path_factory.mktemp("embd")
    kw = dict(n_vocab=N_VOCAB, n_embd=N_EMBD, n_head=4, n_head_kv=2, n_ff=256, n_layer=1,
              n_ctx=512, tied_output=True, seed=3)
    return (str(write_random_model(d / "q8.gguf", "llama", weight_type="Q8_0", **kw)),
            str(write_random_model(d / "f16.gguf", "llama", weight_type="F16", **kw)))


def test_lookups_leave_the_file_pages_of_a_packed_embedding_alone(paths):
    table = N_VOCAB * (N_EMBD // 32) * 34          # Q8_0: 34 bytes a block of 32
    before, after = _grow_while_looking_up_every_row(paths[0])
    print(f"Q8_0 table {table / 2**20:.1f} MiB: mapping resident {before / 2**20:.2f} -> "
          f"{after / 2**20:.2f} MiB")
    assert after - before < table // 8


def test_control_lookups_of_an_unpacked_embedding_fault_the_file_in(paths):
    table = N_VOCAB * N_EMBD * 2                   # F16
    before, after = _grow_while_looking_up_every_row(paths[1])
    print(f"F16 table {table / 2**20:.1f} MiB: mapping resident {before / 2**20:.2f} -> "
          f"{after / 2**20:.2f} MiB")
    assert after - before > table // 2

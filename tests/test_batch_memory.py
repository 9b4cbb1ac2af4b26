"""What the batching engine reports of its memory (issue 11's peak-RSS goal; peak RSS itself is
measured by `dasllama bench serve`, never asserted here):

- kv_pool_bytes equals the allocation formula slots x n_ctx x layers x kv heads x (K row + V
  row), a row of head_dim elements at the cache type's size (f16 2 bytes, f32 4, q8_0 34 bytes
  a block of 32), for each cache type and a model whose K and V widths differ; a formula with
  the wrong element size or the context split between slots would not match.
- scratch_bytes covers the step's logits (one row of n_vocab floats per sampling sequence) and
  ONE vocabulary-sized sampler scratch shared by every slot: with 4 slots sampling it is at
  least the logits plus one scratch and well under what a scratch per slot would take.
- forward_scratch_bytes is the model's own forward buffers (512 rows at most; the feed-forward's
  gate and up for 128 rows, the slice it runs in), not a second set: it is the same whatever
  the number of slots, and a model opened with fewer positions than slots still serves them
  all (the engine then holds a forward of its own).
"""

from __future__ import annotations

import pytest

from dasllama import LLM
from dasllama.batch import BatchEngine, Request, SamplingParams
from dasllama.testing.random_gguf import write_random_model

N_VOCAB = 8192
SHAPE = dict(n_embd=128, n_head=4, n_head_kv=2, n_ff=256, n_layer=3, n_vocab=N_VOCAB)
ELEMENT = {"f16": lambda d: 2 * d, "f32": lambda d: 4 * d, "q8_0": lambda d: 34 * (d // 32)}


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    p = tmp_path_factory.mktemp("mem") / "llama.gguf"
    write_random_model(p, "llama", weight_type="Q8_0", seed=2, **SHAPE)
    return str(p)


@pytest.fixture(scope="module")
def wide_v_path(tmp_path_factory):
    # qwen3 with head_dim 64 over n_embd 128 and 4 heads: q/k/v widths differ from n_embd.
    p = tmp_path_factory.mktemp("mem") / "qwen3.gguf"
    write_random_model(p, "qwen3", weight_type="Q8_0", seed=2, head_dim=64, **SHAPE)
    return str(p)


@pytest.mark.parametrize("kv_type", ["f16", "f32", "q8_0"])
@pytest.mark.parametrize("slots, n_ctx", [(1, 64), (3, 200), (8, 96)])
def test_kv_pool_bytes_match_the_allocation_formula(path, kv_type, slots, n_ctx):
    with LLM(path, n_ctx=128, threads=1, kv_type=kv_type) as llm:
        engine = BatchEngine(llm, slots=slots, n_ctx=n_ctx)
        head_dim = SHAPE["n_embd"] // SHAPE["n_head"]
        row = ELEMENT[kv_type](head_dim)
        expected = slots * n_ctx * SHAPE["n_layer"] * SHAPE["n_head_kv"] * (row + row)
        assert engine.kv_pool_bytes == expected
        assert engine.stats["kv_pool_bytes"] == expected


def test_kv_pool_bytes_with_a_head_dim_of_its_own(wide_v_path):
    with LLM(wide_v_path, n_ctx=128, threads=1, kv_type="f16") as llm:
        engine = BatchEngine(llm, slots=2, n_ctx=100)
        assert engine.kv_pool_bytes == 2 * 100 * SHAPE["n_layer"] * SHAPE["n_head_kv"] * 2 * (2 * 64)
        # negative control: the n_embd / n_head head width gives another figure
        assert engine.kv_pool_bytes != 2 * 100 * SHAPE["n_layer"] * SHAPE["n_head_kv"] * 2 * (2 * 32)


def test_scratch_holds_the_logits_and_one_shared_sampler_scratch(path):
    with LLM(path, n_ctx=256, threads=1) as llm:
        engine = BatchEngine(llm, slots=4, n_ctx=256)
        before = engine.stats["scratch_bytes"]
        assert before < N_VOCAB      # nothing vocabulary-sized before the first step
        for i in range(4):
            engine.submit(Request(prompt=llm.tokenize(f"Prompt number {i}"), max_tokens=6,
                                  sampling=SamplingParams(temperature=0.7, top_k=0, top_p=1.0,
                                                          min_p=0.0, seed=i)))
        engine.run()
        scratch = engine.stats["scratch_bytes"]
        logits = 4 * N_VOCAB * 4               # 4 sampling rows of float32
        one_sampler = N_VOCAB * (4 + 4)        # candidates: (float logit, int32 id)
        assert scratch >= logits + one_sampler
        # a sampler scratch per slot would be 4 x (candidates + float64 weights)
        assert scratch < logits + 4 * N_VOCAB * (8 + 8)
        assert scratch < logits + 2 * N_VOCAB * (8 + 8) + 64 * 1024


def test_the_steps_share_the_model_forward(path):
    with LLM(path, n_ctx=256, threads=1) as llm:
        small = BatchEngine(llm, slots=1, n_ctx=64).stats["forward_scratch_bytes"]
        large = BatchEngine(llm, slots=8, n_ctx=256).stats["forward_scratch_bytes"]
        assert small == large > 0
        # rows x (x, xn, out: n_embd; q, attn: n_head x head_dim; k, v: kv heads x head_dim)
        # floats with rows = the model's min(512, n_ctx), the feed-forward's gate and up for
        # 128 rows (it runs in slices of 128), plus the rope tables
        per_row = (3 * 128 + 2 * 128 + 2 * 64) * 4
        ffn = 128 * 2 * 256 * 4
        assert 256 * per_row + ffn <= small < 256 * per_row + ffn + 256 * 128 * 4


def test_a_model_with_fewer_positions_than_slots_still_serves_every_slot(path):
    with LLM(path, n_ctx=4, threads=1) as llm:
        engine = BatchEngine(llm, slots=6, n_ctx=32)
        assert engine._core.max_step_rows >= 6
        for i in range(6):
            engine.submit(Request(prompt=llm.tokenize(f"p{i}"), max_tokens=3,
                                  sampling=SamplingParams(temperature=0)))
        done = []
        while engine.has_work:
            done += [e for e in engine.step() if e.kind == "done"]
        assert [e.finish_reason for e in done] == ["length"] * 6

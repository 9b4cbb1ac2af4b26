"""Sliding-window layers in the batching engine's KV pool. With sliding_rings=True each slot
keeps a ring of window + chunk - 1 rows for a Gemma-3 local layer (chunk = min(prefill_chunk,
128), the most prompt rows a step takes from one such sequence) and n_ctx rows for a global one;
off (the default) every layer keeps n_ctx rows, a step takes a prompt whole and any cached
prefix is reused. The pool's bytes follow the formula of each mode; outputs at contexts several
windows long equal LLM.generate's (whose own cache keeps every position) in both modes, greedy
and seeded; the negative control shows those contexts depend on the window (the same weights
with no sliding layers give other text), so a ring that lost a needed row would be seen. With
rings, prefix reuse goes on from a cached prefix only where the ring still holds the window
before it; without, the prompt's early prefix is reused too."""

from __future__ import annotations

import pytest

from dasllama import LLM
from dasllama.batch import BatchEngine, Request, SamplingParams
from dasllama.testing.random_gguf import write_random_model

WINDOW = 16
CHUNK = 8
SHAPE = dict(n_embd=64, n_head=4, n_head_kv=2, n_ff=128, n_layer=6, n_ctx=512)
HEAD_DIM = SHAPE["n_embd"] // SHAPE["n_head"]
GLOBAL_LAYER = 5   # gemma3: layers with il % 6 < 5 slide, every sixth is global
PROMPTS = ["The capital of France is a city that many people visit every year because",
           "Once upon a time there was a small village at the foot of a mountain where",
           "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20,"]


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    d = tmp_path_factory.mktemp("ring")
    sliding = write_random_model(d / "sliding.gguf", "gemma3", weight_type="Q8_0", seed=7,
                                 sliding_window=WINDOW, **SHAPE)
    full = write_random_model(d / "full.gguf", "gemma3", weight_type="Q8_0", seed=7,
                              sliding_window=0, **SHAPE)
    return str(sliding), str(full)


@pytest.fixture(scope="module")
def llm(paths):
    with LLM(paths[0], n_ctx=512, threads=2) as m:
        yield m


def _pool_bytes(slots, rows_per_layer):
    f16_row = 2 * HEAD_DIM
    return slots * sum(rows_per_layer) * SHAPE["n_head_kv"] * (f16_row + f16_row)


@pytest.mark.parametrize("n_ctx, prefill_chunk, ring", [
    (200, CHUNK, WINDOW + CHUNK - 1),     # a ring of 23 rows
    (200, 512, WINDOW + 128 - 1),         # chunks capped at 128 rows: a ring of 143
    (100, 512, None),                     # 143 >= 100: the layer keeps n_ctx
])
def test_sliding_layers_keep_a_ring(llm, n_ctx, prefill_chunk, ring):
    engine = BatchEngine(llm, slots=3, n_ctx=n_ctx, prefill_chunk=prefill_chunk,
                         sliding_rings=True)
    assert engine.sliding_rings
    rows = [engine.kv_layer_rows(layer) for layer in range(SHAPE["n_layer"])]
    sliding_rows = n_ctx if ring is None else ring
    assert rows == [sliding_rows] * 5 + [n_ctx]
    assert engine.kv_pool_bytes == _pool_bytes(3, rows)
    if ring is not None:  # negative control: the full-context formula gives more
        assert engine.kv_pool_bytes < _pool_bytes(3, [n_ctx] * SHAPE["n_layer"])


def test_rings_are_off_by_default(llm):
    engine = BatchEngine(llm, slots=3, n_ctx=200, prefill_chunk=CHUNK)
    assert not engine.sliding_rings
    assert [engine.kv_layer_rows(i) for i in range(SHAPE["n_layer"])] == [200] * 6
    assert engine.kv_pool_bytes == _pool_bytes(3, [200] * 6)
    with pytest.raises(ValueError, match="sliding_rings"):
        BatchEngine(llm, slots=1, n_ctx=200, sliding_rings="yes")


def _long_prompt(llm, n):
    ids = []
    while len(ids) < n:
        ids += llm.tokenize(" ".join(PROMPTS))
    return ids[:n]


@pytest.mark.parametrize("rings, steps", [(False, 1), (True, 3)])
def test_prefill_is_capped_only_with_rings(llm, rings, steps):
    # A 300-token prompt with a 512-row chunk: one step without rings, 128 + 128 + 44 with.
    prompt = _long_prompt(llm, 300)
    engine = BatchEngine(llm, slots=1, n_ctx=400, prefill_chunk=512, sliding_rings=rings)
    got, (u,) = _engine_texts(engine, [prompt], 1, SamplingParams(temperature=0.0))
    assert engine.stats["steps"] == steps
    assert u.prompt_tokens == 300
    assert got == [llm.generate(prompt, max_tokens=1, temperature=0)]


def test_a_model_without_sliding_layers_keeps_the_full_context(paths):
    with LLM(paths[1], n_ctx=512, threads=2) as full:
        engine = BatchEngine(full, slots=2, n_ctx=200, prefill_chunk=CHUNK,
                             sliding_rings=True)
        assert [engine.kv_layer_rows(i) for i in range(SHAPE["n_layer"])] == [200] * 6
        assert engine.kv_pool_bytes == _pool_bytes(2, [200] * 6)


def _engine_texts(engine, prompts, max_tokens, sampling):
    texts = {}
    usage = {}

    def collect(ev):
        texts.setdefault(ev.request_id, []).append(ev.text)
        if ev.kind == "done":
            usage[ev.request_id] = ev.usage
        assert ev.kind != "error", ev.error

    ids = [engine.submit(Request(prompt=p, max_tokens=max_tokens, sampling=sampling,
                                 on_event=collect)) for p in prompts]
    engine.run()
    return ["".join(texts[i]) for i in ids], [usage[i] for i in ids]


@pytest.mark.parametrize("rings", [True, False])
@pytest.mark.parametrize("sampling", [
    dict(temperature=0.0),
    dict(temperature=0.9, top_k=0, top_p=1.0, min_p=0.0, seed=4321),
])
def test_outputs_equal_generate_past_the_window(llm, paths, sampling, rings):
    kw = sampling
    ids = [llm.tokenize(p) for p in PROMPTS]
    assert min(len(i) for i in ids) > WINDOW + CHUNK   # prompts span several chunks and windows
    ref = [llm.generate(i, max_tokens=60, **kw) for i in ids]
    engine = BatchEngine(llm, slots=3, n_ctx=200, prefill_chunk=CHUNK, sliding_rings=rings)
    assert engine.kv_layer_rows(0) == (WINDOW + CHUNK - 1 if rings else 200)
    got, usage = _engine_texts(engine, ids, 60, SamplingParams(**kw))
    assert all(u.completion_tokens > WINDOW for u in usage), usage  # decoding wrapped the ring
    assert got == ref
    assert len(set(ref)) == len(ref)
    # Negative control: the same weights attending to every position give other text here, so
    # these contexts depend on the window and a ring that dropped a needed row would show.
    with LLM(paths[1], n_ctx=512, threads=2) as full:
        assert [full.generate(i, max_tokens=60, **kw) for i in ids] != ref


@pytest.mark.parametrize("rings", [True, False])
def test_prefix_reuse_where_the_rows_are_held(llm, rings):
    greedy = SamplingParams(temperature=0.0)
    engine = BatchEngine(llm, slots=1, n_ctx=200, prefill_chunk=CHUNK, sliding_rings=rings)
    ring = WINDOW + CHUNK - 1
    assert engine.kv_layer_rows(0) == (ring if rings else 200)
    first = llm.tokenize(PROMPTS[0])
    _, (u,) = _engine_texts(engine, [first], 30, greedy)
    # The slot holds the prompt and every sampled token but the last (never fed back).
    held = len(first) + u.completion_tokens - 1
    assert engine._core.n_past(0) == held
    assert held - ring > WINDOW   # the start of the prompt has left the ring

    # Going on from near the end: the ring still holds the window before it.
    near_end = held - 3
    assert near_end - WINDOW + 1 >= held - ring
    # The slot's token history, from a second greedy run of the same request.
    ref_engine = BatchEngine(llm, slots=1, n_ctx=200, prefill_chunk=CHUNK)
    tokens = []

    def grab(ev):
        if ev.kind == "token":
            tokens.append(ev.token)

    ref_engine.submit(Request(prompt=first, max_tokens=30, sampling=greedy, on_event=grab))
    ref_engine.run()
    history = first + tokens[:-1]
    assert len(history) == held

    resume = history[:near_end] + llm.tokenize(" and then")
    got, (u2,) = _engine_texts(engine, [resume], 20, greedy)
    assert u2.cached_tokens == near_end
    assert got == [llm.generate(resume, max_tokens=20, temperature=0)]

    # Falling back to the prompt's first tokens: with rings their window has left the ring, so
    # nothing is reused (reusing it would attend to overwritten rows); without, every layer
    # still holds them and the prefix is reused. Either way the text is generate's.
    early = history[:len(first) - 5] + llm.tokenize(" but")
    got, (u3,) = _engine_texts(engine, [early], 20, greedy)
    assert u3.cached_tokens == (0 if rings else len(first) - 5)
    assert got == [llm.generate(early, max_tokens=20, temperature=0)]

"""The batching engine (dasllama.batch over _core.BatchEngine): several sequences decoded together
must give each sequence exactly what LLM.generate gives it alone (token ids and text are
discrete: exact equality), reuse cached prefixes, prefill in chunks, and honour every per-request
setting. Each equality check is shown to be able to fail: the outputs compared are non-empty and
differ between prompts and seeds, so an engine that mixed up sequences or ignored the seed would
not pass."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from dasllama import LLM, _core
from dasllama.batch import BatchEngine, EngineThread, Event, QueueFull, Request, SamplingParams
from dasllama.errors import ShapeError
from dasllama.reference.llm import ReferenceLLM
from dasllama.testing.random_gguf import write_random_model

from parity import check, rel_l2

SHAPE = dict(n_embd=64, n_head=4, n_head_kv=2, n_ff=128, n_layer=2, n_ctx=512)
ARCH_EXTRA = {"gemma3": dict(n_layer=3, sliding_window=8), "qwen3moe": dict(n_expert=4, n_expert_used=2)}
PROMPTS = ["The capital of France is", "1, 2, 3, 4,", "Once upon a time there was",
           "def fib(n):", "Dear Sir or Madam,", "The quick brown fox", "import numpy as np",
           "In 1905 Einstein"]


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    def make(arch: str = "llama", weight_type: str = "Q8_0"):
        path = tmp_path_factory.getbasetemp() / f"batch_{arch}_{weight_type}.gguf"
        if not path.exists():
            write_random_model(path, arch, weight_type=weight_type, seed=3,
                               **dict(SHAPE, **ARCH_EXTRA.get(arch, {})))
        return str(path)
    return make


@pytest.fixture(scope="module")
def llm(model_path):
    with LLM(model_path(), n_ctx=512, threads=2) as m:
        yield m


def _alone(llm, prompts, **kw):
    return [llm.generate(p, **kw) for p in prompts]


def _distinct(texts):
    assert all(texts), f"an output is empty: {texts}"
    assert len(set(texts)) > 1, f"every prompt gave the same text: {texts}"


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "qwen3moe", "gemma3"])
def test_generate_many_equals_generate_greedy(model_path, arch):
    with LLM(model_path(arch), n_ctx=512, threads=2) as llm:
        ref = _alone(llm, PROMPTS[:4], max_tokens=20, temperature=0)
        got = llm.generate_many(PROMPTS[:4], max_tokens=20, temperature=0)
    _distinct(ref)
    assert got == ref


@pytest.mark.parametrize("slots", [1, 2, 4, 8])
def test_seeded_text_independent_of_busy_slots(llm, slots):
    kw = dict(max_tokens=24, temperature=0.9, top_k=0, top_p=1.0, min_p=0.0, seed=1234)
    ref = _alone(llm, PROMPTS, **kw)
    got = llm.generate_many(PROMPTS, slots=slots, **kw)
    _distinct(ref)
    assert got == ref
    # The seed matters: another seed changes some text (so equality above is not vacuous).
    assert llm.generate_many(PROMPTS, slots=slots, **dict(kw, seed=99)) != ref


def test_real_model_batched_equals_alone():
    from dasllama import models
    with LLM(models.find("smollm2"), n_ctx=1024, threads=2) as llm:
        ref = _alone(llm, PROMPTS[:4], max_tokens=16, temperature=0.7, seed=5)
        got = llm.generate_many(PROMPTS[:4], max_tokens=16, temperature=0.7, seed=5)
    _distinct(ref)
    assert got == ref


def _run(engine, requests):
    """Submits requests, steps to the end, returns {id: (text, done event)}."""
    got = {}
    for r in requests:
        r.on_event = lambda ev, got=got: got.setdefault(ev.request_id, []).append(ev)
        engine.submit(r)
    engine.run()
    return {r.id: ("".join(e.text for e in got[r.id]), got[r.id][-1]) for r in requests}


def test_prefix_reuse_reports_cached_tokens_and_keeps_the_text(llm):
    base = llm.tokenize("A long shared system prompt about the weather in Paris and London. " * 4)
    tail_a, tail_b = llm.tokenize(" Question one:", add_special=False), llm.tokenize(" Two:", add_special=False)
    engine = BatchEngine(llm, slots=2)
    first = _run(engine, [Request(prompt=base + tail_a, max_tokens=8,
                                  sampling=SamplingParams(temperature=0))])
    (_, done_a), = first.values()
    assert done_a.usage.cached_tokens == 0
    second = _run(engine, [Request(prompt=base + tail_b, max_tokens=8,
                                   sampling=SamplingParams(temperature=0))])
    (text_b, done_b), = second.values()
    common = next(i for i, (a, b) in enumerate(zip(base + tail_a, base + tail_b)) if a != b)
    assert done_b.usage.cached_tokens == common
    assert engine.stats["prompt_cache_hits"] == 1
    assert text_b == llm.generate(base + tail_b, max_tokens=8, temperature=0)


def test_chunked_prefill_while_others_decode(llm):
    long_prompt = llm.tokenize(" ".join(PROMPTS) * 3)
    assert len(long_prompt) > 40
    engine = BatchEngine(llm, slots=3, prefill_chunk=7)
    reqs = [Request(prompt=llm.tokenize(p), max_tokens=30, sampling=SamplingParams(temperature=0))
            for p in PROMPTS[:2]]
    out = {}
    for r in reqs:
        r.on_event = lambda ev: out.setdefault(ev.request_id, []).append(ev)
        engine.submit(r)
    engine.step()
    engine.step()   # both decode now; the long prompt joins in chunks of 7
    late = Request(prompt=long_prompt, max_tokens=10, sampling=SamplingParams(temperature=0),
                   on_event=lambda ev: out.setdefault(ev.request_id, []).append(ev))
    engine.submit(late)
    engine.step()
    slot = next(a.slot for a in engine._active.values() if a.request is late)
    for k in (1, 2, 3):   # while the others decode, a step takes 7 prompt tokens
        assert engine._core.pending(slot) == len(long_prompt) - 7 * k
        engine.step()
    engine.run()
    texts = {rid: "".join(e.text for e in evs) for rid, evs in out.items()}
    assert texts[late.id] == llm.generate(long_prompt, max_tokens=10, temperature=0)
    for r, p in zip(reqs, PROMPTS[:2]):
        assert texts[r.id] == llm.generate(p, max_tokens=30, temperature=0)


def test_logprobs_equal_log_softmax_of_the_reference(model_path):
    path = model_path("llama", "F32")
    with LLM(path, n_ctx=512, threads=2) as llm:
        llm.model.set_precision("f32")
        ids = llm.tokenize("The quick brown fox")
        engine = BatchEngine(llm, slots=2)
        (text, done), = _run(engine, [Request(prompt=ids, max_tokens=4, logprobs=5,
                                              sampling=SamplingParams(temperature=0))]).values()
    # The reference's logits at each generated position, from the ids the engine chose.
    ref = ReferenceLLM(path)
    events = []
    with LLM(path, n_ctx=512, threads=2) as llm:
        engine = BatchEngine(llm, slots=1)
        r = Request(prompt=ids, max_tokens=4, logprobs=5, sampling=SamplingParams(temperature=0),
                    on_event=events.append)
        engine.submit(r)
        engine.run()
    tokens = [e.token for e in events if e.kind == "token"]
    logits = ref.logits(ids + tokens)[len(ids) - 1:len(ids) - 1 + len(tokens)].astype(np.float64)
    logp = logits - logits.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    got = np.array([e.logprob for e in events if e.kind == "token"])
    want = logp[np.arange(len(tokens)), tokens]
    control = logits[np.arange(len(tokens)), tokens]   # raw logits: the normalizer dropped
    check("logprob of the sampled token", rel_l2(got, want), 1e-4, rel_l2(control, want))
    for e, row in zip([e for e in events if e.kind == "token"], logp):
        top_ids = [t for t, _ in e.top_logprobs]
        assert top_ids == list(np.argsort(-row, kind="stable")[:5])
        assert top_ids[0] == e.token   # greedy: the sampled token is the most probable


class AllowOnly:
    """A constraint that allows only a fixed set of tokens, for five tokens."""

    def __init__(self, allowed, n_vocab):
        self.allowed = set(allowed)
        self.mask_words = np.zeros((n_vocab + 31) // 32, np.uint32)
        for t in allowed:
            self.mask_words[t // 32] |= np.uint32(1 << (t % 32))
        self.seen = []

    def mask(self):
        return self.mask_words

    def advance(self, token):
        self.seen.append(token)

    def is_done(self):
        return len(self.seen) >= 5


def test_constraint_mask_is_enforced(llm):
    allowed = list(range(100, 140))
    c = AllowOnly(allowed, llm.n_vocab)
    engine = BatchEngine(llm, slots=2)
    params = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=3)
    (_, done), = _run(engine, [Request(prompt=llm.tokenize("Hello"), max_tokens=50, sampling=params,
                                       constraint=c)]).values()
    assert len(c.seen) == 5 and set(c.seen) <= set(allowed)
    assert done.finish_reason == "stop"
    # Negative control: the same request unconstrained samples tokens outside the set.
    free = []
    engine.submit(Request(prompt=llm.tokenize("Hello"), max_tokens=5, sampling=params,
                          on_event=lambda ev: free.append(ev.token) if ev.kind == "token" else None))
    engine.run()
    assert not set(free) <= set(allowed)


def test_finish_reasons_and_stop_strings(llm):
    engine = BatchEngine(llm, slots=4, n_ctx=40)
    greedy = SamplingParams(temperature=0)
    text = llm.generate(PROMPTS[1], max_tokens=12, temperature=0)
    stop = text[3:6]
    assert stop.strip()
    res = _run(engine, [
        Request(prompt=llm.tokenize(PROMPTS[1]), max_tokens=12, sampling=greedy, stop=[stop]),
        Request(prompt=llm.tokenize(PROMPTS[1]), max_tokens=3, sampling=greedy),
        Request(prompt=llm.tokenize(PROMPTS[1]), max_tokens=0, sampling=greedy),
        Request(prompt=llm.tokenize(PROMPTS[0]), max_tokens=None, sampling=greedy),
    ])
    (t_stop, d_stop), (t_len, d_len), (t_zero, d_zero), (_, d_ctx) = res.values()
    assert t_stop == text[:text.index(stop)] and d_stop.finish_reason == "stop"
    assert d_len.finish_reason == "length" and d_len.usage.completion_tokens == 3
    assert t_zero == "" and d_zero.finish_reason == "length"
    assert d_ctx.finish_reason == "context"
    assert d_ctx.usage.prompt_tokens + d_ctx.usage.completion_tokens == 40 + 1


def test_queue_cancel_and_errors(llm):
    engine = BatchEngine(llm, slots=1, n_ctx=64, max_queue=1)
    events = []
    a = engine.submit(Request(prompt=llm.tokenize("Hi"), max_tokens=50, on_event=events.append))
    b = engine.submit(Request(prompt=llm.tokenize("Yo"), max_tokens=50, on_event=events.append))
    engine.step()                     # a runs, b waits
    with pytest.raises(QueueFull, match="max_queue=1"):
        engine.submit(Request(prompt=llm.tokenize("No"), max_tokens=5))
    assert engine.stats["slots_busy"] == 1 and engine.stats["queued"] == 1
    engine.cancel(a)
    assert engine.stats["slots_busy"] == 0
    engine.cancel(b)
    assert not engine.has_work
    done = [e for e in events if e.kind == "done"]
    assert [e.finish_reason for e in done] == ["cancelled", "cancelled"]
    with pytest.raises(ShapeError, match="65 tokens.*n_ctx=64"):
        engine.submit(Request(prompt=[1] * 65))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        engine.submit(Request(prompt=[llm.n_vocab]))
    with pytest.raises(ValueError, match="max_tokens"):
        engine.submit(Request(prompt=[1], max_tokens=-1))
    with pytest.raises(ValueError, match="temperature"):
        engine.submit(Request(prompt=[1], sampling=SamplingParams(temperature=-1)))
    with pytest.raises(ValueError, match="logprobs must be at most 20"):
        engine.submit(Request(prompt=[1], logprobs=21))


def test_kv_pool_bytes_is_slots_times_one_context(model_path):
    with LLM(model_path(), n_ctx=128, threads=2, kv_type="f16") as llm:
        engine = BatchEngine(llm, slots=3, n_ctx=200)
        c = SHAPE
        head_dim = c["n_embd"] // c["n_head"]
        per_slot = c["n_layer"] * 200 * c["n_head_kv"] * head_dim * 2 * 2   # K and V, 2 bytes
        assert engine.kv_pool_bytes == 3 * per_slot
        assert engine.n_ctx == 200     # each slot holds the whole context, not 200 / 3


def test_engine_thread_serves_submitters_on_other_threads(llm):
    thread = EngineThread(BatchEngine(llm, slots=2)).start()
    results, lock = {}, threading.Lock()
    done = threading.Semaphore(0)

    def on_event(ev):
        with lock:
            results.setdefault(ev.request_id, []).append(ev)
        if ev.kind != "token":
            done.release()

    def client(p):
        thread.submit(Request(prompt=llm.tokenize(p), max_tokens=10,
                              sampling=SamplingParams(temperature=0), on_event=on_event))

    workers = [threading.Thread(target=client, args=(p,)) for p in PROMPTS[:5]]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for _ in workers:
        assert done.acquire(timeout=60)
    thread.stop()
    texts = sorted("".join(e.text for e in evs) for evs in results.values())
    assert texts == sorted(_alone(llm, PROMPTS[:5], max_tokens=10, temperature=0))
    assert thread.stats["completed"] == 5


def test_engine_thread_never_fails_a_request_it_accepted(llm):
    # Requests submitted while the engine thread is inside a step, after it took its inbox,
    # must count those taken ones: otherwise submit accepts more than max_queue and the engine
    # later ends the surplus with a QueueFull error event instead of refusing it up front.
    thread = EngineThread(BatchEngine(llm, slots=1, n_ctx=64, max_queue=1)).start()
    in_step, resume = threading.Event(), threading.Event()
    events = []

    def hold_first_token(ev):       # runs on the engine thread, inside its step
        events.append(ev)
        if ev.kind == "token" and not in_step.is_set():
            in_step.set()
            assert resume.wait(60)

    try:
        thread.submit(Request(prompt=llm.tokenize("Hi"), max_tokens=30,
                              on_event=hold_first_token))
        assert in_step.wait(60)      # the first request holds the slot; its step is paused
        thread.submit(Request(prompt=llm.tokenize("Yo"), max_tokens=2, on_event=events.append))
        with pytest.raises(QueueFull, match="max_queue=1"):
            thread.submit(Request(prompt=llm.tokenize("No"), max_tokens=2,
                                  on_event=events.append))
    finally:
        resume.set()
    for _ in range(200):        # bounded: the two accepted requests take a few steps
        if len([e for e in events if e.kind != "token"]) == 2:
            break
        time.sleep(0.05)
    thread.stop()
    assert [e.kind for e in events if e.kind != "token"] == ["done", "done"]


def test_embed_equals_reference_hidden_states(model_path):
    path = model_path("llama", "F32")
    ids = [5, 17, 99, 3, 250, 41]
    with LLM(path, n_ctx=64, threads=2, kv_type="f32") as llm:
        llm.model.set_precision("f32")
        rows = llm.embed(ids, pooling="none", normalize=False)
        mean = llm.embed(ids)
        last = llm.embed(ids, pooling="last", normalize=False)
        n_past = llm.model.n_past
    ref = ReferenceLLM(path)
    # The reference's final hidden states: its forward pass up to the output norm.
    from dasllama.reference import llm as reference_llm
    cache = reference_llm.KVCache(ref.config, len(ids), ref.dtype)
    h = ref.weights["token_embd.weight"][np.asarray(ids)] * ref.config["embd_scale"]
    pos = np.arange(len(ids))
    for il in range(ref.config["n_layer"]):
        h = ref.block(il, h, pos, cache)
    want = reference_llm.rms_norm(h, ref.weights["output_norm.weight"], ref.config["rms_eps"])
    check("hidden states", rel_l2(rows, want), 1e-5, rel_l2(h, want))
    m = want.mean(0)
    check("mean pooled, normalized", rel_l2(mean, m / np.linalg.norm(m)), 1e-5,
          rel_l2(want[0] / np.linalg.norm(want[0]), m / np.linalg.norm(m)))
    check("last", rel_l2(last, want[-1]), 1e-5, rel_l2(want[0], want[-1]))
    assert n_past == 0
    with pytest.raises(ValueError, match="pooling must be one of"):
        LLM(path, n_ctx=64).embed(ids, pooling="max")


class FailsAfter:
    """A constraint whose matcher rejects the third token (as a grammar that hits a bug would),
    in advance() or in the is_done() that follows it."""

    def __init__(self, where: str = "advance"):
        self.n = 0
        self.where = where

    def mask(self):
        return None

    def advance(self, token):
        self.n += 1
        if self.n == 3 and self.where == "advance":
            raise ValueError("matcher rejected token")

    def is_done(self):
        if self.n == 3 and self.where == "is_done":
            raise ValueError("matcher rejected token")
        return False


@pytest.mark.parametrize("where", ["advance", "is_done"])
def test_failing_constraint_ends_only_its_request(llm, where):
    engine = BatchEngine(llm, slots=2)
    greedy = SamplingParams(temperature=0)
    res = _run(engine, [Request(prompt=llm.tokenize(PROMPTS[0]), max_tokens=12, sampling=greedy,
                                constraint=FailsAfter(where)),
                        Request(prompt=llm.tokenize(PROMPTS[1]), max_tokens=12, sampling=greedy)])
    (_, bad), (good_text, good) = res.values()
    assert bad.kind == "error" and "matcher rejected" in str(bad.error)
    assert bad.usage.completion_tokens == 3
    assert good.kind == "done" and good_text == llm.generate(PROMPTS[1], max_tokens=12, temperature=0)


def test_ignore_eos_runs_to_max_tokens(model_path):
    # A mask that leaves only the end tokens and one other makes a free run end within a few
    # tokens; with ignore_eos the same run must take all 40.
    with LLM(model_path(), n_ctx=256, threads=2) as llm:
        engine = BatchEngine(llm, slots=1)
        eog = engine.eog_ids()
        assert eog and all(llm.tokenizer.is_eog(t) for t in eog)

        class PreferEnd:
            """Allows only the end tokens and one other, so a free run stops at once."""
            def __init__(self):
                words = np.zeros((llm.n_vocab + 31) // 32, np.uint32)
                for t in eog + [7]:
                    words[t // 32] |= np.uint32(1 << (t % 32))
                self.words = words

            def mask(self):
                return self.words

            def advance(self, token):
                pass

            def is_done(self):
                return False

        runs = {}
        for ignore in (False, True):
            params = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=11)
            (text, done), = _run(engine, [Request(prompt=[1, 2, 3], max_tokens=40, sampling=params,
                                                  constraint=PreferEnd(), ignore_eos=ignore)]).values()
            runs[ignore] = done
        assert runs[False].finish_reason == "eog" and runs[False].usage.completion_tokens < 40
        assert runs[True].finish_reason == "length" and runs[True].usage.completion_tokens == 40


def test_a_slot_left_without_tokens_fails_alone(llm):
    # A mask that allows only an end token, with ignore_eos banning it: nothing can be sampled.
    engine = BatchEngine(llm, slots=2)
    end = engine.eog_ids()[0]
    words = np.zeros((llm.n_vocab + 31) // 32, np.uint32)
    words[end // 32] |= np.uint32(1 << (end % 32))

    class OnlyEnd:
        def mask(self):
            return words

        def advance(self, token):
            pass

        def is_done(self):
            return False

    greedy = SamplingParams(temperature=0)
    res = _run(engine, [Request(prompt=llm.tokenize(PROMPTS[0]), max_tokens=5, sampling=greedy,
                                constraint=OnlyEnd(), ignore_eos=True),
                        Request(prompt=llm.tokenize(PROMPTS[1]), max_tokens=5, sampling=greedy)])
    (_, bad), (text, good) = res.values()
    assert bad.kind == "error" and "-inf" in str(bad.error)
    assert good.kind == "done" and text == llm.generate(PROMPTS[1], max_tokens=5, temperature=0)


def test_a_raising_callback_cancels_its_request_and_spares_the_others(llm):
    engine = BatchEngine(llm, slots=2)
    greedy = SamplingParams(temperature=0)
    good = []

    def bad_callback(ev):
        raise RuntimeError("caller bug")

    bad = Request(prompt=llm.tokenize(PROMPTS[0]), max_tokens=8, sampling=greedy,
                  on_event=bad_callback)
    fine = Request(prompt=llm.tokenize(PROMPTS[1]), max_tokens=8, sampling=greedy,
                   on_event=good.append)
    engine.submit(bad)
    engine.submit(fine)
    with pytest.raises(RuntimeError, match="caller bug"):
        while engine.has_work:
            engine.step()
    assert all(a.request is not bad for a in engine._active.values())
    engine.run()
    assert "".join(e.text for e in good) == llm.generate(PROMPTS[1], max_tokens=8, temperature=0)
    assert good[-1].finish_reason == "length"

"""The batching engine on a model opened on Vulkan: its steps are the seat "batch", run by the
device over K/V slots of its own (serve/batch_seat.h), and must give each sequence what
LLM.generate gives it alone on the CPU chain.

Device: $DASLLAMA_TEST_VULKAN (default "vulkan:llvmpipe", Mesa's lavapipe, which CI installs).
With CI=true a missing device fails; elsewhere the tests skip and say why.

Token ids and text are discrete, so they are compared exactly; the random models' logits are
far enough from ties at these lengths that the two chains' rounding never flips a greedy pick
(the CPU and the device sum in other orders). Every equality is shown able to fail: the texts
compared differ between prompts (and between seeds), so a step that mixed up sequences, slots
or positions would not pass. Seat counters prove the device ran what is checked.
"""

from __future__ import annotations

import numpy as np
import pytest

from dasllama import LLM, _core
from dasllama.batch import BatchEngine, Request, SamplingParams
from dasllama.errors import DeviceError
from dasllama.testing.random_gguf import write_random_model
from gpu_helpers import SPEC, _unavailable

SMALL = dict(n_embd=64, n_head=4, n_head_kv=2, n_ff=128, n_layer=2, n_ctx=512)
CASES = [
    ("llama", "Q8_0", {}),
    ("qwen2", "Q8_0", {}),
    ("qwen3", "Q4_K", dict(n_embd=256, head_dim=64, n_ff=256)),
    ("gemma3", "Q6_K", dict(n_embd=256, head_dim=64, n_ff=256, n_layer=3, sliding_window=8)),
]
PROMPTS = ["The capital of France is", "1, 2, 3, 4,", "Once upon a time there was",
           "def fib(n):"]
# Logprobs of the same token from the device and the CPU chain, both in f32: measured up to
# 2.2e-4 on lavapipe (printed: the f16 K/V rows may round apart); another prompt's logprobs
# differ by more than 0.5.
LOGPROB_BAR = 1e-3
GREEDY = SamplingParams(temperature=0)


def _open_pair(path):
    try:
        gpu = LLM(str(path), n_ctx=256, threads=2, device=SPEC)
    except DeviceError as e:
        _unavailable(f"no Vulkan device {SPEC!r}: {e}")
    gpu.model.set_precision("f32")
    cpu = LLM(str(path), n_ctx=256, threads=2)
    cpu.model.set_precision("f32")
    return gpu, cpu


@pytest.fixture(scope="module", params=CASES, ids=[f"{a}-{t}" for a, t, _ in CASES])
def pair(request, tmp_path_factory):
    arch, wtype, kw = request.param
    path = tmp_path_factory.mktemp("m") / f"{arch}.gguf"
    write_random_model(path, arch, weight_type=wtype, seed=3, **dict(SMALL, **kw))
    gpu, cpu = _open_pair(path)
    yield arch, gpu, cpu
    gpu.close()
    cpu.close()


@pytest.fixture(scope="module")
def llama_pair(tmp_path_factory):
    """The llama case alone, for the checks whose controls need varied text (on the random
    gemma3 the two prefix prompts give the same text, and so do two seeds)."""
    path = tmp_path_factory.mktemp("m") / "llama.gguf"
    write_random_model(path, "llama", weight_type="Q8_0", seed=3, **SMALL)
    gpu, cpu = _open_pair(path)
    yield gpu, cpu
    gpu.close()
    cpu.close()


def _collect(engine, requests):
    got = {}
    for r in requests:
        r.on_event = lambda ev, got=got: got.setdefault(ev.request_id, []).append(ev)
        engine.submit(r)
    return got


def _texts(got, requests):
    return ["".join(e.text for e in got[r.id]) for r in requests]


def _run(engine, requests):
    got = _collect(engine, requests)
    engine.run()
    return _texts(got, requests), got


def _requests(llm, n=4, max_tokens=10, **kw):
    return [Request(prompt=llm.tokenize(p), max_tokens=max_tokens, **dict(dict(sampling=GREEDY), **kw))
            for p in PROMPTS[:n]]


def _seat(engine):
    return engine.stats["seats"]["batch"]


def _alone(cpu, n=4, max_tokens=10):
    want = [cpu.generate(p, max_tokens=max_tokens, temperature=0) for p in PROMPTS[:n]]
    assert all(want) and len(set(want)) == len(want), f"the control texts do not differ: {want}"
    return want


def test_device_steps_equal_generate(pair):
    # prefill_chunk 3: prompts are read in chunks beside the others' decode rows, so steps mix
    # one-row and several-row sequences of different slots and positions.
    arch, gpu, cpu = pair
    want = _alone(cpu)
    engine = BatchEngine(gpu, slots=4, prefill_chunk=3)
    texts, _ = _run(engine, _requests(gpu))
    seat = _seat(engine)
    print(f"{arch}: {engine.stats['steps']} steps, {seat['dispatches']} dispatches")
    assert seat["served"] == engine.stats["steps"] > 0
    assert sum(seat["declined"].values()) == 0
    assert seat["device_kv_bytes"] > 0
    # Steps of the same slots and rows as the last (steady decoding) submit it again.
    assert 0 < seat["replays"] < seat["served"]
    assert texts == want


def test_logprobs_match_the_cpu_engine(pair):
    arch, gpu, cpu = pair
    runs = []
    for llm in (gpu, cpu):
        engine = BatchEngine(llm, slots=4)
        _, got = _run(engine, _requests(llm, logprobs=5))
        runs.append([[(e.token, e.logprob, e.top_logprobs) for e in evs if e.kind == "token"]
                     for evs in got.values()])
    dev, ref = runs
    worst = 0.0
    for d_seq, r_seq in zip(dev, ref):
        assert [t for t, _, _ in d_seq] == [t for t, _, _ in r_seq]
        for (_, d_lp, d_top), (_, r_lp, r_top) in zip(d_seq, r_seq):
            assert [t for t, _ in d_top] == [t for t, _ in r_top]
            worst = max(worst, abs(d_lp - r_lp),
                        max(abs(a - b) for (_, a), (_, b) in zip(d_top, r_top)))
    control = max(abs(a[1] - b[1]) for a, b in zip(dev[0], ref[1]))
    print(f"{arch}: logprobs within {worst:.2e} (bar {LOGPROB_BAR:g}); another prompt's "
          f"differ by {control:.2e}")
    assert worst < LOGPROB_BAR
    assert control > 10 * LOGPROB_BAR


def test_steps_move_between_the_cpu_and_the_device(pair):
    # The seat's knob flips every few steps: each move hands the rows the other side ran.
    arch, gpu, cpu = pair
    want = _alone(cpu)
    engine = BatchEngine(gpu, slots=4, prefill_chunk=3)
    requests = _requests(gpu)
    got = _collect(engine, requests)
    try:
        for i in range(200):
            gpu.model.set_seat_enabled("batch", (i // 3) % 2 == 1)
            if not engine.step() and not engine.has_work:
                break
    finally:
        gpu.model.set_seat_enabled("batch", True)
    seat = _seat(engine)
    assert not engine.has_work
    assert seat["served"] > 0 and seat["declined"]["knob"] > 0
    assert seat["uploads"] > 0
    assert "knob" in seat["reason"]
    assert _texts(got, requests) == want


def test_a_failed_device_step_runs_on_the_cpu(pair):
    arch, gpu, cpu = pair
    want = _alone(cpu)
    engine = BatchEngine(gpu, slots=4)
    requests = _requests(gpu)
    got = _collect(engine, requests)
    for _ in range(3):
        engine.step()
    _core.gpu_inject_submit_fault(1)
    try:
        engine.run()
    finally:
        _core.gpu_inject_submit_fault(0)
    seat = _seat(engine)
    assert seat["declined"]["gpu_error"] == 1 and "injected fault" in seat["reason"]
    assert seat["served"] == engine.stats["steps"] - 1
    assert _texts(got, requests) == want


def test_prefix_reuse_from_a_device_slot(llama_pair):
    gpu, cpu = llama_pair
    base = gpu.tokenize("A long shared system prompt about the weather in Paris. " * 3)
    tails = [gpu.tokenize(t, add_special=False) for t in (" Question one:", " Two:")]
    engine = BatchEngine(gpu, slots=2)
    (first,), _ = _run(engine, [Request(prompt=base + tails[0], max_tokens=6, sampling=GREEDY)])
    texts, got = _run(engine, [Request(prompt=base + tails[1], max_tokens=6, sampling=GREEDY)])
    done = next(iter(got.values()))[-1]
    common = next(i for i, (a, b) in enumerate(zip(base + tails[0], base + tails[1])) if a != b)
    assert done.usage.cached_tokens == common > 0
    seat = _seat(engine)
    # The reused rows were never on the host: the device slot kept them.
    assert seat["uploads"] == 0 and seat["served"] == engine.stats["steps"]
    assert texts == [cpu.generate(base + tails[1], max_tokens=6, temperature=0)]
    assert texts[0] != first


def test_seeded_text_is_the_same_at_1_and_4_slots(llama_pair):
    gpu, cpu = llama_pair
    sampling = [SamplingParams(temperature=0.9, seed=11 + i) for i in range(4)]
    outs = []
    for slots in (1, 4):
        engine = BatchEngine(gpu, slots=slots)
        texts, _ = _run(engine, [Request(prompt=gpu.tokenize(p), max_tokens=10, sampling=s)
                                 for p, s in zip(PROMPTS, sampling)])
        assert _seat(engine)["served"] == engine.stats["steps"]
        outs.append(texts)
    alone = [cpu.generate(p, max_tokens=10, temperature=0.9, seed=11 + i)
             for i, p in enumerate(PROMPTS)]
    reseeded = cpu.generate(PROMPTS[0], max_tokens=10, temperature=0.9, seed=99)
    assert reseeded != alone[0], "the seed does not change the text: the check could not fail"
    assert outs[0] == outs[1] == alone


def test_rings_decline_and_the_cpu_serves(tmp_path):
    path = tmp_path / "gemma3.gguf"
    write_random_model(path, "gemma3", weight_type="Q8_0", seed=3,
                       **dict(SMALL, n_layer=3, sliding_window=8))
    try:
        gpu = LLM(str(path), n_ctx=256, threads=2, device=SPEC)
    except DeviceError as e:
        _unavailable(f"no Vulkan device {SPEC!r}: {e}")
    with gpu, LLM(str(path), n_ctx=256, threads=2) as cpu:
        engine = BatchEngine(gpu, slots=2, sliding_rings=True)
        texts, _ = _run(engine, _requests(gpu, n=2))
        seat = _seat(engine)
        assert seat["served"] == 0 and seat["declined"]["shape"] == engine.stats["steps"] > 0
        assert "rings" in seat["reason"] and seat["device_kv_bytes"] == 0
        assert texts == _alone(cpu, n=2)


def test_seat_knob_sends_every_step_to_the_cpu(llama_pair):
    gpu, cpu = llama_pair
    gpu.model.set_seat_enabled("batch", False)
    try:
        engine = BatchEngine(gpu, slots=2)
        texts, _ = _run(engine, _requests(gpu, n=2))
    finally:
        gpu.model.set_seat_enabled("batch", True)
    seat = _seat(engine)
    assert seat["served"] == 0 and seat["declined"]["knob"] == engine.stats["steps"] > 0
    assert texts == _alone(cpu, n=2)
    assert "seats" not in BatchEngine(cpu, slots=1).stats
    with pytest.raises(ValueError, match="seats: prefill, decode, batch"):
        gpu.model.set_seat_enabled("nope", True)


def test_a_new_engine_never_replays_a_freed_pools_recording(llama_pair):
    # Engines one after another on one model: each step of the same layout as the last one
    # replays, but an engine's first step must record anew, since the last recording was bound
    # to the previous engine's (freed) device slots, whose memory the new pool may reuse.
    gpu, cpu = llama_pair
    prompt = gpu.tokenize(PROMPTS[0])[:1]
    want = cpu.generate(prompt, max_tokens=3, temperature=0)
    for _ in range(3):
        engine = BatchEngine(gpu, slots=1)
        texts, _ = _run(engine, [Request(prompt=prompt, max_tokens=3, sampling=GREEDY)])
        seat = _seat(engine)
        assert seat["served"] == engine.stats["steps"] == 3
        assert seat["replays"] == 2, seat
        assert texts == [want]
        del engine


def test_generate_between_engine_steps(llama_pair):
    # LLM.generate on the device between an engine's steps: both run on the model's one device
    # forward pass (its own cache for generate, the engine's slots for the steps), and neither
    # may replay the other's last recording.
    gpu, cpu = llama_pair
    want = _alone(cpu, n=2)
    aside = cpu.generate(PROMPTS[2], max_tokens=4, temperature=0)
    assert aside not in want
    decode_before = gpu.model.seat_stats()["decode"]["served"]
    engine = BatchEngine(gpu, slots=2)
    requests = _requests(gpu, n=2)
    got = _collect(engine, requests)
    between = []
    while engine.has_work:
        engine.step()
        between.append(gpu.generate(PROMPTS[2], max_tokens=4, temperature=0))
    assert _texts(got, requests) == want
    assert set(between) == {aside}
    seat = _seat(engine)
    assert seat["served"] == engine.stats["steps"] == len(between)
    assert gpu.model.seat_stats()["decode"]["served"] > decode_before


def test_a_step_wider_than_the_device_pass_declines_as_shape(tmp_path):
    # A model opened on 2 positions has a device pass of 2 rows (and a CPU forward of 2, so an
    # engine of 4 slots runs on a forward of its own). Steps of more rows decline as shape and
    # the CPU runs them; once two sequences have ended, the device serves the other two,
    # taking up the rows the CPU wrote.
    path = tmp_path / "llama.gguf"
    write_random_model(path, "llama", weight_type="Q8_0", seed=3, **SMALL)
    try:
        gpu = LLM(str(path), n_ctx=2, threads=2, device=SPEC)
    except DeviceError as e:
        _unavailable(f"no Vulkan device {SPEC!r}: {e}")
    gpu.model.set_precision("f32")
    with gpu, LLM(str(path), n_ctx=256, threads=2) as cpu:
        cpu.model.set_precision("f32")
        lengths = [2, 3, 10, 10]
        want = [cpu.generate(p, max_tokens=n, temperature=0) for p, n in zip(PROMPTS, lengths)]
        assert len(set(want)) == len(want), f"the control texts do not differ: {want}"
        engine = BatchEngine(gpu, slots=4, n_ctx=64)
        requests = [Request(prompt=gpu.tokenize(p), max_tokens=n, sampling=GREEDY)
                    for p, n in zip(PROMPTS, lengths)]
        texts, _ = _run(engine, requests)
        seat = _seat(engine)
        assert seat["declined"]["shape"] > 0 and seat["served"] > 0, seat
        assert seat["served"] + seat["declined"]["shape"] == engine.stats["steps"], seat
        assert seat["uploads"] > 0 and "holds 2" in seat["reason"], seat
        assert texts == want


def _seat_steps(url):
    """{(seat, outcome): steps} of /metrics, read as `dasllama bench serve` reads them."""
    from dasllama.bench.serve import seat_steps_from_metrics
    from test_server_support import httpx

    return seat_steps_from_metrics(httpx.get(url + "/metrics", timeout=30).text)


def test_server_metrics_count_the_seats_steps(tmp_path):
    # What `dasllama bench serve --device` reads to know that the device served its rows.
    from test_server_support import client, serve, spec

    path = tmp_path / "llama.gguf"
    write_random_model(path, "llama", weight_type="Q8_0", seed=3, **SMALL)
    try:
        LLM(str(path), n_ctx=64, threads=1, device=SPEC).close()
    except DeviceError as e:
        _unavailable(f"no Vulkan device {SPEC!r}: {e}")
    with serve([spec("tiny", path)], parallel=2, n_ctx=64, device=SPEC) as srv:
        before = _seat_steps(srv.url)
        assert before.get(("batch", "served")) == 0 and before[("batch", "knob")] == 0
        client(srv).completions.create(model="tiny", prompt="1, 2, 3,", max_tokens=5,
                                       temperature=0, extra_body={"ignore_eos": True})
        after = _seat_steps(srv.url)
        assert after[("batch", "served")] >= 5, after
        assert all(n == 0 for (seat, outcome), n in after.items() if outcome != "served"), after

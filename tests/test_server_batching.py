"""The server over the batching engine: seeded output independent of the slot count and of
what else runs (and equal to LLM.generate at that seed), every slot busy under concurrent load
(seen through /metrics), and a client that goes away freeing its slot or its queue place."""

from __future__ import annotations

import threading
import time

import pytest

from test_server_support import (SLOW, WAIT_S, client, httpx, metric, metrics, random_model,
                                 serve, spec, wait_for)

from dasllama import LLM

PROMPTS = ["The quick brown fox", "In the morning the weather", "Numbers like 3.14159",
           "She said: \"Hello", "Rain, snow, wind", "The engine loads the weights"]
SLOT_COUNTS = (1, 2, 4)
MATRIX = ((1, 3), (2, 4), (4, 6))     # (slots, concurrent requests)
CTX = 4096


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    folder = tmp_path_factory.mktemp("batching_models")
    return {"small": random_model(folder, "small", seed=3),
            "slow": random_model(folder, "slow", seed=4, **SLOW)}


@pytest.fixture(scope="module")
def server(paths):
    models = [spec(f"s{n}", paths["small"], slots=n) for n in SLOT_COUNTS]
    models += [spec(f"p{n}", paths["slow"], slots=n) for n, _ in MATRIX]
    with serve(models, n_ctx=CTX, max_queue=16) as srv:
        yield srv


def _concurrently(fn, args_list):
    """Runs fn(*args) for each args on its own thread; returns results in order (re-raises the
    first failure)."""
    results, errors = [None] * len(args_list), []

    def run(i, args):
        try:
            results[i] = fn(*args)
        except BaseException as e:   # reported below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i, a)) for i, a in enumerate(args_list)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a request did not finish in 120 s"
    if errors:
        raise errors[0]
    return results


def test_seeded_text_is_the_same_for_1_2_4_slots_and_equals_llm_generate(server, paths):
    api = client(server)
    jobs = [(p, 100 + i) for i, p in enumerate(PROMPTS)]

    def complete(model, prompt, seed):
        r = api.completions.create(model=model, prompt=prompt, max_tokens=24, temperature=0.9,
                                   top_p=0.95, seed=seed, extra_body={"top_k": 40, "min_p": 0.05})
        return r.choices[0].text

    by_slots = {}
    for n in SLOT_COUNTS:    # all six at once: they share the batch (and queue for s1, s2)
        by_slots[n] = _concurrently(complete, [(f"s{n}", p, s) for p, s in jobs])
    with LLM(paths["small"], n_ctx=CTX, threads=1) as llm:
        expected = [llm.generate(p, max_tokens=24, temperature=0.9, top_k=40, top_p=0.95,
                                 min_p=0.05, seed=s) for p, s in jobs]
    for n in SLOT_COUNTS:
        assert by_slots[n] == expected, f"{n} slots gave other text than LLM.generate"
    # Negative control: the seed matters, so the equality above is not trivially true.
    other = _concurrently(complete, [("s2", p, s + 1000) for p, s in jobs])
    assert other != expected


@pytest.mark.parametrize("slots,concurrent", MATRIX)
def test_concurrent_requests_fill_every_slot(server, slots, concurrent):
    model, url = f"p{slots}", server.url
    api = client(server)
    seen = {"busy": 0, "queued": 0, "tokens_per_s": 0.0}
    done = threading.Event()

    def watch():
        while not done.is_set():
            m = metrics(url)
            seen["busy"] = max(seen["busy"], m.get(("dasllama_slots_busy", model), 0))
            seen["queued"] = max(seen["queued"], m.get(("dasllama_requests_queued", model), 0))
            seen["tokens_per_s"] = max(seen["tokens_per_s"],
                                       m.get(("dasllama_generation_tokens_per_second", model), 0))
            time.sleep(0.005)

    def chat(seed):
        r = api.chat.completions.create(model=model, messages=[{"role": "user", "content":
                                                                 f"Tell story {seed}."}],
                                        max_tokens=600, seed=seed, temperature=0.8,
                                        extra_body={"ignore_eos": True})
        return r.choices[0].finish_reason, r.usage.completion_tokens

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        results = _concurrently(chat, [(s,) for s in range(concurrent)])
    finally:
        done.set()
        watcher.join(30)
    assert results == [("length", 600)] * concurrent
    assert seen["busy"] == slots, f"at most {seen['busy']} of {slots} slots were seen busy"
    assert seen["queued"] >= 1, "no request was seen waiting although there were more than slots"
    assert seen["tokens_per_s"] > 0, "the tokens/s gauge stayed at 0 while generating"
    wait_for(lambda: metric(url, "slots_busy", model) == 0, "the slots to empty")


LONG = {"model": "p1", "messages": [{"role": "user", "content": "Go on forever."}],
        "max_tokens": 3000, "ignore_eos": True, "temperature": 0}


def _generated(url: str) -> float:
    return metric(url, "generated_tokens_total", "p1")


def test_a_disconnected_stream_frees_its_slot(server):
    url = server.url
    wait_for(lambda: metric(url, "slots_busy", "p1") == 0, "p1 to be idle")
    start = _generated(url)
    with httpx.Client(timeout=60) as c:
        with c.stream("POST", url + "/v1/chat/completions", json={**LONG, "stream": True}) as r:
            lines = r.iter_lines()
            for _ in range(3):
                next(lines)
            assert metric(url, "slots_busy", "p1") == 1
            assert metric(url, "requests_running", "p1") == 1
        # Leaving the block closed the connection mid-stream.
    t0 = time.monotonic()
    wait_for(lambda: metric(url, "slots_busy", "p1") == 0
             and metric(url, "requests_running", "p1") == 0, "the slot to free")
    freed_after = time.monotonic() - t0
    generated = _generated(url) - start
    assert generated < LONG["max_tokens"] / 2, f"the request ran on to {generated} tokens"
    assert freed_after < WAIT_S
    print(f"slot freed {freed_after * 1000:.0f} ms after the disconnect, {generated:.0f} tokens")


def test_a_disconnected_plain_request_frees_its_slot(server):
    url = server.url
    wait_for(lambda: metric(url, "slots_busy", "p1") == 0, "p1 to be idle")
    start = _generated(url)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(url + "/v1/chat/completions", json=LONG, timeout=httpx.Timeout(60, read=0.5))
    wait_for(lambda: metric(url, "slots_busy", "p1") == 0
             and metric(url, "requests_running", "p1") == 0, "the slot to free")
    generated = _generated(url) - start
    assert 0 < generated < LONG["max_tokens"] / 2, f"the request ran on to {generated} tokens"


def test_a_client_that_leaves_the_queue_gives_up_its_place(server):
    url = server.url
    wait_for(lambda: metric(url, "slots_busy", "p1") == 0, "p1 to be idle")
    with httpx.Client(timeout=60) as c:
        with c.stream("POST", url + "/v1/chat/completions", json={**LONG, "stream": True}) as r:
            lines = r.iter_lines()   # kept: a dropped iterator closes the connection
            next(lines)
            outcome = []

            def wait_in_queue():
                try:
                    outcome.append(httpx.post(url + "/v1/chat/completions", json=LONG,
                                              timeout=httpx.Timeout(60, read=1.0)))
                except httpx.ReadTimeout as e:
                    outcome.append(e)

            waiting = threading.Thread(target=wait_in_queue)
            waiting.start()
            wait_for(lambda: metric(url, "requests_queued", "p1") == 1, "the second to queue")
            waiting.join(30)
            assert len(outcome) == 1 and isinstance(outcome[0], httpx.ReadTimeout), outcome
            wait_for(lambda: metric(url, "requests_queued", "p1") == 0,
                     "the queue to drop the request whose client left")
            assert metric(url, "requests_running", "p1") == 1   # the first still runs
    wait_for(lambda: metric(url, "slots_busy", "p1") == 0, "the slot to free")

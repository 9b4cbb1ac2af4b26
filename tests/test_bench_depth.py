"""The LLM harness's depth option (llama-bench's -d): a test at depth D fills the cache with D ids,
untimed, then times ppN or tgN at positions D.. ; names get @dD, rows carry the depth, every
engine gets the same filling ids in a repetition, and the record validates against the schema.
Engines here are fakes; the llama.cpp runner's positions are checked with a fake context."""

import json
import sys
from pathlib import Path

import pytest

from dasllama.bench import llama_cpp_runner, llm, probe, record
from dasllama.bench.llama_cpp import LlamaCppRunner, parse_llama_bench_json
from dasllama.testing import write_random_model

SCHEMA = json.loads((Path(__file__).resolve().parent.parent / "bench" / "schema.json").read_text())


class DepthEngine:
    """Records (test, tokens, depth) of every run; 1 us a timed token."""

    def __init__(self, name, log, vocab=(512, 1, True)):
        self.name, self.log, self._vocab = name, log, vocab
        self.version, self.threads, self.details = f"{name}-fake", 2, {}
        self.closed = False

    def vocab(self):
        return self._vocab

    def run(self, test, tokens, depth=()):
        self.log.append((self.name, test, list(tokens), list(depth)))
        return 1000 * len(tokens)

    def top(self, tokens, k=5):
        return [1, 2, 3][:k]

    def memory(self):
        return {"peak_rss": 1, "baseline_rss": 1, "peak_scope": "fake"}

    def close(self):
        self.closed = True


class NoDepthEngine(DepthEngine):
    """An engine from before depths: run() takes no depth."""

    def run(self, test, tokens):
        return super().run(test, tokens)


def test_parse_depths():
    assert llm.parse_depths("0") == [0]
    assert llm.parse_depths("0,4096") == [0, 4096]
    assert llm.parse_depths(" 4096 , 0, 4096") == [4096, 0]
    with pytest.raises(llm.BenchError, match="'4k'"):
        llm.parse_depths("4k")
    with pytest.raises(llm.BenchError, match="0 or more"):
        llm.parse_depths("0,-1")


def test_test_names_carry_the_depth():
    assert llm.TestSpec("pp", 512).name == "pp512"
    assert llm.TestSpec("tg", 128, 4096).name == "tg128@d4096"


def test_a_test_at_depth_fills_the_cache_with_the_same_ids_for_every_engine():
    log = []
    a, b = DepthEngine("dasllama", log), DepthEngine("llama.cpp", log)
    tests = [llm.TestSpec("tg", 3, 0), llm.TestSpec("pp", 4, 6)]
    llm.measure("m.gguf", [a, b], tests, reps=2, seed=1, noise_cv=None)
    runs = [r for r in log if r[1] in ("pp", "tg")][2:]          # past the validation prompts
    at_depth = [r for r in runs if r[1] == "pp"]
    assert all(not r[3] for r in runs if r[1] == "tg")            # depth 0: nothing filled
    assert len(at_depth) == 2 + 4                                 # warm-ups, then 2 reps x 2
    assert all(len(r[3]) == 6 and r[3][0] == 1 for r in at_depth)   # BOS first, 6 ids
    timed = at_depth[2:]
    # a repetition's filling ids (and prompt) go to both engines; the next one draws new ones
    assert [r[0] for r in timed] == ["dasllama", "llama.cpp"] * 2
    assert timed[0][2:] == timed[1][2:] and timed[2][2:] == timed[3][2:]
    assert timed[0][3] != timed[2][3]


def test_engines_without_a_depth_still_serve_depth_zero():
    log = []
    e = NoDepthEngine("llama.cpp", log)
    out = llm.measure("m.gguf", [e], [llm.TestSpec("pp", 4)], reps=1, noise_cv=None)
    assert out["samples"]["llama.cpp"]["pp4"] == [4000]
    with pytest.raises(TypeError):       # and a depth test reaches them as an error, not silently
        llm.measure("m.gguf", [e], [llm.TestSpec("pp", 4, 2)], reps=1, noise_cv=None)


def test_benchmark_rows_at_two_depths_validate(tmp_path):
    jsonschema = pytest.importorskip("jsonschema", reason="the test extra installs jsonschema")
    path = write_random_model(tmp_path / "tiny.gguf", "llama", weight_type="Q8_0")
    log, ctx = [], []

    def opener(name):
        def open_engine(p, threads, n_ctx):
            ctx.append(n_ctx)
            return DepthEngine(name, log, (512, 1, False))
        return open_engine

    openers = {"dasllama": opener("dasllama"), "llama.cpp": opener("llama.cpp")}
    result = llm.benchmark([path], openers, threads=2, reps=2, n_prompt=8, n_gen=2,
                           depths=[0, 16], pause=0)
    machine = probe.machine()
    rec = record.finish(result, machine, probe.build(), None, box=probe.box_name(machine))
    jsonschema.validate(rec, SCHEMA)
    assert ctx == [26, 26] and rec["config"]["n_depth"] == [0, 16]
    assert [r["test"] for r in rec["rows"]][::2] == ["pp8", "tg2", "pp8@d16", "tg2@d16"]
    assert [r["depth"] for r in rec["rows"]][::2] == [0, 0, 16, 16]
    bad = json.loads(json.dumps(rec))
    bad["rows"][0]["test"] = "pp8@16"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, SCHEMA)


def test_dasllama_engine_fills_the_cache_before_the_clock_starts():
    class Model:
        def __init__(self, path, **kw):
            self.calls, self.n_vocab = [], 10

        def reset(self):
            self.calls.append("reset")

        def eval(self, ids):
            self.calls.append(len(ids))

    e = llm.DasllamaEngine("x.gguf", threads=2, n_ctx=64, factory=Model)
    e.run("tg", [1, 2], depth=[1, 5, 6, 7])
    e.run("pp", [1, 2, 3])
    assert e.model.calls == ["reset", 4, 1, 1, "reset", 3]


class FakeContext:
    """Records the positions llama.cpp's batches would be decoded at."""

    def __init__(self):
        self.positions = []

    def kv_cache_clear(self):
        self.positions.append("clear")

    def decode(self, batch):
        self.positions.append(batch)

    def synchronize(self):
        pass


def test_the_runner_decodes_the_depth_first_then_times_from_its_end():
    class Cy:
        @staticmethod
        def llama_batch_get_one(tokens, pos):
            return (len(tokens), pos)

    r = object.__new__(llama_cpp_runner.Runner)
    r.cy, r.ctx, r.n_batch = Cy, FakeContext(), 4
    r.run("tg", [7, 8], depth=list(range(6)))
    r.run("pp", [1, 2, 3])
    assert r.ctx.positions == ["clear", (4, 0), (2, 4), (1, 6), (1, 7), "clear", (3, 0)]
    with pytest.raises(ValueError, match="unknown test"):
        r.run("xx", [1])


FAKE_RUNNER = r'''
import json, sys
print(json.dumps({"event": "ready", "version": "b0", "n_vocab": 100, "bos": 1,
                  "add_bos": True, "threads": 2}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    if req["cmd"] == "quit":
        print(json.dumps({"ok": True}), flush=True)
        break
    print(json.dumps({"ok": True, "ns": 1000 * len(req["tokens"]) + len(req.get("depth", []))}),
          flush=True)
'''


def test_the_runner_protocol_carries_the_depth(tmp_path):
    script = tmp_path / "runner.py"
    script.write_text(FAKE_RUNNER)
    peer = LlamaCppRunner("m.gguf", threads=2, n_ctx=32, python=sys.executable, runner=script)
    try:
        assert peer.run("pp", [1, 2]) == 2000
        assert peer.run("pp", [1, 2], depth=[1, 2, 3]) == 2003
    finally:
        peer.close()


def test_llama_bench_json_names_depth_tests():
    text = json.dumps([{"n_prompt": 0, "n_gen": 128, "n_depth": 4096, "samples_ns": [5]},
                       {"n_prompt": 512, "n_gen": 0, "samples_ns": [7]}])
    assert [r["test"] for r in parse_llama_bench_json(text)] == ["tg128@d4096", "pp512"]

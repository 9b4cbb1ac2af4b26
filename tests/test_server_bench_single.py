"""The single-request cell of `dasllama bench serve` (dasllama.bench.serve_single): one request
through `dasllama serve` against LLM.generate on the same prompt ids and tokens.

Run on a random-weight model with a few tiny repetitions: the rows' structure (engines, test,
unit, statistics over the repetitions, the same work on both sides, the pairing that gives the
ratio) and the validation that refuses a comparison of different work. Nothing here asserts a
time.

The record validates against bench/schema.json, which lists the cell's engine (LLM.generate)
and test (single_c1, in t/s) among the serve rows.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from dasllama.bench import record

jsonschema = pytest.importorskip("jsonschema", reason="the test extra installs jsonschema")
pytest.importorskip("fastapi", reason="dasllama serve needs the server extra (in the test extra)")

pytestmark = pytest.mark.timeout(600)

REPS = 3
MAX_TOKENS = 12


def _schema() -> dict:
    return json.loads((Path(__file__).resolve().parent.parent / "bench" / "schema.json")
                      .read_text())


@pytest.fixture(scope="module")
def random_model(tmp_path_factory):
    from dasllama.testing import write_random_model
    return write_random_model(tmp_path_factory.mktemp("single") / "single-random.gguf", "llama",
                              chat_template=True, n_ctx=4096)


@pytest.fixture(scope="module")
def run(random_model):
    """A --single only run on the dasllama engine alone, finished into a record."""
    from dasllama.bench import probe, serve

    notes = []
    result = serve.benchmark([random_model], [serve.dasllama_engine()], threads=1,
                             concurrency=[1], requests=1, max_tokens=MAX_TOKENS, ctx=2048,
                             reps=REPS, pause=0.0, single="only",
                             on_event=lambda kind, **kw: notes.append((kind, kw)))
    machine = probe.machine()
    rec = record.finish(result, machine, probe.build(), None, box=probe.box_name(machine))
    return rec, notes


def test_the_cell_gives_two_paired_rows(run):
    rec, _ = run
    jsonschema.validate(rec, _schema(), format_checker=jsonschema.FormatChecker())
    rows = rec["rows"]
    assert [(r["engine"], r["test"], r["unit"]) for r in rows] == \
        [("dasllama", "single_c1", "t/s"), ("LLM.generate", "single_c1", "t/s")]
    for r in rows:
        assert r["kind"] == "serve" and r["n"] == REPS and len(r["samples"]) == REPS
        assert len(r["samples_ns"]) == REPS and len(r["waited_s"]) == REPS
        # CPU seconds: /proc counts the server's in 10 ms ticks (these requests take less);
        # getrusage counts the harness's in microseconds.
        assert len(r["cpu_s"]) == REPS and all(c >= 0 for c in r["cpu_s"])
        if r["engine"] == "LLM.generate":
            assert all(c > 0 for c in r["cpu_s"])
        assert r["min"] <= r["median"] <= r["max"] and r["median"] == sorted(r["samples"])[1]
        assert r["noisy"] == (r["cv"] > record.NOISE_CV)
        assert (r["concurrency"], r["requests"], r["threads"]) == (1, 1, 1)
        # t/s is the tokens over each repetition's time
        for tps, ns in zip(r["samples"], r["samples_ns"]):
            assert tps == pytest.approx(r["completion_tokens"] * 1e9 / ns)
    served, called = rows
    assert served["completion_tokens"] == called["completion_tokens"] > 0
    assert served["prompt_tokens"] == called["prompt_tokens"] > 0
    assert served["completion_tokens"] <= MAX_TOKENS
    (ours, ref, q), = list(record.pairs(rows))
    assert (ours["engine"], ref["engine"]) == ("dasllama", "LLM.generate")
    assert q == pytest.approx(ours["median"] / ref["median"])
    assert rec["engines"]["LLM.generate"]["version"] == rec["engines"]["dasllama"]["version"]
    assert rec["config"]["single"] == "only"


def test_the_cell_records_its_validation(run):
    rec, notes = run
    (v,) = [v for v in rec["validation"] if v.get("cell") == "single"]
    assert v["same_text"] is True and v["completion_tokens"] == rec["rows"][0]["completion_tokens"]
    reps = [kw["message"] for kind, kw in notes
            if re.search(r"\ssingle\s+\S+\s+rep \d+:", kw.get("message", ""))]
    assert len(reps) == 2 * REPS, reps


def test_the_record_check_bites(run):
    """Negative controls: the schema check above can fail on a wrong unit or a missing field."""
    rec, _ = run
    wrong_unit = copy.deepcopy(rec)
    wrong_unit["rows"][0]["unit"] = "x"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(wrong_unit, _schema())
    no_slots = copy.deepcopy(rec)
    del no_slots["rows"][1]["slots"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(no_slots, _schema())


def test_different_work_is_refused(random_model, monkeypatch):
    """The validation bites: when LLM.generate's text differs from the server's, no figure."""
    from dasllama.bench import serve, serve_single
    from dasllama.bench.serve_load import ServeError

    real = serve_single.time_generate

    def another_text(llm, ids, max_tokens):
        out = real(llm, ids, max_tokens)
        out["text"] += " and one more word"
        return out

    monkeypatch.setattr(serve_single, "time_generate", another_text)
    with pytest.raises(ServeError, match="not the same work"):
        serve.benchmark([random_model], [serve.dasllama_engine()], threads=1,
                        concurrency=[1], requests=1, max_tokens=MAX_TOKENS, ctx=2048, reps=2,
                        pause=0.0, single="only")


def test_single_only_needs_the_dasllama_engine(random_model, tmp_path):
    from dasllama.bench import serve
    from dasllama.bench.llm import BenchError

    peer = serve.Engine("llama.cpp", lambda *a, **k: [], "b0", {})
    with pytest.raises(BenchError, match="dasllama engine"):
        serve.benchmark([random_model], [peer], threads=1, concurrency=[1], requests=1,
                        max_tokens=4, ctx=512, single="only")
    with pytest.raises(BenchError, match="--single"):
        serve.benchmark([random_model], [peer], threads=1, concurrency=[1], requests=1,
                        max_tokens=4, ctx=512, single="sometimes")

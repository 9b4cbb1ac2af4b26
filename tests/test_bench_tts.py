"""``dasllama bench tts``: Pocket TTS against the pocket-tts package, frames pinned.

Fake engines check the structure (validation before timing, one warm-up each, alternating
requests with shared seeds, three rows per engine from the same requests (four where the
requests time their prompt stage), GPU rows paired across GPU APIs, the noisy-cell
re-run, the quiet guard's re-run of a disturbed request, a stop that keeps finished rows), that the record follows bench/schema.json with
every dasllama row paired, and that the board shows the cells. One real run (2 frames, 1
request, the random English model) goes through the command line, dasllama.TTS and the
package's runner process; it needs torch and pocket-tts, which CI installs (there a missing
one fails the test). Nothing here is timed against a bar."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dasllama.bench import board, cli, record, tts
from dasllama.bench.llm import BenchError
from dasllama.bench.pocket_peer import Request
from bench_records import check_record
from requires import require as _require

BENCH = Path(__file__).resolve().parent.parent / "bench"
FRAME = 1920          # samples a frame at 24 kHz, 12.5 frames a second


class FakeEngine:
    """Requests after the validation (the warm-up first) take the (wall, first audio) ns given,
    in order; the validation takes 1 ms. Every request makes ``frames`` frames unless
    ``short`` says fewer."""

    def __init__(self, name, timed=(), tokens=(5, 6, 7), short=None, chunks=1):
        self.name, self.timed = name, list(timed)
        self.version, self.threads, self.details, self.backend = f"{name}-fake", 2, {}, "cpu"
        self.versions = {"version": self.version}
        self.sample_rate, self.frame_size = 24000, FRAME
        self.tokens, self.short, self.chunks = list(tokens), short, chunks
        self.calls, self.closed, self.rss_scope = [], False, "fake"

    def run(self, text, frames, temperature, seed, keep_audio=False):
        self.calls.append((temperature, seed, keep_audio))
        n = (self.short or frames) * FRAME
        audio = np.sin(np.arange(n) / 7.0).astype(np.float32) if keep_audio else None
        wall, first = (1_000_000, 100_000) if keep_audio else self.timed.pop(0)
        return Request(wall, first, n, [self.tokens] * self.chunks, audio)

    def max_rss(self):
        return 1 << 20

    def close(self):
        self.closed = True


WARM = [(1_000_000, 100_000)]       # the warm-up request
STEADY = [(400_000_000, 100_000_000)] * 3
NOISY = [(400_000_000, 100_000_000), (600_000_000, 150_000_000), (300_000_000, 80_000_000)]


def _model():
    return {"file": "pocket-f32.gguf", "sha256": "ab" * 32, "arch": "pocket", "quant": "F32",
            "params": 1000, "file_size": 4000}


def test_requests_alternate_after_validation_and_warm_up():
    ours, peer = FakeEngine("dasllama", WARM + STEADY), FakeEngine("pocket-tts", WARM + STEADY)
    events = []
    got = tts.measure([ours, peer], text="Hello.", frames=50, reps=3, seed=10,
                      on_event=lambda kind, **f: events.append((kind, f)))
    runs = [(f["engine"], f["rep"]) for k, f in events if k == "run"]
    assert runs == [("dasllama", 0), ("pocket-tts", 0), ("dasllama", 1), ("pocket-tts", 1),
                    ("dasllama", 2), ("pocket-tts", 2)]
    for e in (ours, peer):
        # validation at temperature 0 with the audio, one warm-up, then seeds 10, 11, 12
        assert e.calls[0] == (0.0, 0, True)
        assert e.calls[1][0] == 0.3 and e.calls[1][1] not in (10, 11, 12)
        assert [c[1] for c in e.calls[2:]] == [10, 11, 12]
    v = got["validation"]
    assert v["tokens_agree"] and v["samples"] == {"dasllama": 50 * FRAME, "pocket-tts": 50 * FRAME}
    assert v["audio_rel_l2"] == 0.0
    assert not got["reruns"]


def test_three_rows_per_engine_from_the_same_requests():
    ours = FakeEngine("dasllama", WARM + [(400_000_000, 100_000_000),
                                          (500_000_000, 120_000_000)])
    got = tts.measure([ours], text="Hello.", frames=50, reps=2, noise_cv=None)
    rows = tts.rows_for(ours, _model(), got["requests"]["dasllama"], 24000, text="Hello.",
                        quant="F32")
    by_test = {r["test"]: r for r in rows}
    assert [r["test"] for r in rows] == ["request_wall", "first_audio", "rtf"]
    assert by_test["request_wall"]["samples"] == [400.0, 500.0]
    assert by_test["first_audio"]["samples"] == [100.0, 120.0]
    # 50 frames of 80 ms = 4 s of audio in 0.4 s and 0.5 s
    assert by_test["rtf"]["samples"] == pytest.approx([10.0, 8.0])
    assert by_test["rtf"]["unit"] == "x" and by_test["first_audio"]["unit"] == "ms"
    assert all(r["audio_seconds"] == 4.0 and r["kind"] == "tts" for r in rows)


def test_a_prompt_stage_row_when_every_request_times_its_prompt():
    """Requests that carry prompt_ns give a fourth row, prompt_stage (ms), from the same
    requests; one request without it (an engine that does not time its prompt) gives none."""
    def req(wall, prompt):
        return Request(wall, wall // 4, 50 * FRAME, [], None, prompt_ns=prompt)

    ours = FakeEngine("dasllama")
    rows = tts.rows_for(ours, _model(), [req(400_000_000, 3_000_000),
                                         req(500_000_000, 5_000_000)], 24000,
                        text="Hello.", quant="F32")
    by_test = {r["test"]: r for r in rows}
    assert [r["test"] for r in rows] == ["request_wall", "first_audio", "rtf", "prompt_stage"]
    assert by_test["prompt_stage"]["samples"] == [3.0, 5.0]
    assert by_test["prompt_stage"]["samples_ns"] == [3_000_000, 5_000_000]
    assert by_test["prompt_stage"]["unit"] == "ms"
    rows = tts.rows_for(ours, _model(), [req(400_000_000, 3_000_000), req(500_000_000, None)],
                        24000, text="Hello.", quant="F32")
    assert [r["test"] for r in rows] == ["request_wall", "first_audio", "rtf"]


def test_a_gpu_row_pairs_with_the_reference_on_another_gpu_api_not_with_a_cpu_row():
    """pair_key compares backend classes: dasllama on Vulkan pairs with the package on CUDA
    (the same run's GPU rows), never with a CPU row of the package."""
    def row(engine, backend, median):
        return {"kind": "tts", "engine": engine, "backend": backend, "model": "m.gguf",
                "test": "request_wall", "median": median}

    found = list(record.pairs([row("dasllama", "vulkan", 50.0), row("pocket-tts", "cuda", 800.0)]))
    assert [(o["backend"], r["backend"], q) for o, r, q in found] == [("vulkan", "cuda", 0.0625)]
    assert not list(record.pairs([row("dasllama", "vulkan", 50.0),
                                  row("pocket-tts", "cpu", 800.0)]))
    assert not list(record.pairs([row("dasllama", "cpu", 50.0),
                                  row("pocket-tts", "cuda", 800.0)]))


def test_a_noisy_engine_is_run_once_more_and_stays_marked():
    ours, peer = FakeEngine("dasllama", WARM + NOISY + NOISY), FakeEngine("pocket-tts",
                                                                        WARM + STEADY)
    events = []
    got = tts.measure([ours, peer], text="Hello.", frames=50, reps=3,
                      on_event=lambda kind, **f: events.append((kind, f)))
    assert [f["engines"] for k, f in events if k == "rerun"] == [["dasllama"]]
    assert [f["engine"] for k, f in events if k == "run" and f["attempt"]] == ["dasllama"] * 3
    assert "pocket-tts" not in got["reruns"]
    rows = tts.rows_for(ours, _model(), got["requests"]["dasllama"], 24000, text="Hello.",
                        quant="F32", first_attempt=got["reruns"]["dasllama"])
    assert all(r["reruns"] == 1 and r["noisy"] and r["first_cv"] > 0.03 for r in rows)
    assert rows[0]["first_samples_ns"] == [w for w, _ in NOISY]


def test_quiet_wait_runs_a_disturbed_request_again(monkeypatch):
    """--quiet-wait: a request during which others used 5 CPU seconds is run again; the rows
    keep the seconds waited, others' CPU of the kept request and the discarded wall time.
    Without it the load is recorded and nothing is run twice."""
    from dasllama.bench import quiet
    busy = iter([0.0, 5.0] + [10.0, 10.0] * 100)   # the first request: 5 s of others' CPU
    monkeypatch.setattr(quiet, "machine_busy_s", lambda: next(busy))
    monkeypatch.setattr(quiet, "wait_quiet", lambda processes, limit: 0.25)
    ours = FakeEngine("dasllama", [(400_000_000, 100_000_000), (300_000_000, 90_000_000)])
    got = tts._guarded_run(ours, [], "Hello.", 50, 0.3, 1, quiet_wait=5.0)
    assert len(ours.calls) == 2 and got.discarded == [400_000_000]
    assert got.others_cpu_s == pytest.approx(0.0) and got.waited_s == 0.25
    rows = {r["test"]: r for r in tts.rows_for(ours, _model(), [got], 24000, text="Hello.",
                                                quant="F32")}
    assert rows["request_wall"]["disturbed_samples"] == [400.0]
    assert rows["request_wall"]["samples"] == [300.0]
    assert rows["rtf"]["waited_s"] == [0.25] and "disturbed_samples" not in rows["rtf"]
    busy = iter([0.0, 5.0])
    plain = FakeEngine("dasllama", [(400_000_000, 100_000_000)])
    got = tts._guarded_run(plain, [], "Hello.", 50, 0.3, 1, quiet_wait=0.0)
    assert len(plain.calls) == 1 and got.discarded == [] and got.waited_s == 0.0
    assert got.others_cpu_s == pytest.approx(5.0, abs=0.5)   # less the harness's own CPU


@pytest.mark.parametrize("bad", ["tokens", "frames", "chunks"])
def test_validation_refuses_engines_that_do_not_do_the_same_work(bad):
    peer = FakeEngine("pocket-tts", WARM + STEADY)
    ours = {"tokens": FakeEngine("dasllama", WARM + STEADY, tokens=(5, 6, 8)),
            "frames": FakeEngine("dasllama", WARM + STEADY, short=49),
            "chunks": FakeEngine("dasllama", WARM + STEADY, chunks=2)}[bad]
    with pytest.raises(BenchError, match={"tokens": "different token ids", "frames":
                                          "pinned at 50 frames", "chunks": "2 chunks"}[bad]):
        tts.measure([ours, peer], text="Hello.", frames=50, reps=3)
    assert len(ours.calls) == 1          # refused before any timed request


def _fake_benchmark(monkeypatch, models, ours_runs, peer_runs, **kw):
    monkeypatch.setattr(tts, "model_info", lambda path, n_ctx: {**_model(), "file": Path(
        path).name})
    opened = []

    def open_ours(path, threads):
        opened.append(FakeEngine("dasllama", ours_runs.pop(0)))
        return opened[-1]
    peer = FakeEngine("pocket-tts", [x for runs in peer_runs for x in runs])
    result = tts.benchmark(models, open_ours, lambda threads: peer, threads=2, reps=3,
                           frames=50, **kw)
    return result, opened, peer


def test_a_record_of_two_lanes_follows_the_schema_and_shows_on_the_board(monkeypatch,
                                                                         tmp_path):
    result, opened, peer = _fake_benchmark(
        monkeypatch, ["p-f32.gguf", "p-q8_0.gguf"], [WARM + STEADY, WARM + STEADY],
        [WARM + STEADY, WARM + STEADY])
    assert all(e.closed for e in opened) and peer.closed
    assert len(result["rows"]) == 12
    rec = record.finish(result, {"cpu": "Fake CPU", "arch": "x86_64", "flags": [],
                                 "logical_cores": 2, "memory_bytes": 1 << 30, "os": "Linux"},
                        {"version": "0.1.0"}, None, box="fake-2c")
    check_record(rec)
    found = list(record.pairs(rec["rows"]))
    assert len(found) == 6 and {ours["model"] for ours, _, _ in found} == {"p-f32.gguf",
                                                                          "p-q8_0.gguf"}
    table = record.format_table(rec)
    assert "request_wall" in table and "dasllama/pocket-tts" in table
    pytest.importorskip("jinja2", reason="the board needs jinja2 (test extra)")
    index = board.render([rec], tmp_path, charts=False)
    text = index.read_text()
    for test in ("request_wall", "first_audio", "rtf"):
        assert f'data-model="p-q8_0.gguf" data-test="{test}"' in text
    # a broken pairing is caught: drop the peer's rtf row of one lane
    rec["rows"] = [r for r in rec["rows"] if not (r["engine"] == "pocket-tts" and
                                                  r["test"] == "rtf" and
                                                  r["model"] == "p-f32.gguf")]
    with pytest.raises(AssertionError, match="no reference row"):
        check_record(rec)


def test_a_stop_keeps_the_finished_lane(monkeypatch):
    class Interrupting(FakeEngine):
        def run(self, *a, **k):
            raise KeyboardInterrupt
    monkeypatch.setattr(tts, "model_info", lambda path, n_ctx: {**_model(), "file": path})
    engines = iter([FakeEngine("dasllama", WARM + STEADY), Interrupting("dasllama")])
    peer = FakeEngine("pocket-tts", WARM + STEADY)
    result = tts.benchmark(["a.gguf", "b.gguf"], lambda path, threads: next(engines),
                           lambda threads: peer, threads=2, reps=3, frames=50)
    assert len(result["rows"]) == 6 and result["stopped"]["rows_planned"] == 12
    assert result["stopped"]["during"]["model"] == "b.gguf" and peer.closed


def test_the_command_line_parses_and_refuses_a_gguf_without_its_source(tmp_path):
    import argparse
    p = argparse.ArgumentParser()
    cli._add_bench_parser(p.add_subparsers())
    args = p.parse_args(["bench", "tts", "--lane", "f32,q8_0", "--frames", "7", "-t", "2"])
    assert args.run is cli.run_tts and args.frames == 7 and args.lane == ["f32,q8_0"]
    fake = tmp_path / "x.gguf"
    fake.write_bytes(b"GGUF")
    args = p.parse_args(["bench", "tts", "--model", str(fake)])
    with pytest.raises(BenchError, match="--checkpoint"):
        cli.run_tts(args)
    with pytest.raises(BenchError, match="lane 'q4'"):
        tts.random_model(tmp_path, ["q4"])


# =============================================================================================
# The real engines: one short run
# =============================================================================================

@pytest.fixture(scope="module")
def fx():
    _require("torch")
    _require("pocket_tts")
    _require("tokenizers")
    from dasllama.testing.pocket import shared_fixture
    return shared_fixture(("f32",))


def test_pinned_frames_in_dasllama(fx):
    """TTS.stream(max_frames=, eos=False) makes exactly that many frames; with EOS on and a
    threshold every logit passes (the negative control) the chunk ends elsewhere."""
    import dasllama
    from dasllama.errors import TTSInputError
    with dasllama.TTS(fx.gguf_path("f32"), n_threads=2) as t:
        audio, _ = t.speak(tts.TEXT, seed=1, max_frames=9, eos=False)
        print("pinned:", t.stats["frames"], "frames,", len(audio), "samples")
        assert t.stats["frames"] == 9 and len(audio) == 9 * t.config["frame_size"]
        early, _ = t.speak(tts.TEXT, seed=1, eos_threshold=-1e9, frames_after_eos=0)
        print("EOS on, threshold -1e9:", t.stats["frames"], "frames")
        assert t.stats["frames"] != 9
        with pytest.raises(TTSInputError, match="max_frames"):
            t.speak(tts.TEXT, max_frames=0)


def test_a_real_short_run_through_the_command_line(fx, tmp_path, capsys):
    out = tmp_path / "tts-{box}.json"
    argv = ["bench", "tts", "--model", str(fx.gguf_path("f32")), "--checkpoint",
            str(fx.checkpoint), "--tokenizer", str(fx.tokenizer), "--frames", "2", "--reps",
            "1", "-t", "2", "--pause", "0", "-o", str(out)]
    from dasllama.cli import main
    assert main(argv) == 0
    printed = capsys.readouterr()
    print(printed.out)
    written = list(tmp_path.glob("tts-*.json"))
    assert len(written) == 1
    rec = json.loads(written[0].read_text())
    check_record(rec)
    # Four rows an engine: both time their prompt stage.
    assert rec["complete"] and len(rec["rows"]) == 8
    prompts = [r for r in rec["rows"] if r["test"] == "prompt_stage"]
    assert sorted(r["engine"] for r in prompts) == ["dasllama", "pocket-tts"]
    assert all(0 < r["median"] < r2["median"] for r in prompts for r2 in rec["rows"]
               if r2["engine"] == r["engine"] and r2["test"] == "request_wall")
    v = rec["validation"][0]
    print("validation:", v)
    assert v["tokens_agree"] and v["samples"] == {"dasllama": 2 * FRAME,
                                                  "pocket-tts": 2 * FRAME}
    assert all(r["audio_seconds"] == pytest.approx(0.16) for r in rec["rows"])
    assert rec["engines"]["pocket-tts"]["version"] == "4.0.1"
    assert rec["engines"]["pocket-tts"]["torch_threads"] == 2
    assert "dasllama/pocket-tts" in printed.out

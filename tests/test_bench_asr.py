"""``dasllama bench asr``: Whisper in dasllama against faster-whisper on the same weights.
Fake runners check the structure (validation before timing, which is also the warm-up;
alternating requests; three rows per engine and cell from the same requests; the noisy re-run;
the disturbed-request re-run of --quiet-wait; a stop keeps the finished cells; the memory
pass, first), that the record follows bench/schema.json with every dasllama row paired, and that
failures name what failed. The built clips and the word error rate are checked on known
inputs. One real run (a 6 s clip, one request, float32, beam 1) goes through the command line
and both runner processes. Nothing here is timed against a bar."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from dasllama.bench import asr, cli, record
from dasllama.bench.llm import BenchError
from bench_records import check_record
from requires import require

BENCH = Path(__file__).resolve().parent.parent / "bench"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "asr"
SR = asr.SAMPLE_RATE


def finish(result: dict) -> dict:
    return record.finish(result, {"cpu": "Fake CPU", "arch": "x86_64", "flags": [],
                                  "logical_cores": 2, "memory_bytes": 1 << 30, "os": "Linux"},
                         {"version": "0.1.0"}, None, box="fake-2c")


# =============================================================================================
# clips and word errors
# =============================================================================================

def test_built_clips_are_exact_whole_sources_with_gaps_and_silence():
    a = np.full(3 * SR, 0.5, np.float32)
    b = np.full(2 * SR, -0.25, np.float32)
    clip = asr.build_clip([a, b], 10.0, gap_s=0.5)
    assert clip.dtype == np.float32 and clip.size == 10 * SR
    gap = SR // 2
    # a, gap, b, gap, a (3 + .5 + 2 + .5 + 3 = 9 s); b no longer fits: 1 s of silence
    assert np.all(clip[:3 * SR] == 0.5)
    assert np.all(clip[3 * SR:3 * SR + gap] == 0)
    assert np.all(clip[3 * SR + gap:5 * SR + gap] == -0.25)
    assert np.all(clip[6 * SR:9 * SR] == 0.5)
    assert np.all(clip[9 * SR:] == 0)
    assert np.array_equal(clip, asr.build_clip([a, b], 10.0, gap_s=0.5))   # deterministic
    # a source that does not fit is skipped, the next one that fits is taken
    c = asr.build_clip([np.ones(4 * SR, np.float32), b], 5.0, gap_s=0.5)
    assert np.all(c[:4 * SR] == 1) and np.all(c[4 * SR:] == 0)
    with pytest.raises(BenchError, match="no source clip fits in 1.0 s"):
        asr.build_clip([a, b], 1.0)
    with pytest.raises(BenchError, match="no source clips"):
        asr.build_clip([], 5.0)


def test_clips_from_the_fixtures_have_the_asked_lengths():
    require("soundfile")
    sources = asr.load_sources(FIXTURES)
    assert len(sources) == len(asr.FIXTURE_ORDER)
    for seconds in asr.CLIP_SECONDS:
        clip = asr.build_clip(sources, seconds)
        assert clip.size == seconds * SR
        # mostly speech, not mostly padding
        assert np.count_nonzero(np.abs(clip) > 1e-3) > 0.5 * clip.size * 0.5
    with pytest.raises(BenchError, match="missing us_plain.flac"):
        asr.load_sources(BENCH)


@pytest.mark.parametrize("hyp, ref, wer", [
    ("The quick brown fox.", "the quick brown fox", 0.0),
    ("the quick brown box", "the quick brown fox", 0.25),      # one substitution
    ("the quick fox", "the quick brown fox", 0.25),             # one deletion
    ("the very quick brown fox", "the quick brown fox", 0.25),  # one insertion
    ("", "a b", 1.0),
    ("", "", 0.0),
])
def test_word_error_rate(hyp, ref, wer):
    assert asr.word_errors(hyp, ref) == pytest.approx(wer)


def test_test_names_follow_the_schema_pattern():
    schema = json.loads((BENCH / "schema.json").read_text())
    asr_rule = next(r for r in schema["$defs"]["row"]["allOf"]
                    if r["if"]["properties"]["kind"].get("const") == "asr")
    pattern = re.compile(asr_rule["then"]["properties"]["test"]["pattern"])
    names = {asr.test_name(t, s, c, b) for t, _ in asr.TESTS for s in asr.CLIP_SECONDS
             for c in asr.COMPUTE_TYPES for b in asr.BEAMS}
    assert len(names) == 3 * 3 * 2 * 2 and "rtf_300sint8b5" in names
    assert all(pattern.fullmatch(n) for n in names)


# =============================================================================================
# fake runners: the structure
# =============================================================================================

class FakeRunner:
    """Timed requests take the wall ns given, in order (first segment at a quarter of it);
    the validation takes 1 ms. Every request says ``text``."""

    backend, device = "cpu", None

    def __init__(self, name, compute_type="int8", timed=(), text=" hello there",
                 tokens=(1, 2), threads=2):
        self.name, self.compute_type, self.timed = name, compute_type, list(timed)
        self.version, self.threads = f"{name}-fake", threads
        self.details = {"version": self.version, "model_file": "m.bin",
                        "model_file_size": 4000}
        self.text, self.tokens = text, list(tokens)
        self.baseline_rss, self.loaded_rss = 10 << 20, 20 << 20
        self.calls, self.closed, self.validated = [], False, False

    def run(self, clip, beam):
        self.calls.append((Path(clip).name, beam))
        if not self.validated:
            self.validated = True
            wall = 1_000_000
        else:
            wall = self.timed.pop(0) if self.timed else 400_000_000
        return asr.Request(wall, wall // 4, self.text, list(self.tokens))

    def peak_rss(self):
        return 30 << 20

    def cpu_seconds(self):
        return 0.0

    def close(self):
        self.closed = True


def _fake(monkeypatch, factory, **kw):
    monkeypatch.setattr(asr, "model_source", lambda m: Path("/models/whisper-fake"))
    monkeypatch.setattr(asr, "model_info", lambda folder: {
        "file": "whisper-fake", "sha256": "ab" * 32, "arch": "whisper", "params": 1000,
        "file_size": 4000})
    monkeypatch.setattr(asr, "load_sources", lambda folder: [np.ones(4 * SR, np.float32)])
    opened = []

    def open_runner(engine, folder, ct, threads):
        r = factory(engine, ct)
        opened.append(r)
        return r
    kw.setdefault("clip_seconds", (5,))
    kw.setdefault("beams", (1,))
    kw.setdefault("compute_types", ("int8",))
    result = asr.benchmark("whisper-fake", threads=2, reps=3, pause=0, clips=Path("."),
                           open_runner=open_runner, **kw)
    return result, opened


def test_requests_alternate_after_validation_and_rows_pair(monkeypatch):
    result, opened = _fake(monkeypatch, lambda e, ct: FakeRunner(e, ct),
                           clip_seconds=(5, 9), beams=(1, 5), compute_types=("int8", "float32"))
    cells = 2 * 2 * 2
    assert len(result["rows"]) == 3 * 2 * cells
    timed = [r for r in opened if r.calls and len(r.calls) > 1]
    # first the memory pass: a runner per (precision, engine) for one request on the longest
    # clip; then per precision one runner per engine serving 4 cells of 1 + 3 requests
    assert len(opened) == 2 * 2 + 2 * 2 and len(timed) == 4
    for r in timed:
        assert r.calls == [(c, b) for b in (1, 5) for c in ("clip_5s.npy", "clip_9s.npy")
                           for _ in range(4)]
    memory_runners = opened[:4]
    assert all(r.calls == [("clip_9s.npy", 5)] for r in memory_runners)
    assert all(r.closed for r in opened)
    rec = finish(result)
    check_record(rec)
    found = list(record.pairs(rec["rows"]))
    assert len(found) == 3 * cells
    assert {o["test"] for o, _, _ in found} >= {"rtf_9sint8b5", "request_wall_5sf32b1",
                                                "first_text_9sf32b1"}
    row = next(r for r in rec["rows"] if r["test"] == "rtf_9sint8b5")
    assert row["median"] == pytest.approx(9 / 0.4) and row["audio_seconds"] == 9
    assert row["beam_size"] == 5 and row["quant"] == "int8"
    first = next(r for r in rec["rows"] if r["test"] == "first_text_5sint8b1")
    assert first["median"] == pytest.approx(100.0)
    assert [v["texts_identical"] for v in rec["validation"]] == [True] * cells
    assert len(rec["memory"]) == 4 and rec["memory"][0]["peak_rss"] == 30 << 20
    assert rec["memory"][0]["clip_seconds"] == 9 and rec["memory"][0]["beam_size"] == 5
    assert "rtf_9sint8b5" in record.format_table(rec)
    summary = asr.format_summary(rec)
    assert "9sint8b5" in summary and "identical" in summary


def test_different_transcripts_are_reported_with_their_word_error_rate(monkeypatch):
    texts = {"dasllama": " the quick brown box", "faster-whisper": " the quick brown fox"}
    result, _ = _fake(monkeypatch, lambda e, ct: FakeRunner(e, ct, text=texts[e]),
                      memory=False)
    v = result["validation"][0]
    assert v["texts_identical"] is False and v["tokens_identical"] is True
    assert v["wer"] == pytest.approx(0.25) and v["texts"] == texts
    assert "differ (WER 0.250)" in asr.format_summary(finish(result))


def test_whisper_cpp_is_a_second_peer_compared_by_text(monkeypatch):
    texts = {"dasllama": " the quick brown box", "faster-whisper": " the quick brown box",
             "whisper.cpp": " the quick  brown fox"}
    timed = {"dasllama": [100_000_000] * 3, "faster-whisper": [200_000_000] * 3,
             "whisper.cpp": [400_000_000] * 3}
    result, opened = _fake(monkeypatch, lambda e, ct: FakeRunner(
        e, ct, text=texts[e], timed=timed[e], tokens=() if e == "whisper.cpp" else (1, 2)),
        engines=asr.ALL_ENGINES, memory=False)
    v = result["validation"][0]
    assert v["texts_identical"] is True                  # against faster-whisper
    assert v["whisper_cpp"] == {"texts_identical": False, "wer": pytest.approx(0.25)}
    assert v["texts"]["whisper.cpp"] == texts["whisper.cpp"]
    rec = finish(result)
    check_record(rec)
    assert {r["engine"] for r in rec["rows"]} == set(asr.ALL_ENGINES)
    summary = asr.format_summary(rec)
    print(summary)
    line = next(x for x in summary.splitlines() if x.startswith("5sint8b1"))
    # rtf 50, 25 and 12.5: dasllama 2x faster-whisper and 4x whisper.cpp
    assert line.split()[1:6] == ["50.0", "25.0", "2.00", "12.5", "4.00"]
    assert "identical, whisper.cpp WER 0.250" in line
    # spacing between segments alone is no difference
    texts["whisper.cpp"] = " the quick  brown box"
    result, _ = _fake(monkeypatch, lambda e, ct: FakeRunner(e, ct, text=texts[e]),
                      engines=asr.ALL_ENGINES, memory=False)
    assert result["validation"][0]["whisper_cpp"]["texts_identical"] is True


def test_a_noisy_engine_is_run_once_more_and_keeps_its_first_attempt(monkeypatch):
    steady = [400_000_000] * 3
    noisy = [400_000_000, 600_000_000, 300_000_000]
    timings = {"dasllama": noisy + steady, "faster-whisper": steady}
    result, opened = _fake(monkeypatch, lambda e, ct: FakeRunner(e, ct, timed=timings[e]),
                           memory=False)
    ours = next(r for r in result["rows"] if r["engine"] == "dasllama" and
                r["test"].startswith("rtf"))
    peer = next(r for r in result["rows"] if r["engine"] == "faster-whisper" and
                r["test"].startswith("rtf"))
    assert ours["reruns"] == 1 and ours["first_samples_ns"] == noisy
    assert ours["first_cv"] > record.NOISE_CV and not ours["noisy"]
    assert peer["reruns"] == 0 and "first_cv" not in peer
    assert len(opened[0].calls) == 1 + 6 and len(opened[1].calls) == 1 + 3


def test_quiet_wait_runs_a_disturbed_request_again(monkeypatch):
    from dasllama.bench import quiet
    busy = iter([0.0, 5.0] + [10.0, 10.0] * 100)   # the first request: 5 s of others' CPU
    monkeypatch.setattr(quiet, "machine_busy_s", lambda: next(busy))
    monkeypatch.setattr(quiet, "wait_quiet", lambda runners, limit: 0.25)
    r = FakeRunner("dasllama")
    r.validated = True
    got = asr._guarded_run(r, [r], Path("c.npy"), 1, quiet_wait=5.0)
    assert len(r.calls) == 2 and got.discarded == [400_000_000]
    assert got.others_cpu_s == pytest.approx(0.0) and got.waited_s == 0.25
    rows = asr.rows_for(r, {"file": "w", "sha256": "ab" * 32, "arch": "whisper",
                            "params": 1}, [got], 5.0, 1)
    rtf = next(x for x in rows if x["test"].startswith("rtf"))
    assert rtf["disturbed_samples"] == [pytest.approx(12.5)] and rtf["waited_s"] == [0.25]


def test_a_stop_keeps_the_finished_cells(monkeypatch):
    class Interrupting(FakeRunner):
        def run(self, clip, beam):
            if "9s" in Path(clip).name:
                raise KeyboardInterrupt
            return super().run(clip, beam)
    result, opened = _fake(monkeypatch, lambda e, ct: Interrupting(e, ct), clip_seconds=(5, 9),
                           memory=False)
    assert len(result["rows"]) == 6 and result["stopped"]["rows_planned"] == 12
    assert result["stopped"]["during"]["cell"] == "9s int8 beam 1"
    assert all(r.closed for r in opened)
    rec = finish(result)
    assert rec["complete"] is False
    check_record(rec)


def test_failures_name_what_failed(monkeypatch, tmp_path):
    with pytest.raises(BenchError, match="compute type 'int4'"):
        asr.benchmark("m", threads=2, reps=1, compute_types=("int4",))
    with pytest.raises(BenchError, match="beam sizes must be positive"):
        asr.benchmark("m", threads=2, reps=1, beams=(0,))
    # a .gguf is not something faster-whisper reads
    fake = tmp_path / "w.gguf"
    fake.write_bytes(b"GGUF")
    with pytest.raises(BenchError, match="not a CTranslate2 Whisper directory"):
        asr.model_source(str(fake))
    with pytest.raises(BenchError, match="reps must be at least 1"):
        asr.measure_cell([FakeRunner("dasllama")], Path("c"), 5.0, 1, reps=0)
    # a runner that cannot load its model says which engine and why
    bad = tmp_path / "empty-model"
    bad.mkdir()
    with pytest.raises(BenchError, match=r"dasllama \(float32\) did not start.*empty-model"):
        asr.Runner("dasllama", bad, "float32", 1, work=tmp_path)


def test_the_command_line_parses_lists():
    import argparse
    p = argparse.ArgumentParser()
    cli._add_bench_parser(p.add_subparsers())
    args = p.parse_args(["bench", "asr", "-m", "whisper-tiny.en", "--beam", "1,5",
                         "--compute-type", "int8", "--seconds", "10", "--seconds", "60",
                         "--quiet-wait", "30"])
    assert args.run is asr.run_asr and args.quiet_wait == 30 and args.engine == "both"
    assert p.parse_args(["bench", "asr", "--engine", "all"]).engine == "all"
    assert asr._list(args.beam, asr.BEAMS, int) == (1, 5)
    assert asr._list(args.seconds, asr.CLIP_SECONDS, float) == (10.0, 60.0)
    assert asr._list(None, asr.COMPUTE_TYPES, str) == asr.COMPUTE_TYPES
    with pytest.raises(BenchError, match="cannot read"):
        asr._list(["1,x"], asr.BEAMS, int)


# =============================================================================================
# The real engines: one short run
# =============================================================================================

def test_a_real_short_run_through_the_command_line(real_model, tmp_path, capsys):
    require("faster_whisper")
    require("soundfile")
    real_model("whisper-tiny.en")
    out = tmp_path / "asr-{box}.json"
    argv = ["bench", "asr", "-m", "whisper-tiny.en", "--seconds", "6", "--beam", "1",
            "--compute-type", "float32", "--reps", "1", "-t", "2", "--pause", "0",
            "-o", str(out)]
    from dasllama.cli import main
    assert main(argv) == 0
    printed = capsys.readouterr()
    print(printed.out)
    written = list(tmp_path.glob("asr-*.json"))
    assert len(written) == 1
    rec = json.loads(written[0].read_text())
    check_record(rec)
    assert rec["complete"] and len(rec["rows"]) == 6
    v = rec["validation"][0]
    print("validation:", v)
    # float32 on both sides: the parity lane gives the same transcript of the 6 s clip
    assert v["texts_identical"] and v["tokens_identical"] and v["wer"] == 0.0
    assert v["words"]["dasllama"] > 5
    assert rec["engines"]["faster-whisper"]["version"] == "1.2.1"
    assert rec["engines"]["faster-whisper"]["float32"]["cpu_threads"] == 2
    mem = {m["engine"]: m for m in rec["memory"]}
    assert set(mem) == {"dasllama", "faster-whisper"}
    assert all(m["peak_rss"] >= m["loaded_rss"] > m["baseline_rss"] > 0 for m in mem.values())


def test_a_real_short_run_with_whisper_cpp(real_model, tmp_path, capsys):
    """whisper.cpp on the F16 ggml file the writer makes from the same folder: its rows, its
    file's details and its transcript within the engines' word error rate of dasllama's."""
    require("faster_whisper")
    require("pywhispercpp")
    require("soundfile")
    real_model("whisper-tiny.en")
    out = tmp_path / "asr-{box}.json"
    argv = ["bench", "asr", "-m", "whisper-tiny.en", "--seconds", "6", "--beam", "1",
            "--compute-type", "float32", "--reps", "1", "-t", "2", "--pause", "0",
            "--engine", "all", "--no-memory", "-o", str(out)]
    from dasllama.cli import main
    assert main(argv) == 0
    print(capsys.readouterr().out)
    rec = json.loads(next(tmp_path.glob("asr-*.json")).read_text())
    check_record(rec)
    assert {r["engine"] for r in rec["rows"]} == set(asr.ALL_ENGINES)
    w = rec["engines"]["whisper.cpp"]["float32"]
    assert w["ggml_type"] == "F16" and w["model_file"].endswith(".f16.ggml.bin")
    v = rec["validation"][0]
    print("validation:", v)
    # the engines' decoding rules differ a little (test_convert_whisper_ggml's bar)
    assert v["whisper_cpp"]["wer"] <= 0.10
    first = next(r for r in rec["rows"]
                 if r["engine"] == "whisper.cpp" and r["test"] == "first_text_6sf32b1")
    wall = next(r for r in rec["rows"]
                if r["engine"] == "whisper.cpp" and r["test"] == "request_wall_6sf32b1")
    assert 0 < first["median"] <= wall["median"]

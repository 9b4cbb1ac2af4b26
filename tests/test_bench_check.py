"""The regression check (dasllama bench check / --check) on synthetic records: a row more than
5% worse than the stored mean fails, past 3% warns, both edges exact, in both directions
(throughput: lower is worse; milliseconds: higher is worse)."""

import copy
import json

import pytest

from dasllama.bench import check, cli, record


def _row(engine, test, mean, unit="t/s", kind="llm"):
    r = {"kind": kind, "engine": engine, "backend": "cpu", "version": "v", "threads": 2,
         "model": "m.gguf", "model_sha256": "a" * 64, "arch": "llama", "quant": "Q4_0",
         "params": 10, "test": test, "unit": unit, "n": 5, "mean": mean, "sd": 0.0,
         "median": mean, "min": mean, "max": mean, "cv": 0.0, "noisy": False}
    return r


def _record(box, rows, created="2026-12-01T00:00:00Z"):
    return {"schema": record.SCHEMA, "created": created, "complete": True, "box": box,
            "machine": {"cpu": "AMD EPYC", "arch": "x86_64", "flags": [], "logical_cores": 2,
                        "memory_bytes": 1, "os": "Linux"},
            "build": {"version": "0.1.0"}, "config": {"reps": 5, "threads": 2},
            "engines": {}, "rows": rows}


STORED = _record("amd-epyc-2c", [_row("dasllama", "pp512", 100.0),
                                 _row("llama.cpp", "pp512", 50.0),
                                 _row("dasllama", "tg128", 200.0),
                                 _row("llama.cpp", "tg128", 100.0)])


def _new(pp, tg=200.0, box="amd-epyc-2c"):
    return _record(box, [_row("dasllama", "pp512", pp), _row("llama.cpp", "pp512", 50.0),
                         _row("dasllama", "tg128", tg), _row("llama.cpp", "tg128", 100.0)],
                   created="2026-12-02T00:00:00Z")


@pytest.mark.parametrize("pp, status", [
    (100.0, "ok"), (110.0, "ok"),             # faster is never a regression
    (97.0, "ok"),                             # exactly 3% below: not past the warning edge
    (96.99, "warn"),                          # just past 3%
    (95.0, "warn"),                           # exactly 5% below: warns, does not fail
    (94.99, "fail"),                          # just past 5%
    (80.0, "fail")])
def test_throughput_edges(pp, status):
    findings = check.compare(_new(pp), [STORED])
    by_test = {f.row["test"]: f for f in findings}
    assert set(by_test) == {"pp512", "tg128"}            # only dasllama's rows decide
    print(pp, by_test["pp512"].drop)
    assert by_test["pp512"].status == status
    assert by_test["tg128"].status == "ok"
    assert check.exit_code(findings) == (1 if status == "fail" else 0)


@pytest.mark.parametrize("ms, status", [(100.0, "ok"), (90.0, "ok"), (103.0, "ok"),
                                         (103.01, "warn"), (105.0, "warn"), (105.01, "fail")])
def test_milliseconds_are_worse_when_higher(ms, status):
    stored = _record("box-2c", [_row("dasllama", "first_audio", 100.0, "ms", "tts"),
                                _row("pocket-tts", "first_audio", 150.0, "ms", "tts")])
    new = _record("box-2c", [_row("dasllama", "first_audio", ms, "ms", "tts"),
                             _row("pocket-tts", "first_audio", 150.0, "ms", "tts")])
    (f,) = check.compare(new, [stored])
    assert f.status == status and f.reference_drop == 0.0


def test_only_the_same_box_file_and_threads_compare():
    other_box = check.compare(_new(50.0, box="intel-xeon-2c"), [STORED])
    assert {f.status for f in other_box} == {"new"} and check.exit_code(other_box) == 2
    new = _new(50.0)
    for r in new["rows"]:
        r["model_sha256"] = "b" * 64                  # same name, other file
    assert {f.status for f in check.compare(new, [STORED])} == {"new"}
    new = _new(50.0)
    for r in new["rows"]:
        r["threads"] = 4
    assert {f.status for f in check.compare(new, [STORED])} == {"new"}


def test_the_newest_stored_record_of_a_box_counts():
    newer = copy.deepcopy(STORED)
    newer["created"] = "2026-12-05T00:00:00Z"
    newer["rows"][0]["mean"] = 90.0
    findings = check.compare(_new(90.0), [newer, STORED])
    assert findings[0].status == "ok" and findings[0].stored["mean"] == 90.0


def test_the_command_line_exit_codes(tmp_path, capsys):
    stored_dir = tmp_path / "records"
    record.write(STORED, stored_dir / "llm-amd-epyc-2c.json")
    for pp, code, word in ((99.0, 0, "OK"), (96.0, 0, "WARN"), (90.0, 1, "FAIL")):
        path = record.write(_new(pp), tmp_path / f"new-{pp}.json")
        args = type("A", (), {"record": str(path), "records": str(stored_dir)})
        assert cli.run_check(args) == code
        out = capsys.readouterr().out
        assert word in out and "m.gguf pp512" in out
    path = record.write(_new(90.0, box="other-2c"), tmp_path / "other.json")
    args = type("A", (), {"record": str(path), "records": str(stored_dir)})
    assert cli.run_check(args) == 2


def test_the_committed_record_checks_against_itself():
    folder = cli.records_dir()
    stored = check.load_records(folder)
    findings = check.compare(stored[0], stored)
    assert findings and {f.status for f in findings} == {"ok"}
    slower = json.loads(json.dumps(stored[0]))
    for r in slower["rows"]:
        r["mean"] *= 0.9
    assert check.exit_code(check.compare(slower, stored)) == 1

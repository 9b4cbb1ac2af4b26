"""A benchmark run as the command line drives it: the noisy-cell re-run, the progress lines,
and a stop by a real signal that keeps the finished rows in a valid record. Engines are fakes;
nothing is timed and no figure decides a test."""

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dasllama.bench import llm, record
from dasllama.bench.progress import Progress
from dasllama.testing.random_gguf import write_random_model


class ScriptedEngine:
    """An engine whose runs of more than one token take the ns given, in order (a one-token
    tg warm-up takes 1000 ns)."""

    def __init__(self, name, timed_ns, vocab=(100, 1, True)):
        self.name, self.timed, self._vocab = name, list(timed_ns), vocab
        self.version, self.threads, self.details = f"{name}-fake", 2, {}
        self.calls = 0

    def vocab(self):
        return self._vocab

    def run(self, test, tokens):
        self.calls += 1
        return self.timed.pop(0) if self.timed and len(tokens) > 1 else 1000

    def top(self, tokens, k=5):
        return list(range(k))

    def memory(self):
        return {}

    def close(self):
        pass


def test_a_noisy_cell_is_run_once_more_and_marked_if_still_noisy():
    steady = [1000, 1000, 1000]
    noisy = [1000, 1500, 800]           # cv far above 3%
    tests = [llm.TestSpec("tg", 4)]   # tg: the warm-up is one token, not timed here
    # dasllama noisy twice: re-run, still noisy; llama.cpp steady: never re-run
    ours = ScriptedEngine("dasllama", noisy + noisy)
    theirs = ScriptedEngine("llama.cpp", steady)
    events = []
    out = llm.measure("m.gguf", [ours, theirs], tests, reps=3,
                      on_event=lambda kind, **f: events.append((kind, f)))
    assert [f["engines"] for k, f in events if k == "rerun"] == [["dasllama"]]
    assert out["reruns"]["dasllama"]["tg4"]["first_samples_ns"] == noisy
    assert "tg4" not in out["reruns"]["llama.cpp"]
    rows = llm.rows_for(ours, _model(), out["samples"]["dasllama"], tests,
                        out["reruns"]["dasllama"])
    assert rows[0]["reruns"] == 1 and rows[0]["noisy"] is True
    assert rows[0]["first_cv"] > record.NOISE_CV
    # the second attempt settles: re-run, and not marked
    ours = ScriptedEngine("dasllama", noisy + steady)
    out = llm.measure("m.gguf", [ours, ScriptedEngine("llama.cpp", steady)], tests, reps=3)
    assert out["samples"]["dasllama"]["tg4"] == steady
    rows = llm.rows_for(ours, _model(), out["samples"]["dasllama"], tests,
                        out["reruns"]["dasllama"])
    assert rows[0]["reruns"] == 1 and rows[0]["noisy"] is False
    # at the edge: a cv of exactly the bar is not above it (no re-run)
    assert llm._cv(tests[0], [1000, 1000]) == 0.0
    out = llm.measure("m.gguf", [ScriptedEngine("dasllama", noisy)], tests, reps=3,
                      noise_cv=None)
    assert out["reruns"]["dasllama"] == {}     # re-runs turned off


def _model():
    return {"file": "m.gguf", "sha256": "0" * 64, "arch": "llama", "quant": "Q8_0",
            "params": 10, "bytes_per_token": 10, "flops_per_token": 20}


def test_progress_lines_say_rows_done_current_row_and_elapsed(capsys):
    show = Progress()
    show("start", total_rows=8)
    show("model", file="m.gguf", arch="llama", quant="Q8_0", params=1000)
    show("run", engine="dasllama", test="pp512", rep=2, ns=612_400_000)
    show("rows", done=2, total=8)
    err = capsys.readouterr().err.splitlines()
    assert err[1].startswith("[0/8 rows  0:00] m.gguf  pp512  dasllama  rep 3:")
    assert "612.4 ms" in err[1]
    assert err[2] == "[2/8 rows  0:00] rows done"
    quiet = Progress(quiet=True)
    quiet("start", total_rows=8)
    quiet("rows", done=2, total=8)
    assert capsys.readouterr().err == ""


# A run of fake engines through the command line's run_and_record, in a child process that the
# test stops with a real signal. Each timed run sleeps, so the stop lands mid-run.
CHILD = textwrap.dedent("""\
    import sys, time
    from dasllama.bench import cli

    class Slow:
        def __init__(self, name):
            self.name, self.version, self.threads, self.details = name, name + "-fake", 2, {}
        def vocab(self):
            return (512, 1, False)
        def run(self, test, tokens):
            time.sleep(0.15)
            return 1000 * len(tokens)
        def top(self, tokens, k=5):
            return list(range(k))
        def memory(self):
            return {}
        def close(self):
            pass

    openers = {n: (lambda p, threads, n_ctx, n=n: Slow(n)) for n in ("dasllama", "llama.cpp")}
    rec, path = cli.run_and_record([sys.argv[1]] * 3, openers, threads=2, reps=2, n_prompt=8,
                                   n_gen=4, pause=0, out=sys.argv[2])
    sys.exit(130 if rec.get("stopped") else 0)
    """)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_keeps_the_finished_rows(tmp_path, sig):
    model = write_random_model(tmp_path / "tiny.gguf", "llama", weight_type="Q8_0")
    out = tmp_path / "rec.json"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    proc = subprocess.Popen([sys.executable, str(script), str(model), str(out)],
                            stderr=subprocess.PIPE, text=True)
    lines = []
    try:
        for line in proc.stderr:          # stop once two row pairs are done
            lines.append(line)
            if "rows done" in line and line.startswith("[ 4/12"):
                proc.send_signal(sig)
                break
        _, rest = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines += rest.splitlines(True)
    err = "".join(lines)
    print(err)
    assert proc.returncode == 130, err
    name = signal.Signals(sig).name
    assert f"stopped by {name} after" in err and "the finished rows are kept in" in err
    rec = json.loads(out.read_text())
    assert rec["complete"] is False and rec["stopped"]["signal"] == name
    assert rec["stopped"]["rows_planned"] == 12
    done = rec["stopped"]["rows_done"]
    assert 4 <= done < 12 and len(rec["rows"]) == done and done % 2 == 0   # pairs only
    schema = pytest.importorskip("jsonschema", reason="the test extra installs jsonschema")
    schema.validate(rec, json.loads((Path(__file__).parent.parent / "bench" /
                                     "schema.json").read_text()))
    assert not list(tmp_path.glob("*.tmp"))


def test_checkpoints_are_valid_records(tmp_path):
    """Each finished row pair is written at once, marked incomplete until the end."""
    model = write_random_model(tmp_path / "tiny.gguf", "llama", weight_type="Q8_0")
    from dasllama.bench import cli
    seen = []
    real_write = record.write

    def spy(rec, path):
        seen.append((rec["complete"], len(rec["rows"])))
        return real_write(rec, path)

    openers = {n: (lambda p, threads, n_ctx, n=n: ScriptedEngine(n, [])) for n in
               ("dasllama", "llama.cpp")}
    record.write = spy
    try:
        rec, path = cli.run_and_record([model], openers, threads=2, reps=2, n_prompt=8,
                                       n_gen=4, pause=0, out=str(tmp_path / "r-{box}.json"),
                                       quiet=True)
    finally:
        record.write = real_write
    assert seen == [(False, 2), (False, 4), (False, 4), (True, 4)]
    assert path.name == f"r-{rec['box']}.json" and rec["complete"] is True

"""The benchmark harness (dasllama.bench): statistics, the alternation of engines, the record,
the llama-bench JSON parser and the runner protocol. Engines here are fakes: nothing is timed
and no figure decides a test."""

import json
import math
import os
import random
import stat
import sys
import textwrap

import pytest

from dasllama.bench import llm, probe, record
from dasllama.bench.llama_cpp import (RUNNER, LlamaBenchBinary, LlamaCppRunner, PeerError,
                                      parse_llama_bench_json)
from dasllama.bench.stats import ratio, summarize
from dasllama.testing.random_gguf import write_random_model


# --- statistics ---------------------------------------------------------------------------

def test_summary_even_count_by_hand():
    s = summarize([2, 4, 4, 4, 5, 5, 7, 9])
    # mean 40/8 = 5; squared deviations 9+1+1+1+0+0+4+16 = 32; sample sd = sqrt(32/7)
    assert s.n == 8 and s.mean == 5.0
    assert s.sd == pytest.approx(math.sqrt(32 / 7), rel=1e-12)
    # negative control: the population sd (divide by n) would be exactly 2, off by 7%
    assert abs(s.sd - 2.0) > 0.1
    assert s.median == 4.5 and s.min == 2 and s.max == 9
    assert s.cv == pytest.approx(math.sqrt(32 / 7) / 5, rel=1e-12)


def test_summary_odd_count_and_order_independent():
    s = summarize([3.0, 1.0, 2.0])
    assert (s.mean, s.sd, s.median, s.min, s.max, s.cv) == (2.0, 1.0, 2.0, 1.0, 3.0, 0.5)
    assert summarize([1.0, 2.0, 3.0]) == s


def test_summary_single_sample_and_errors():
    s = summarize([7.5])
    assert (s.n, s.mean, s.sd, s.median, s.cv) == (1, 7.5, 0.0, 7.5, 0.0)
    with pytest.raises(ValueError, match="at least one"):
        summarize([])
    with pytest.raises(ValueError, match="NaN"):
        summarize([1.0, float("nan")])
    assert math.isnan(summarize([0.0, 0.0]).cv)


def test_ratio_uses_medians():
    ours = summarize([10, 11, 1000])      # one outlier: mean 340, median 11
    theirs = summarize([5, 5.5, 6])
    assert ratio(ours, theirs) == pytest.approx(11 / 5.5)


# --- token ids and alternation ------------------------------------------------------------

def test_make_tokens_bos_first_only_when_added():
    rng = random.Random(1)
    ids = llm.make_tokens(100, 50, bos=7, add_bos=True, rng=rng)
    assert len(ids) == 100 and ids[0] == 7 and all(0 <= t < 50 for t in ids)
    firsts = {llm.make_tokens(3, 50, bos=7, add_bos=False, rng=rng)[0] for _ in range(40)}
    assert len(firsts) > 1          # without BOS the first id is random too


def test_schedule_alternates_within_each_repetition():
    assert llm.schedule(["dasllama", "llama.cpp"], 3) == [
        (0, "dasllama"), (0, "llama.cpp"), (1, "dasllama"), (1, "llama.cpp"),
        (2, "dasllama"), (2, "llama.cpp")]
    assert llm.schedule(["a"], 2) == [(0, "a"), (1, "a")]


class FakeEngine:
    """An engine that records what it was asked and 'takes' a fixed time per token."""

    def __init__(self, name, log, ns_per_token=1000, vocab=(100, 1, True)):
        self.name, self.log, self.ns, self._vocab = name, log, ns_per_token, vocab
        self.version, self.threads, self.details = f"{name}-fake", 2, {"fake": True}
        self.closed = False

    def vocab(self):
        return self._vocab

    def run(self, test, tokens):
        self.log.append((self.name, test, list(tokens)))
        return self.ns * len(tokens)

    def top(self, tokens, k=5):
        return [3, 1, 4, 1, 5][:k]

    def memory(self):
        return {"peak_rss": 123, "baseline_rss": 100, "peak_scope": "fake"}

    def close(self):
        self.closed = True


def test_measure_warms_up_then_alternates_with_shared_tokens():
    log = []
    a, b = FakeEngine("dasllama", log), FakeEngine("llama.cpp", log)
    tests = [llm.TestSpec("pp", 8), llm.TestSpec("tg", 4)]
    out = llm.measure("m.gguf", [a, b], tests, reps=3, seed=5)
    order = [(name, test, len(toks)) for name, test, toks in log]
    pp = [("dasllama", "pp", 8), ("llama.cpp", "pp", 8)]
    tg = [("dasllama", "tg", 4), ("llama.cpp", "tg", 4)]
    # warm-ups: the whole prompt for pp, one token for tg (llama-bench); then alternation
    assert order == pp + pp * 3 + [("dasllama", "tg", 1), ("llama.cpp", "tg", 1)] + tg * 3
    timed_pp = log[2:8]
    for i in range(0, 6, 2):          # each repetition: the same ids for both engines
        assert timed_pp[i][2] == timed_pp[i + 1][2]
        assert timed_pp[i][2][0] == 1  # BOS first (the fake model adds BOS)
    assert timed_pp[0][2] != timed_pp[2][2]   # fresh ids every repetition
    assert out["samples"]["dasllama"]["pp8"] == [8000] * 3
    assert out["samples"]["llama.cpp"]["tg4"] == [4000] * 3
    assert out["validation"]["top1_agree"] is True


def test_measure_refuses_engines_with_different_vocabularies():
    log = []
    with pytest.raises(llm.BenchError, match="vocabulary"):
        llm.measure("m.gguf", [FakeEngine("a", log), FakeEngine("b", log, vocab=(99, 1, True))],
                    [llm.TestSpec("pp", 4)], reps=1)


class FakeModel:
    """Stands in for _core.LLMModel: counts resets and eval calls."""

    def __init__(self, path, n_ctx, n_threads, kv_type):
        self.calls, self.n_vocab = [], 10

        class Tok:
            bos_id, add_bos = 1, True
        self.tokenizer = Tok()

    def reset(self):
        self.calls.append("reset")

    def eval(self, ids):
        self.calls.append(len(ids))
        import numpy as np
        logits = np.zeros((1, self.n_vocab), np.float32)
        logits[0, ids[-1] % self.n_vocab] = 1.0
        return logits

    def close(self):
        self.calls.append("close")


def test_dasllama_engine_clears_the_cache_and_decodes_tg_one_token_at_a_time():
    e = llm.DasllamaEngine("x.gguf", threads=2, n_ctx=64, factory=FakeModel)
    assert e.vocab() == (10, 1, True)
    e.run("pp", [1, 2, 3, 4])
    e.run("tg", [1, 2, 3])
    assert e.model.calls == ["reset", 4, "reset", 1, 1, 1]
    assert e.top([1, 2, 7], k=1) == [7]
    with pytest.raises(ValueError, match="unknown test"):
        e.run("xx", [1])


# --- the record ---------------------------------------------------------------------------

ROW_KEYS = {"kind", "engine", "backend", "version", "threads", "model", "model_sha256", "arch",
            "quant", "params", "test", "unit", "n", "mean", "sd", "median", "min", "max", "cv",
            "noisy", "reruns", "samples_ts", "samples_ns"}


def test_benchmark_record_structure(tmp_path):
    path = write_random_model(tmp_path / "tiny.gguf", "llama", weight_type="Q8_0")
    log, opened = [], []

    def opener(name, ns):
        def open_engine(p, threads, n_ctx):
            opened.append(FakeEngine(name, log, ns, (512, 1, False)))
            return opened[-1]
        return open_engine

    openers = {"dasllama": opener("dasllama", 500), "llama.cpp": opener("llama.cpp", 1000)}
    result = llm.benchmark([path], openers, threads=2, reps=2, n_prompt=16, n_gen=4, pause=0)
    machine = probe.machine()
    rec = record.finish(result, machine, probe.build(), probe.process_peak_rss_bytes(),
                        box=probe.box_name(machine))
    out = record.write(rec, tmp_path / "records" / "llm-test.json")
    back = json.loads(out.read_text())
    assert back["schema"] == record.SCHEMA and back["complete"] is True
    assert set(back) >= {"created", "box", "command", "env", "machine", "build", "config",
                         "engines", "rows", "memory", "validation", "process_peak_rss"}
    assert "ratios" not in back          # derived when printing, never stored
    assert back["machine"]["logical_cores"] >= 1 and back["machine"]["cpu"]
    assert back["config"]["n_ctx"] == 20 and back["config"]["alternate"] is True
    # rows are added a test at a time, every engine's row of that test together
    assert [(r["engine"], r["test"]) for r in back["rows"]] == [
        ("dasllama", "pp16"), ("llama.cpp", "pp16"), ("dasllama", "tg4"), ("llama.cpp", "tg4")]
    for r in back["rows"]:
        assert ROW_KEYS <= set(r), ROW_KEYS - set(r)
        assert r["model"] == "tiny.gguf" and len(r["model_sha256"]) == 64
        assert r["arch"] == "llama" and r["quant"] == "Q8_0" and r["params"] > 0
        assert r["n"] == 2 and len(r["samples_ns"]) == 2
        assert r["kind"] == "llm" and r["backend"] == "cpu"
        assert r["noisy"] is False and r["reruns"] == 0    # the fakes do not vary
    pp = back["rows"][0]
    assert pp["median"] == pytest.approx(16 * 1e9 / (16 * 500))   # t/s from the fake's ns
    assert [(o["test"], q) for o, _, q in record.pairs(back["rows"])] == [("pp16", 2.0),
                                                                          ("tg4", 2.0)]
    mem = {m["engine"]: m for m in back["memory"]}
    assert mem["dasllama"]["peak_rss"] > 0 and mem["llama.cpp"]["peak_rss"] == 123
    # layers x positions x kv heads x (k + v head size) x f16
    assert mem["dasllama"]["kv_cache_bytes"] == 2 * 20 * 2 * (16 + 16) * 2
    text = record.format_table(back) + record.format_memory(back)
    assert "dasllama/llama.cpp" in text and "2.000" in text
    assert len(opened) == 2 and all(e.closed for e in opened)


def test_benchmark_refuses_empty_requests():
    with pytest.raises(llm.BenchError, match="reps must be at least 1, got 0"):
        llm.benchmark([], {}, threads=1, reps=0, n_prompt=8, n_gen=8)
    with pytest.raises(llm.BenchError, match="nothing to measure"):
        llm.benchmark([], {}, threads=1, reps=1, n_prompt=0, n_gen=0)


def test_record_writes_nan_as_null(tmp_path):
    out = record.write({"x": float("nan"), "y": [1.0, float("inf")]}, tmp_path / "r.json")
    assert json.loads(out.read_text()) == {"x": None, "y": [1.0, None]}


def test_box_name_is_a_file_label():
    m = {"cpu": "Intel(R) Xeon(R) Platinum 8480+ CPU @ 2.00GHz", "arch": "x86_64",
         "logical_cores": 2}
    assert probe.box_name(m) == "intel-xeon-platinum-2c"
    m = {"cpu": "AMD EPYC", "arch": "x86_64", "logical_cores": 2}
    assert probe.box_name(m) == "amd-epyc-2c"


# --- llama-bench JSON ---------------------------------------------------------------------

# The layout llama-bench's json printer writes (`-o json`: fields in its order, then the
# per-repetition samples), for a pp512 and a tg128 test at 2 threads.
LLAMA_BENCH_SAMPLE = textwrap.dedent("""\
    [
      {
        "build_commit": "a1b2c3d4e",
        "build_number": 11669,
        "cpu_info": "AMD EPYC",
        "gpu_info": "",
        "backends": "CPU",
        "model_filename": "SmolLM2-135M-Instruct.Q4_1.gguf",
        "model_type": "llama 256M Q4_1",
        "model_size": 96576768,
        "model_n_params": 134515008,
        "n_batch": 2048,
        "n_ubatch": 512,
        "n_threads": 2,
        "cpu_mask": "0x0",
        "cpu_strict": false,
        "poll": 50,
        "type_k": "f16",
        "type_v": "f16",
        "n_gpu_layers": 99,
        "n_cpu_moe": 0,
        "split_mode": "layer",
        "main_gpu": 0,
        "no_kv_offload": false,
        "flash_attn": -1,
        "devices": "auto",
        "tensor_split": "0.00",
        "tensor_buft_overrides": "none",
        "load_mode": "mmap",
        "embeddings": false,
        "no_op_offload": 0,
        "no_host": false,
        "fit_target": 0,
        "fit_min_ctx": 0,
        "n_prompt": 512,
        "n_gen": 0,
        "n_depth": 0,
        "test_time": "2026-11-30T02:00:00Z",
        "avg_ns": 1600000000,
        "stddev_ns": 10000000,
        "avg_ts": 320.012000,
        "stddev_ts": 2.000000,
        "samples_ns": [ 1590000000, 1610000000 ],
        "samples_ts": [ 322.013, 318.012 ]
      },
      {
        "build_commit": "a1b2c3d4e",
        "build_number": 11669,
        "cpu_info": "AMD EPYC",
        "gpu_info": "",
        "backends": "CPU",
        "model_filename": "SmolLM2-135M-Instruct.Q4_1.gguf",
        "model_type": "llama 256M Q4_1",
        "model_size": 96576768,
        "model_n_params": 134515008,
        "n_batch": 2048,
        "n_ubatch": 512,
        "n_threads": 2,
        "n_prompt": 0,
        "n_gen": 128,
        "n_depth": 0,
        "test_time": "2026-11-30T02:00:05Z",
        "avg_ns": 1280000000,
        "stddev_ns": 0,
        "avg_ts": 100.000000,
        "stddev_ts": 0.000000,
        "samples_ns": [ 1280000000 ],
        "samples_ts": [ 100 ]
      }
    ]
    """)


def test_parse_llama_bench_json():
    recs = parse_llama_bench_json("main: some log line\n" + LLAMA_BENCH_SAMPLE)
    assert [r["test"] for r in recs] == ["pp512", "tg128"]
    assert recs[0]["samples_ns"] == [1590000000, 1610000000]
    assert recs[1]["build_number"] == 11669 and recs[1]["n_threads"] == 2
    assert parse_llama_bench_json('[{"n_prompt": 4, "n_gen": 2, "samples_ns": [1]}]')[0]["test"] \
        == "pp4+tg2"


def test_parse_llama_bench_json_errors():
    with pytest.raises(PeerError, match="no JSON array"):
        parse_llama_bench_json("error: failed to load model")
    with pytest.raises(PeerError, match="does not parse"):
        parse_llama_bench_json("[ {\"n_prompt\": 1, ")
    with pytest.raises(PeerError, match="lacks samples_ns"):
        parse_llama_bench_json('[{"n_prompt": 1, "n_gen": 0}]')


def _script(path, body):
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_llama_bench_binary_one_invocation_per_repetition(tmp_path):
    calls = tmp_path / "calls.txt"
    fake = _script(tmp_path / "llama-bench", f"""\
        import json, sys
        a = sys.argv[1:]
        open({str(calls)!r}, "a").write(" ".join(a) + "\\n")
        p, n = int(a[a.index("-p") + 1]), int(a[a.index("-n") + 1])
        print(json.dumps([{{"build_commit": "abc", "build_number": 42, "n_prompt": p, "n_gen": n,
                           "n_threads": int(a[a.index("-t") + 1]),
                           "samples_ns": [1000 * (p + n)]}}]))
        """)
    peer = LlamaBenchBinary(fake, "model.gguf", threads=2)
    assert peer.run("pp", [0] * 8) == 8000 and peer.run("tg", [0] * 3) == 3000
    assert peer.version == "b42 (abc)" and peer.warms_up_itself and peer.vocab() is None
    assert peer.backend == "cpu"
    # llama-bench offloads every layer unless told: -ngl is always given
    gpu = LlamaBenchBinary(fake, "model.gguf", threads=2, n_gpu_layers=99, flash_attn="off")
    assert gpu.run("pp", [0] * 4) == 4000 and gpu.backend == "vulkan"
    lines = calls.read_text().splitlines()
    assert lines[0] == "-m model.gguf -p 8 -n 0 -r 1 -t 2 -ngl 0 -o json"
    assert lines[1] == "-m model.gguf -p 0 -n 3 -r 1 -t 2 -ngl 0 -o json"
    assert lines[2] == "-m model.gguf -p 4 -n 0 -r 1 -t 2 -ngl 99 -fa 0 -o json"


# --- the runner protocol ------------------------------------------------------------------

FAKE_RUNNER = """\
    import json, sys
    print(json.dumps({"event": "ready", "engine": "llama.cpp", "version": "b0", "n_vocab": 100,
                      "bos": 1, "add_bos": True, "threads": 2, "n_ctx": 32, "baseline_rss": 10}),
          flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        cmd = req["cmd"]
        if cmd == "run" and req["test"] in ("pp", "tg"):
            reply = {"ok": True, "ns": 10 * len(req["tokens"])}
        elif cmd == "top":
            reply = {"ok": True, "top": req["tokens"][::-1][:req["k"]]}
        elif cmd == "rss":
            reply = {"ok": True, "max_rss": 2048, "rss": 1024}
        elif cmd == "quit":
            reply = {"ok": True}
        elif cmd == "die":
            sys.exit(3)
        else:
            reply = {"ok": False, "error": "unknown command " + repr(cmd)}
        print(json.dumps(reply), flush=True)
        if cmd == "quit":
            break
    """


def test_runner_protocol_with_a_fake_peer(tmp_path):
    fake = _script(tmp_path / "runner.py", FAKE_RUNNER)
    peer = LlamaCppRunner("m.gguf", threads=2, n_ctx=32, python=sys.executable, runner=fake)
    try:
        assert peer.vocab() == (100, 1, True) and peer.version == "b0" and peer.threads == 2
        assert peer.run("pp", [1, 2, 3]) == 30 and peer.run("tg", [5]) == 10
        assert peer.top([4, 5, 6], k=2) == [6, 5]
        assert peer.memory() == {"peak_rss": 2048, "baseline_rss": 10,
                                 "peak_scope": "runner process"}
        with pytest.raises(PeerError, match="unknown command 'bogus'"):
            peer.request(cmd="bogus")
        assert peer.run("pp", [1]) == 10          # an error reply leaves the runner usable
        with pytest.raises(PeerError, match="exited"):
            peer.request(cmd="die")
    finally:
        peer.close()


def test_runner_that_fails_to_start_reports_its_stderr(tmp_path):
    fake = _script(tmp_path / "runner.py", """\
        import sys
        sys.stderr.write("cannot open the model: no such file\\n")
        sys.exit(1)
        """)
    with pytest.raises(PeerError, match="no such file"):
        LlamaCppRunner("m.gguf", threads=2, n_ctx=32, python=sys.executable, runner=fake)
    garbage = _script(tmp_path / "garbage.py", "print('hello, not json', flush=True)\n")
    with pytest.raises(PeerError, match="out of protocol"):
        LlamaCppRunner("m.gguf", threads=2, n_ctx=32, python=sys.executable, runner=garbage)


def test_packaged_runner_reports_a_missing_binding_on_the_protocol():
    try:
        import cyllama  # noqa: F401
        pytest.skip("this interpreter has cyllama; the missing-binding path cannot be shown")
    except ImportError:
        pass
    with pytest.raises(PeerError, match="cyllama"):
        LlamaCppRunner("m.gguf", threads=1, n_ctx=8, python=sys.executable, runner=RUNNER)


def test_bench_subcommand_parses():
    import argparse
    from dasllama.bench.cli import _add_bench_parser
    p = argparse.ArgumentParser()
    _add_bench_parser(p.add_subparsers(dest="command", required=True))
    args = p.parse_args(["bench", "llm", "-m", "smollm2", "--engine", "llama.cpp", "-t", "2",
                         "--reps", "3"])
    assert args.model == ["smollm2"] and args.engine == "llama.cpp" and args.reps == 3
    assert args.run.__name__ == "run_llm"
    for argv, verb in ((["bench", "check", "new.json"], "run_check"),
                       (["bench", "--check", "new.json"], "_run_bench"),
                       (["bench", "board", "--out", "x"], "run_board"),
                       (["bench", "tune", "-m", "smollm2"], "run_tune"),
                       (["bench", "tuning"], "run_tuning_show")):
        assert p.parse_args(argv).run.__name__ == verb


@pytest.mark.skipif(not os.environ.get("DASLLAMA_LLAMA_CPP_PYTHON"),
                    reason="set DASLLAMA_LLAMA_CPP_PYTHON to a Python with cyllama")
def test_real_llama_cpp_runner_answers(real_model):
    """The packaged runner against llama.cpp itself: protocol and vocabulary, not speed."""
    peer = LlamaCppRunner(real_model("smollm2"), threads=1, n_ctx=16,
                          python=os.environ["DASLLAMA_LLAMA_CPP_PYTHON"])
    try:
        assert peer.vocab() == (49152, 1, False)
        assert peer.backend == "cpu" and peer.details["n_gpu_layers"] == 0
        assert any(d["type"] == "CPU" for d in peer.details["devices"])   # what it saw
        assert peer.run("pp", [1, 2, 3, 4]) > 0 and peer.run("tg", [1, 2]) > 0
        assert len(peer.top([1, 2, 3], k=5)) == 5
    finally:
        peer.close()


@pytest.mark.parametrize("argv0", ["/usr/local/bin/dasllama", "/tmp/w/pkg/dasllama/cli.py",
                                   "/opt/site/dasllama/__main__.py", "dasllama"])
def test_the_recorded_command_names_no_machine_path(monkeypatch, argv0):
    monkeypatch.setattr(sys, "argv", [argv0, "bench", "llm", "-m", "a b.gguf"])
    assert record.command_line() == "dasllama bench llm -m 'a b.gguf'"
    monkeypatch.setattr(sys, "argv", ["/opt/other/tool.py", "x"])
    assert record.command_line() == "/opt/other/tool.py x"      # another program stays as run

"""GPU rows of the benchmark harness, with fake engines (no GPU needed): the device reaches
dasllama's model and the rows, llama.cpp's offload follows it (ngl 99 on a GPU, 0 on the
CPU), the peer reports the devices it saw, a GPU row that the CPU fallback produced is
refused, the probe prefers dasllama's own GPU enumeration, the schema takes all of it, and
the board and the check keep GPU rows in cells of their own. Nothing is timed."""

import argparse
import copy
import json
import stat
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest

from dasllama.bench import board, check, cli, llm, probe, record
from dasllama.bench.llama_cpp import LlamaCppRunner, PeerError, peer_backend
from dasllama.testing.random_gguf import write_random_model

BENCH = Path(__file__).resolve().parent.parent / "bench"
H200 = "NVIDIA H200"


# --- the device spec and llama.cpp's offload --------------------------------------------

@pytest.mark.parametrize("device, backend", [("cpu", "cpu"), ("vulkan", "vulkan"),
                                             ("vulkan:0", "vulkan"), ("vulkan:NVIDIA", "vulkan"),
                                             ("Vulkan:1", "vulkan"), ("metal", "metal")])
def test_backend_of_a_device_spec(device, backend):
    assert llm.backend_of(device) == backend


def test_an_unknown_device_is_refused_by_name():
    with pytest.raises(llm.BenchError, match="'cuda:0'"):
        llm.backend_of("cuda:0")


@pytest.mark.parametrize("device, given, ngl", [
    ("cpu", None, 0), ("vulkan", None, 99), ("vulkan:0", None, 99), ("vulkan:H200", None, 99),
    ("vulkan", 0, 0),          # a GPU dasllama against a CPU peer, asked for explicitly
    ("cpu", 12, 12), ("vulkan", 20, 20)])
def test_llama_cpp_offloads_where_dasllama_runs(device, given, ngl):
    assert cli.default_ngl(device, given) == ngl


def test_negative_ngl_is_refused():
    with pytest.raises(llm.BenchError, match="-1"):
        cli.default_ngl("vulkan", -1)


def _parser():
    p = argparse.ArgumentParser()
    cli._add_bench_parser(p.add_subparsers(dest="command", required=True))
    return p


def test_the_command_line_takes_device_ngl_and_flash_attention():
    args = _parser().parse_args(["bench", "llm", "--device", "vulkan:0"])
    assert args.device == "vulkan:0" and args.llama_cpp_ngl is None
    assert args.llama_cpp_flash_attn == "auto"
    assert cli.default_ngl(args.device, args.llama_cpp_ngl) == 99
    args = _parser().parse_args(["bench", "llm"])
    assert args.device == "cpu" and cli.default_ngl(args.device, args.llama_cpp_ngl) == 0
    args = _parser().parse_args(["bench", "llm", "-d", "vulkan", "--llama-cpp-ngl", "7",
                                 "--llama-cpp-flash-attn", "off"])
    assert (args.llama_cpp_ngl, args.llama_cpp_flash_attn) == (7, "off")
    with pytest.raises(SystemExit):
        _parser().parse_args(["bench", "llm", "--llama-cpp-flash-attn", "maybe"])


def test_the_openers_pass_the_device_and_the_offload(monkeypatch):
    got = {}

    def fake(name):
        def make(*a, **kw):
            got[name] = (a, kw)
            return name
        return make

    monkeypatch.setattr(cli.llm, "DasllamaEngine", fake("dasllama"))
    monkeypatch.setattr(cli, "LlamaCppRunner", fake("llama.cpp"))
    args = _parser().parse_args(["bench", "llm", "--device", "vulkan:1",
                                 "--llama-cpp-python", sys.executable,
                                 "--llama-cpp-flash-attn", "on"])
    for name, open_engine in cli._openers(args, cli.ENGINES["both"]).items():
        open_engine("m.gguf", threads=2, n_ctx=64)
    assert got["dasllama"][1]["device"] == "vulkan:1"
    assert got["llama.cpp"][1]["n_gpu_layers"] == 99
    assert got["llama.cpp"][1]["flash_attn"] == "on"
    assert cli._unpaired_note("vulkan:1", 99, cli.ENGINES["both"]) is None
    assert "do not pair" in cli._unpaired_note("vulkan:1", 0, cli.ENGINES["both"])
    assert cli._unpaired_note("vulkan:1", 0, cli.ENGINES["dasllama"]) is None


# --- dasllama's engine on a device --------------------------------------------------------

class FakeGpuModel:
    """Stands in for _core.LLMModel(..., device=...): counts seat use like the GPU runtime,
    prefill for a prompt and decode for one token; ``decline`` makes every call fall back."""

    def __init__(self, path, n_ctx, n_threads, kv_type, device="cpu", decline=False):
        self.device, self.decline, self.n_vocab = device, decline, 10
        self.device_name = H200 if device != "cpu" else "cpu"
        self.seats = {s: {"served": 0, "declined": {}, "dispatches": 0, "uploads": 0}
                      for s in ("prefill", "decode")}

        class Tok:
            bos_id, add_bos = 1, True
        self.tokenizer = Tok()

    def seat_stats(self):
        return copy.deepcopy(self.seats)

    def reset(self):
        pass

    def eval(self, ids):
        seat = self.seats["prefill" if len(ids) > 1 else "decode"]
        if self.decline:
            seat["declined"]["shape"] = seat["declined"].get("shape", 0) + 1
        else:
            seat["served"] += 1
        logits = np.zeros((1, self.n_vocab), np.float32)
        logits[0, ids[-1] % self.n_vocab] = 1.0
        return logits

    def close(self):
        pass


class OldModel(FakeGpuModel):
    """A build whose LLMModel takes no device argument (pybind11 raises TypeError)."""

    def __init__(self, path, n_ctx, n_threads, kv_type):
        super().__init__(path, n_ctx, n_threads, kv_type)


def test_a_cpu_engine_passes_no_device_and_carries_none():
    e = llm.DasllamaEngine("m.gguf", threads=2, n_ctx=16, factory=OldModel)
    assert e.backend == "cpu" and e.device is None and e.model.device == "cpu"
    e.run("pp", [1, 2, 3])
    assert e.row_fields("pp") == {} and e.seat_use == {}


def test_a_gpu_engine_opens_the_model_on_the_device():
    e = llm.DasllamaEngine("m.gguf", threads=2, n_ctx=16, device="vulkan:0",
                           factory=FakeGpuModel)
    assert e.model.device == "vulkan:0" and e.backend == "vulkan" and e.device == H200
    assert e.details["device"] == "vulkan:0" and e.details["device_name"] == H200
    e.run("pp", [1, 2, 3])
    e.run("tg", [1, 2, 3])
    assert e.row_fields("pp") == {"device": H200, "seats": {
        "prefill": {"served": 1, "declined": {}}, "decode": {"served": 0, "declined": {}}}}
    assert e.row_fields("tg")["seats"]["decode"] == {"served": 3, "declined": {}}


def test_a_build_without_devices_says_so():
    with pytest.raises(llm.BenchError, match="cannot open a model on device 'vulkan'"):
        llm.DasllamaEngine("m.gguf", threads=2, n_ctx=16, device="vulkan", factory=OldModel)


def test_a_gpu_row_the_cpu_fallback_produced_is_refused():
    e = llm.DasllamaEngine("m.gguf", threads=2, n_ctx=16, device="vulkan",
                           factory=lambda *a, **kw: FakeGpuModel(*a, decline=True, **kw))
    e.run("tg", [1, 2])
    with pytest.raises(llm.BenchError, match=r"'shape': 2.*CPU fallback"):
        e.row_fields("tg")


# --- llama.cpp on the GPU -----------------------------------------------------------------

DEVICES = [{"name": "CPU", "description": "AMD EPYC", "type": "CPU"},
           {"name": "Vulkan0", "description": H200, "type": "GPU"}]


def test_peer_backend_follows_the_offload_and_the_devices():
    assert peer_backend(0, DEVICES) == ("cpu", None)
    assert peer_backend(99, DEVICES) == ("vulkan", H200)
    assert peer_backend(99, None) == ("vulkan", None)        # a runner that does not say
    assert peer_backend(99, [{"name": "MTL0", "description": "Apple M3", "type": "GPU"}]) \
        == ("metal", "Apple M3")
    with pytest.raises(PeerError, match="sees no GPU device.*CPU \\(CPU\\)"):
        peer_backend(99, DEVICES[:1])


# A runner that answers like the real one and echoes the options it was started with.
FAKE_RUNNER = """\
    import json, sys
    a = sys.argv[1:]
    ngl = int(a[a.index("--n-gpu-layers") + 1])
    devices = json.loads({devices!r})
    print(json.dumps({{"event": "ready", "engine": "llama.cpp", "version": "b0", "n_vocab": 100,
                       "bos": 1, "add_bos": True, "threads": 2, "n_ctx": 32,
                       "n_gpu_layers": ngl, "flash_attn": a[a.index("--flash-attn") + 1],
                       "devices": devices, "baseline_rss": 10}}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        print(json.dumps({{"ok": True, "ns": 10 * len(req.get("tokens", [])), "max_rss": 1}}),
              flush=True)
        if req["cmd"] == "quit":
            break
    """


def _runner(tmp_path, devices):
    path = tmp_path / "runner.py"
    path.write_text(f"#!{sys.executable}\n" +
                    textwrap.dedent(FAKE_RUNNER.format(devices=json.dumps(devices))))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_the_runner_is_started_with_the_offload_and_reports_its_devices(tmp_path):
    peer = LlamaCppRunner("m.gguf", threads=2, n_ctx=32, python=sys.executable,
                          runner=_runner(tmp_path, DEVICES), n_gpu_layers=99, flash_attn="off")
    try:
        assert peer.backend == "vulkan" and peer.device == H200
        assert peer.details["n_gpu_layers"] == 99 and peer.details["flash_attn"] == "off"
        assert peer.details["devices"] == DEVICES
        assert peer.run("pp", [1, 2]) == 20
    finally:
        peer.close()
    cpu = LlamaCppRunner("m.gguf", threads=2, n_ctx=32, python=sys.executable,
                         runner=_runner(tmp_path, DEVICES))
    try:
        assert cpu.backend == "cpu" and cpu.device is None and cpu.details["n_gpu_layers"] == 0
    finally:
        cpu.close()


def test_a_cpu_only_peer_asked_to_offload_is_refused(tmp_path):
    with pytest.raises(PeerError, match="cyllama-vulkan"):
        LlamaCppRunner("m.gguf", threads=2, n_ctx=32, python=sys.executable,
                       runner=_runner(tmp_path, DEVICES[:1]), n_gpu_layers=99)


def test_the_packaged_runner_takes_the_options():
    from dasllama.bench import llama_cpp_runner
    assert llama_cpp_runner.FLASH_ATTN == {"auto": -1, "off": 0, "on": 1}   # llama.h's values
    fake_cy = types.SimpleNamespace(ggml_backend_dev_info=lambda: [dict(d, extra=1)
                                                                   for d in DEVICES])
    assert llama_cpp_runner._devices(fake_cy) == DEVICES
    assert llama_cpp_runner._devices(types.SimpleNamespace()) == []


# --- a whole GPU run: rows, record, schema ----------------------------------------------

class FakePeer:
    """llama.cpp offloaded to the GPU, as the runner reports it."""

    name, version, threads = "llama.cpp", "b0", 2
    backend, device = "vulkan", H200

    def __init__(self, ns_per_token=2000):
        self.ns, self.details = ns_per_token, {"n_gpu_layers": 99, "devices": DEVICES}

    def vocab(self):
        return (512, 1, False)

    def run(self, test, tokens):
        return self.ns * len(tokens)

    def top(self, tokens, k=5):
        return [3, 1, 4, 1, 5][:k]

    def memory(self):
        return {"peak_rss": 1, "baseline_rss": 1, "peak_scope": "fake"}

    def close(self):
        pass


class TimedGpuModel(FakeGpuModel):
    n_vocab = 512

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.n_vocab = 512


def _schema_check(rec):
    jsonschema = pytest.importorskip("jsonschema", reason="the test extra installs jsonschema")
    schema = json.loads((BENCH / "schema.json").read_text())
    jsonschema.validate(json.loads(json.dumps(rec)), schema,
                        format_checker=jsonschema.FormatChecker())
    refs = {record.pair_key(r) for r in rec["rows"] if r["engine"] != record.OURS}
    assert all(record.pair_key(r) in refs for r in rec["rows"] if r["engine"] == record.OURS)


RUNTIME_GPUS = [{"backend": "vulkan", "index": 0, "name": H200, "type": "discrete",
                 "driver": "NVIDIA (580.159)", "api_version": "1.4.312", "subgroup_size": 32,
                 "memory_bytes": 150 * 2**30, "coopmat_khr": True}]


def test_a_gpu_run_records_vulkan_rows_and_the_gpu(tmp_path, monkeypatch):
    real = probe.runtime_gpus
    monkeypatch.setattr(probe, "runtime_gpus", lambda: real(types.SimpleNamespace(
        gpu_devices=lambda: RUNTIME_GPUS)))
    model = write_random_model(tmp_path / "tiny.gguf", "llama", weight_type="Q8_0")
    openers = {"dasllama": lambda p, threads, n_ctx: llm.DasllamaEngine(
                   p, threads=threads, n_ctx=n_ctx, device="vulkan:0", factory=TimedGpuModel),
               "llama.cpp": lambda p, threads, n_ctx: FakePeer()}
    rec, path = cli.run_and_record([model], openers, threads=2, reps=2, n_prompt=8, n_gen=4,
                                   pause=0, device="vulkan:0", noise_cv=None,
                                   out=str(tmp_path / "r-{box}.json"), quiet=True)
    assert rec["config"]["device"] == "vulkan:0"
    assert [(r["engine"], r["backend"], r["device"]) for r in rec["rows"]] == \
        [("dasllama", "vulkan", H200), ("llama.cpp", "vulkan", H200)] * 2
    ours = {r["test"]: r for r in rec["rows"] if r["engine"] == "dasllama"}
    # warm-up + 2 timed runs: 3 prompts served by prefill; 1 + 2 x 4 tokens by decode
    assert ours["pp8"]["seats"]["prefill"]["served"] == 3
    assert ours["tg4"]["seats"]["decode"]["served"] == 9
    assert rec["engines"]["dasllama"]["device_name"] == H200
    (gpu,) = rec["machine"]["gpus"]
    assert gpu == {"name": H200, "source": "dasllama", "vulkan_api": "1.4.312",
                   "driver": "NVIDIA (580.159)", "type": "discrete", "backend": "vulkan",
                   "index": 0, "memory_bytes": 150 * 2**30, "subgroup_size": 32}
    # GPU rows pair with the peer's GPU rows (dasllama's times are real, so no fixed ratio)
    assert [(o["test"], ref["backend"]) for o, ref, _ in record.pairs(rec["rows"])] == \
        [("pp8", "vulkan"), ("tg4", "vulkan")]
    assert "vulkan" in record.format_table(rec) and H200 in record.format_table(rec)
    _schema_check(json.loads(path.read_text()))


def test_the_schema_refuses_broken_gpu_rows(tmp_path):
    rec = _gpu_record("vulkan", 100.0)
    _schema_check(rec)
    for breakage in ("backend", "device", "seats", "vulkan_api"):
        bad = copy.deepcopy(rec)
        row = bad["rows"][0]
        if breakage == "backend":
            row["backend"] = "cuda"
        elif breakage == "device":
            row["device"] = ""
        elif breakage == "seats":
            row["seats"] = {"decode": {"served": -1, "declined": {}}}
        else:
            bad["machine"]["gpus"] = [{"name": H200, "vulkan_api": "1.4 beta"}]
        with pytest.raises(Exception) as e:
            _schema_check(bad)
        assert type(e.value).__name__ == "ValidationError", breakage


# --- the probe ----------------------------------------------------------------------------

def test_the_probe_prefers_the_runtime_and_falls_back(monkeypatch):
    wrapped = probe.runtime_gpus
    assert wrapped(types.SimpleNamespace()) is None                 # a build without GPUs

    def broken():
        raise RuntimeError("no Vulkan loader")
    assert wrapped(types.SimpleNamespace(gpu_devices=broken)) is None
    assert wrapped(types.SimpleNamespace(gpu_devices=lambda: RUNTIME_GPUS))[0]["source"] \
        == "dasllama"
    calls = []
    monkeypatch.setattr(probe, "runtime_gpus", lambda: calls.append(1) or None)
    monkeypatch.setattr(probe, "_run", lambda cmd: "")
    assert probe.gpus(runtime=True) == [] and calls == [1]        # fell through to the tools
    probe.machine()
    assert calls == [1]              # a CPU run opens no Vulkan instance in this process


# --- board and check: GPU rows are cells of their own --------------------------------------

def _row(engine, test, median, backend="cpu", device=None):
    r = {"kind": "llm", "engine": engine, "backend": backend, "version": "v", "threads": 2,
         "model": "m.gguf", "model_sha256": "a" * 64, "arch": "llama", "quant": "Q4_0",
         "params": 10, "test": test, "unit": "t/s", "n": 5, "mean": median, "sd": 0.0,
         "median": median, "min": median, "max": median, "cv": 0.0, "noisy": False}
    if device:
        r["device"] = device
    return r


def _gpu_record(backend, ours, device=H200, created="2026-12-01T00:00:00Z"):
    dev = device if backend != "cpu" else None
    return {"schema": record.SCHEMA, "created": created, "complete": True, "box": "amd-epyc-2c",
            "machine": {"cpu": "AMD EPYC", "arch": "x86_64", "flags": [], "logical_cores": 2,
                        "memory_bytes": 1, "os": "Linux",
                        "gpus": [{"name": H200, "vulkan_api": "1.4.312", "source": "dasllama"}]},
            "build": {"version": "0.1.0"}, "config": {"reps": 5, "threads": 2},
            "engines": {"dasllama": {"version": "v"}, "llama.cpp": {"version": "b0"}},
            "rows": [_row("dasllama", "pp512", ours, backend, dev),
                     _row("llama.cpp", "pp512", 100.0, backend, dev)]}


def test_the_board_shows_a_vulkan_cell_beside_the_cpu_cell(tmp_path):
    from test_bench_board import parse
    recs = [_gpu_record("cpu", 50.0), _gpu_record("vulkan", 200.0),
            _gpu_record("vulkan", 80.0, device="AMD Radeon", created="2026-12-02T00:00:00Z")]
    cells = board.collect(recs)["amd-epyc-2c"]["cells"]
    assert [(c["backend"], c["device"], c["ratio"]) for c in cells] == [
        ("cpu", "", 0.5), ("vulkan", "AMD Radeon", 0.8), ("vulkan", H200, 2.0)]
    page = parse(board.render(recs, tmp_path, charts=False))
    rows = {(r["data-backend"], r["data-device"]): r for r in page.rows}
    assert set(rows) == {("cpu", ""), ("vulkan", H200), ("vulkan", "AMD Radeon")}
    gpu = rows[("vulkan", H200)]
    assert float(gpu["data-ratio"]) == pytest.approx(2.0) and H200 in gpu["text"]
    assert any("ahead" in c for c in gpu["td_classes"])
    assert any("behind" in c for c in rows[("cpu", "")]["td_classes"])


def test_the_check_compares_a_gpu_row_only_with_its_own_gpu():
    stored = [_gpu_record("cpu", 200.0), _gpu_record("vulkan", 1000.0)]
    new = _gpu_record("vulkan", 900.0, created="2026-12-03T00:00:00Z")   # 10% below the GPU
    (f,) = check.compare(new, stored)
    assert f.status == "fail" and f.stored["backend"] == "vulkan" and H200 in f.line()
    other = _gpu_record("vulkan", 900.0, device="AMD Radeon", created="2026-12-03T00:00:00Z")
    (f,) = check.compare(other, stored)
    assert f.status == "new"          # another GPU of the box: nothing to compare with
    cpu = _gpu_record("cpu", 199.0, created="2026-12-03T00:00:00Z")
    (f,) = check.compare(cpu, stored)
    assert f.status == "ok" and f.stored["mean"] == 200.0   # not the GPU's 1000

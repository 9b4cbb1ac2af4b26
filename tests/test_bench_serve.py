"""The serving benchmark (dasllama bench serve): its pieces, its record, and its errors.

The end-to-end run is the harness's --smoke mode against `dasllama serve` on a
random-weight model. No llama-server is built here, so the reference engine is a stand-in:
a script that takes llama-server's command line (-m, -np, -c, -t, --host, --port) and starts
dasllama's server with the per-slot context llama-server would give (-c / -np). The rows it
yields are labelled llama.cpp only inside this test's temporary record; they prove the
plumbing (two servers, alternation, pairing, ratios, memory), not any figure. Nothing here
asserts a time.
"""

from __future__ import annotations

import copy
import json
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dasllama.bench import record, serve
from dasllama.bench.serve_load import percentile

jsonschema = pytest.importorskip("jsonschema", reason="the test extra installs jsonschema")
pytest.importorskip("fastapi", reason="dasllama serve needs the server extra (in the test extra)")

SCHEMA = json.loads((Path(__file__).resolve().parent.parent / "bench" / "schema.json")
                    .read_text())

SHIM = """#!{python}
# llama-server's command line, served by dasllama: -c is split across -np slots.
import os, sys
args = sys.argv[1:]
if args == ["--version"]:
    print("version: 0.0.0-stand-in (build 7, commit shim)")
    sys.exit(0)
opt = dict(zip(args[::2], args[1::2]))
slots = int(opt["-np"])
os.execv(sys.executable, [sys.executable, "-m", "dasllama.cli", "serve", "-m", opt["-m"],
                          "--parallel", str(slots), "--ctx", str(int(opt["-c"]) // slots),
                          "--threads", opt["-t"], "--host", opt["--host"],
                          "--port", opt["--port"]])
"""


def _script(path: Path, text: str) -> str:
    path.write_text(text.replace("{python}", sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def check_record(rec: dict) -> None:
    """The schema, and the pairing rule: every dasllama row has its reference row."""
    jsonschema.validate(rec, SCHEMA, format_checker=jsonschema.FormatChecker())
    reference = {record.pair_key(r) for r in rec["rows"] if r["engine"] != record.OURS}
    for row in rec["rows"]:
        if row["engine"] == record.OURS and record.pair_key(row) not in reference:
            raise ValueError(f"dasllama row {row['test']} has no reference row")
        if row["noisy"] != (row["cv"] > record.NOISE_CV):
            raise ValueError(f"{row['test']}: noisy does not match cv")


@pytest.fixture(scope="module")
def random_model(tmp_path_factory):
    from dasllama.testing import write_random_model
    folder = tmp_path_factory.mktemp("serve-model")
    # n_ctx: the random BPE vocabulary spends more tokens on English than a real model does.
    return write_random_model(folder / "serve-random.gguf", "llama", chat_template=True,
                              n_ctx=8192)


# ----------------------------------------------------------------------------------------
# pieces

def test_percentile_interpolates_between_ranks():
    assert percentile([4.0, 1.0, 3.0, 2.0], 0.5) == pytest.approx(2.5)
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.95) == pytest.approx(3.85)
    assert percentile([7.0], 0.95) == 7.0
    with pytest.raises(ValueError):
        percentile([], 0.5)


def test_prompts_are_fixed_by_key_and_distinct_from_the_first_tokens():
    a = serve.request_bodies("m", 8, 16, "0-model-c=8-0-0")
    again = serve.request_bodies("m", 8, 16, "0-model-c=8-0-0")
    other_rep = serve.request_bodies("m", 8, 16, "0-model-c=8-1-0")
    texts = [b["messages"][0]["content"] for b in a]
    assert texts == [b["messages"][0]["content"] for b in again]
    # distinct per client and per repetition, already in their first words (no shared prefix)
    firsts = {t.split(".")[0] for t in texts} | {b["messages"][0]["content"].split(".")[0]
                                                 for b in other_rep}
    assert len(firsts) == 16
    words = [len(t.split()) for t in texts]
    assert 120 <= min(words) and max(words) <= 260, words
    body = a[0]
    assert body["ignore_eos"] is True and body["temperature"] == 0 and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True} and body["max_tokens"] == 16


def test_prefix_prompts_share_the_system_prompt_only():
    bodies = serve.prefix_bodies("m", 4, 8, "k")
    assert all(b["messages"][0] == {"role": "system", "content": serve.SYSTEM_PROMPT}
               for b in bodies)
    assert len({b["messages"][1]["content"] for b in bodies}) == 4
    assert len(serve.SYSTEM_PROMPT.split()) > 400


def test_llama_server_gets_the_same_context_per_slot(tmp_path, random_model):
    fake = _script(tmp_path / "llama-server",
                   "#!/bin/sh\necho 'version: 0.6.0-dev (build 11434, commit unknown)'\n"
                   "echo 'built with GNU 12.2.0 for Linux x86_64'\n")
    e = serve.llama_server_engine(fake, "GGML_NATIVE=OFF")
    assert e.version == "b11434"
    assert e.details["build"] == "GGML_NATIVE=OFF"
    argv = e.argv(random_model, slots=8, ctx=1024, threads=2, port=9000)
    assert len(argv) == 13        # the file has a chat template: nothing about templates
    opt = dict(zip(argv[1::2], argv[2::2]))
    assert opt["-np"] == "8" and opt["-c"] == str(8 * 1024) and opt["-t"] == "2"
    assert opt["--host"] == "127.0.0.1" and opt["--port"] == "9000"
    ours = serve.dasllama_engine().argv(random_model, slots=8, ctx=1024, threads=2, port=9001)
    i = ours.index("--ctx")
    assert ours[i + 1] == "1024" and ours[ours.index("--parallel") + 1] == "8"


def test_a_file_without_chat_template_gets_gemmas_format_in_llama_server(tmp_path):
    from dasllama import models
    from dasllama.testing import write_random_model
    plain = write_random_model(tmp_path / "no-template.gguf", "llama")
    assert serve.template_args(str(plain)) == ()     # no Gemma turn tokens: left alone
    try:
        gemma = models.find("gemma3")
    except FileNotFoundError as e:
        pytest.skip(f"the packaged gemma3 model is not in the cache: {e}")
    assert serve.template_args(str(gemma)) == ("--no-jinja", "--chat-template", "gemma")


def test_a_repetition_is_disturbed_by_others_cpu_use_alone(monkeypatch):
    # 0.1 CPU s of others over 10 s is 1% of a core: quiet; 1 CPU s over 10 s is 10%
    assert not serve._disturbed({"others_cpu_s": 0.1, "wall_ns": 10 * 10**9, "agg": 1.0})
    assert serve._disturbed({"others_cpu_s": 1.0, "wall_ns": 10 * 10**9, "agg": 999.0})
    assert not serve._disturbed({"others_cpu_s": None, "wall_ns": 10**9})
    # the wait for quiet is bounded, and ends once quiet windows come in a row
    from dasllama.bench import quiet
    monkeypatch.setattr(quiet, "others_busy", lambda processes: 1.0)
    assert 0.2 <= quiet.wait_quiet([], 0.2) < 5
    calls = iter([1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0])
    monkeypatch.setattr(quiet, "others_busy", lambda processes: next(calls))
    quiet.wait_quiet([], 60)
    assert next(calls) == 1.0      # stopped after the third quiet window in a row


def test_process_cpu_seconds_reads_a_child_and_survives_a_gone_one():
    from dasllama.bench import quiet
    child = subprocess.Popen([sys.executable, "-c",
                              "import time\nt = time.process_time()\n"
                              "while time.process_time() - t < 0.3: pass\ninput()"],
                             stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while quiet.process_cpu_seconds(child.pid) < 0.25 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert 0.25 <= quiet.process_cpu_seconds(child.pid) < 10
    finally:
        child.communicate(b"\n", timeout=20)
    # reaped: no /proc entry is left, and the reader says 0 rather than raising
    assert quiet.process_cpu_seconds(child.pid) == 0.0
    assert quiet.process_cpu_seconds(None) == 0.0


def test_record_command_names_no_local_paths():
    assert serve.portable_command(["dasllama", "--llama-server", "/opt/x/llama-server",
                                   "-m", "gemma3"]) == ["dasllama", "--llama-server",
                                                        "llama-server", "-m", "gemma3"]


@pytest.mark.parametrize("case", ["missing", "no_version"])
def test_a_broken_peer_binary_is_refused_before_anything_starts(tmp_path, case):
    if case == "missing":
        path = str(tmp_path / "no-such-llama-server")
        expect = "no such executable"
    else:
        path = _script(tmp_path / "llama-server", "#!/bin/sh\necho 'bad flag' >&2\nexit 2\n")
        expect = "exited 2 without a version line; it said: bad flag"
    with pytest.raises(serve.PeerError, match=expect):
        serve.llama_server_engine(path)


# ----------------------------------------------------------------------------------------
# the run

def _servers_of(model: Path) -> list:
    """Processes of this machine whose command line names ``model`` (our servers)."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if str(model).encode() in cmd:
                found.append(int(d.name))
    return found


def _bench(*args) -> tuple:
    """`dasllama bench serve ARGS` as its own process: (exit code, stdout, stderr)."""
    r = subprocess.run([sys.executable, "-m", "dasllama.cli", "bench", "serve",
                        *map(str, args)], capture_output=True, text=True, timeout=600)
    return r.returncode, r.stdout, r.stderr


@pytest.mark.timeout(600)
def test_a_peer_that_dies_at_start_is_a_clear_error(tmp_path, random_model):
    dies = _script(tmp_path / "llama-server",
                   "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'version: 1 (x)'; exit 0; "
                   "fi\necho 'error: unknown argument: -np' >&2\nexit 3\n")
    code, _, err = _bench("--smoke", "-m", random_model, "--llama-server", dies, "-q",
                          "-o", tmp_path / "never.json")
    assert code == 1, err
    assert "llama.cpp exited with code 3 before /health answered 200" in err
    assert "error: unknown argument: -np" in err      # the end of its log is quoted
    assert not (tmp_path / "never.json").exists()
    assert _servers_of(random_model) == [], "the dasllama server started first was not stopped"


@pytest.mark.timeout(900)
def test_smoke_run_gives_a_valid_paired_record(tmp_path, random_model):
    peer = _script(tmp_path / "llama-server", SHIM)
    out = tmp_path / "serve-{box}.json"
    code, printed, err = _bench("--smoke", "-m", random_model, "--llama-server", peer,
                                "--llama-server-build", "stand-in", "-o", out)
    assert code == 0, err
    written = list(tmp_path.glob("serve-*.json"))
    assert len(written) == 1
    rec = json.loads(written[0].read_text())
    check_record(rec)
    assert rec["complete"] is True and rec["config"]["smoke"] is True
    assert _servers_of(random_model) == [], "a server outlived the run"

    tests = {(r["engine"], r["test"]) for r in rec["rows"]}
    for engine in ("dasllama", "llama.cpp"):
        for c in (1, 2):
            for t in ("agg", "ttft_p50", "ttft_p95", "req"):
                assert (engine, f"{t}_c{c}") in tests
        for t in ("agg", "ttft_p50", "ttft_p95"):
            assert (engine, f"prefix_{t}_c2") in tests
    for row in rec["rows"]:
        assert row["n"] == 2 and row["max_tokens"] == 8 and row["slots"] == 2
        assert row["ctx_per_slot"] == rec["config"]["ctx_per_slot"]
        assert len(row["samples"]) == 2
    # ratios are derived from the rows' medians, for every dasllama row
    found = {o["test"]: (o, f, q) for o, f, q in record.pairs(rec["rows"])}
    assert len(found) == sum(r["engine"] == "dasllama" for r in rec["rows"])
    for o, f, q in found.values():
        assert q == pytest.approx(o["median"] / f["median"])
    assert "agg_c2" in printed and "prefix_ttft_p50_c2" in printed
    # the prefix cell reused the shared system prompt, and the server said so
    prefix = [r for r in rec["rows"] if r["test"] == "prefix_agg_c2"]
    assert all(r["cached_reported"] and r["cached_tokens"] > 0 for r in prefix), prefix
    distinct = [r for r in rec["rows"] if r["test"] == "agg_c2"]
    assert all(r["cached_tokens"] < r["prompt_tokens"] / 2 for r in distinct), distinct
    # memory of both servers, and dasllama's KV pool from its /metrics
    mem = {m["engine"]: m for m in rec["memory"]}
    assert set(mem) == {"dasllama", "llama.cpp"}
    assert all(m["peak_rss"] >= m["ready_rss"] > 0 for m in mem.values())
    assert mem["dasllama"]["kv_pool_bytes"] > 0
    v = rec["validation"][0]
    assert v["completion_tokens"] == {"dasllama": 16, "llama.cpp": 16}
    # the same server on both sides: the same prompt lengths and the same greedy text
    assert v["prompt_tokens_agree"] is True
    assert v["text"]["dasllama"] == v["text"]["llama.cpp"]
    # the record's command is the one run, with no local paths in it
    assert rec["command"].startswith("dasllama bench serve --smoke")
    assert "--llama-server llama-server" in rec["command"] and str(tmp_path) not in rec["command"]

    # negative controls: the checks above can fail
    unpaired = copy.deepcopy(rec)
    unpaired["rows"] = [r for r in rec["rows"] if r["engine"] == "dasllama"]
    with pytest.raises(ValueError):
        check_record(unpaired)
    wrong_unit = copy.deepcopy(rec)
    next(r for r in wrong_unit["rows"] if r["test"] == "agg_c1")["unit"] = "ms"
    with pytest.raises(jsonschema.ValidationError):
        check_record(wrong_unit)
    no_slots = copy.deepcopy(rec)
    del no_slots["rows"][0]["slots"]
    with pytest.raises(jsonschema.ValidationError):
        check_record(no_slots)


@pytest.mark.timeout(600)
def test_gpu_rows_say_the_device_served_every_step(tmp_path, random_model, monkeypatch):
    # --device: each timed repetition's engine steps must all have been the batch seat's, as
    # /metrics counts them; rows say how many. With the seat off by its knob the CPU runs the
    # steps, and the run stops rather than label them with the GPU.
    from gpu_helpers import SPEC, _unavailable

    from dasllama import LLM
    from dasllama.errors import DeviceError

    try:
        LLM(random_model, n_ctx=64, threads=1, device=SPEC).close()
    except DeviceError as e:
        _unavailable(f"no Vulkan device {SPEC!r}: {e}")
    out = tmp_path / "gpu.json"
    code, _, err = _bench("--smoke", "--engine", "dasllama", "--device", SPEC, "-m",
                          random_model, "--concurrency", "2", "--prefix-concurrency", "0",
                          "-q", "-o", out)
    assert code == 0, err
    rows = [r for r in json.loads(out.read_text())["rows"] if r["test"] == "agg_c2"]
    assert rows and rows[0]["backend"] == "vulkan"
    seat = rows[0]["seats"]["batch"]
    assert seat["served"] > 0 and not any(seat["declined"].values()), seat

    monkeypatch.setenv("DASLLAMA_SEAT_BATCH", "0")
    code, _, err = _bench("--smoke", "--engine", "dasllama", "--device", SPEC, "-m",
                          random_model, "--concurrency", "2", "--prefix-concurrency", "0",
                          "-q", "-o", tmp_path / "never.json")
    assert code == 1 and "batch seat served 0 steps" in err and "'knob'" in err, err
    assert not (tmp_path / "never.json").exists()

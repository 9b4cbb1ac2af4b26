"""The soak benchmark (dasllama.bench.soak, bench/serve_soak.py): a 15-second run against
`dasllama serve` on a random-weight model, checked for the summary's fields and for what a
healthy server must give (no 5xx, no failed request, alive, idle after the load); and the
figures and goals from synthetic outcomes, so that a 5xx, a failure, a dead process or RSS
growth are seen to fail the run. Nothing here asserts a time or a memory figure of the run."""

from __future__ import annotations

import json

import pytest

from dasllama.bench import soak
from dasllama.bench.soak import Outcome, summarize

pytest.importorskip("fastapi", reason="dasllama serve needs the server extra (in the test extra)")

DURATION = "15"
RSS_COUNTER_SLACK_BYTES = 1 << 20   # a 1 MiB bound on that lag (seen: 56 KiB)
GOALS = {"no_server_errors", "no_failed_requests", "rss_growth_under_5_pct", "alive",
         "idle_after_load"}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from dasllama.testing import write_random_model
    folder = tmp_path_factory.mktemp("soak")
    model = write_random_model(folder / "soak-random.gguf", "llama", chat_template=True,
                               n_ctx=2048)
    out = folder / "{box}" / "soak.json"
    rc = soak.main(["-m", str(model), "--duration", DURATION, "--clients", "3", "--parallel", "2",
                    "--ctx", "1024", "--max-tokens", "16", "--sample-every", "0.5", "--quiet",
                    "--out", str(out)])
    (written,) = folder.glob("*/soak.json")
    return rc, json.loads(written.read_text()), written


def test_the_summary_has_its_fields(run):
    rc, s, path = run
    assert path.parent.name == s["box"]          # {box} in --out became the machine's label
    assert s["schema"] == soak.SUMMARY_SCHEMA
    assert s["command"].startswith("serve_soak -m ")
    assert "loadavg_1m" in s["machine"] and "loadavg_1m_end" in s["machine"]
    for key in ("created", "machine", "build", "config", "requests", "server_errors_5xx",
                "deliberate_503", "rss", "alive", "idle_after_load", "goals", "passed"):
        assert key in s, key
    cfg = s["config"]
    assert (cfg["duration_s"], cfg["clients"], cfg["slots"], cfg["ctx"]) == (15.0, 3, 2, 1024)
    assert cfg["embeddings"] is True, cfg["embeddings_probe"]
    assert set(cfg["mix"]) == set(soak.MIX)
    assert set(s["goals"]) == GOALS
    assert s["passed"] == all(s["goals"].values())
    assert rc == (0 if s["passed"] else 1)


def test_every_kind_was_sent_and_answered_as_expected(run):
    _, s, _ = run
    r = s["requests"]
    assert set(r["by_kind"]) == set(soak.MIX), r["by_kind"]
    assert r["total"] == sum(r["by_status"].values()) == sum(
        sum(v.values()) for v in r["by_kind"].values())
    for kind, counts in r["by_kind"].items():
        if kind == "malformed":
            assert all(400 <= int(k) < 500 for k in counts), counts
        else:
            assert set(counts) <= {"200", "503"}, (kind, counts)
    assert r["failed"] == 0 and r["failure_examples"] == [], r["failure_examples"]
    assert s["server_errors_5xx"] == 0
    assert s["goals"]["no_server_errors"] and s["goals"]["no_failed_requests"]
    assert s["alive"] is True and s["idle_after_load"] is True


def test_the_rss_figures_come_from_the_samples(run):
    _, s, _ = run
    m = s["rss"]
    samples = m["samples"]
    assert len(samples) >= 10
    assert all(isinstance(b, int) and b > 0 for _, b in samples)
    assert [t for t, _ in samples] == sorted(t for t, _ in samples)
    warm = sorted(b for t, b in samples if m["warm_window_s"][0] <= t <= m["warm_window_s"][1])
    assert warm and min(warm) <= m["warm_bytes"] <= max(warm)
    assert m["growth_pct"] == pytest.approx(100 * (m["end_bytes"] - m["warm_bytes"])
                                            / m["warm_bytes"], abs=1e-3)
    assert s["goals"]["rss_growth_under_5_pct"] == (m["growth_pct"] < 5.0)
    # VmHWM and VmRSS come from per-CPU batched counters that the kernel folds lazily, so the
    # high-water mark read at the end can trail a sampled VmRSS by a few batches of pages.
    assert m["peak_bytes"] >= m["max_after_warm_bytes"] - RSS_COUNTER_SLACK_BYTES
    assert m["max_after_warm_bytes"] > 0


# --------------------------------------------------------------------------------------------
# The figures and goals on synthetic outcomes
# --------------------------------------------------------------------------------------------
def flat(n=100, value=100 << 20):
    return [(float(t), value) for t in range(n)]


def outcomes(*extra):
    base = [Outcome("chat", 200, True, 0.1), Outcome("malformed", 400, True, 0.01),
            Outcome("chat_stream", 200, True, 0.2)]
    return base + list(extra)


def test_a_healthy_run_passes():
    s = summarize(outcomes(), flat(), duration=100.0, alive=True, idle_after=True)
    assert s["passed"] and s["rss"]["growth_pct"] == 0.0
    assert s["requests"]["by_status"] == {"200": 2, "400": 1}


def test_a_5xx_fails_but_a_deliberate_503_does_not():
    busy = Outcome("chat", 503, True, 0.01, deliberate_503=True)
    s = summarize(outcomes(busy), flat(), duration=100.0, alive=True, idle_after=True)
    assert s["passed"] and s["deliberate_503"] == 1 and s["server_errors_5xx"] == 0
    broken = Outcome("chat", 500, False, 0.01, note="HTTP 500")
    s = summarize(outcomes(broken), flat(), duration=100.0, alive=True, idle_after=True)
    assert not s["passed"] and s["server_errors_5xx"] == 1
    assert not s["goals"]["no_server_errors"] and not s["goals"]["no_failed_requests"]
    assert s["requests"]["failure_examples"] == [{"kind": "chat", "status": 500,
                                                  "note": "HTTP 500"}]


def test_a_failed_request_a_dead_server_or_a_busy_one_fails():
    lost = Outcome("completion", None, False, 1.0, note="ConnectionResetError")
    s = summarize(outcomes(lost), flat(), duration=100.0, alive=True, idle_after=True)
    assert not s["passed"] and s["requests"]["by_status"]["no answer"] == 1
    assert not summarize(outcomes(), flat(), duration=100.0, alive=False,
                         idle_after=True)["passed"]
    assert not summarize(outcomes(), flat(), duration=100.0, alive=True,
                         idle_after=False)["passed"]


def test_growth_is_the_end_window_over_the_warm_window():
    # 100 MiB until 50 s, then 110 MiB: the warm window (20-25 s) reads 100, the end (95-100)
    # 110; samples before the warm window (the load's start) do not count.
    mib = 1 << 20
    samples = [(0.0, 40 * mib)] + [(float(t), (100 if t < 50 else 110) * mib)
                                   for t in range(1, 101)]
    s = summarize(outcomes(), samples, duration=100.0, alive=True, idle_after=True)
    assert s["rss"]["warm_bytes"] == 100 * mib and s["rss"]["end_bytes"] == 110 * mib
    assert s["rss"]["growth_pct"] == pytest.approx(10.0)
    assert not s["goals"]["rss_growth_under_5_pct"] and not s["passed"]
    loose = summarize(outcomes(), samples, duration=100.0, alive=True, idle_after=True,
                      growth_goal_pct=15.0)
    assert loose["passed"] and "rss_growth_under_15_pct" in loose["goals"]
    # no samples (the process was gone at once): no figure, the goal fails
    s = summarize(outcomes(), [], duration=100.0, alive=False, idle_after=False)
    assert s["rss"]["growth_pct"] is None and not s["goals"]["rss_growth_under_5_pct"]


def test_bad_arguments_are_refused_before_anything_starts(capsys):
    assert soak.main(["--duration", "0"]) == 2
    assert "--duration must be > 0" in capsys.readouterr().err
    assert soak.main(["--clients", "0"]) == 2
    assert "--clients must be >= 1" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# How one request is judged, against a stand-in on loopback that answers one fixed status
# --------------------------------------------------------------------------------------------
@pytest.fixture
def stand_in():
    """A loopback HTTP server answering every POST with the status in .status (503s carry
    Retry-After); yields it, then stops."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(server.status)
            if server.status == 503:
                self.send_header("Retry-After", "1")
            self.send_header("Content-Length", "4")
            self.end_headers()
            self.wfile.write(b"nope")

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    server.status = 500
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(10)


@pytest.mark.parametrize("kind", sorted(soak.MIX))
def test_each_kind_is_judged_by_its_answer(stand_in, kind):
    import random
    port = stand_in.server_address[1]

    def judge():
        return soak.one_request(kind, random.Random(0), 1, port, "m", 8, timeout=10.0)

    stand_in.status = 500
    o = judge()
    assert (o.status, o.ok, o.deliberate_503) == (500, False, False)
    assert "nope" in o.note
    stand_in.status = 503                      # with Retry-After: a deliberate refusal
    o = judge()
    assert (o.status, o.deliberate_503) == (503, kind != "malformed")
    assert o.ok == (kind != "malformed")
    stand_in.status = 400                      # right for a malformed body only
    o = judge()
    assert (o.status, o.ok) == (400, kind == "malformed")

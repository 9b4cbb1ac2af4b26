"""Where one decode step's GPU time goes: per-stamp totals, the first layer's dispatches in
order, and the wall time of replayed decode steps next to the sum of the dispatch times (their
difference is what the queue spends between dispatches and on the host's submit and wait).

    python bench/gpu_decode_profile.py MODEL.gguf [MODEL.gguf ...] [--device vulkan]
                                       [--steps 128] [--json OUT.json] [--knob NAME=VALUE ...]

Timing only, never a pass/fail test: run it on the machine whose figures you quote. Profiled
steps bracket every dispatch with timestamps, so the profile's sum runs a little above the
unprofiled step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

# Positions decoded before the timed steps, so attention reads a short cache as in tg128.
PROMPT_TOKENS = 8
WARMUP_STEPS = 4
# Timed passes of --steps decodes; the median pass is reported.
PASSES = 3


def _decode_steps(model, ids, steps: int) -> float:
    """Seconds for `steps` single-token decodes after a reset and a short prompt."""
    model.reset()
    model.eval(ids[:PROMPT_TOKENS])
    t0 = time.perf_counter()
    for i in range(steps):
        model.eval([ids[(PROMPT_TOKENS + i) % len(ids)]])
    return time.perf_counter() - t0


def profile_model(path: str, device: str, steps: int) -> dict:
    from dasllama import _core
    model = _core.LLMModel(path, n_ctx=PROMPT_TOKENS + steps + WARMUP_STEPS + 8, device=device)
    try:
        n_vocab = int(model.n_vocab)
        ids = [(7919 * i + 13) % n_vocab for i in range(PROMPT_TOKENS + steps + WARMUP_STEPS)]
        _decode_steps(model, ids, WARMUP_STEPS)
        walls = [_decode_steps(model, ids, steps) / steps for _ in range(PASSES)]
        model.set_profiling(True)
        model.reset()
        model.eval(ids[:PROMPT_TOKENS])
        model.eval([ids[PROMPT_TOKENS]])   # recorded anew with timestamps
        model.eval([ids[PROMPT_TOKENS + 1]])   # the replay is what decode runs
        timings = [(str(s), float(us)) for s, us in model.last_profile()]
        model.set_profiling(False)
        return {"model": path, "device": str(model.device_name), "n_layer": int(model.n_layer),
                "wall_step_us": 1e6 * statistics.median(walls),
                "dispatches": timings}
    finally:
        model.close()


def report(p: dict, tokens_per_call: int = 1, call: str = "a step", unit: str = "t/s") -> str:
    """The table of one profile; `tokens_per_call` turns the wall time into a rate (`unit`)."""
    timings = p["dispatches"]
    whole = sum(us for _, us in timings)
    totals: dict = {}
    for stamp, us in timings:
        n, t = totals.get(stamp, (0, 0.0))
        totals[stamp] = (n + 1, t + us)
    lines = [f"{p['model']} on {p['device']}: wall {p['wall_step_us']:.1f} us {call} "
             f"({tokens_per_call * 1e6 / p['wall_step_us']:.0f} {unit}); "
             f"profiled dispatches {whole:.1f} us in "
             f"{len(timings)} ({whole / max(len(timings), 1):.2f} us each)",
             f"  {'stamp':<26} {'calls':>5} {'us':>9} {'us/call':>8} {'share':>6}"]
    for stamp, (n, t) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
        lines.append(f"  {stamp:<26} {n:>5} {t:>9.1f} {t / n:>8.2f} "
                     f"{100.0 * t / max(whole, 1e-9):>5.1f}%")
    per_layer = max(1, (len(timings) - 4) // max(1, p["n_layer"]))
    lines.append(f"  first dispatches in order (about {per_layer} a layer):")
    for stamp, us in timings[:per_layer + 3]:
        lines.append(f"    {stamp:<26} {us:>8.2f}")
    return "\n".join(lines)


def add_profile_arguments(ap: argparse.ArgumentParser) -> None:
    """The options every profile script shares: --device, --json and --knob."""
    ap.add_argument("--device", default="vulkan")
    ap.add_argument("--json", default=None, help="also write every dispatch's time here")
    ap.add_argument("--knob", action="append", default=[], metavar="NAME=VALUE",
                    help="set a tuning knob first (dasllama bench tuning lists them)")


def apply_knobs(knobs) -> None:
    """Set each NAME=VALUE knob before a model opens."""
    from dasllama import _core
    for k in knobs:
        name, _, value = k.partition("=")
        _core.tuning_set(name, int(value))


def write_json(path, profiles: list) -> None:
    """Every profile, each dispatch's time included, to `path` (the --json option; None: none)."""
    if path:
        with open(path, "w") as f:
            json.dump(profiles, f, indent=1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--steps", type=int, default=128)
    add_profile_arguments(ap)
    a = ap.parse_args(argv)
    apply_knobs(a.knob)
    out = []
    for m in a.models:
        p = profile_model(m, a.device, a.steps)
        print(report(p), flush=True)
        out.append(p)
    write_json(a.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

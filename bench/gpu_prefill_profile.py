"""Where one prompt call's GPU time goes: per-stamp totals, the first layer's dispatches in
order, and the wall time of back-to-back prompt calls (and of calls after an idle pause, as the
bench harness makes them) next to the sum of the dispatch times.

    python bench/gpu_prefill_profile.py MODEL.gguf [MODEL.gguf ...] [--device vulkan]
                                        [--tokens 512] [--json OUT.json] [--knob NAME=VALUE ...]

Timing only, never a pass/fail test: run it on the machine whose figures you quote. The
profiled call brackets every dispatch with timestamps, so its sum runs a little above the
unprofiled call.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_decode_profile import (add_profile_arguments, apply_knobs, report,  # noqa: E402
                                write_json)

# Back-to-back timed prompt calls (after one warm-up); the median is reported.
CALLS = 7
# The bench harness pauses this long between repetitions: calls after such a pause show what
# an idle GPU's clocks cost the first call.
PAUSE_S = 0.1
PAUSED_CALLS = 3


def _prompt_call(model, ids) -> float:
    model.reset()
    t0 = time.perf_counter()
    model.eval(ids)
    return time.perf_counter() - t0


def profile_model(path: str, device: str, n_tokens: int) -> dict:
    from dasllama import _core
    model = _core.LLMModel(path, n_ctx=n_tokens + 8, device=device)
    try:
        n_vocab = int(model.n_vocab)
        ids = [(7919 * i + 13) % n_vocab for i in range(n_tokens)]
        _prompt_call(model, ids)
        walls = [_prompt_call(model, ids) for _ in range(CALLS)]
        paused = []
        for _ in range(PAUSED_CALLS):
            time.sleep(PAUSE_S)
            paused.append(_prompt_call(model, ids))
        model.set_profiling(True)
        _prompt_call(model, ids)   # recorded anew with timestamps
        _prompt_call(model, ids)
        timings = [(str(s), float(us)) for s, us in model.last_profile()]
        model.set_profiling(False)
        return {"model": path, "device": str(model.device_name), "n_layer": int(model.n_layer),
                "n_tokens": n_tokens, "wall_step_us": 1e6 * statistics.median(walls),
                "wall_after_pause_us": 1e6 * statistics.median(paused),
                "dispatches": timings}
    finally:
        model.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--tokens", type=int, default=512)
    add_profile_arguments(ap)
    a = ap.parse_args(argv)
    apply_knobs(a.knob)
    out = []
    for m in a.models:
        p = profile_model(m, a.device, a.tokens)
        text = report(p, a.tokens, f"a {a.tokens}-token call")
        print(text, flush=True)
        print(f"  after a {PAUSE_S:.1f} s pause: wall {p['wall_after_pause_us']:.1f} us "
              f"({a.tokens * 1e6 / p['wall_after_pause_us']:.0f} t/s)", flush=True)
        out.append(p)
    write_json(a.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

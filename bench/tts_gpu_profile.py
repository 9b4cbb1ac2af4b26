"""Where a Pocket TTS request's GPU time goes: the prompt, one frame batch and one codec call,
each timed by the device per dispatch (per-stamp totals), next to the host's wall time for the
same call and the stage times of an unprofiled 50-frame request (their gap is what the queue
spends between dispatches and the host on recording, submits, waits and the CPU's part).

    python bench/tts_gpu_profile.py MODEL.gguf [--device vulkan] [--frames 6] [--json OUT.json]
                                    [--knob NAME=VALUE]

Timing only, never a pass/fail test: run it on the machine whose figures you quote. Profiled
calls bracket every dispatch with timestamps, and record their command buffers anew (the
vulkan.pocket.replay knob off), so their walls run a little above the unprofiled ones.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from dasllama import _core
from dasllama.tts import TTS

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_decode_profile import add_profile_arguments, apply_knobs  # noqa: E402

SENTENCE = "The quick brown fox jumps over the lazy dog near the quiet river."
REPLAY = "vulkan.pocket.replay"
# Profiled repetitions of each call; the median pass is reported.
PASSES = 5
# Stamps listed per call, largest total first.
TOP = 10


def _stamps(profile) -> dict:
    out: dict = {}
    for stamp, us in profile:
        n, t = out.get(stamp, (0, 0.0))
        out[stamp] = (n + 1, t + us)
    return out


def _summary(label: str, walls: list, profiles: list) -> dict:
    """The median pass (by GPU sum) of a call: its dispatches, GPU sum and per-stamp totals."""
    sums = [sum(us for _, us in p) for p in profiles]
    mid = sorted(range(len(sums)), key=lambda i: sums[i])[len(sums) // 2]
    by_stamp = _stamps(profiles[mid])
    row = dict(call=label, wall_ms=1e3 * statistics.median(walls), gpu_ms=sums[mid] / 1e3,
               dispatches=len(profiles[mid]),
               stamps={k: dict(n=n, us=round(t, 1)) for k, (n, t) in
                       sorted(by_stamp.items(), key=lambda kv: -kv[1][1])})
    print(f"{label:24s} wall {row['wall_ms']:7.3f} ms  gpu {row['gpu_ms']:7.3f} ms  "
          f"{row['dispatches']:4d} dispatches ({1e3 * row['gpu_ms'] / max(1, row['dispatches']):.1f}"
          f" us each)")
    for k, v in list(row["stamps"].items())[:TOP]:
        print(f"    {k:40s} {v['n']:4d} x  {v['us']:9.1f} us")
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--frames", type=int, default=6, help="frames of the profiled batch")
    add_profile_arguments(ap)
    args = ap.parse_args()
    apply_knobs(args.knob)
    out = dict(model=args.model, device=args.device, rows=[])
    with TTS(args.model, device=args.device) as tts:
        m = tts.model
        ids = tts.plan(SENTENCE)[0][1]
        # The unprofiled request's stage times (the bench's shape: 50 frames, EOS off).
        tts.speak(SENTENCE, seed=0, eos=False, max_frames=50)
        stages = []
        for i in range(PASSES):
            t0 = time.perf_counter()
            tts.speak(SENTENCE, seed=i, eos=False, max_frames=50)
            st = dict(tts.stats["stages"], wall_ms=1e3 * (time.perf_counter() - t0))
            stages.append(st)
        med = {k: statistics.median(s[k] for s in stages) for k in
               ("wall_ms", "prompt_ms", "frames_gpu_ms", "mimi_ms")}
        print("50-frame request (unprofiled): " +
              "  ".join(f"{k} {v:.2f}" for k, v in med.items()))
        out["request"] = med
        m.set_profiling(True)
        _core.tuning_set(REPLAY, 0)
        try:
            calls = {"prompt": ([], []), f"frames x{args.frames}": ([], []),
                     f"codec x{args.frames}": ([], [])}
            for i in range(PASSES):
                m.seed_noise(i)
                t0 = time.perf_counter()
                m.begin_chunk(ids, "", 0.3, float("inf"), 0)
                calls["prompt"][0].append(time.perf_counter() - t0)
                calls["prompt"][1].append(m.last_profile())
                m.set_seat_enabled("codec", False)   # the frame batch's submit is the last
                t0 = time.perf_counter()
                m.step(args.frames)
                calls[f"frames x{args.frames}"][0].append(time.perf_counter() - t0)
                calls[f"frames x{args.frames}"][1].append(m.last_profile())
                m.set_seat_enabled("codec", True)
                m.set_seat_enabled("frames", False)  # the codec's submit is the last
                t0 = time.perf_counter()
                m.step(args.frames)
                calls[f"codec x{args.frames}"][0].append(time.perf_counter() - t0)
                calls[f"codec x{args.frames}"][1].append(m.last_profile())
                m.set_seat_enabled("frames", True)
        finally:
            for seat in ("frames", "codec"):
                m.set_seat_enabled(seat, True)
            _core.tuning_reset(REPLAY)
            m.set_profiling(False)
        print("profiled calls (the codec call's wall includes the CPU frames before it):")
        for label, (walls, profiles) in calls.items():
            out["rows"].append(_summary(label, walls, profiles))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()

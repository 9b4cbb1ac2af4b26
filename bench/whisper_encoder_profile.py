"""Where one 30 s window's GPU time goes in Whisper's encoder seat: per-stamp totals, the first
layer's dispatches in order, and the wall time of back-to-back windows next to the sum of the
dispatch times, for each lane asked for.

    python bench/whisper_encoder_profile.py MODEL [--device vulkan] [--lane float32 --lane int8]
                                            [--windows 10] [--json OUT.json] [--knob NAME=VALUE]

MODEL: a Whisper GGUF, ggml .bin or CTranslate2 directory (what dasllama.ASR opens). The window
is a log-mel of a fixed synthetic signal: the encoder's work does not depend on its values.
Timing only, never a pass/fail test: run it on the machine whose figures you quote. The
profiled window brackets every dispatch with timestamps, so its sum runs a little above the
unprofiled window.
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

SAMPLE_RATE = 16000
WINDOW_S = 30


def _window(asr):
    import numpy as np
    t = np.arange(WINDOW_S * SAMPLE_RATE) / SAMPLE_RATE
    audio = (0.1 * np.sin(2 * np.pi * 220.0 * t) * np.sin(2 * np.pi * 0.5 * t)).astype(np.float32)
    n_frames = 2 * int(asr.config["n_audio_ctx"])
    return np.ascontiguousarray(asr.model.log_mel(audio)[:, :n_frames])


def profile_lane(path: str, device: str, lane: str, windows: int) -> dict:
    import dasllama
    asr = dasllama.ASR(path, device=device, compute_type=lane)
    try:
        if not asr.seat_stats():
            raise SystemExit(f"{path}: no encoder seat on {device} (the CPU chain would run)")
        mel = _window(asr)
        served = asr.seat_stats()["encoder"]["served"]
        asr.model.encode(mel, False)   # recorded once; the timed windows replay it
        if asr.seat_stats()["encoder"]["served"] == served:
            raise SystemExit(f"{path}: the encoder seat declined the window "
                             f"({asr.seat_stats()['encoder'].get('declined')}): the CPU ran it")
        walls = []
        for _ in range(windows):
            t0 = time.perf_counter()
            asr.model.encode(mel, False)
            walls.append(time.perf_counter() - t0)
        asr.model.set_profiling(True)
        asr.model.encode(mel, False)   # recorded anew with timestamps
        timings = [(str(s), float(us)) for s, us in asr.model.last_profile()]
        asr.model.set_profiling(False)
        return {"model": f"{os.path.basename(os.path.normpath(path))} ({lane})",
                "device": str(asr.device_name), "lane": lane,
                "n_layer": int(asr.config["n_audio_layer"]),
                "wall_step_us": 1e6 * statistics.median(walls), "dispatches": timings}
    finally:
        asr.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--lane", action="append", choices=("float32", "int8"),
                    help="compute types to profile (default both)")
    ap.add_argument("--windows", type=int, default=10, help="timed windows (median reported)")
    add_profile_arguments(ap)
    a = ap.parse_args(argv)
    apply_knobs(a.knob)
    out = []
    for lane in a.lane or ("float32", "int8"):
        p = profile_lane(a.model, a.device, lane, a.windows)
        print(report(p, 1, "a window", "windows/s"), flush=True)
        out.append(p)
    write_json(a.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

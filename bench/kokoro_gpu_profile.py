"""Where one Kokoro chunk's time goes with the vocoder seat on a GPU: the chunk's wall time, the
predictor's (stages 1-5, on the CPU) beside it with its parts, and the seat's per-stamp GPU
times.

    python bench/kokoro_gpu_profile.py MODEL PLAN [--text medium] [--chunk 0] [--calls 7]
                                       [--threads 8] [--device vulkan] [--json OUT.json]
                                       [--knob NAME=VALUE]

MODEL: a converted Kokoro GGUF. PLAN: the phoneme-id chunks and style rows that
`python -m dasllama.bench.tts_kokoro_gpu plan` writes (so no phonemizer is needed where this
runs). Timing only, never a pass/fail test: run it on the machine whose figures you quote. The
profiled call brackets every dispatch with timestamps, so its sum runs a little above the
unprofiled call's seat time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_decode_profile import (add_profile_arguments, apply_knobs, report,  # noqa: E402
                                write_json)


def _median_ms(fn, calls: int) -> float:
    walls = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(walls)


def profile_chunk(path: str, chunk: dict, device: str, threads: int, calls: int) -> dict:
    import numpy as np

    from dasllama import _core
    model = _core.KokoroModel(path, threads, device)
    if not model.seat_stats():
        raise SystemExit(f"{path}: no vocoder seat on {device} (the CPU chain would run)")
    ids, style = chunk["ids"], np.asarray(chunk["style"], np.float32)
    served = model.seat_stats()["vocoder"]["served"]
    out = model.synthesize(ids, style, 1.0)   # warm-up: buffers sized, pipelines made
    if model.seat_stats()["vocoder"]["served"] == served:
        raise SystemExit(f"{path}: the vocoder seat declined the chunk "
                         f"({model.seat_stats()['vocoder'].get('reason')}): the CPU ran it")
    frames = int(np.sum(out["durations"]))
    chunk_ms = _median_ms(lambda: model.synthesize(ids, style, 1.0), calls)
    predict_ms = _median_ms(lambda: model.predict(np.asarray(ids, np.int64), style, 1.0), calls)
    split = model.config["style_split"][0]
    s_pred = style[split:].copy()
    ids64 = np.asarray(ids, np.int64)
    bounded = np.concatenate([[0], ids64, [0]]).astype(np.int64)   # the boundary id around them
    p = model.predict(ids64, style, 1.0)
    en = np.ascontiguousarray(np.repeat(p["d"], p["durations"], axis=0).T, np.float32)
    parts = {"albert": lambda: model.albert(bounded),
             "duration encoder": lambda: model.duration_encoder(p["d_en"], s_pred),
             "durations (LSTM, proj)": lambda: model.durations(p["d"], 1.0),
             "F0 / N": lambda: model.f0_energy(en, s_pred),
             "text encoder": lambda: model.text_encoder(bounded)}
    predictor = {name: _median_ms(fn, calls) for name, fn in parts.items()}
    model.set_profiling(True)
    model.synthesize(ids, style, 1.0)
    timings = [(str(s), float(us)) for s, us in model.last_profile()]
    model.set_profiling(False)
    return {"model": os.path.basename(path), "device": str(model.device_name),
            "ids": len(ids), "frames": frames, "chunk_ms": chunk_ms, "predict_ms": predict_ms,
            "predictor_ms": predictor,
            # report() lists the first len / n_layer dispatches: about sixteen of them
            "n_layer": max(1, len(timings) // 16),
            "wall_step_us": 1e3 * (chunk_ms - predict_ms), "dispatches": timings}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("plan")
    ap.add_argument("--text", default="medium", help="which text of the plan")
    ap.add_argument("--chunk", type=int, default=0, help="which chunk of that text")
    ap.add_argument("--calls", type=int, default=7, help="timed calls (median reported)")
    ap.add_argument("--threads", type=int, default=8, help="the predictor's CPU threads")
    add_profile_arguments(ap)
    a = ap.parse_args(argv)
    apply_knobs(a.knob)
    with open(a.plan) as f:
        plan = json.load(f)
    chunks = plan["texts"].get(a.text)
    if not chunks or not 0 <= a.chunk < len(chunks):
        raise SystemExit(f"{a.plan}: no chunk {a.chunk} of text '{a.text}' "
                         f"(texts: {', '.join(plan['texts'])})")
    p = profile_chunk(a.model, chunks[a.chunk], a.device, a.threads, a.calls)
    print(f"{a.text} text, chunk {a.chunk}: {p['ids']} ids, {p['frames']} frames; chunk "
          f"{p['chunk_ms']:.1f} ms, of which the predictor (CPU, {a.threads} threads) "
          f"{p['predict_ms']:.1f} ms")
    print("  " + ", ".join(f"{name} {ms:.1f}" for name, ms in p["predictor_ms"].items()) + " ms")
    print(report(p, p["frames"], "of seat a chunk", "frames/s"), flush=True)
    write_json(a.json, [p])
    return 0


if __name__ == "__main__":
    sys.exit(main())

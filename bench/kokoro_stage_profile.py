"""Where one Kokoro chunk's time goes on the CPU: wall time, process CPU time and thread-pool
jobs per stage of the chain, each stage called alone through the model's stage methods on the
inputs the chain gives it.

    python bench/kokoro_stage_profile.py [--model kokoro] [--threads 2] [--reps 7]
        [--text long] [--chunk 0]

The default is the first chunk of `dasllama bench tts`'s long text (the chunk a stream's first
audio waits for). Figures are the minimum and median over the repetitions; the pool column is
the jobs the pool handed its workers in one call (each a dispatch and a join). Indented rows
are parts of the row above them: ALBERT, the duration encoder, the duration LSTM, the F0/N
branches and the text encoder make up stages 1-5 (predict, which also aligns); the source
spectrum (SineGen, merge, STFT) is part of the generator, whose last row takes it as given.
Informal: no record is written, and a loaded machine inflates every row.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def main(argv=None) -> int:
    from dasllama.bench.tts_kokoro import TEXTS
    from dasllama.kokoro import KokoroTTS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="kokoro")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--text", default="long", choices=sorted(TEXTS))
    ap.add_argument("--chunk", type=int, default=0, help="which chunk of the text's plan")
    a = ap.parse_args(argv)

    tts = KokoroTTS(a.model, n_threads=a.threads)
    m = tts.model
    chunk = tts.plan(TEXTS[a.text])[a.chunk]
    style = np.asarray(tts.voice_pack(tts.voices[0])[chunk.style_row], np.float32)
    split = m.config["style_split"][0]
    s_dec, s_pred = style[:split].copy(), style[split:].copy()
    ids = np.array(chunk.ids, np.int64)
    bounded = np.array([0] + chunk.ids + [0], np.int64)   # the boundary id around the phonemes

    p = m.predict(ids, style, 1.0)
    en = np.ascontiguousarray(np.repeat(p["d"], p["durations"], axis=0).T, np.float32)
    x = m.decoder(p["asr"], p["f0"], p["n"], s_dec)
    har = m.source_spectrum(p["f0"])
    stages = [
        ("synthesize (whole chunk)", lambda: m.synthesize(ids, style, 1.0)),
        ("predict (stages 1-5)", lambda: m.predict(ids, style, 1.0)),
        ("  albert", lambda: m.albert(bounded)),
        ("  duration encoder", lambda: m.duration_encoder(p["d_en"], s_pred)),
        ("  durations (LSTM, proj)", lambda: m.durations(p["d"], 1.0)),
        ("  F0 / N", lambda: m.f0_energy(en, s_pred)),
        ("  text encoder", lambda: m.text_encoder(bounded)),
        ("decoder", lambda: m.decoder(p["asr"], p["f0"], p["n"], s_dec)),
        ("generator", lambda: m.generator(x, s_dec, p["f0"])),
        ("  source spectrum", lambda: m.source_spectrum(p["f0"])),
        ("  generator less source", lambda: m.generator(x, s_dec, p["f0"], har)),
    ]
    def jobs() -> int:   # -1 throughout on a build without the counter
        return getattr(m, "pool_jobs", -1)

    rows = {name: [] for name, _ in stages}
    for _ in range(a.reps):
        for name, fn in stages:
            j0, c0, t0 = jobs(), time.process_time(), time.perf_counter()
            fn()
            wall, cpu = (time.perf_counter() - t0) * 1e3, (time.process_time() - c0) * 1e3
            rows[name].append((wall, cpu, jobs() - j0 if j0 >= 0 else -1))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{a.text} text, chunk {a.chunk}: {len(chunk.ids)} ids, {p['frames']} frames "
          f"({p['frames'] * 600 / tts.sample_rate:.2f} s), {a.threads} threads, "
          f"{a.reps} reps, load {load:.1f}")
    print(f"{'stage':28s} {'wall min':>9s} {'wall med':>9s} {'cpu med':>9s} {'pool jobs':>9s}")
    for name, v in rows.items():
        w = sorted(r[0] for r in v)
        print(f"{name:28s} {w[0]:9.1f} {np.median(w):9.1f} "
              f"{np.median([r[1] for r in v]):9.1f} {v[-1][2]:9d}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

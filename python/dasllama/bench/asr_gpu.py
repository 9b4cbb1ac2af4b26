"""Whisper on a GPU: dasllama with its encoder seat on Vulkan against openai-whisper on CUDA
(float16), in the same run, on the same weights and samples.

The model travels as one whisper.cpp ggml file (``pack``: written from a CTranslate2 folder at
Q8_0, since tiny.en's float16 folder is over what one device call carries). dasllama reads that
file as it is; openai-whisper gets the same values, dequantized, as a float16 checkpoint in its
own layout (``openai_checkpoint``), so both decode the same function of the audio.

``run`` builds the clips as ``dasllama bench asr`` does (the ASR fixtures, in a fixed order,
padded with silence to 10 s, 60 s and 5 min) and times, per clip and beam size:

* ``request_wall`` (ms): samples in, every segment out (each engine's log-mel inside);
* ``first_text`` (ms): from the call to the first segment (openai-whisper's ``transcribe``
  returns every segment at once, when the whole clip is decoded: its first text is its wall);
* ``rtf`` (x): seconds of audio per second of wall time;
* ``encoder_window`` (ms, once per run; ``encoder_window_int8`` in the int8 lane): one 30 s
  log-mel window through the encoder alone,
  host to host for dasllama (the seat's upload, replayed command buffer and download),
  synchronized CUDA for openai-whisper; medians of ``ENCODER_REPS``.

Options on both sides: English, transcribe, temperature 0 (no fallback), the beam size,
timestamps on, ``condition_on_previous_text``, the default thresholds and suppression. One
warm-up request per engine and cell (which is also the validation: identical transcripts, or
the word error rate between them), then ``reps`` requests alternating between the engines. The
record keeps the seat's counters (windows served, declines by reason) over the timed requests.

On the GPU machine::

    python -m dasllama.bench.asr_gpu pack CT2_FOLDER tiny-q8_0.bin          # here, once
    python -m dasllama.bench.asr_gpu run tiny-q8_0.bin --clips tests/fixtures/asr -o rec.json
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from .asr import (BEAMS, CLIP_SECONDS, FIXTURE_ORDER, SAMPLE_RATE, Request, build_clip,
                  fixture_dir, load_sources, rows_for, word_errors, words)
from .llm import BenchError, _sha256, schedule

__all__ = ["pack", "openai_checkpoint", "benchmark", "main"]

OURS, PEER = "dasllama", "openai-whisper"
PACK_TYPE = "Q8_0"          # tiny.en at Q8_0 is 42 MB: it fits one device call with the wheel
WINDOW_SAMPLES = 30 * SAMPLE_RATE
ENCODER_REPS = 20           # encoder-alone timings per engine (a few ms each)


def pack(folder, out) -> Path:
    """The CTranslate2 Whisper ``folder`` as a whisper.cpp ggml file at PACK_TYPE."""
    from ..convert.whisper_ggml import write_ggml_whisper
    return write_ggml_whisper(folder, out, PACK_TYPE)


def openai_checkpoint(ggml_path, out) -> Path:
    """The ggml file's weights, dequantized, as an openai-whisper checkpoint (``dims`` and a
    float16 ``model_state_dict`` under OpenAI's names, which whisper.cpp's files keep)."""
    import torch
    from ..convert.whisper_ggml import read_ggml_whisper

    g = read_ggml_whisper(ggml_path)
    state = {name: torch.from_numpy(a).to(torch.float16) for name, a in g.openai_state().items()}
    dims = {k: int(v) for k, v in g.hparams.items()}
    torch.save({"dims": dims, "model_state_dict": state}, out)
    return Path(out)


# dasllama's lanes here, as the record describes them.
LANES = {"float32": "float32 compute, encoder on the GPU seat, decoder on the CPU",
         "int8": "the int8 lane: encoder on the GPU seat (the file's matrices, products and "
                 "attention in float16 on cooperative matrices), decoder on the CPU in "
                 "CTranslate2's int8 numerics"}


class _Ours:
    name, backend = OURS, "vulkan"

    def __init__(self, model: Path, device: str, threads: Optional[int],
                 compute_type: str = "float32"):
        from .. import ASR
        from .probe import build
        self.asr = ASR(model, device=device, compute_type=compute_type, n_threads=threads)
        b = build()
        self.version = b["version"] + (f"+g{b['git_sha']}" if b["git_sha"] else "")
        self.threads, self.compute_type = self.asr.model.n_threads, compute_type
        self.device_name = self.asr.device_name
        if not self.asr.seat_stats():
            raise BenchError(f"device {device!r}: the encoder seat is not there (CPU only)")

    def run(self, samples: np.ndarray, beam: int) -> Request:
        texts, tokens, first = [], [], None
        t0 = time.perf_counter_ns()
        for s in self.asr.transcribe(samples, beam_size=beam, temperature=0.0,
                                     language="en")[0]:
            if first is None:
                first = time.perf_counter_ns() - t0
            texts.append(s.text)
            tokens.extend(int(t) for t in s.tokens)
        wall = time.perf_counter_ns() - t0
        return Request(wall, first if first is not None else wall, "".join(texts), tokens)

    def encoder_ms(self, window: np.ndarray, reps: int) -> list:
        mel = np.ascontiguousarray(self.asr.model.log_mel(window)[:, :2 * self.n_ctx])
        self.asr.model.encode(mel, False)
        out = []
        for _ in range(reps):
            t0 = time.perf_counter_ns()
            self.asr.model.encode(mel, False)
            out.append((time.perf_counter_ns() - t0) / 1e6)
        return out

    @property
    def n_ctx(self) -> int:
        return int(self.asr.model.config["n_audio_ctx"])

    def seats(self) -> dict:
        enc = self.asr.seat_stats().get("encoder", {})
        return {"served": enc.get("served", 0), "declined": dict(enc.get("declined", {})),
                "replays": enc.get("replays", 0), "reason": enc.get("reason", "")}


class _Peer:
    name, backend, compute_type = PEER, "cuda", "float16"

    def __init__(self, checkpoint: Path, device: str):
        import importlib.metadata as md

        import torch
        import whisper
        self.torch, self.whisper, self.device = torch, whisper, device
        self.model = whisper.load_model(str(checkpoint), device=device)
        self.version = f"openai-whisper {md.version('openai-whisper')} (torch {torch.__version__})"
        self.threads = torch.get_num_threads()
        self.device_name = torch.cuda.get_device_name(torch.device(device))

    def run(self, samples: np.ndarray, beam: int) -> Request:
        t0 = time.perf_counter_ns()
        got = self.model.transcribe(samples, language="en", task="transcribe", temperature=0.0,
                                    beam_size=beam if beam > 1 else None, fp16=True,
                                    condition_on_previous_text=True, verbose=None)
        self.torch.cuda.synchronize()
        wall = time.perf_counter_ns() - t0
        tokens = [int(t) for s in got["segments"] for t in s["tokens"]]
        return Request(wall, wall, "".join(s["text"] for s in got["segments"]), tokens)

    def encoder_ms(self, window: np.ndarray, reps: int) -> list:
        w, torch = self.whisper, self.torch
        mel = w.pad_or_trim(w.log_mel_spectrogram(window, self.model.dims.n_mels), 3000)
        mel = mel.to(self.device).half()[None]
        out = []
        with torch.no_grad():
            self.model.encoder(mel)
            for _ in range(reps):
                torch.cuda.synchronize()
                t0 = time.perf_counter_ns()
                self.model.encoder(mel)
                torch.cuda.synchronize()
                out.append((time.perf_counter_ns() - t0) / 1e6)
        return out


def _model_info(path: Path) -> dict:
    """The rows' model facts: of the ggml file, or of a CTranslate2 directory (tests)."""
    from ..convert.whisper_ggml import is_ggml_file, read_ggml_whisper
    if not is_ggml_file(path):
        from .asr import model_info
        return dict(model_info(Path(path)), matrix_type="as stored")
    g = read_ggml_whisper(path)
    params = sum(int(np.prod(shape)) for shape, _, _ in g.tensors.values())
    return {"file": path.name, "sha256": _sha256(path), "arch": "whisper", "params": params,
            "file_size": path.stat().st_size, "matrix_type": g.matrix_type}


def benchmark(model: Path, *, clips: Path, reps: int, threads: Optional[int] = None,
              clip_seconds: Sequence[float] = CLIP_SECONDS, beams: Sequence[int] = BEAMS,
              device: str = "vulkan", peer_device: str = "cuda", work: Path = Path("."),
              compute_type: str = "float32",
              pause: float = 0.1, encoder_reps: int = ENCODER_REPS,
              open_peer: Optional[Callable] = None,
              on_event: Callable = lambda *a, **k: None) -> dict:
    """Both engines over every (beam, clip) cell; the record's result part. ``open_peer(model,
    work)``: the peer engine (default: openai-whisper on ``peer_device``, from the model's
    float16 checkpoint). ``compute_type``: dasllama's lane, "float32" (the seat's products in
    float32) or "int8" (its products and attention round to float16 on devices with
    cooperative matrices; the decoder's CPU products are CTranslate2's int8 numerics)."""
    if reps < 1:
        raise BenchError(f"reps must be at least 1, got {reps}")
    if compute_type not in LANES:
        raise BenchError(f"compute_type {compute_type!r} is not one of {sorted(LANES)}")
    info = _model_info(model)
    sources = load_sources(clips)
    ours = _Ours(model, device, threads, compute_type)
    peer = (open_peer or (lambda m, w: _Peer(openai_checkpoint(m, w / f"{m.stem}-openai.pt"),
                                             peer_device)))(model, work)
    engines = {e.name: e for e in (ours, peer)}
    result = {"config": {"reps": reps, "threads": ours.threads, "warmup": 1, "alternate": True,
                         "pause_s": pause, "device": device, "peer_device": peer_device,
                         "temperature": 0.0, "language": "en",
                         "clip_seconds": list(clip_seconds), "beam_sizes": list(beams),
                         "clip_sources": list(FIXTURE_ORDER),
                         "weights": f"{info['file']} ({info['matrix_type']} matrices); the peer: "
                                    f"the same values dequantized to float16",
                         "lanes": {OURS: LANES[compute_type], PEER: "float16 on CUDA"}},
              "engines": {n: {"version": e.version, "device": e.device_name,
                              "compute_type": e.compute_type} for n, e in engines.items()},
              "rows": [], "memory": [], "validation": []}
    window = build_clip(sources, 60)[:WINDOW_SAMPLES]
    enc = {n: e.encoder_ms(window, encoder_reps) for n, e in engines.items()}
    for n, e in engines.items():
        result["rows"].append(_encoder_row(e, compute_type, info, enc[n]))
        on_event("encoder", engine=n, ms=float(np.median(enc[n])))
    for beam in beams:
        for s in clip_seconds:
            samples = build_clip(sources, s)
            label = f"{int(round(s))}s beam {beam}"
            got = {n: e.run(samples, beam) for n, e in engines.items()}
            before = ours.seats()
            reqs = {n: [] for n in engines}
            for rep, name in schedule(list(engines), reps):
                if pause > 0:
                    time.sleep(pause)
                reqs[name].append(engines[name].run(samples, beam))
                on_event("run", engine=name, cell=label, rep=rep,
                         ms=reqs[name][-1].wall_ns / 1e6)
            after = ours.seats()
            result["validation"].append({
                "clip_seconds": s, "beam_size": beam,
                "texts_identical": got[OURS].text.strip() == got[PEER].text.strip(),
                "wer": word_errors(got[OURS].text, got[PEER].text),
                "words": {n: len(words(g.text)) for n, g in got.items()},
                "texts": {n: g.text for n, g in got.items()},
                "seat": {"served": after["served"] - before["served"],
                         "replays": after["replays"] - before["replays"],
                         "declined": {k: v - before["declined"].get(k, 0)
                                      for k, v in after["declined"].items()},
                         "reason": after["reason"]}})
            for n, e in engines.items():
                result["rows"] += _cell_rows(e, compute_type, info, reqs[n], s, beam)
    return result


def encoder_test(lane: str) -> str:
    """The encoder row's test name: both engines' rows pair under dasllama's lane (the float32
    lane's keeps the plain name)."""
    return "encoder_window" if lane == "float32" else f"encoder_window_{lane}"


class _AsCell:
    """An engine seen through the cell's name: both engines' rows of a cell share one test name
    (the ours-against-peer pair), so the cell is named by dasllama's lane."""

    def __init__(self, engine, lane: str):
        self.name, self.backend, self.version = engine.name, engine.backend, engine.version
        self.threads, self.compute_type = engine.threads, lane


def _cell_rows(engine, lane: str, info: dict, reqs, seconds: float, beam: int) -> list:
    rows = rows_for(_AsCell(engine, lane), info, reqs, seconds, beam)
    for r in rows:
        r.update(quant=engine.compute_type, compute_type=engine.compute_type,
                 device=engine.device_name)
    return rows


def _encoder_row(engine, lane: str, info: dict, ms: list) -> dict:
    from .record import NOISE_CV
    from .stats import summarize
    s = summarize(ms)
    return {"kind": "asr", "engine": engine.name, "backend": engine.backend,
            "version": engine.version, "threads": engine.threads, "model": info["file"],
            "model_sha256": info["sha256"], "arch": "whisper", "quant": engine.compute_type,
            "params": info["params"], "test": encoder_test(lane), "unit": "ms", **s.as_dict(),
            "noisy": bool(s.cv > NOISE_CV), "reruns": 0, "samples": ms,
            "samples_ns": [int(x * 1e6) for x in ms], "audio_seconds": 30.0,
            "compute_type": engine.compute_type, "device": engine.device_name}


def main(argv: Optional[list] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="python -m dasllama.bench.asr_gpu")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack", help="a CTranslate2 folder -> the ggml file both engines read")
    p.add_argument("folder"), p.add_argument("out")
    r = sub.add_parser("run", help="both engines on the GPU machine; writes the record")
    r.add_argument("model", help="the ggml file `pack` wrote")
    r.add_argument("--clips", default=None, help="the ASR fixture clips (default: the tree's)")
    r.add_argument("--reps", type=int, default=5)
    r.add_argument("--threads", type=int, default=None, help="dasllama's CPU threads")
    r.add_argument("--seconds", default=",".join(str(s) for s in CLIP_SECONDS))
    r.add_argument("--beam", default=",".join(str(b) for b in BEAMS))
    r.add_argument("--device", default="vulkan"), r.add_argument("--peer-device", default="cuda")
    r.add_argument("--compute-type", default="float32", choices=sorted(LANES),
                   help="dasllama's lane (default float32)")
    r.add_argument("-o", "--out", default=None)
    a = ap.parse_args(argv)
    if a.cmd == "pack":
        print("wrote", pack(a.folder, a.out))
        return 0
    from . import probe, record

    def show(kind, **k):
        print(kind, " ".join(f"{n}={v:.1f}" if isinstance(v, float) else f"{n}={v}"
                             for n, v in k.items()), flush=True)

    clips = Path(a.clips) if a.clips else fixture_dir()
    if clips is None:
        raise SystemExit("no fixture clips here: pass --clips DIR")
    out = Path(a.out) if a.out else None
    machine = probe.machine(gpu=True)
    import tempfile
    with tempfile.TemporaryDirectory(prefix="dasllama-asr-gpu-") as work:   # the checkpoint
        result = benchmark(Path(a.model), clips=clips, reps=a.reps, threads=a.threads,
                           clip_seconds=[float(x) for x in a.seconds.split(",")],
                           beams=[int(x) for x in a.beam.split(",")], device=a.device,
                           peer_device=a.peer_device, work=Path(work), on_event=show,
                           compute_type=a.compute_type)
    machine["loadavg_1m_end"] = probe.loadavg()
    command = "python -m dasllama.bench.asr_gpu " + " ".join(shlex.quote(x) for x in argv)
    rec = record.finish(result, machine, probe.build(), probe.process_peak_rss_bytes(),
                        box=probe.box_name(machine), command=command)
    print(record.format_table(rec))
    for v in result["validation"]:
        print(f"{int(v['clip_seconds'])}s beam {v['beam_size']}: "
              + ("identical" if v["texts_identical"] else f"differ, WER {v['wer']:.3f}")
              + f"; seat served {v['seat']['served']} windows, declined {v['seat']['declined']}")
    if out:
        record.write(rec, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

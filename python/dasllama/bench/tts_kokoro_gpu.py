"""Kokoro on a GPU: dasllama's Vulkan seat against the `kokoro` package (hexgrad's KModel,
PyTorch) on CUDA, in the same run, on a model at Kokoro-82M's shapes.

The real int8 file (92 MB) is over what one device call carries, so the model travels as a
skeleton and is made whole on the machine:

* ``skeleton``: a copy of a converted Kokoro GGUF with the int8 data of the decoder's blocks and
  generator (``RANDOM_PREFIXES``, 57 MB of the 78 MB of int8) zeroed, plus each zeroed tensor's
  histogram of int8 values. Every other tensor (text encoder, ALBERT, predictor, scales, biases,
  voices) is the file's own, so durations are the real model's.
* ``fill``: each zeroed tensor drawn from its own histogram with a seeded generator: the same
  shapes, tensor types (int8 where the file is int8) and value spread, random structure.
* ``plan``: the bench texts (tts_kokoro.TEXTS) as the phoneme-id chunks and voice rows that
  KokoroTTS.plan gives, written once where espeak-ng is installed; both engines are fed these
  ids, so neither phonemizes inside the clock.
* ``run``: the two engines over the plan. The package's KModel is built from Kokoro-82M's config
  with random init (its weights are not reachable here); its duration head is pinned (weights
  0, ``k`` bins at +30, the rest at -30: every id lasts exactly ``k`` frames, with ``k`` the
  rounded mean of dasllama's frames per id on that text), so both decode about the same
  number of frames: the record's validation keeps both audio lengths.

Tests, per text size: ``request_wall`` (ms, the ids of every chunk in, the whole audio on the
host), ``first_audio`` (ms, the first chunk's audio on the host) and ``rtf`` (x). Warm-up: one
request per engine per text; then ``reps`` requests alternating between the engines.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from .llm import BenchError, schedule
from .pocket_peer import Request
from .record import NOISE_CV
from .stats import summarize
from .tts_kokoro import TESTS, TEXTS, _rel_l2, request_figures

__all__ = ["write_skeleton", "fill_skeleton", "write_plan", "benchmark", "main"]

RANDOM_PREFIXES = ("decoder.decode.", "decoder.generator.")
PEER = "kokoro"
MODEL_NAME = "kokoro-82m-shapes-int8"
SAMPLE_RATE = 24000
PINNED_LOGIT = 30.0     # sigmoid(+-30) is 1 or 0 to float32 precision: a pinned bin counts 0 or 1
# Kokoro-82M's published config (hexgrad/Kokoro-82M config.json), without its vocabulary.
KOKORO_82M = {
    "istftnet": {"upsample_kernel_sizes": [20, 12], "upsample_rates": [10, 6],
                 "gen_istft_hop_size": 5, "gen_istft_n_fft": 20,
                 "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
                 "resblock_kernel_sizes": [3, 7, 11], "upsample_initial_channel": 512},
    "dim_in": 64, "dropout": 0.2, "hidden_dim": 512, "max_conv_dim": 512, "max_dur": 50,
    "multispeaker": True, "n_layer": 3, "n_mels": 80, "n_token": 178, "style_dim": 128,
    "text_encoder_kernel_size": 5,
    "plbert": {"hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 2048,
               "max_position_embeddings": 512, "num_hidden_layers": 12, "dropout": 0.1},
}


# --- the model's skeleton ----------------------------------------------------------------------

def _int8_tensors(reader):
    for t in reader.tensors:
        if t.tensor_type.name == "I8" and t.name.startswith(RANDOM_PREFIXES):
            yield t


def write_skeleton(src, out, histograms) -> int:
    """Copy ``src`` to ``out`` with RANDOM_PREFIXES' int8 data zeroed; their histograms (256
    counts, value -128 first) to ``histograms`` (.npz). Returns the bytes zeroed."""
    from gguf import GGUFReader

    shutil.copyfile(src, out)
    reader = GGUFReader(str(out), "r+")
    hist, zeroed = {}, 0
    for t in _int8_tensors(reader):
        data = np.asarray(t.data).view(np.int8)
        hist[t.name] = np.bincount(data.ravel().astype(np.int16) + 128, minlength=256)
        data[...] = 0
        zeroed += data.size
    reader.data.flush()
    np.savez(histograms, **hist)
    return zeroed


def fill_skeleton(skeleton, histograms, out, seed: int = 0) -> int:
    """``out``: the skeleton with each zeroed tensor drawn from its histogram (seeded)."""
    from gguf import GGUFReader

    shutil.copyfile(skeleton, out)
    reader = GGUFReader(str(out), "r+")
    hist = dict(np.load(histograms))
    rng = np.random.default_rng(seed)
    filled = 0
    for t in _int8_tensors(reader):
        if t.name not in hist:
            raise BenchError(f"{histograms}: no histogram for {t.name}")
        p = hist[t.name].astype(np.float64)
        data = np.asarray(t.data).view(np.int8)
        data[...] = (rng.choice(256, size=data.shape, p=p / p.sum()) - 128).astype(np.int8)
        filled += data.size
    reader.data.flush()
    if not filled:
        raise BenchError(f"{skeleton}: no tensor under {RANDOM_PREFIXES} to fill")
    return filled


# --- the plan ------------------------------------------------------------------------------------

def write_plan(model, out, voice: str = "jf_alpha") -> dict:
    """TEXTS as KokoroTTS.plan chunks: {size: [{"ids", "style"}]} with the voice's rows."""
    from ..kokoro import KokoroTTS

    with KokoroTTS(model) as tts:
        pack = tts.voice_pack(voice)
        plan = {"voice": voice, "texts": {}}
        for size, text in TEXTS.items():
            plan["texts"][size] = [{"ids": [int(i) for i in c.ids],
                                    "style": [float(x) for x in pack[c.style_row]]}
                                   for c in tts.plan(text)]
    Path(out).write_text(json.dumps(plan))
    return plan


# --- the engines -------------------------------------------------------------------------------

def _request(run_chunks: Callable, chunks, keep: bool) -> Request:
    kept, samples, first = [], 0, None
    t0 = time.perf_counter_ns()
    for audio in run_chunks(chunks):
        if first is None:
            first = time.perf_counter_ns() - t0
        samples += len(audio)
        if keep:
            kept.append(audio)
    wall = time.perf_counter_ns() - t0
    return Request(wall, first, samples, [], np.concatenate(kept) if keep else None)


class _Ours:
    """_core.KokoroModel with the vocoder seat on ``device``, the predictor on the CPU."""

    name = "dasllama"

    def __init__(self, path, threads: int, device: str):
        from .. import _core
        from .tts import _version

        from .kokoro_peer import file_sha256

        self.model = _core.KokoroModel(str(path), int(threads), device)
        self.version, self.threads, self.backend = _version(), threads, device.split(":")[0]
        self.device_name = getattr(self.model, "device_name", device)
        self.sha256 = file_sha256(Path(path))
        self.frames = []

    def seats(self) -> dict:
        """{seat: {"served", "declined": {reason: n}}} so far (none on the CPU)."""
        stats = self.model.seat_stats() if self.backend != "cpu" else {}
        return {name: {"served": int(s.get("served", 0)),
                       "declined": {k: int(v) for k, v in dict(s.get("declined", {})).items()}}
                for name, s in stats.items()}

    def chunks(self, chunks):
        self.frames = []
        for c in chunks:
            out = self.model.synthesize(c["ids"], np.asarray(c["style"], np.float32), 1.0)
            self.frames.append(np.asarray(out["durations"], np.int64))
            yield np.asarray(out["audio"], np.float32)


def _kokoro_modules():
    """kokoro.model without the package's __init__ (which imports the misaki G2P)."""
    import importlib.util
    import types

    if "kokoro.model" not in sys.modules:
        spec = importlib.util.find_spec("kokoro")
        if spec is None or not spec.submodule_search_locations:
            raise BenchError("the peer needs the kokoro package (pip install kokoro)")
        pkg = types.ModuleType("kokoro")
        pkg.__path__ = list(spec.submodule_search_locations)
        pkg.__spec__ = spec
        sys.modules["kokoro"] = pkg
    import kokoro.model as model
    return model


class _Peer:
    """The kokoro package's KModel at Kokoro-82M's config, random init, on ``device``."""

    name = PEER

    def __init__(self, vocab: dict, device: str, folder: Path, seed: int = 0):
        import torch

        model = _kokoro_modules()
        torch.manual_seed(seed)
        from .kokoro_peer import file_sha256

        empty = folder / "kokoro-empty.pth"
        torch.save({}, empty)          # KModel loads no weights: its random init stays
        self.torch, self.device = torch, device
        self.model = model.KModel(repo_id="hexgrad/Kokoro-82M",
                                  config=dict(KOKORO_82M, vocab=vocab),
                                  model=str(empty)).to(device).eval()
        weights = folder / "kokoro-random.pth"     # the random init, for the record's sha256
        torch.save(self.model.state_dict(), weights)
        self.sha256 = file_sha256(weights)
        import importlib.metadata as md
        self.version = f"kokoro {md.version('kokoro')} (torch {torch.__version__})"
        self.threads, self.backend = torch.get_num_threads(), device.split(":")[0]
        self.device_name = (torch.cuda.get_device_name(torch.device(device))
                            if self.backend == "cuda" else None)
        self.frames_per_id = 1

    def pin_durations(self, k: int) -> None:
        """Every id lasts ``k`` frames (see the module doc)."""
        proj = self.model.predictor.duration_proj.linear_layer
        with self.torch.no_grad():
            proj.weight.zero_()
            proj.bias.fill_(-PINNED_LOGIT)
            proj.bias[:k] = PINNED_LOGIT
        self.frames_per_id = k

    def chunks(self, chunks):
        torch = self.torch
        for c in chunks:
            ids = torch.tensor([[0, *c["ids"], 0]], dtype=torch.long, device=self.device)
            style = torch.tensor([c["style"]], dtype=torch.float32, device=self.device)
            audio, _ = self.model.forward_with_tokens(ids, style, 1.0)
            yield audio.float().cpu().numpy().reshape(-1)


def _rows(engine, size: str, reqs, voice: str, seats: Optional[dict]) -> list:
    figures, ns = request_figures(reqs, SAMPLE_RATE)
    rows = []
    for test, unit in TESTS:
        s = summarize(figures[test])
        rows.append({"kind": "tts", "engine": engine.name, "backend": engine.backend,
                     "version": engine.version, "threads": engine.threads,
                     "model": MODEL_NAME, "model_sha256": engine.sha256, "arch": "kokoro",
                     "quant": "int8" if engine.name == "dasllama" else "f32",
                     "test": f"{test}_{size}", "unit": unit, **s.as_dict(),
                     "noisy": bool(s.cv > NOISE_CV), "reruns": 0,
                     "samples": figures[test], "samples_ns": ns[test],
                     "text_chars": len(TEXTS[size]), "audio_seconds": reqs[0].samples / SAMPLE_RATE,
                     "voice": voice})
        if engine.device_name and engine.backend != "cpu":
            rows[-1]["device"] = engine.device_name
        if seats is not None:
            rows[-1]["seats"] = seats
    return rows


def _against_cpu(model, threads: int, plan: dict) -> dict:
    """The seat's audio against the CPU chain's on the plan's first chunk (same ids, style,
    predictor), and another voice row's audio as the control."""
    from .. import _core

    chunk = next(iter(plan["texts"].values()))[0]
    cpu = _core.KokoroModel(str(model), int(threads))
    style = np.asarray(chunk["style"], np.float32)
    out = cpu.synthesize(chunk["ids"], style, 1.0)
    ref = np.asarray(out["audio"], np.float32)
    other = np.asarray(cpu.synthesize(chunk["ids"], style[::-1].copy(), 1.0,
                                      durations=np.asarray(out["durations"], np.int64))["audio"],
                       np.float32)     # the style row reversed, the same durations
    return {"check": "vocoder seat vs the CPU chain, first chunk", "ids": len(chunk["ids"]),
            "cpu_samples": int(ref.size), "_ref": ref, "control_rel_l2_vs_cpu": _rel_l2(other, ref)}


def benchmark(model, plan: dict, *, reps: int, threads: int, device: str = "vulkan",
              peer_device: str = "cuda", pause: float = 0.1, folder: Path = Path("."),
              on_event: Callable = lambda *a, **k: None) -> dict:
    """Both engines over the plan's texts; the record's result part."""
    from gguf import GGUFReader

    if reps < 1:
        raise BenchError(f"reps must be at least 1, got {reps}")
    meta = GGUFReader(str(model)).fields
    symbols = [bytes(meta["kokoro.vocab.symbols"].parts[i]).decode()
               for i in meta["kokoro.vocab.symbols"].data]
    ids = [int(meta["kokoro.vocab.ids"].parts[i][0]) for i in meta["kokoro.vocab.ids"].data]
    ours = _Ours(model, threads, device)
    peer = _Peer(dict(zip(symbols, ids)), peer_device, Path(folder))
    engines = [ours, peer]
    result = {"config": {"reps": reps, "threads": threads, "warmup": 1, "alternate": True,
                         "pause_s": pause, "voice": plan["voice"], "speed": 1.0,
                         "device": device, "peer_device": peer_device,
                         "texts": dict(TEXTS), "input": "phoneme ids (KokoroTTS.plan, espeak-ng "
                         "en-us), the same for both engines",
                         "model": "Kokoro-82M shapes: the converted int8 file with the decoder "
                         "blocks' and generator's int8 weights drawn from their own value "
                         "histograms; the peer: KModel at Kokoro-82M's config, random init, "
                         "duration head pinned"},
              "engines": {e.name: {"version": e.version} for e in engines},
              "rows": [], "memory": [], "validation": []}
    if ours.backend != "cpu":
        result["validation"].append(_against_cpu(model, threads, plan))
    for size, chunks in plan["texts"].items():
        before = ours.seats()
        got = _request(ours.chunks, chunks, True)
        check = result["validation"][0] if result["validation"] else {}
        if "_ref" in check:
            first = np.asarray(next(ours.chunks(chunks[:1])), np.float32)
            check["audio_rel_l2_vs_cpu"] = _rel_l2(first, check.pop("_ref"))
            check["gpu_samples"] = int(first.size)
        frames = np.concatenate(ours.frames)
        k = max(1, int(round(frames.sum() / len(frames))))
        peer.pin_durations(k)
        theirs = _request(peer.chunks, chunks, True)
        result["validation"].append({
            "text": size, "chunks": len(chunks), "phonemes": sum(len(c["ids"]) for c in chunks),
            "samples": {ours.name: got.samples, peer.name: theirs.samples},
            "frames": {ours.name: int(frames.sum()), peer.name: k * int(len(frames))},
            "peer_frames_per_id": k, "finite": {
                ours.name: bool(np.isfinite(got.audio).all()),
                peer.name: bool(np.isfinite(theirs.audio).all())},
            "seat_stats": ours.seats()})
        for e in engines:
            _request(e.chunks, chunks, False)          # warm-up
        reqs = {e.name: [] for e in engines}
        by_name = {e.name: e for e in engines}
        for rep, name in schedule(list(by_name), reps):
            if pause > 0:
                time.sleep(pause)
            r = _request(by_name[name].chunks, chunks, False)
            reqs[name].append(r)
            on_event(name, size, rep, r.wall_ns / 1e6, r.first_audio_ns / 1e6)
        after = ours.seats()
        seats = {n: {"served": s["served"] - before.get(n, {}).get("served", 0),
                     "declined": {k: v - before.get(n, {}).get("declined", {}).get(k, 0)
                                  for k, v in s["declined"].items()}}
                 for n, s in after.items()}
        for e in engines:
            result["rows"] += _rows(e, size, reqs[e.name], plan["voice"],
                                    seats if e is ours and ours.backend != "cpu" else None)
    return result


# --- command line ------------------------------------------------------------------------------

def main(argv: Optional[list] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="python -m dasllama.bench.tts_kokoro_gpu")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("skeleton")
    s.add_argument("src"), s.add_argument("out"), s.add_argument("histograms")
    f = sub.add_parser("fill")
    f.add_argument("skeleton"), f.add_argument("histograms"), f.add_argument("out")
    f.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("plan")
    p.add_argument("model"), p.add_argument("out"), p.add_argument("--voice", default="jf_alpha")
    r = sub.add_parser("run")
    r.add_argument("model"), r.add_argument("plan")
    r.add_argument("--reps", type=int, default=7), r.add_argument("--threads", type=int, default=8)
    r.add_argument("--device", default="vulkan"), r.add_argument("--peer-device", default="cuda")
    r.add_argument("-o", "--out", default=None)
    a = ap.parse_args(argv)
    if a.cmd == "skeleton":
        print("zeroed", write_skeleton(a.src, a.out, a.histograms))
    elif a.cmd == "fill":
        print("filled", fill_skeleton(a.skeleton, a.histograms, a.out, a.seed))
    elif a.cmd == "plan":
        plan = write_plan(a.model, a.out, a.voice)
        print({k: [len(c["ids"]) for c in v] for k, v in plan["texts"].items()})
    else:
        from . import probe, record

        def show(name, size, rep, wall, first):
            print(f"{size} {name} rep {rep}: {wall:.1f} ms (first {first:.1f} ms)", flush=True)

        machine = probe.machine(gpu=True)
        result = benchmark(Path(a.model), json.loads(Path(a.plan).read_text()), reps=a.reps,
                           threads=a.threads, device=a.device, peer_device=a.peer_device,
                           folder=Path(a.out).parent if a.out else Path("."), on_event=show)
        machine["loadavg_1m_end"] = probe.loadavg()
        command = "python -m dasllama.bench.tts_kokoro_gpu " + " ".join(
            shlex.quote(x) for x in argv)
        rec = record.finish(result, machine, probe.build(), probe.process_peak_rss_bytes(),
                            box=probe.box_name(machine), command=command)
        print(record.format_table(rec))
        if a.out:
            record.write(rec, Path(a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

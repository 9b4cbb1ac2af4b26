"""Speech quality of the phoneme TTS models: the word error rate an ASR makes on what each
lane speaks, against the same ASR on onnxruntime's audio of the same file.

``dasllama bench quality`` speaks the fixed sentences of :mod:`.quality_sentences` (40:
plain prose, numbers, dates, money, names, questions, long sentences) with every lane,
transcribes each sentence's audio with dasllama's Whisper, and reports per lane the corpus
word error rate (jiwer) against the text. The goal the figures are read against: a lane's
WER within half a point of onnxruntime's (the peer running the same int8 ONNX file).

The lanes (``--lanes``, comma-separated):

* ``onnxruntime``: the ONNX file through onnxruntime (CPU, ``--threads`` intra-op threads);
  the peer every other lane is compared with.
* ``dasllama``: dasllama's C++ chain (csrc/tts/kokoro) on the GGUF converted from that file,
  the served lane (``--threads`` pool threads).
* ``reference``: dasllama's NumPy reference (dasllama.reference.kokoro) on that GGUF: the
  integer ops as the graph does them, float32 elsewhere (slow; not in the default lanes).

Method:

* One text plan for all lanes (dasllama.text.plan: normalization, espeak-ng en-us phonemes,
  chunks under 510 phonemes, the voice row per chunk), so the lanes differ only in how they
  compute; a sentence's chunks are spoken in order and joined.
* The ASR (``--asr``, default whisper-tiny.en, float32, beam 5, English) reads each
  sentence's audio resampled to 16 kHz (soxr). The same ASR settings for every lane.
* Both sides of the WER are normalized the same way before jiwer compares them: numbers,
  money and dates spelled out by dasllama.text.normalize, lower case, punctuation dropped
  (so "$42.50" in the text and "42.50" or "forty-two fifty" from the ASR meet on words).
* The record (``-o``, default bench/records/quality/quality-{box}.json) keeps per lane the
  corpus WER, each sentence's transcript and WER, and the seconds of audio spoken.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import re
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from . import probe, record
from .llm import BenchError
from .kokoro_peer import file_sha256, kokoro_files, onnx_speaker
from .quality_sentences import SENTENCES

__all__ = ["LANES", "SCHEMA", "wer_words", "corpus_wer", "speak_corpus", "transcribe_corpus",
           "benchmark", "add_quality_arguments", "run_quality"]

SCHEMA = "dasllama-quality/1"
LANES = ("onnxruntime", "dasllama", "reference")
DEFAULT_LANES = ("onnxruntime", "dasllama")
PEER_LANE = "onnxruntime"
SAMPLE_RATE = 24000       # Kokoro's output rate
ASR_RATE = 16000          # Whisper's input rate
GOAL_POINTS = 0.5         # a lane's WER within this many points of the peer's (the goal)
_NOT_WORD = re.compile(r"[^a-z0-9' ]+")


def wer_words(text: str) -> str:
    """``text`` as the WER compares it: spelled out, lower case, words only."""
    from ..text import normalize

    text = normalize(text).lower().replace("-", " ")
    return " ".join(_NOT_WORD.sub(" ", text).split())


def corpus_wer(references: Sequence[str], hypotheses: Sequence[str]) -> float:
    """Word error rate over the whole corpus (errors / reference words), after wer_words."""
    import jiwer

    refs = [wer_words(t) for t in references]
    hyps = [wer_words(t) for t in hypotheses]
    # jiwer refuses an empty reference; an empty hypothesis is all deletions, as it should be.
    keep = [i for i, r in enumerate(refs) if r]
    return float(jiwer.wer([refs[i] for i in keep], [hyps[i] or "" for i in keep]))


# ---------------------------------------------------------------------------------- lanes

def _reference_lane(gguf: Path) -> Callable:
    from ..reference.kokoro import ReferenceKokoro

    ref = ReferenceKokoro(gguf)

    def speak(ids, style, speed):
        return ref.synthesize(ids, style, speed).audio

    return speak


def _dasllama_lane(gguf: Path, threads: int) -> Callable:
    from .. import _core

    model = _core.KokoroModel(str(gguf), threads)

    def speak(ids, style, speed):
        return np.asarray(model.synthesize(ids, style, speed)["audio"], np.float32)

    return speak


def speak_corpus(speak: Callable, sentences: Sequence[str], vocab: dict, pack: np.ndarray,
                 speed: float, progress: Optional[Callable] = None) -> List[np.ndarray]:
    """Each sentence's audio: its plan's chunks spoken in order and joined."""
    from ..text import plan

    out = []
    for i, text in enumerate(sentences):
        pieces = [speak(c.ids, pack[c.style_row], speed) for c in plan(text, vocab)]
        out.append(np.concatenate(pieces).astype(np.float32))
        if progress:
            progress(i + 1, len(sentences))
    return out


def transcribe_corpus(asr, audios: Sequence[np.ndarray], beam: int) -> List[str]:
    """The ASR's text for each audio (24 kHz in, 16 kHz to Whisper)."""
    from ..audio import resample

    texts = []
    for a in audios:
        segments, _ = asr.transcribe(resample(a, SAMPLE_RATE, ASR_RATE), language="en",
                                     beam_size=beam)
        texts.append(" ".join(s.text.strip() for s in segments).strip())
    return texts


def benchmark(*, model: str = "kokoro", lanes: Sequence[str] = DEFAULT_LANES, voice: str = "jf_alpha",
              speed: float = 1.0, asr_model: str = "whisper-tiny.en", beam: int = 5,
              threads: int = 2, sentences: Sequence[str] = SENTENCES,
              log: Callable[[str], None] = lambda s: None) -> dict:
    """Speak ``sentences`` with each lane, transcribe, and return the record's result part."""
    from ..asr import ASR

    unknown = [x for x in lanes if x not in LANES]
    if unknown or not lanes:
        raise BenchError(f"lanes {unknown or list(lanes)!r}: choose from {', '.join(LANES)}")
    onnx, gguf, vocab, packs = kokoro_files(model)
    if voice not in packs:
        raise BenchError(f"voice {voice!r} is not in the model's packs; accepted: "
                         f"{', '.join(sorted(packs))}")
    pack = np.asarray(packs[voice], np.float32).reshape(-1, 256)
    makers = {"onnxruntime": lambda: onnx_speaker(onnx, threads),
              "dasllama": lambda: _dasllama_lane(gguf, threads),
              "reference": lambda: _reference_lane(gguf)}
    asr = ASR(asr_model, compute_type="float32", n_threads=threads)
    result = {}
    for lane in lanes:
        speak = makers[lane]()
        t0 = time.perf_counter()
        audios = speak_corpus(speak, sentences, vocab, pack, speed,
                              lambda i, n: log(f"{lane}: spoke {i}/{n}"))
        spoken_s = time.perf_counter() - t0
        texts = transcribe_corpus(asr, audios, beam)
        result[lane] = {
            "wer": corpus_wer(sentences, texts),
            "audio_seconds": round(sum(len(a) for a in audios) / SAMPLE_RATE, 3),
            "synthesis_seconds": round(spoken_s, 3),
            "sentences": [{"text": s, "transcript": t, "wer": corpus_wer([s], [t])}
                          for s, t in zip(sentences, texts)],
        }
        log(f"{lane}: WER {100 * result[lane]['wer']:.2f}%")
    config = {"model": onnx.name, "model_sha256": file_sha256(onnx), "voice": voice,
              "speed": speed, "asr": asr_model, "asr_compute_type": "float32", "beam": beam,
              "threads": threads, "phonemizer": "espeak-ng en-us", "n_sentences": len(sentences)}
    return {"config": config, "lanes": result}


def format_summary(rec: dict) -> str:
    lanes = rec["lanes"]
    peer = lanes.get(PEER_LANE, {}).get("wer")
    lines = [f"{'lane':<12} {'WER %':>7} {'vs onnxruntime':>15} {'audio s':>8}"]
    for name, lane in lanes.items():
        delta = "" if peer is None or name == PEER_LANE else \
            f"{100 * (lane['wer'] - peer):+.2f} pts"
        lines.append(f"{name:<12} {100 * lane['wer']:>7.2f} {delta:>15} "
                     f"{lane['audio_seconds']:>8.1f}")
    lines.append(f"goal: a lane within {GOAL_POINTS} points of onnxruntime's WER")
    return "\n".join(lines)


def add_quality_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", "-m", default="kokoro", metavar="NAME|PATH",
                   help="a Kokoro model folder or packaged name (default kokoro)")
    p.add_argument("--lanes", default=",".join(DEFAULT_LANES),
                   help=f"comma-separated lanes of {', '.join(LANES)} "
                        f"(default {','.join(DEFAULT_LANES)})")
    p.add_argument("--voice", default="jf_alpha", help="voice pack (default jf_alpha)")
    p.add_argument("--speed", type=float, default=1.0, help="speaking speed (default 1.0)")
    p.add_argument("--asr", default="whisper-tiny.en", metavar="NAME|PATH",
                   help="the Whisper model that transcribes (default whisper-tiny.en)")
    p.add_argument("--beam", type=int, default=5, help="the ASR's beam size (default 5)")
    p.add_argument("--threads", "-t", type=int, default=2, help="threads (default 2)")
    p.add_argument("--sentences", type=int, default=len(SENTENCES),
                   help=f"speak only the first N sentences (default all {len(SENTENCES)})")
    p.add_argument("--out", "-o", default="bench/records/quality/quality-{box}.json",
                   metavar="FILE", help="the record ({box} is this machine's name)")


def run_quality(args) -> int:
    lanes = [x.strip() for x in args.lanes.split(",") if x.strip()]
    if not 1 <= args.sentences <= len(SENTENCES):
        raise BenchError(f"--sentences {args.sentences}: choose 1 to {len(SENTENCES)}")
    if not 0.25 <= args.speed <= 4:
        raise BenchError(f"--speed {args.speed}: choose a speed in [0.25, 4]")
    machine = probe.machine()
    result = benchmark(model=args.model, lanes=lanes, voice=args.voice, speed=args.speed,
                       asr_model=args.asr, beam=args.beam, threads=args.threads,
                       sentences=SENTENCES[:args.sentences],
                       log=lambda s: print(s, file=sys.stderr, flush=True))
    box = probe.box_name(machine)
    rec = {"schema": SCHEMA,
           "created": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "box": box, "command": record.command_line(), "machine": machine,
           "build": probe.build(), **result}
    out = Path(args.out.replace("{box}", box))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rec, indent=1, ensure_ascii=False) + "\n")
    print(format_summary(rec))
    print(f"wrote {out}")
    return 0

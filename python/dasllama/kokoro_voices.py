"""Kokoro's voices: packs by name, weighted blends and custom style vectors.

A pack is a (rows, width) float32 array, Kokoro's (510, 256): row n - 1 is the style for a
chunk of n phonemes (dasllama.text.chunk.voice_row); a model's packs share one shape, and a
model of other widths (Kitten) has packs of its own width. A voice is any of:

* a pack's name: ``"jf_alpha"``;
* a blend written as text: ``"af_bella(2)+af_sky(1)"`` (a name without a weight counts 1);
* a blend as a list of (name, weight) pairs: ``[("af_bella", 2), ("af_sky", 1)]``;
* an array: a whole pack (rows, width), or one style row (width,) used for every length.

A blend is the weighted mean of its packs, row by row, with the weights normalized to sum to
one (so "a(2)+b(2)" is "a+b"; Kokoro-FastAPI and kokoro-onnx's examples mix the same way).
"""

from __future__ import annotations

import re
from typing import Mapping, Sequence, Tuple, Union

import numpy as np

from .errors import TTSInputError

__all__ = ["STYLE_WIDTH", "PACK_ROWS", "parse_blend", "resolve_voice"]

STYLE_WIDTH = 256    # Kokoro's style row: 128 for the decoder, 128 for the prosody predictor
PACK_ROWS = 510      # one row per chunk length, 1 to the model's 510-phoneme limit
_TERM = re.compile(r"^\s*([A-Za-z0-9_.-]+)\s*(?:\(\s*([0-9]*\.?[0-9]+)\s*\))?\s*$")

Voice = Union[str, Sequence[Tuple[str, float]], np.ndarray]


def parse_blend(spec: str) -> list:
    """``"a(2)+b"`` -> [("a", 2.0), ("b", 1.0)]. Raises TTSInputError naming the bad term."""
    terms = []
    for part in spec.split("+"):
        m = _TERM.match(part)
        if not m:
            raise TTSInputError(f"voice {spec!r}: {part.strip()!r} is not NAME or NAME(WEIGHT)")
        terms.append((m.group(1), float(m.group(2)) if m.group(2) else 1.0))
    return terms


def _known(packs: Mapping[str, np.ndarray]) -> str:
    names = sorted(packs)
    shown = ", ".join(names[:20]) + (f", ... ({len(names)} in all)" if len(names) > 20 else "")
    return shown or "none"


def resolve_voice(voice: Voice, packs: Mapping[str, np.ndarray]) -> np.ndarray:
    """The float32 pack a voice stands for, of the shape the model's packs share (Kokoro's
    (PACK_ROWS, STYLE_WIDTH) when there are none)."""
    rows, width = next(iter(packs.values())).shape if packs else (PACK_ROWS, STYLE_WIDTH)
    if isinstance(voice, np.ndarray):
        a = np.asarray(voice, np.float32)
        if a.shape == (width,):
            a = np.broadcast_to(a, (rows, width))
        elif a.ndim == 3 and a.shape[1] == 1:
            a = a[:, 0, :]                       # kokoro's (510, 1, 256) layout
        if a.shape != (rows, width):
            raise TTSInputError(f"a style array has shape {tuple(voice.shape)}; accepted: "
                                f"({width},) or ({rows}, {width})")
        if not np.all(np.isfinite(a)):
            raise TTSInputError("a style array holds NaN or infinite values")
        return np.ascontiguousarray(a)
    if isinstance(voice, str):
        terms = parse_blend(voice)
    elif isinstance(voice, (list, tuple)) and voice:
        terms = []
        for t in voice:
            if (not isinstance(t, (list, tuple)) or len(t) != 2 or not isinstance(t[0], str)
                    or isinstance(t[1], bool) or not isinstance(t[1], (int, float))):
                raise TTSInputError(f"voice blend term {t!r} is not a (name, weight) pair")
            terms.append((t[0], float(t[1])))
    else:
        raise TTSInputError(f"voice {voice!r}: give a name, a blend like 'a(2)+b(1)', a list "
                            "of (name, weight) pairs, or a style array")
    missing = [n for n, _ in terms if n not in packs]
    if missing:
        raise TTSInputError(f"unknown voice {missing[0]!r}; known voices: {_known(packs)}")
    bad = [(n, w) for n, w in terms if not (w > 0 and np.isfinite(w))]
    if bad:
        raise TTSInputError(f"voice {bad[0][0]!r} has weight {bad[0][1]}; weights must be "
                            "positive")
    total = sum(w for _, w in terms)
    mix = np.zeros((rows, width), np.float64)
    for name, weight in terms:
        mix += (weight / total) * np.asarray(packs[name], np.float64)
    return mix.astype(np.float32)

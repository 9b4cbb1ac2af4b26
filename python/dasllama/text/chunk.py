"""Long phoneme strings split into chunks the model takes, and the voice-pack row per chunk.

Kokoro reads at most 510 phonemes at a time (its position table has 512 rows; two go to the
boundary ids). ``split_phonemes`` cuts at sentence ends first (. ! ?), then at clause marks
(, ; : —), then between words, and only a single word longer than the limit is cut inside
it. Chunks keep their punctuation, so each ends as it would in the text.

The voice-pack row: a pack holds one style row per phoneme count. This project follows hexgrad's
pipeline (the reference implementation): the row for a chunk of n phonemes is n - 1
(``voice_row``). kokoro-onnx indexes with n instead, one row later; the two differ by one.
"""

from __future__ import annotations

import re

__all__ = ["MAX_PHONEMES", "split_phonemes", "voice_row"]

MAX_PHONEMES = 510   # the model's context (512 positions) less the two boundary ids

_SENTENCE = re.compile(r"(?<=[.!?…])\s+")
_CLAUSE = re.compile(r"(?<=[,;:—])\s*")


def voice_row(n_phonemes: int, rows: int = MAX_PHONEMES) -> int:
    """The style row for a chunk of n phonemes: n - 1 (hexgrad's rule), clamped to the pack."""
    if n_phonemes < 1:
        raise ValueError(f"a chunk has at least one phoneme, got {n_phonemes}")
    return min(n_phonemes, rows) - 1


def _pack(pieces: list, limit: int, joiner: str) -> list:
    """Greedily join pieces (each <= limit) into chunks of at most limit characters."""
    out, cur = [], ""
    for p in pieces:
        cand = p if not cur else cur + joiner + p
        if len(cand) <= limit:
            cur = cand
        else:
            if cur:
                out.append(cur)
            cur = p
    if cur:
        out.append(cur)
    return out


def _split_words(text: str, limit: int) -> list:
    words = []
    for w in text.split(" "):
        while len(w) > limit:          # one word longer than the limit: cut inside it
            words.append(w[:limit])
            w = w[limit:]
        if w:
            words.append(w)
    return _pack(words, limit, " ")


def _split_clauses(text: str, limit: int) -> list:
    pieces = []
    for clause in (c for c in _CLAUSE.split(text) if c.strip()):
        clause = clause.strip()
        pieces.extend([clause] if len(clause) <= limit else _split_words(clause, limit))
    return _pack(pieces, limit, " ")


def split_phonemes(phonemes: str, limit: int = MAX_PHONEMES) -> list:
    """Chunks of at most ``limit`` phonemes, cut at sentence, then clause, then word
    boundaries; whitespace between chunks is dropped."""
    if limit < 1:
        raise ValueError(f"limit must be positive, got {limit}")
    phonemes = re.sub(r"\s+", " ", phonemes).strip()
    if not phonemes:
        return []
    if len(phonemes) <= limit:
        return [phonemes]
    pieces = []
    for sentence in (s.strip() for s in _SENTENCE.split(phonemes) if s.strip()):
        pieces.extend([sentence] if len(sentence) <= limit else _split_clauses(sentence, limit))
    return _pack(pieces, limit, " ")

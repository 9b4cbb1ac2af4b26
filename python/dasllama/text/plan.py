"""Text to the chunks a phoneme TTS model (Kokoro, Kitten) speaks: normalized, phonemized,
split under the model's limit, each with its ids and its voice-pack row.

::

    chunks = plan("It costs $5.", vocab)                  # espeak-ng en-us
    chunks = plan("həlˈoʊ wˈɜːld.", vocab, phonemes=True)  # raw phoneme input
    chunks[0].ids, chunks[0].style_row

One function so the engine and the benches cut text the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Mapping, Optional

from ..errors import TTSInputError
from .chunk import MAX_PHONEMES, split_phonemes, voice_row
from .normalize import normalize
from .phonemize import PUNCTUATION, EspeakPhonemizer, phoneme_ids

__all__ = ["Chunk", "CHUNK_RAMP", "FIRST_MIN_PHONEMES", "plan"]

_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+")
_CLAUSE_END = re.compile(r"[,;:—]\s+")
# A first chunk cut inside a sentence keeps at least this many phonemes on each side of the
# cut: under about two words the model has too little context for a piece's prosody.
FIRST_MIN_PHONEMES = 12
# After a short first chunk, each chunk is at most this many times as long as the one before
# it (up to the model's limit): a model speaking at least this many times faster than real
# time has the next chunk ready before the one playing ends, so a stream does not stall.
CHUNK_RAMP = 3


@dataclass(frozen=True)
class Chunk:
    """One piece the model reads at a time."""

    phonemes: str     # the chunk's phonemes (symbols of the vocabulary only)
    ids: List[int]    # the model's ids for them, without the boundary ids
    style_row: int    # the voice pack's row for this chunk (text.chunk.voice_row)


def _first_cut(sentence: str, first_min: int, first_limit: int) -> int:
    """Where a first sentence longer than ``first_limit`` is cut for the first chunk: after its
    last clause mark (, ; : —) that leaves between ``first_min`` and ``first_limit`` phonemes
    before it, else at its last word boundary within ``first_limit``; 0 when neither leaves at
    least ``first_min`` phonemes on each side (the sentence then stays whole)."""
    ends = [m.end() for m in _CLAUSE_END.finditer(sentence)
            if first_min <= len(sentence[:m.end()].rstrip()) <= first_limit]
    if not ends:
        ends = [m.start() for m in re.finditer(" ", sentence)
                if first_min <= m.start() <= first_limit]
    cut = max(ends, default=0)
    return cut if len(sentence) - cut >= first_min else 0


def _split_first(pieces: List[str], first_limit: int, limit: int) -> List[str]:
    """The pieces with a short first chunk in front (plan's first_limit rule)."""
    sentences = _SENTENCE_END.split(pieces[0])
    if len(sentences) == 1 and len(pieces) == 1:
        return pieces                    # one sentence, one chunk: nothing follows it
    if len(sentences[0]) <= first_limit:  # whole sentences while they fit
        n = 1
        while n < len(sentences) and len(" ".join(sentences[:n + 1])) <= first_limit:
            n += 1
        first, rest = " ".join(sentences[:n]), sentences[n:]
    else:
        first_min = min(FIRST_MIN_PHONEMES, first_limit)
        cut = _first_cut(sentences[0], first_min, first_limit)
        if not cut:
            return pieces
        first = sentences[0][:cut].rstrip()
        rest = [sentences[0][cut:].lstrip()] + sentences[1:]
    return [first] + _ramped(" ".join(rest + pieces[1:]), len(first), limit)


def _ramped(text: str, previous: int, limit: int) -> List[str]:
    """``text`` cut as split_phonemes cuts it, each chunk at most CHUNK_RAMP times as long as
    the one before it (``previous`` phonemes) until the cap reaches ``limit``."""
    out: List[str] = []
    text = re.sub(r"\s+", " ", text).strip()
    while text:
        cap = min(limit, CHUNK_RAMP * max(previous, 1))
        pieces = split_phonemes(text, cap)
        if cap == limit or len(pieces) == 1:
            return out + pieces
        out.append(pieces[0])
        previous = len(pieces[0])
        # the rest as it stands in the text (a word cut inside stays one word when re-cut)
        text = (text[previous:].lstrip() if text.startswith(pieces[0])
                else " ".join(pieces[1:]))
    return out


def plan(text: str, vocab: Mapping[str, int], *, language: str = "en-us",
         phonemes: bool = False, limit: int = MAX_PHONEMES,
         voice_rows: int = MAX_PHONEMES, first_limit: Optional[int] = None) -> List[Chunk]:
    """The chunks of ``text`` (or of a phoneme string with ``phonemes=True``).

    first_limit: a short first chunk, so a stream's first audio comes after little work. It
    applies to a text of several sentences or chunks whose first chunk is longer than
    ``first_limit`` phonemes: the first chunk becomes the whole first sentences that fit in
    ``first_limit``; or, when the first sentence alone is longer, its head up to its last
    clause mark (, ; : —) within ``first_limit`` that leaves at least FIRST_MIN_PHONEMES before
    and after the cut, else up to its last word boundary within ``first_limit`` (the same
    minimum), else the sentence stays whole. A single sentence that fits one chunk is never cut
    (all of it is the first audio then). The rest is cut as without it, but each chunk at most
    CHUNK_RAMP times as long as the one before it until that reaches ``limit``, so the next
    chunk is ready before the one playing ends.
    Raises TTSInputError for empty text and for text with nothing the model can speak."""
    if not isinstance(text, str):
        raise TTSInputError(f"text must be a string, got {type(text).__name__}")
    if not text.strip():
        raise TTSInputError("the text is empty")
    if first_limit is not None and first_limit < 1:
        raise TTSInputError(f"first_limit must be a positive number of phonemes, got "
                            f"{first_limit!r}")
    if phonemes:
        symbols = "".join(c for c in text if c in vocab)
    else:
        symbols = EspeakPhonemizer(language, vocab)(normalize(text))
    pieces = split_phonemes(symbols, limit)
    if first_limit is not None and pieces and len(pieces[0]) > first_limit:
        pieces = _split_first(pieces, first_limit, limit)
    chunks = []
    for piece in pieces:
        ids = phoneme_ids(piece, vocab)
        if ids and any(c not in PUNCTUATION for c in piece):   # punctuation alone says nothing
            chunks.append(Chunk(piece, ids, voice_row(len(ids), voice_rows)))
    if not chunks:
        shown = text if len(text) <= 60 else text[:57] + "..."
        raise TTSInputError(f"the text {shown!r} has no characters the model can speak")
    return chunks

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

__all__ = ["Chunk", "plan"]

_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+")


@dataclass(frozen=True)
class Chunk:
    """One piece the model reads at a time."""

    phonemes: str     # the chunk's phonemes (symbols of the vocabulary only)
    ids: List[int]    # the model's ids for them, without the boundary ids
    style_row: int    # the voice pack's row for this chunk (text.chunk.voice_row)


def plan(text: str, vocab: Mapping[str, int], *, language: str = "en-us",
         phonemes: bool = False, limit: int = MAX_PHONEMES,
         voice_rows: int = MAX_PHONEMES, first_limit: Optional[int] = None) -> List[Chunk]:
    """The chunks of ``text`` (or of a phoneme string with ``phonemes=True``). first_limit:
    when the first chunk holds several sentences and is longer than this, it is cut after
    the sentences that fit (at least one), so a stream's first audio comes after a short
    chunk; the rest is cut under ``limit`` as before. Raises TTSInputError for empty text and for
    text with nothing the model can speak."""
    if not isinstance(text, str):
        raise TTSInputError(f"text must be a string, got {type(text).__name__}")
    if not text.strip():
        raise TTSInputError("the text is empty")
    if phonemes:
        symbols = "".join(c for c in text if c in vocab)
    else:
        symbols = EspeakPhonemizer(language, vocab)(normalize(text))
    pieces = split_phonemes(symbols, limit)
    if first_limit is not None and pieces and len(pieces[0]) > first_limit:
        sentences = _SENTENCE_END.split(pieces[0])
        if len(sentences) > 1:           # one sentence stays whole: cutting it costs prosody
            n = 1
            while n < len(sentences) and len(" ".join(sentences[:n + 1])) <= first_limit:
                n += 1
            rest = " ".join(sentences[n:] + pieces[1:])
            pieces = [" ".join(sentences[:n])] + split_phonemes(rest, limit)
    chunks = []
    for piece in pieces:
        ids = phoneme_ids(piece, vocab)
        if ids and any(c not in PUNCTUATION for c in piece):   # punctuation alone says nothing
            chunks.append(Chunk(piece, ids, voice_row(len(ids), voice_rows)))
    if not chunks:
        shown = text if len(text) <= 60 else text[:57] + "..."
        raise TTSInputError(f"the text {shown!r} has no characters the model can speak")
    return chunks

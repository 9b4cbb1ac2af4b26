"""Word timestamps for the phoneme TTS models: each word of the original text gets the time
span of the phonemes that speak it, from the durations the model predicted.

The model says how many frames each phoneme lasts (Kokoro: 600 samples, 25 ms at 24 kHz, a
frame). What it does not say is which word a phoneme belongs to: espeak-ng phonemizes the text
as a whole, joins function words ("in the" -> ɪnðə) and changes numbers into several words.
So each original word is phonemized on its own (normalized the same way), and the word-by-word
phoneme string is aligned with the spoken one by longest matching blocks (difflib). A run of
spoken phonemes that matches nothing goes to the words between its neighbours that got nothing
(espeak says "a" alone as ˈeɪ but ɐ in a sentence), else to the word before it. Spaces and
punctuation (pauses) belong to no word, so a word ends where its last phoneme ends.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Callable, List, Sequence

import numpy as np

from .phonemize import PUNCTUATION

__all__ = ["WordTime", "word_phonemes", "align_words"]

_SILENT = set(PUNCTUATION) | set("()")
_EDGE_PUNCT = re.compile(r"^[^\w$£€¥%]+|[^\w%]+$")


@dataclass(frozen=True)
class WordTime:
    """One word of the text and when it is spoken, in seconds from the start of the audio."""

    word: str
    start: float
    end: float


def word_phonemes(text: str, phonemize: Callable[[str], str]) -> List[tuple]:
    """[(word, phonemes)] for the whitespace-separated words of ``text`` (the word as written,
    its phonemes without spaces); a word with nothing to say (a lone dash) is left out."""
    from .normalize import normalize

    out = []
    for word in text.split():
        core = _EDGE_PUNCT.sub("", word)
        if not core:
            continue
        spoken = phonemize(normalize(core))
        spoken = "".join(c for c in spoken if c not in _SILENT)
        if spoken:
            out.append((word, spoken))
    return out


def align_words(words: Sequence[tuple], chunks: Sequence[str],
                durations: Sequence[np.ndarray], frame_seconds: float) -> List[WordTime]:
    """Word times from ``words`` ([(word, phonemes)], word_phonemes), the spoken chunks'
    phoneme strings and each chunk's durations (frames per id, the two boundary ids
    included: len(chunk) + 2 values)."""
    spoken, starts, ends = [], [], []
    offset = 0
    for phonemes, d in zip(chunks, durations):
        d = np.asarray(d, np.int64).reshape(-1)
        if len(d) != len(phonemes) + 2:
            raise ValueError(f"a chunk of {len(phonemes)} phonemes has {len(d)} durations "
                             f"(expected {len(phonemes) + 2}: one per id and the boundaries)")
        edges = offset + np.cumsum(d)          # edges[k]: where id k ends
        for k, symbol in enumerate(phonemes):
            spoken.append(symbol)
            starts.append(edges[k])            # id k + 1 (after the leading boundary)
            ends.append(edges[k + 1])
        offset = int(edges[-1])
    owner_of_word_char, written = [], []
    for i, (_, p) in enumerate(words):
        owner_of_word_char.extend([i] * len(p))
        written.append(p)
    owner = [-1] * len(spoken)
    matcher = difflib.SequenceMatcher(None, "".join(written), "".join(spoken), autojunk=False)
    for a, b, size in matcher.get_matching_blocks():
        for j in range(size):
            owner[b + j] = owner_of_word_char[a + j]
    _fill_unmatched(owner, spoken, len(words))
    out, previous_end = [], 0.0
    for i, (word, _) in enumerate(words):
        mine = [k for k, o in enumerate(owner) if o == i]
        if mine:
            start = max(previous_end, starts[mine[0]] * frame_seconds)
            end = max(start, ends[mine[-1]] * frame_seconds)
        else:                                   # nothing of it was matched: zero length
            start = end = previous_end
        out.append(WordTime(word, round(float(start), 3), round(float(end), 3)))
        previous_end = end
    return out


def _fill_unmatched(owner: list, spoken: Sequence[str], n_words: int) -> None:
    """Give each run of unmatched spoken phonemes (owner -1) to the words between the run's
    matched neighbours that own nothing, split evenly in order; with none, to the word
    before (or, at the start, after) it. Silent symbols stay unowned."""
    silent = [s in _SILENT for s in spoken]
    owned = {o for o in owner if o >= 0}
    k, n = 0, len(owner)
    while k < n:
        if owner[k] >= 0 or silent[k]:
            owner[k] = -1 if silent[k] else owner[k]
            k += 1
            continue
        j = k
        while j < n and (owner[j] < 0 or silent[j]):
            j += 1
        run = [i for i in range(k, j) if not silent[i]]
        before = next((owner[i] for i in range(k - 1, -1, -1) if owner[i] >= 0), -1)
        after = owner[j] if j < n else n_words
        missing = [w for w in range(before + 1, after) if w not in owned]
        if missing:
            for m, i in enumerate(run):
                owner[i] = missing[m * len(missing) // len(run)]
            owned.update(missing[:len(run)])
        else:
            for i in run:
                owner[i] = before if before >= 0 else min(after, n_words - 1)
        for i in range(k, j):
            if silent[i]:
                owner[i] = -1
        k = j

"""Pocket TTS text handling: normalization, sentence chunking and tokenization.

Written from pocket_tts models/text_chunking.py (4.0.1): the model is trained on single
sentences, so a long input is split at sentence ends (and, for an oversized sentence, at
commas, semicolons and colons), regrouped into chunks of at most ``max_tokens`` tokens, and
each chunk is normalized again before it is spoken. The rules here are the package's, quirks
included (a chunk boundary needs a *token* that is a sentence mark; a period between two digits
is not a boundary).

The tokenizer is the one stored in the GGUF: a ``tokenizers`` JSON or a SentencePiece model
(needs the ``tokenizers`` or ``sentencepiece`` package respectively).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import ShapeError

_TERMINAL_PUNCTUATION = ".!?\u2026"
_WEAK_PUNCTUATION = ",;:-\u2013\u2014"
_CLOSERS = "\"'\u201d\u2019)]\u00bb"


@dataclass(frozen=True)
class TextRules:
    """The config's text options (GGUF pocket.text.*)."""
    pad_with_spaces: bool = False
    remove_semicolons: bool = False
    append_terminal_punctuation: bool = True
    capitalize_first_letter: bool = True
    replace: dict = field(default_factory=dict)


class Tokenizer:
    """Text -> token ids with the model's own tokenizer (kind "tokenizers" or "sentencepiece")."""

    def __init__(self, kind: str, payload):
        self.kind = kind
        if kind == "tokenizers":
            import tokenizers
            self._tok = tokenizers.Tokenizer.from_str(payload)
        elif kind == "sentencepiece":
            import sentencepiece
            self._sp = sentencepiece.SentencePieceProcessor()
            self._sp.load_from_serialized_proto(bytes(payload))
        else:
            raise ShapeError(f"pocket.tokenizer.kind {kind!r}: expected tokenizers or "
                             f"sentencepiece")

    def encode(self, text: str) -> list[int]:
        if self.kind == "tokenizers":
            return list(self._tok.encode(text).ids)
        return list(self._sp.encode(text, out_type=int))

    def decode(self, ids: list[int]) -> str:
        if self.kind == "tokenizers":
            return self._tok.decode(ids)
        return self._sp.decode(ids)

    def vocab_size(self) -> int:
        return self._tok.get_vocab_size() if self.kind == "tokenizers" else self._sp.vocab_size()


def ensure_terminal_punctuation(text: str) -> str:
    """End with . ! ? or an ellipsis (before closing quotes / brackets); a trailing comma,
    colon or dash becomes a period; anything else gets a period appended."""
    core = text.rstrip(_CLOSERS + " ")
    closers = text[len(core):].strip()
    if not core or core[-1] in _TERMINAL_PUNCTUATION:
        return text
    if core[-1] in _WEAK_PUNCTUATION:
        return core.rstrip(_WEAK_PUNCTUATION + " ") + "." + closers
    return text + "."


def prepare_text(text: str, rules: TextRules) -> tuple[str, int]:
    """(normalized text, frames-after-EOS guess): strip, replace characters, one line,
    capitalize, terminal punctuation, optional left padding. The guess is 3 frames for at
    most four words, else 1 (the caller adds 2). Raises ValueError on empty text."""
    text = text.strip()
    if rules.replace:
        text = " ".join(text.translate(str.maketrans(rules.replace)).split())
        # a deleted quote can leave a sentence mark followed by a comma: keep the mark only
        text = re.sub(r"([.!?\u2026])\s*[,;:]", r"\1", text)
    if text == "":
        raise ValueError("Text prompt cannot be empty")
    text = text.replace("\n", " ").replace("\r", " ").replace("  ", " ")
    if rules.remove_semicolons:
        text = text.replace(";", ",")
    guess = 3 if len(text.split()) <= 4 else 1
    if rules.capitalize_first_letter and not text[0].isupper():
        text = text[0].upper() + text[1:]
    if rules.append_terminal_punctuation:
        text = ensure_terminal_punctuation(text)
    if rules.pad_with_spaces and len(text.split()) < 5:
        text = " " * 8 + text
    return text, guess


def _after_decimal_period(ids: list[int], i: int, tok: Tokenizer) -> bool:
    """Whether ids[i] starts right after a period between two digits ("3.5")."""
    prefix, suffix = tok.decode(ids[:i]), tok.decode(ids[i:])
    return len(prefix) >= 2 and prefix[-1] == "." and prefix[-2].isdigit() \
        and bool(suffix) and suffix[0].isdigit()


def _boundaries(ids: list[int], marks: list[int], tok: Tokenizer | None = None,
                skip_decimal: bool = False) -> list[int]:
    """Segment starts: 0, every first non-mark token after a run of mark tokens, len(ids)."""
    marks_set = set(marks)
    out, after_mark = [0], False
    for i, t in enumerate(ids):
        if t in marks_set:
            after_mark = True
            continue
        if after_mark:
            if not (skip_decimal and tok is not None and _after_decimal_period(ids, i, tok)):
                out.append(i)
        after_mark = False
    out.append(len(ids))
    return out


def _segments(ids: list[int], cuts: list[int], tok: Tokenizer) -> list[tuple[int, str]]:
    return [(b - a, tok.decode(ids[a:b])) for a, b in zip(cuts[:-1], cuts[1:])]


def split_into_chunks(text: str, tok: Tokenizer, rules: TextRules, max_tokens: int) -> list[str]:
    """The package's split_into_best_sentences: sentences (sub-split at , ; : when longer than
    max_tokens) greedily packed into chunks of at most max_tokens tokens."""
    text, _ = prepare_text(text, rules)
    ids = tok.encode(text.strip())
    # The mark tokens are those of ".!...?" and ",;:" without their first token (the word
    # boundary a SentencePiece-style tokenizer puts in front).
    sentence_marks = tok.encode(".!...?")[1:]
    segments = _segments(ids, _boundaries(ids, sentence_marks, tok, skip_decimal=True), tok)
    clause_marks = tok.encode(",;:")[1:]
    refined = []
    for n, seg in segments:
        if n <= max_tokens:
            refined.append((n, seg))
            continue
        sub_ids = tok.encode(seg.strip())
        subs = _segments(sub_ids, _boundaries(sub_ids, clause_marks), tok)
        refined.extend(subs if len(subs) > 1 else [(n, seg)])
    chunks, current, count = [], "", 0
    for n, seg in refined:
        if current == "":
            current, count = seg, n
        elif count + n > max_tokens:
            chunks.append(current.strip())
            current, count = seg, n
        else:
            current += " " + seg
            count += n
    if current != "":
        chunks.append(current.strip())
    return chunks

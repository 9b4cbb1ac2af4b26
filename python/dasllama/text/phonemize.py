"""Text to Kokoro phonemes through espeak-ng, as kokoro-onnx produces them, and phonemes to
the model's ids.

::

    p = EspeakPhonemizer("en-us")
    p("Hello world.")               # 'həlˈoʊ wˈɜːld.'
    phoneme_ids("həlˈoʊ", vocab)    # raw phoneme input works the same way

The binding: the ``phonemizer`` package's espeak backend over the espeak-ng library and data
that the ``espeakng-loader`` wheel ships, so no system package is needed (kokoro-onnx uses the
same pair, which makes its phonemes and ours the same string for the same text). After espeak,
the symbols the model was not trained on are mapped as kokoro-onnx maps them (palatalization
mark to j, r to ɹ, x to k, ɬ to l), a space is restored before "hundred", a detached plural z
is joined to its word, American "ninety" keeps its flap (nˈaɪndi), and anything outside the
vocabulary is dropped.
"""

from __future__ import annotations

import re
import threading
from typing import Mapping, Sequence

from ..errors import TTSInputError

__all__ = ["EspeakPhonemizer", "phoneme_ids", "LANGUAGES", "PUNCTUATION"]

LANGUAGES = ("en-us", "en-gb")   # espeak voices the English Kokoro voices were trained with

# Symbol rewrites after espeak, in order (kokoro's vocabulary lacks the left-hand ones).
_SYMBOL_MAP = (("ʲ", "j"), ("r", "ɹ"), ("x", "k"), ("ɬ", "l"))
# kokoro is read with its own stress (as in kokoro-onnx).
_WORD_FIXES = (("kəkˈoːɹoʊ", "kˈoʊkəɹoʊ"), ("kəkˈɔːɹəʊ", "kˈəʊkəɹəʊ"))
PUNCTUATION = ';:,.!?¡¿—…"«»“” '   # symbols that are pauses, not sounds

_lock = threading.Lock()
_backends: dict = {}


def _backend(language: str):
    """One espeak backend per language (espeak-ng is not re-entrant: calls hold _lock)."""
    if language not in _backends:
        try:
            import espeakng_loader
            from phonemizer.backend import EspeakBackend
            from phonemizer.backend.espeak.wrapper import EspeakWrapper
        except ImportError as e:
            raise TTSInputError("phonemizing text needs the espeakng-loader and phonemizer "
                                f"packages (pip install 'dasllama[tts]'): {e}") from None
        EspeakWrapper.set_library(espeakng_loader.get_library_path())
        EspeakWrapper.set_data_path(espeakng_loader.get_data_path())
        _backends[language] = EspeakBackend(language=language, preserve_punctuation=True,
                                            with_stress=True)
    return _backends[language]


class EspeakPhonemizer:
    """Phonemes for text in one espeak language (default en-us). Thread-safe."""

    def __init__(self, language: str = "en-us", vocab: Mapping[str, int] = None) -> None:
        if language not in LANGUAGES:
            raise TTSInputError(f"language {language!r} is not supported; accepted: "
                                f"{', '.join(LANGUAGES)}")
        self.language = language
        self.vocab = vocab

    def __call__(self, text: str) -> str:
        if not text.strip():
            return ""
        with _lock:
            out = _backend(self.language).phonemize([text], strip=True)[0]
        return self.clean(out)

    def clean(self, phonemes: str) -> str:
        """espeak's output brought to the model's symbols (see the module doc)."""
        for a, b in _WORD_FIXES:
            phonemes = phonemes.replace(a, b)
        for a, b in _SYMBOL_MAP:
            phonemes = phonemes.replace(a, b)
        phonemes = re.sub(r"(?<=[a-zɹː])(?=hˈʌndɹɪd)", " ", phonemes)
        phonemes = re.sub(r" z(?=[" + re.escape(PUNCTUATION) + r"]|$)", "z", phonemes)
        if self.language == "en-us":
            phonemes = re.sub(r"(?<=nˈaɪn)ti(?!ː)", "di", phonemes)
        if self.vocab is not None:
            phonemes = "".join(c for c in phonemes if c in self.vocab)
        return phonemes.strip()


def phoneme_ids(phonemes: str, vocab: Mapping[str, int], *, strict: bool = False) -> list:
    """The model's ids for a phoneme string (raw phoneme input included). Symbols outside the
    vocabulary are dropped, or with strict=True raise TTSInputError naming them."""
    if strict:
        unknown = sorted({c for c in phonemes if c not in vocab})
        if unknown:
            raise TTSInputError(f"phonemes {unknown!r} are not in the model's vocabulary of "
                                f"{len(vocab)} symbols")
    return [vocab[c] for c in phonemes if c in vocab]


def ids_to_phonemes(ids: Sequence[int], vocab: Mapping[str, int]) -> str:
    """The inverse of phoneme_ids (for messages and timestamps)."""
    inverse = {i: s for s, i in vocab.items()}
    return "".join(inverse.get(i, "") for i in ids)

"""What /v1/audio/speech needs from each kind of speech model, in one shape: its voices, the
request options it cannot honour, the text's token count, and the synthesis stream.

- Pocket TTS (dasllama.TTS): voices are "default" (no voice prompt) and those registered at
  load; temperature and seed shape its noise; it speaks at its own pace (speed 1.0 only).
- Kokoro and Kitten (dasllama.kokoro.KokoroTTS): voices are the file's packs, those
  registered at load, and blends of them written as "a(2)+b(1)"; "default" is the first pack;
  speed in [0.25, 4] is the model's own; it has no noise, so temperature and seed are 400s
  when a request sets them.
"""

from __future__ import annotations

from typing import Iterator, List, Optional

import numpy as np

from ..errors import TTSInputError
from .errors import APIError

__all__ = ["DEFAULT_VOICE", "speech_engine", "PocketSpeech", "KokoroSpeech"]

DEFAULT_VOICE = "default"        # the model's own voice


def _unsupported(param: str, message: str) -> APIError:
    return APIError(400, message, param=param, code="unsupported")


class PocketSpeech:
    name = "Pocket TTS"

    def __init__(self, tts):
        self.tts = tts

    def voices(self) -> List[str]:
        return [DEFAULT_VOICE] + [v for v in self.tts.voices if v != DEFAULT_VOICE]

    def check(self, body) -> None:
        if body.speed != 1.0:
            raise _unsupported("speed", f"speed {body.speed:g} is not supported: Pocket TTS "
                                        "speaks at its own pace (speed 1.0 only)")
        if body.instructions:
            raise _unsupported("instructions", "instructions are not supported by Pocket "
                                               "TTS (voices come from voice prompts)")

    def voice(self, name: str, model: str) -> Optional[str]:
        """The registered voice to speak with (None: the model's own); 400 otherwise."""
        known = self.voices()
        if name not in known:
            raise APIError(400, f"unknown voice {name!r} for the model {model!r}; its voices: "
                                f"{', '.join(known)}", param="voice", code="unknown_voice")
        return None if name == DEFAULT_VOICE else name

    def count(self, text: str) -> int:
        return sum(len(ids) for _, ids, _ in self.tts.plan(text))

    def stream(self, text: str, voice, body) -> Iterator[np.ndarray]:
        return self.tts.stream(text, voice, body.temperature, body.seed)

    def output_units(self) -> int:
        """Audio frames made (usage.output_tokens)."""
        return int(self.tts.stats.get("frames", 0))


class KokoroSpeech:
    name = "Kokoro"

    def __init__(self, tts):
        self.tts = tts

    def voices(self) -> List[str]:
        return [DEFAULT_VOICE] + self.tts.voices

    def check(self, body) -> None:
        for param in ("temperature", "seed"):
            if param in body.model_fields_set:
                raise _unsupported(param, f"{param} is not supported by Kokoro (it has no "
                                          "noise: the same text and voice give the same audio)")
        if body.instructions:
            raise _unsupported("instructions", "instructions are not supported by Kokoro "
                                               "(choose or blend voices instead)")

    def voice(self, name: str, model: str) -> str:
        """A pack's name or a blend "a(2)+b(1)" of them; 400 naming the voices otherwise."""
        if name == DEFAULT_VOICE:
            return self.tts.voices[0]
        try:
            self.tts.voice_pack(name)
        except TTSInputError as e:
            raise APIError(400, f"voice for the model {model!r}: {e}; or a blend such as "
                                "'a(2)+b(1)'", param="voice", code="unknown_voice") from e
        return name

    def count(self, text: str) -> int:
        return sum(len(c.ids) for c in self.tts.plan(text))

    def stream(self, text: str, voice, body) -> Iterator[np.ndarray]:
        return self.tts.stream(text, voice, body.speed, word_timestamps=False)

    def output_units(self) -> int:
        """Duration frames spoken (25 ms each; usage.output_tokens)."""
        return int(sum(int(np.sum(d)) for d in self.tts.stats.get("durations", [])))


def speech_engine(tts):
    """The adapter for a loaded speech model."""
    from ..kokoro import KokoroTTS

    return KokoroSpeech(tts) if isinstance(tts, KokoroTTS) else PocketSpeech(tts)

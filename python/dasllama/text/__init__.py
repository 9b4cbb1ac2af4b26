"""Text front end for the phoneme-based TTS models (Kokoro, Kitten).

- :mod:`.normalize` -- numbers, dates, times, money, units and abbreviations spelled out.
- :mod:`.phonemize` -- espeak-ng phonemes as kokoro-onnx produces them; phonemes to ids.
- :mod:`.chunk` -- long phoneme strings split under the model's limit; the voice row rule.
"""

from .chunk import MAX_PHONEMES, split_phonemes, voice_row
from .normalize import normalize

__all__ = ["MAX_PHONEMES", "split_phonemes", "voice_row", "normalize"]

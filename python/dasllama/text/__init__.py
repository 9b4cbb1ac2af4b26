"""Text front end for the phoneme-based TTS models (Kokoro, Kitten).

- :mod:`.normalize` -- numbers, dates, times, money, units and abbreviations spelled out.
- :mod:`.phonemize` -- espeak-ng phonemes as kokoro-onnx produces them; phonemes to ids.
- :mod:`.chunk` -- long phoneme strings split under the model's limit; the voice row rule.
- :mod:`.plan` -- all of the above in order: text to the chunks a model speaks.
"""

from .chunk import MAX_PHONEMES, split_phonemes, voice_row
from .normalize import normalize
from .plan import Chunk, plan

__all__ = ["MAX_PHONEMES", "split_phonemes", "voice_row", "normalize", "Chunk", "plan"]

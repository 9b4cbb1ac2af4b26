"""dasllama: a local inference engine for GGUF language models and speech models.

The public API::

    import dasllama
    f = dasllama.gguf.open("model.gguf")     # validated, memory-mapped GGUF reader
    dasllama.formats.dequantize("Q4_K", raw, n)
    dasllama.models.find("smollm2")          # a model file by name or path
    dasllama.cpu_features()                  # what this CPU offers and what dasllama uses
    dasllama.LLM("smollm2").generate("Hi")   # text generation (see dasllama.llm)
    dasllama.ASR("whisper-tiny.en").transcribe("talk.flac")   # speech to text (dasllama.asr)
"""

from . import errors, formats, gguf, models
from ._core import cpu_features as _cpu_features
from .errors import DasllamaError
from .asr import ASR
from .llm import LLM
from .tts import TTS
from .vad import VAD

__version__ = "0.1.0"
__all__ = ["errors", "formats", "gguf", "models", "cpu_features", "DasllamaError", "ASR", "LLM", "TTS", "VAD",
           "__version__"]


def cpu_features() -> dict:
    """The CPU's instruction-set features as probed at import, and ``isa``: the kernel level
    dasllama runs (``amx``, ``avx512``, ``avx2``, ``generic``, ``neon_dotprod``, ``neon``).
    ``DASLLAMA_CPU_ISA`` caps that level (for example ``generic`` to rule out a SIMD kernel)."""
    return dict(_cpu_features())


# This box's tuning file ($DASLLAMA_TUNING), applied whole or not at all. Last: it reads
# __version__ and cpu_features above.
from .bench import tuning as _tuning  # noqa: E402

_tuning.apply_at_start()

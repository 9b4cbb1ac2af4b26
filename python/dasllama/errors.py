"""The exceptions dasllama raises. Every message names the file, field, offset or value at fault.

All derive from :class:`DasllamaError`; those about bad input also derive from ``ValueError``,
so code that already catches ``ValueError`` keeps working.
"""

__all__ = ["DasllamaError", "GGUFError", "FormatError", "ShapeError", "DeviceError",
           "ModelNotFoundError", "ConvertError", "TTSInputError"]


class DasllamaError(Exception):
    """Base class of every error dasllama raises on purpose."""


class GGUFError(DasllamaError, ValueError):
    """A GGUF file violates the format or the reader's limits."""


class FormatError(DasllamaError, ValueError):
    """A tensor format cannot do what was asked (unknown type, bad length)."""


class ShapeError(DasllamaError, ValueError):
    """Dimensions that do not fit together."""


class DeviceError(DasllamaError, RuntimeError):
    """A GPU device failed or is missing."""


class ModelNotFoundError(DasllamaError, FileNotFoundError):
    """A model name or path that dasllama cannot find; the message says how to get it."""


class ConvertError(DasllamaError, ValueError):
    """A checkpoint cannot be converted: a tensor is missing, misshapen or unexpected, a file is
    malformed, or an option is out of range. The message names the tensor, file or option."""


class TTSInputError(DasllamaError, ValueError):
    """Text or a voice a speech model cannot speak: the message says what is accepted."""

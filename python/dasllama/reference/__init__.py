"""Plain-NumPy reference implementations, written from published definitions.

Slow and obvious on purpose: the fast paths (C++ CPU, GPU backends) are tested against these
modules, never the other way round. Nothing here imports ``dasllama._core``.

- :mod:`dasllama.reference.quants` -- the GGUF tensor formats (block layouts, dequantization,
  the deterministic reference quantizers).
"""

"""Plain-NumPy reference implementations, written from published definitions.

Slow and obvious on purpose: the fast paths (C++ CPU, GPU backends) are tested against these
modules, never the other way round. The reference never calls a compute path of
``dasllama._core``: its arithmetic is all NumPy, and it reads model files without dasllama's
C++ reader too: :mod:`.gguf_file` reads them through the peer ``gguf`` package and dequantizes
with :mod:`dasllama.reference.quants` (dasllama's own reader, :mod:`dasllama.gguf`, is tested
against both: tests/test_gguf.py, tests/test_formats.py, tests/test_reference_gguf.py).

- :mod:`dasllama.reference.quants` -- the GGUF tensor formats (block layouts, dequantization,
  the deterministic reference quantizers). Imports nothing from ``_core``.
- :mod:`dasllama.reference.llm` -- a decoder-only language model's forward pass
  (``ReferenceLLM``: logits and greedy decoding), with the per-architecture facts in
  :mod:`dasllama.reference.llm_arch`.
- :mod:`dasllama.reference.pocket` -- Kyutai's Pocket TTS (``ReferencePocket``: text
  normalization and chunking, the prompt stage, the frame loop with its flow head and EOS rule,
  the Mimi codec), with its blocks in :mod:`.pocket_blocks`, :mod:`.pocket_mimi` and
  :mod:`.pocket_text`.
"""

"""Plain-NumPy reference implementations, written from published definitions.

Slow and obvious on purpose: the fast paths (C++ CPU, GPU backends) are tested against these
modules, never the other way round. The reference never calls a compute path of
``dasllama._core``: its arithmetic is all NumPy. To get a model's weights, :mod:`.llm` reads them through the
GGUF reader, :mod:`dasllama.gguf`, which reads and dequantizes through ``_core``; that reader
is tested on its own: against the peer ``gguf`` package (tests/test_gguf.py), and its
dequantizers bit for bit against :mod:`dasllama.reference.quants` (tests/test_formats.py).

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

"""Test helpers: random-weight GGUF models and odd GGUF files (needs the ``gguf`` package)."""

from .random_gguf import (
    ALL_TYPES_KV,
    ARCHS,
    all_types_tensors,
    split_paths,
    tensor_plan,
    write_all_types_gguf,
    write_gguf,
    write_gguf_version,
    write_random_model,
)
from .tokenizer_vocab import CHATML_TEMPLATE, bpe_vocab, spm_vocab

__all__ = [
    "ALL_TYPES_KV", "ARCHS", "CHATML_TEMPLATE", "all_types_tensors", "bpe_vocab", "spm_vocab",
    "split_paths", "tensor_plan", "write_all_types_gguf", "write_gguf", "write_gguf_version",
    "write_random_model",
]

"""Benchmarks that ship with dasllama, so ``dasllama bench`` works from an installed wheel.

``dasllama bench llm`` times prompt processing and generation against llama.cpp in the same
run on the same machine (llm.py holds the method, llama_cpp.py the peer); records are JSON
files whose schema bench/README.md in the source tree describes (record.py). ``bench check``
compares a fresh record with the stored one (check.py), ``bench board`` renders the records
(board.py), ``bench tune`` races kernel knobs into the per-box tuning file (tune.py,
tuning.py). Timing never decides a test.
"""

from .stats import Summary, summarize

__all__ = ["Summary", "summarize"]

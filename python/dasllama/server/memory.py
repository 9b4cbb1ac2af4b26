"""Process-wide memory settings the server applies when it starts (``run``).

glibc's malloc gives each thread that allocates a malloc arena of its own (up to 8 per core),
and memory freed in an arena stays resident for that arena's next use. A server has many such
threads: uvicorn's thread pool renders chat templates and tokenizes (``prepare_chat``), the
engine thread samples, the C++ pool computes. Kept apart, their arenas added about 20 MB to the
peak RSS of ``dasllama serve`` at 8 concurrent requests (SmolLM2 and Gemma-3 270M, 8 slots of
1024 tokens: 315/305 MiB against 286 MiB with one arena), more than a tenth of the model. One
arena makes them reuse the same freed blocks; these threads allocate little per decode step
(the engine's buffers are allocated once), so the shared lock costs nothing measurable here.

``MALLOC_ARENA_MAX`` in the environment wins: the setting is left alone when it is set.
"""

from __future__ import annotations

import ctypes
import os
import sys

__all__ = ["SERVER_MALLOC_ARENAS", "limit_malloc_arenas"]

# One arena for the whole process (see the module docstring for the measurement).
SERVER_MALLOC_ARENAS = 1
# glibc's mallopt parameter number for the arena limit (M_ARENA_MAX in malloc.h).
_M_ARENA_MAX = -8


def limit_malloc_arenas(n: int = SERVER_MALLOC_ARENAS) -> bool:
    """Caps glibc's malloc arenas at n for threads that allocate from now on; True when the
    limit was set. False (and nothing changes) off Linux, on a C library without mallopt
    (musl), or when MALLOC_ARENA_MAX is set in the environment."""
    if not sys.platform.startswith("linux") or "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(_M_ARENA_MAX, int(n)) == 1

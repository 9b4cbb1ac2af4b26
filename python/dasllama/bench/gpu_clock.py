"""The GPU's core clock at each timed run of a GPU benchmark, so a record shows what clock state
its figures were measured in.

Why: on an H200 (driver 580) both engines' pp512 inside one alternating run sometimes read about
4.4x (dasllama) and 3.6x (llama.cpp) below each engine timed alone, and while they did, the GPU
idled at 345 MHz between runs instead of 1980 MHz (nvidia-smi). That state began once a second
process had run GPU work and lasted, through pauses of 1 s, until that process exited; other runs
stayed at full clock throughout. The figures of such a run are the clock's, not the engines', so
each row of a GPU test carries the clock read just before each of its timed runs and is marked
``gpu_clock_low`` when their median is under half the GPU's maximum.

Only NVIDIA GPUs are read (through ``nvidia-smi``); elsewhere nothing is recorded.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
from typing import Callable, Optional, Sequence

__all__ = ["LOW_FRACTION", "ClockReader", "nvidia_smi_reader", "summarize_clock"]

# A run whose median clock sample is below this fraction of the maximum clock is marked low:
# the slow state read 345-375 of 1980 MHz (0.17-0.19); a GPU boosting normally reads at or
# near its maximum.
LOW_FRACTION = 0.5
# nvidia-smi answers in ~0.1 s; a hung driver must not hang the benchmark.
_TIMEOUT_S = 5.0

ClockReader = Callable[[], Optional[tuple]]   # () -> (sm_mhz, max_sm_mhz) or None


def _parse(text: str) -> Optional[tuple]:
    """The first GPU's "clocks.sm, clocks.max.sm" line, as two floats; None if unreadable."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    parts = [p.strip().split()[0] for p in line.split(",") if p.strip()]
    try:
        sm, top = float(parts[0]), float(parts[1])
    except (IndexError, ValueError):
        return None
    return (sm, top) if sm > 0 and top > 0 else None


def nvidia_smi_reader(binary: Optional[str] = None) -> Optional[ClockReader]:
    """A reader of the first NVIDIA GPU's SM clock and its maximum, or None without nvidia-smi
    (or when it reads nothing now)."""
    exe = binary or shutil.which("nvidia-smi")
    if not exe:
        return None

    def read() -> Optional[tuple]:
        try:
            r = subprocess.run([exe, "--query-gpu=clocks.sm,clocks.max.sm",
                                "--format=csv,noheader,nounits"], capture_output=True, text=True,
                               timeout=_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError):
            return None
        return _parse(r.stdout) if r.returncode == 0 else None

    return read if read() is not None else None


def summarize_clock(samples: Sequence[Optional[tuple]]) -> dict:
    """Row fields for a test's clock samples (None entries: a read that failed): the samples in
    MHz, the maximum clock, and whether their median was below LOW_FRACTION of it."""
    got = [s for s in samples if s is not None]
    if not got:
        return {}
    mhz = [s[0] for s in got]
    top = max(s[1] for s in got)
    return {"gpu_sm_clock_mhz": mhz, "gpu_sm_clock_max_mhz": top,
            "gpu_clock_low": statistics.median(mhz) < LOW_FRACTION * top}

"""Other processes' CPU use during a benchmark, on a shared machine: how busy the rest of the
box is (Linux /proc/stat less what the benchmark's own processes used), waiting for it to be
quiet before a repetition (``--quiet-wait``), and whether a repetition was disturbed.

The benchmark's processes are any objects with ``cpu_seconds()`` (a server, a runner); the
harness's own process is added by these functions.
"""

from __future__ import annotations

import os
import resource
import time
from typing import Callable, Optional, Sequence

__all__ = ["CLK_TCK", "process_cpu_seconds", "QUIET_WINDOW_S", "QUIET_CORES", "QUIET_STREAK", "DISTURBED_CORES",
           "DISTURBED_RETRIES", "cpu_self", "machine_busy_s", "others_busy", "disturbed",
           "wait_quiet"]

QUIET_WINDOW_S = 1.0       # the window over which others' CPU use is sampled
QUIET_CORES = 0.2          # others using less than this share of one core: quiet enough
QUIET_STREAK = 3           # ... in this many windows in a row (others' tests come in bursts)
# A repetition during which the rest of the machine used more than this share of a core on
# average was disturbed (a quiet box measures under 0.01); with --quiet-wait it is run again,
# at most DISTURBED_RETRIES times, and the rows keep what the discarded attempts measured.
DISTURBED_CORES = 0.05
DISTURBED_RETRIES = 3


CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100   # /proc time unit


def process_cpu_seconds(pid: Optional[int]) -> float:
    """User plus system CPU seconds process ``pid`` has used so far (0 where /proc has none
    or the process is gone)."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as f:
            # the command name in parentheses may hold spaces: the fields start after it
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return 0.0


def cpu_self() -> float:
    """CPU seconds this process has used (user + system)."""
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def machine_busy_s() -> Optional[float]:
    """CPU seconds all processes of the machine have been busy (Linux /proc/stat), or None."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    # user nice system idle iowait irq softirq steal ...: all but idle and iowait
    return (sum(fields[:8]) - fields[3] - fields[4]) / CLK_TCK


def others_busy(processes: Sequence, window: float = QUIET_WINDOW_S) -> float:
    """Cores' worth of CPU that processes outside this run used over ``window`` seconds."""
    ours0 = sum(p.cpu_seconds() for p in processes) + cpu_self()
    busy0 = machine_busy_s()
    time.sleep(window)
    busy1 = machine_busy_s()
    ours1 = sum(p.cpu_seconds() for p in processes) + cpu_self()
    if busy0 is None or busy1 is None:
        return 0.0
    return max(0.0, (busy1 - busy0) - (ours1 - ours0)) / window


def disturbed(others_cpu_s: Optional[float], wall_s: float) -> bool:
    """Whether others used more than DISTURBED_CORES of a core on average over ``wall_s``."""
    return others_cpu_s is not None and others_cpu_s > DISTURBED_CORES * wall_s


def wait_quiet(processes: Sequence, limit: float) -> float:
    """Before a repetition: wait, up to ``limit`` seconds, until the rest of the machine has
    used less than QUIET_CORES of a core for QUIET_STREAK windows in a row (a shared box:
    others' builds and tests). Returns the seconds waited; the repetition then runs whether
    or not it became quiet."""
    t0 = time.monotonic()
    streak = 0
    while streak < QUIET_STREAK and time.monotonic() - t0 < limit:
        streak = streak + 1 if others_busy(processes) < QUIET_CORES else 0
    return time.monotonic() - t0


def guarded_run(run_once: Callable, processes: Sequence, quiet_wait: float):
    """One timed request (``run_once()``, which returns an object with ``wall_ns``) with
    others' CPU use measured over it (``others_cpu_s``); with ``quiet_wait`` the machine's
    quiet is waited for first (``waited_s``) and a disturbed request run again
    (DISTURBED_RETRIES at most; the discarded walls in ``discarded``). ``processes``: the
    runner processes whose CPU time is ours, not others'."""
    discarded: list = []

    def ours() -> float:
        return sum(p.cpu_seconds() for p in processes) + cpu_self()

    while True:
        waited = wait_quiet(processes, quiet_wait) if quiet_wait else 0.0
        busy0, ours0 = machine_busy_s(), ours()
        r = run_once()
        busy1, ours1 = machine_busy_s(), ours()
        r.waited_s = waited
        if busy0 is not None and busy1 is not None:
            r.others_cpu_s = max(0.0, (busy1 - busy0) - (ours1 - ours0))
        if not (quiet_wait and disturbed(r.others_cpu_s, r.wall_ns / 1e9)) or \
                len(discarded) >= DISTURBED_RETRIES:
            r.discarded = discarded
            return r
        discarded.append(r.wall_ns)

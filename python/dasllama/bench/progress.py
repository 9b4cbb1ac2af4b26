"""Progress lines on stderr while a benchmark runs, and stopping it cleanly on a signal.

``Progress`` turns the harness's events into lines that say how many rows are done, which row
is running and how long the run has taken:

    [ 2/8 rows  0:41] gemma-3-270m-q4_k_m.gguf  pp512  dasllama  rep 3:  612.4 ms

``stop_on_signals()`` makes SIGTERM (and SIGHUP) raise ``Stopped``, a KeyboardInterrupt that
names its signal, as Ctrl-C (SIGINT) already raises KeyboardInterrupt: the harness catches it
between repetitions, keeps the rows already finished and returns them.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from typing import Optional, TextIO

__all__ = ["Progress", "Stopped", "stop_on_signals"]


class Stopped(KeyboardInterrupt):
    """A signal asked the benchmark to stop; ``signal_name`` says which."""

    def __init__(self, signal_name: str):
        super().__init__(signal_name)
        self.signal_name = signal_name


@contextlib.contextmanager
def stop_on_signals(names=("SIGTERM", "SIGHUP")):
    """Within the block, the named signals raise Stopped in the main thread (restored after)."""
    previous = {}

    def handler(signum, frame):
        raise Stopped(signal.Signals(signum).name)

    for name in names:
        sig = getattr(signal, name, None)
        if sig is not None:
            try:
                previous[sig] = signal.signal(sig, handler)
            except ValueError:     # not the main thread: leave signals alone
                pass
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    """The harness's ``on_event`` printing progress to ``stream`` (nothing when quiet)."""

    def __init__(self, quiet: bool = False, stream: Optional[TextIO] = None):
        self.quiet, self.stream = quiet, stream
        self.t0 = time.monotonic()
        self.done, self.total, self.model = 0, 0, ""

    def prefix(self) -> str:
        width = len(str(self.total))
        return f"[{self.done:>{width}}/{self.total} rows {_clock(time.monotonic() - self.t0):>5}]"

    def say(self, msg: str) -> None:
        if not self.quiet:
            print(msg, file=self.stream or sys.stderr, flush=True)

    def __call__(self, kind: str, **f) -> None:
        if kind == "start":
            self.total = f["total_rows"]
            return
        if kind == "rows":
            self.done, self.total = f["done"], f["total"]
            self.say(f"{self.prefix()} rows done")
            return
        if kind == "model":
            self.model = f["file"]
            msg = f"model {f['file']} ({f['arch']}, {f['quant']}, {f['params']:,} parameters)"
        elif kind == "validate":
            msg = f"top-5 next tokens after {f['prompt_tokens']} ids: {f['top']}"
            if f["top1_agree"] is False:
                msg += "  <- the engines disagree on top-1"
        elif kind == "note":
            msg = f["message"]
        elif kind == "warmup":
            msg = f"{self.model}  {f['test']:<6} {f['engine']:<9} warm-up"
        elif kind == "rerun":
            cvs = ", ".join(f"{e} {100 * c:.1f}%" for e, c in f["cv"].items())
            msg = f"{self.model}  {f['test']:<6} cv above the bar ({cvs}): running it once more"
        elif kind == "run":
            again = " (re-run)" if f.get("attempt") else ""
            msg = (f"{self.model}  {f['test']:<6} {f['engine']:<9} rep {f['rep'] + 1}{again}: "
                   f"{f['ns'] / 1e6:9.1f} ms")
            if f.get("first_ns") is not None:
                msg += f" (first audio {f['first_ns'] / 1e6:.1f} ms)"
        else:
            return
        self.say(f"{self.prefix()} {msg}")

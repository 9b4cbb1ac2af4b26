"""Whether two engines alternating on one GPU slow each other: dasllama's and llama.cpp's pp512
alone, side by side with the other idle, alternating (with 0.1 s and 1 s pauses and none), and
after the peer exits, with the GPU's core clock (nvidia-smi) after each phase.

    python bench/gpu_alternation_probe.py MODEL.gguf [--llama-cpp-python PYTHON]
                                          [--threads 16] [--device vulkan] [--passes all|first]

Each pass starts a llama.cpp runner (bench's llama_cpp_runner.py) with other settings: 16
threads, 1 thread, and 16 threads with OMP_WAIT_POLICY=PASSIVE. Timing only, never a pass/fail
test. On an H200 (driver 580) the pattern it found: once both processes had run GPU work, both
engines' prompt calls ran 3.6-4.4x slower and the GPU idled at 345 MHz instead of 1980 MHz
between calls, through pauses of 1 s, until the runner exited (bench/README.md, GPU clock).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

N_TOKENS = 512
PAUSE_S = 0.1


def _clock() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,pstate,"
                               "utilization.gpu", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "no clock"


def _rate(xs) -> str:
    return (f"[t={time.time():.1f}] {N_TOKENS / statistics.median(xs):8.0f} t/s "
            f"(min {N_TOKENS / max(xs):.0f}, max {N_TOKENS / min(xs):.0f})")


class Peer:
    """A llama.cpp runner with the model loaded, answering pp requests."""

    def __init__(self, python, runner, model, threads, env=None):
        e = dict(os.environ)
        e.update(env or {})
        self.p = subprocess.Popen([python, runner, model, "--threads", str(threads), "--n-ctx",
                                   str(N_TOKENS + 128), "--n-gpu-layers", "99"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True, bufsize=1, env=e)
        self.ready = json.loads(self.p.stdout.readline())

    def _req(self, **r):
        self.p.stdin.write(json.dumps(r) + "\n")
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline())

    def pp(self, ids) -> float:
        return self._req(cmd="run", test="pp", tokens=ids)["ns"] / 1e9

    def close(self):
        self._req(cmd="quit")
        self.p.wait()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--llama-cpp-python", default=sys.executable)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--device", default="vulkan")
    ap.add_argument("--passes", choices=("all", "first"), default="all")
    a = ap.parse_args(argv)
    from dasllama import _core
    from dasllama.bench.llama_cpp import RUNNER
    m = _core.LLMModel(a.model, n_ctx=N_TOKENS + 128, n_threads=a.threads, device=a.device)
    ids = [(7919 * i + 13) % int(m.n_vocab) for i in range(N_TOKENS)]

    def ours() -> float:
        m.reset()
        t = time.perf_counter()
        m.eval(ids)
        return time.perf_counter() - t

    def rest(s=PAUSE_S):
        time.sleep(s)

    ours()
    print("A ours alone, back to back      ", _rate([ours() for _ in range(5)]))
    print("A ours alone, 0.1 s pauses      ", _rate([(rest(), ours())[1] for _ in range(5)]),
          _clock())
    passes = (("peer t16", a.threads, None), ("peer t1", 1, None),
              ("peer t16 OMP passive", a.threads, {"OMP_WAIT_POLICY": "PASSIVE"}))
    for label, threads, env in passes[:1 if a.passes == "first" else 3]:
        p = Peer(a.llama_cpp_python, str(RUNNER), a.model, threads, env)
        print(f"== {label}: ready, threads {p.ready.get('threads')}")
        print("B ours, peer idle (never ran)   ", _rate([(rest(), ours())[1] for _ in range(3)]))
        p.pp(ids)
        print("C peer alone, 0.1 s pauses      ", _rate([(rest(), p.pp(ids))[1] for _ in range(4)]))
        print("B2 ours after the peer ran, 1 s ",
              _rate([(rest(1.0), ours())[1] for _ in range(3)]))
        for title, pause, n in (("D alternating", PAUSE_S, 4), ("E alternating 1 s", 1.0, 3),
                                ("F alternating, no pause", 0.0, 4)):
            theirs, mine = [], []
            for _ in range(n):
                rest(pause)
                theirs.append(p.pp(ids))
                rest(pause)
                mine.append(ours())
            print(f"{title + ': peer':<32}", _rate(theirs))
            print(f"{title + ': ours':<32}", _rate(mine), _clock())
        p.close()
        print("G ours after the peer closed    ", _rate([(rest(), ours())[1] for _ in range(3)]),
              _clock())
    m.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

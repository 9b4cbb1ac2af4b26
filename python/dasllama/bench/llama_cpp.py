"""The peer engine: llama.cpp, driven one repetition at a time so its runs interleave with ours.

Two ways to reach it:

* ``LlamaCppRunner``: llama.cpp's Python bindings (the ``cyllama`` wheel) in a persistent child
  process running ``llama_cpp_runner.py`` under the interpreter that has them (the wheel needs
  CPython 3.12, so it is rarely dasllama's own). The model stays loaded; each repetition is one
  JSON request, and the tokens come from the harness, so both engines decode the same ids.
* ``LlamaBenchBinary``: a ``llama-bench`` executable, run once per repetition with ``-r 1 -o
  json`` (each run loads the model and warms up by itself, untimed, as llama-bench always does);
  it draws its own random tokens.

Both offer what the harness needs from an engine: ``name``, ``version``, ``details``,
``vocab()``, ``run(test, tokens) -> ns``, ``top(tokens, k)``, ``memory()``, ``close()``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional, Sequence

from .llm import BenchError

__all__ = ["PeerError", "LlamaCppRunner", "LlamaBenchBinary", "RUNNER", "FLASH_ATTN",
           "find_peer_python", "parse_llama_bench_json", "peer_backend"]

RUNNER = Path(__file__).with_name("llama_cpp_runner.py")
PYTHON_ENV = "DASLLAMA_LLAMA_CPP_PYTHON"


FLASH_ATTN = ("auto", "on", "off")    # llama.cpp's flash attention choices
_GPU_TYPES = ("GPU", "iGPU")            # ggml's device types that offloaded layers run on


class PeerError(BenchError):
    """The peer engine failed to start, answered out of protocol, or reported an error."""


def peer_backend(n_gpu_layers: int, devices: Optional[list]) -> tuple:
    """(backend, device) of llama.cpp's rows: "cpu" without offloaded layers; with them the
    backend of the GPU devices it saw (ggml names them Vulkan0, MTL0, ...) and their
    descriptions. ``devices`` None: the runner did not say (taken as Vulkan, unnamed).
    Layers offloaded with no GPU device seen (a CPU-only wheel) raise PeerError: llama.cpp
    would quietly run on the CPU under a GPU label."""
    if n_gpu_layers <= 0:
        return "cpu", None
    if devices is None:
        return "vulkan", None
    gpus = [d for d in devices if d.get("type") in _GPU_TYPES]
    if not gpus:
        seen = ", ".join(f"{d.get('name')} ({d.get('type')})" for d in devices) or "none"
        raise PeerError(f"llama.cpp was asked to offload {n_gpu_layers} layers but sees no GPU "
                        f"device (devices: {seen}); install the cyllama-vulkan wheel in the "
                        f"peer's interpreter, or pass --llama-cpp-ngl 0 for a CPU peer")
    names = [str(d.get("name", "")).lower() for d in gpus]
    backend = "metal" if all(n.startswith(("mtl", "metal")) for n in names) else "vulkan"
    return backend, ", ".join(d.get("description") or d.get("name") for d in gpus)


def find_peer_python(given: Optional[str]) -> Optional[str]:
    """The interpreter for the runner: the one given, else $DASLLAMA_LLAMA_CPP_PYTHON, else a
    ``python3.12`` on PATH (what the cyllama wheel needs); None when there is none."""
    return given or os.environ.get(PYTHON_ENV) or shutil.which("python3.12")


def _tail(path: str, n: int = 2000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - n))
            return f.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""


class LlamaCppRunner:
    """llama.cpp through its Python bindings in a child process that keeps the model loaded."""

    name = "llama.cpp"

    def __init__(self, model_path, *, threads: int, n_ctx: int, python: str,
                 runner: Path = RUNNER, n_batch: int = 2048, n_ubatch: int = 512,
                 n_gpu_layers: int = 0, flash_attn: str = "auto", verbose: bool = False):
        if flash_attn not in FLASH_ATTN:
            raise PeerError(f"flash_attn {flash_attn!r}: expected one of {', '.join(FLASH_ATTN)}")
        self._stderr = tempfile.NamedTemporaryFile(prefix="dasllama-peer-", suffix=".log",
                                                   delete=False)
        cmd = [python, str(runner), str(model_path), "--threads", str(threads),
               "--n-ctx", str(n_ctx), "--n-batch", str(n_batch), "--n-ubatch", str(n_ubatch),
               "--n-gpu-layers", str(n_gpu_layers), "--flash-attn", flash_attn]
        if verbose:
            cmd.append("--verbose")
        try:
            # A session of its own: a Ctrl-C at the terminal stops the harness, which then
            # closes the runner itself, instead of killing it in the middle of a reply.
            self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=self._stderr, text=True, bufsize=1,
                                          start_new_session=True)
        except OSError as e:
            raise PeerError(f"cannot start the llama.cpp runner with {python!r}: {e}") from e
        ready = self._read()
        if ready.get("event") != "ready":
            self.close()
            raise PeerError(f"the llama.cpp runner did not load {model_path}: "
                            f"{ready.get('error', ready)}{self._stderr_note()}")
        self.info = ready
        self.version = ready.get("version", "unknown")
        self.details = {k: ready[k] for k in ("bindings", "ggml", "system_info", "n_ctx",
                                              "n_batch", "n_ubatch", "flash_attn", "model_desc",
                                              "n_gpu_layers", "gpu_offload", "devices")
                        if k in ready}
        self.details.setdefault("n_gpu_layers", n_gpu_layers)
        self.threads = ready.get("threads", threads)
        try:
            self.backend, self.device = peer_backend(n_gpu_layers, ready.get("devices"))
        except PeerError:
            self.close()
            raise

    def _stderr_note(self) -> str:
        tail = _tail(self._stderr.name)
        return f"\n--- runner stderr (end) ---\n{tail}" if tail else ""

    def _read(self) -> dict:
        line = self._proc.stdout.readline()
        if not line:
            code = self._proc.poll()
            raise PeerError(f"the llama.cpp runner exited (status {code}) without answering"
                            f"{self._stderr_note()}")
        try:
            return json.loads(line)
        except ValueError as e:
            raise PeerError(f"the llama.cpp runner answered out of protocol: {line[:200]!r}") from e

    def request(self, **req) -> dict:
        """Send one request and return the reply; a reply with ok=false raises PeerError."""
        if self._proc.poll() is not None:
            raise PeerError(f"the llama.cpp runner has exited (status {self._proc.returncode})"
                            f"{self._stderr_note()}")
        try:
            self._proc.stdin.write(json.dumps(req) + "\n")
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise PeerError(f"cannot write to the llama.cpp runner: {e}"
                            f"{self._stderr_note()}") from e
        reply = self._read()
        if not reply.get("ok"):
            raise PeerError(f"llama.cpp runner: {req.get('cmd')} failed: "
                            f"{reply.get('error', reply)}")
        return reply

    def vocab(self):
        return self.info["n_vocab"], self.info["bos"], self.info["add_bos"]

    def run(self, test: str, tokens: Sequence[int], depth: Sequence[int] = ()) -> int:
        req = {"cmd": "run", "test": test, "tokens": [int(t) for t in tokens]}
        if len(depth):
            req["depth"] = [int(t) for t in depth]
        return int(self.request(**req)["ns"])

    def top(self, tokens: Sequence[int], k: int = 5) -> Optional[list]:
        return self.request(cmd="top", tokens=[int(t) for t in tokens], k=k)["top"]

    def memory(self) -> dict:
        r = self.request(cmd="rss")
        return {"peak_rss": r["max_rss"], "baseline_rss": self.info.get("baseline_rss"),
                "peak_scope": "runner process"}

    def close(self) -> None:
        proc = getattr(self, "_proc", None)
        if proc is not None and proc.poll() is None:
            try:
                proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
                proc.stdin.flush()
                proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait()
        if proc is not None:
            for stream in (proc.stdin, proc.stdout):
                if stream:
                    stream.close()
        self._stderr.close()
        try:
            os.unlink(self._stderr.name)
        except OSError:
            pass


def _test_name(n_prompt: int, n_gen: int, n_depth: int = 0) -> str:
    at = f"@d{n_depth}" if n_depth else ""
    if n_gen == 0:
        return f"pp{n_prompt}{at}"
    if n_prompt == 0:
        return f"tg{n_gen}{at}"
    return f"pp{n_prompt}+tg{n_gen}{at}"


def parse_llama_bench_json(text: str) -> list:
    """The tests in llama-bench's ``-o json`` output (a JSON array of objects, one per test),
    each as a dict with ``test`` (pp512, tg128, ...) added and ``samples_ns`` as ints."""
    start = text.find("[")
    if start < 0:
        raise PeerError(f"llama-bench printed no JSON array: {text[:200]!r}")
    try:
        records = json.loads(text[start:])
    except ValueError as e:
        raise PeerError(f"llama-bench's JSON does not parse: {e}") from e
    if not isinstance(records, list):
        raise PeerError(f"llama-bench's JSON is a {type(records).__name__}, expected a list")
    out = []
    for i, rec in enumerate(records):
        missing = [k for k in ("n_prompt", "n_gen", "samples_ns") if k not in rec]
        if missing:
            raise PeerError(f"llama-bench test {i} lacks {', '.join(missing)}")
        rec = dict(rec)
        rec["test"] = _test_name(int(rec["n_prompt"]), int(rec["n_gen"]),
                                 int(rec.get("n_depth", 0) or 0))
        rec["samples_ns"] = [int(x) for x in rec["samples_ns"]]
        out.append(rec)
    return out


class LlamaBenchBinary:
    """A llama-bench executable, one invocation (``-r 1``) per repetition."""

    name = "llama.cpp"
    warms_up_itself = True   # llama-bench warms up inside every invocation

    def __init__(self, binary, model_path, *, threads: int, n_gpu_layers: int = 0,
                 flash_attn: str = "auto", timeout: float = 600):
        if flash_attn not in FLASH_ATTN:
            raise PeerError(f"flash_attn {flash_attn!r}: expected one of {', '.join(FLASH_ATTN)}")
        self.binary, self.model_path = str(binary), str(model_path)
        self.threads, self.timeout = threads, timeout
        self.n_gpu_layers, self.flash_attn = n_gpu_layers, flash_attn
        # llama-bench names no devices the way the bindings do: the backend follows -ngl.
        self.backend, self.device = peer_backend(n_gpu_layers, None)
        self.version = "unknown"
        self.details = {"runner": "llama-bench", "tokens": "its own random ids",
                        "n_gpu_layers": n_gpu_layers, "flash_attn": flash_attn}
        self._peak = 0

    def _invoke(self, n_prompt: int, n_gen: int, n_depth: int = 0) -> dict:
        # -ngl always: llama-bench's own default offloads every layer (99).
        cmd = [self.binary, "-m", self.model_path, "-p", str(n_prompt), "-n", str(n_gen),
               "-r", "1", "-t", str(self.threads), "-ngl", str(self.n_gpu_layers), "-o", "json"]
        if n_depth:
            cmd[-2:-2] = ["-d", str(n_depth)]
        if self.flash_attn != "auto":
            cmd[-2:-2] = ["-fa", "1" if self.flash_attn == "on" else "0"]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout,
                               start_new_session=True)
        except (OSError, subprocess.SubprocessError) as e:
            raise PeerError(f"cannot run {self.binary}: {e}") from e
        if r.returncode != 0:
            raise PeerError(f"{self.binary} exited with status {r.returncode}: {r.stderr[-2000:]}")
        (rec,) = parse_llama_bench_json(r.stdout)
        self.version = f"b{rec.get('build_number', '?')} ({rec.get('build_commit', '?')})"
        for k in ("model_type", "n_batch", "n_ubatch", "flash_attn", "type_k", "type_v",
                  "backends", "gpu_info"):
            if k in rec:
                self.details[k] = rec[k]
        if self.backend != "cpu" and rec.get("gpu_info"):
            self.device = str(rec["gpu_info"])
        return rec

    def vocab(self):
        return None      # llama-bench draws its own tokens

    def run(self, test: str, tokens: Sequence[int], depth: Sequence[int] = ()) -> int:
        """One invocation; at a depth llama-bench fills the cache with its own ids (-d)."""
        n = len(tokens)
        rec = self._invoke(n if test == "pp" else 0, n if test == "tg" else 0, len(depth))
        return rec["samples_ns"][0]

    def top(self, tokens, k: int = 5):
        return None      # llama-bench does not expose logits

    def memory(self) -> dict:
        try:
            import resource
            peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
            peak = peak if sys.platform == "darwin" else peak * 1024
        except ImportError:
            peak = None
        return {"peak_rss": peak, "baseline_rss": None, "peak_scope": "largest child process"}

    def close(self) -> None:
        pass

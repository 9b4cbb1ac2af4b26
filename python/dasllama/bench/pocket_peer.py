"""The pocket-tts side of ``dasllama bench tts``: the package's model on a checkpoint, one
request timed with its frame count pinned, in the harness's process or in a runner of its own.

The package (pocket-tts 4.0.1, on torch) loads the same weights dasllama's GGUF was converted
from: a ``TTSModel`` state dict saved with safetensors (the released ``model.safetensors``, or
the random test model of :mod:`dasllama.testing.pocket`), the tokenizer its config names, and
the config (``english`` by default). The frame count is pinned as dasllama pins it: EOS off
(``eos_threshold`` +inf, so no logit ends the chunk) and the length cap replaced by the frames
asked for (``_estimate_max_gen_len``), so the chunk makes exactly that many frames.

A request is ``generate_audio_stream`` consumed to its end, as a user streams it: the clock
starts before the call (text normalization and tokenization are inside, as in dasllama's
``TTS.stream``); first audio is the first piece it yields; the wall time ends with the last.
The package runs generation and Mimi decoding on two Python threads of its own; each uses
torch's intra-op pool of ``threads`` threads (``torch.set_num_threads``, which the package
sets to 1 on import).

On a CUDA GPU (``device="cuda"``, the runner's ``--device cuda``) the model and its state live
on the device and the clock reads wait for the device (``torch.cuda.synchronize``) at the first
piece and at the end, as the package's own GPU timing does; the rows' backend is then
``cuda`` and their device the GPU's name.

Every request also times the package's prompt stage: its ``_run_flow_lm_and_increment_step``
call on the text tokens (device work waited for on CUDA), ``Request.prompt_ns``.

Run as a program it is the runner (the same interpreter, another process, so torch's thread
pool and dasllama's never share a process):

    python -m dasllama.bench.pocket_peer --checkpoint C --tokenizer T --threads N
                                         [--language english] [--device cpu|cuda]

Protocol: one JSON object a line. After loading it writes ``{"event": "ready", ...}``
(versions, threads, sample rate), then answers each request line with one reply line:

    {"cmd": "run", "text": ..., "frames": 50, "temperature": 0.3, "seed": 1, "audio": false}
        -> {"ok": true, "wall_ns": .., "first_audio_ns": .., "prompt_ns": .., "samples": ..,
            "tokens": [[ids of each chunk]], "audio_f32": base64 (when "audio" is true)}
    {"cmd": "rss"}  -> {"ok": true, "max_rss": bytes}
    {"cmd": "quit"} -> {"ok": true}, then exit
    anything that fails -> {"ok": false, "error": "..."}
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

__all__ = ["Request", "PocketPackage", "PocketRunner", "main"]

ENGINE = "pocket-tts"
# Where the package can run: torch's CPU, or its first CUDA GPU.
DEVICES = ("cpu", "cuda")


@dataclass
class Request:
    """One timed request: wall and first-audio times (ns), the samples made, the token ids of
    each chunk the engine spoke, and the audio itself when asked for."""
    wall_ns: int
    first_audio_ns: int
    samples: int
    tokens: list = field(default_factory=list)
    audio: Optional[object] = None       # float32 NumPy array
    # The quiet guard (bench/quiet.py): CPU seconds other processes used during the request,
    # seconds waited for quiet before it, and the wall times of disturbed attempts discarded.
    others_cpu_s: Optional[float] = None
    waited_s: float = 0.0
    discarded: list = field(default_factory=list)
    # The prompt stage (the text rows through the backbone) as the engine times it, ns.
    prompt_ns: Optional[int] = None


def _max_rss() -> int:
    try:
        import resource
    except ImportError:
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024   # Linux reports KiB


class PocketPackage:
    """The pocket-tts package's TTSModel in this process, ready to time pinned requests."""

    name, backend, device = ENGINE, "cpu", None
    rss_scope = "the harness's process, whole run"

    def __init__(self, checkpoint, tokenizer, *, threads: int, language: str = "english",
                 device: str = "cpu"):
        import torch
        from pocket_tts.models.tts_model import TTSModel
        from pocket_tts.utils.config import CONFIGS_DIR, load_config

        # The package says "Maximum generation length reached without EOS" at every pinned
        # request (that is the point) and logs each step at INFO: keep the harness quiet.
        logging.getLogger("pocket_tts").setLevel(logging.ERROR)
        cfg = load_config(CONFIGS_DIR / f"{language}.yaml")
        cfg.weights_path = str(checkpoint)
        cfg.weights_path_without_voice_cloning = None
        cfg.flow_lm.weights_path = None
        cfg.mimi.weights_path = None
        cfg.flow_lm.lookup_table.tokenizer_path = str(tokenizer)
        cfg.flow_lm.lookup_table.tokenizer = ("tokenizers" if str(tokenizer).endswith(".json")
                                              else "sentencepiece")
        if device not in DEVICES:
            raise ValueError(f"device {device!r}: expected one of {', '.join(DEVICES)}")
        if device == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("device 'cuda': this torch sees no CUDA GPU "
                               f"(torch {torch.__version__})")
        self.model = TTSModel._from_pydantic_config_with_weights(
            cfg, cfg.default_temperature, 1, None, math.inf).eval().to(device)
        torch.set_num_threads(threads)   # after the import, which sets 1
        self.threads = threads
        self.sample_rate = int(self.model.sample_rate)
        self.frame_size = int(self.sample_rate / cfg.mimi.frame_rate)
        self._torch = torch
        self._cuda = device == "cuda"
        from importlib.metadata import version
        self.versions = {"version": version("pocket-tts"), "torch": torch.__version__,
                         "torch_threads": torch.get_num_threads(), "language": language,
                         "checkpoint": Path(checkpoint).name, "dtype": "float32",
                         "device": device}
        if self._cuda:
            self.versions["gpu"] = torch.cuda.get_device_name(0)
            self.versions["cuda"] = torch.version.cuda
            self.backend, self.device = "cuda", self.versions["gpu"]
        self.version = self.versions["version"]

    def _sync(self) -> None:
        """Waits for the device's queued work (CUDA), so a clock read after it counts it."""
        if self._cuda:
            self._torch.cuda.synchronize()

    def run(self, text: str, frames: int, temperature: float, seed: int,
            keep_audio: bool = False) -> Request:
        """One request of exactly ``frames`` frames (EOS off, length cap = frames)."""
        import numpy as np
        from pocket_tts.modules.stateful_module import init_states

        torch, m = self._torch, self.model
        m.eos_threshold = math.inf
        m.temp = float(temperature)
        m._estimate_max_gen_len = lambda token_count: int(frames)
        tokens: list = []
        prepare = m.flow_lm.conditioner.prepare

        def recording_prepare(chunk_text):
            out = prepare(chunk_text)
            tokens.append([int(i) for i in out.reshape(-1).tolist()])
            return out

        step = m._run_flow_lm_and_increment_step
        prompt_ns: list = []

        def timed_step(*args, **kwargs):
            # The prompt stage is the call that takes the text tokens.
            if kwargs.get("text_tokens") is None:
                return step(*args, **kwargs)
            self._sync()
            p0 = time.perf_counter_ns()
            out = step(*args, **kwargs)
            self._sync()
            prompt_ns.append(time.perf_counter_ns() - p0)
            return out

        state = init_states(m.flow_lm, batch_size=1, sequence_length=0)   # no voice
        torch.manual_seed(int(seed))
        m.flow_lm.conditioner.prepare = recording_prepare
        m._run_flow_lm_and_increment_step = timed_step
        pieces, samples, first = [], 0, None
        try:
            with torch.no_grad():
                self._sync()
                t0 = time.perf_counter_ns()
                for piece in m.generate_audio_stream(state, text, copy_state=False):
                    if first is None:
                        self._sync()
                        first = time.perf_counter_ns() - t0
                    samples += int(piece.shape[-1])
                    if keep_audio:
                        pieces.append(piece)
                self._sync()
                wall = time.perf_counter_ns() - t0
        finally:
            del m.flow_lm.conditioner.prepare     # the class's method again
            del m._run_flow_lm_and_increment_step
        audio = (torch.cat(pieces).cpu().numpy().astype(np.float32) if keep_audio and pieces
                 else None)
        return Request(wall, first if first is not None else wall, samples, tokens, audio,
                       prompt_ns=prompt_ns[0] if prompt_ns else None)

    def max_rss(self) -> int:
        return _max_rss()

    def close(self) -> None:
        self.model = None


# =============================================================================================
# The runner (this module as a program) and its client
# =============================================================================================

def _serve(args) -> int:
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)          # stray prints from native code go to stderr, not into replies
    sys.stdout = sys.stderr
    try:
        peer = PocketPackage(args.checkpoint, args.tokenizer, threads=args.threads,
                             language=args.language, device=args.device)
    except Exception as e:                          # noqa: BLE001 - reported, then exit
        out.write(json.dumps({"event": "error", "error": f"{type(e).__name__}: {e}"}) + "\n")
        return 1
    out.write(json.dumps({"event": "ready", "sample_rate": peer.sample_rate,
                          "frame_size": peer.frame_size, **peer.versions}) + "\n")
    for line in sys.stdin:
        try:
            req = json.loads(line)
            cmd = req.get("cmd")
            if cmd == "run":
                r = peer.run(req["text"], int(req["frames"]), float(req["temperature"]),
                             int(req["seed"]), bool(req.get("audio")))
                reply = {"ok": True, "wall_ns": r.wall_ns, "first_audio_ns": r.first_audio_ns,
                         "prompt_ns": r.prompt_ns, "samples": r.samples, "tokens": r.tokens}
                if r.audio is not None:
                    reply["audio_f32"] = base64.b64encode(r.audio.tobytes()).decode("ascii")
            elif cmd == "rss":
                reply = {"ok": True, "max_rss": peer.max_rss()}
            elif cmd == "quit":
                out.write(json.dumps({"ok": True}) + "\n")
                return 0
            else:
                reply = {"ok": False, "error": f"unknown command {cmd!r}"}
        except Exception as e:                      # noqa: BLE001 - the reply says what
            reply = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        out.write(json.dumps(reply) + "\n")
    return 0


class PocketRunner:
    """The package in a runner process (this module as a program, same interpreter): the same
    interface as PocketPackage. torch's thread pool then lives apart from dasllama's."""

    name, backend, device = ENGINE, "cpu", None
    rss_scope = "the runner process, whole run"

    def __init__(self, checkpoint, tokenizer, *, threads: int, language: str = "english",
                 device: str = "cpu", python: Optional[str] = None, startup_s: float = 300.0):
        from .llm import BenchError
        self._error = BenchError
        cmd = [python or sys.executable, "-m", "dasllama.bench.pocket_peer",
               "--checkpoint", str(checkpoint), "--tokenizer", str(tokenizer),
               "--threads", str(threads), "--language", language, "--device", device]
        env = dict(os.environ)
        # This package, importable from the runner even when it is a source checkout.
        pkg_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = pkg_root + os.pathsep + env.get("PYTHONPATH", "")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env)
        ready = self._read()
        if ready.get("event") != "ready":
            self.close()
            raise BenchError(f"the pocket-tts runner did not start: "
                             f"{ready.get('error', ready)}")
        self.threads = threads
        self.sample_rate = int(ready["sample_rate"])
        self.frame_size = int(ready["frame_size"])
        self.versions = {k: v for k, v in ready.items()
                         if k not in ("event", "sample_rate", "frame_size")}
        self.version = str(self.versions["version"])
        if self.versions.get("device") == "cuda":
            self.backend, self.device = "cuda", str(self.versions.get("gpu", "cuda"))

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            raise self._error(f"the pocket-tts runner exited (code {code}) without a reply; "
                              f"its stderr above says why")
        return json.loads(line)

    def _ask(self, **req) -> dict:
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        reply = self._read()
        if not reply.get("ok"):
            raise self._error(f"pocket-tts runner: {reply.get('error')}")
        return reply

    def run(self, text: str, frames: int, temperature: float, seed: int,
            keep_audio: bool = False) -> Request:
        r = self._ask(cmd="run", text=text, frames=frames, temperature=temperature, seed=seed,
                      audio=keep_audio)
        audio = None
        if "audio_f32" in r:
            import numpy as np
            audio = np.frombuffer(base64.b64decode(r["audio_f32"]), dtype=np.float32)
        prompt = r.get("prompt_ns")
        return Request(int(r["wall_ns"]), int(r["first_audio_ns"]), int(r["samples"]),
                       r["tokens"], audio, prompt_ns=None if prompt is None else int(prompt))

    def max_rss(self) -> int:
        return int(self._ask(cmd="rss")["max_rss"])

    def cpu_seconds(self) -> float:
        """User plus system CPU seconds of the runner so far (0 where /proc has none)."""
        from .quiet import process_cpu_seconds
        return process_cpu_seconds(self.proc.pid)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self._ask(cmd="quit")
            except Exception:                       # noqa: BLE001 - ending it anyway
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="pocket_peer", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True, help="the TTSModel state dict (safetensors)")
    p.add_argument("--tokenizer", required=True, help="tokenizers .json or SentencePiece .model")
    p.add_argument("--threads", type=int, required=True, help="torch's intra-op threads")
    p.add_argument("--language", default="english", help="the package's config name")
    p.add_argument("--device", default="cpu", choices=DEVICES,
                   help="torch's device for the model (cuda: the first CUDA GPU)")
    return _serve(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

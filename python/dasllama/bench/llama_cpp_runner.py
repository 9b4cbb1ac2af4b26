"""The llama.cpp side of ``dasllama bench llm``: a small server that keeps one model loaded.

It runs under the interpreter that has llama.cpp's Python bindings (the ``cyllama`` wheel,
which needs CPython 3.12), not under dasllama's own, so it imports nothing from dasllama and
only the standard library besides ``cyllama``.

    python llama_cpp_runner.py MODEL.gguf --threads T --n-ctx N [--n-batch 2048] [--n-ubatch 512]
                               [--n-gpu-layers 0] [--flash-attn auto|on|off]

Protocol: one JSON object a line. After loading, the runner writes
``{"event": "ready", ...}`` (engine version, vocabulary, the context it made, the backend
devices llama.cpp sees as ``devices``: name, description and type, e.g. ``{"name":
"Vulkan0", "description": "NVIDIA H200", "type": "GPU"}``); then it answers
each request line with one reply line:

    {"cmd": "run", "test": "pp", "tokens": [...]}   decode the tokens as one prompt
    {"cmd": "run", "test": "tg", "tokens": [...]}   decode them one at a time
        -> {"ok": true, "ns": elapsed}               (the cache is cleared first, not timed)
    a run may carry "depth": [...]: ids decoded first as one prompt, untimed, so the timed
        tokens start at position len(depth) (llama-bench's -d)
    {"cmd": "top", "tokens": [...], "k": 5}         -> {"ok": true, "top": [ids by logit]}
    {"cmd": "rss"}                                  -> {"ok": true, "max_rss": bytes}
    {"cmd": "quit"}                                 -> {"ok": true}, then exit
    anything that fails                             -> {"ok": false, "error": "..."}

The timing follows llama-bench (tools/llama-bench): the prompt goes in batches of n_batch
tokens, generation decodes one token per call, and llama_synchronize follows the prompt and
every generated token, so the clock stops only when the work is done. Native code prints to
file descriptor 1; the runner moves the protocol to a private descriptor and points 1 at
stderr so no stray print can corrupt a reply.
"""

import argparse
import json
import os
import sys
import time


def _protocol_stream():
    """A private copy of stdout for replies; fd 1 then goes to stderr."""
    fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(fd, "w", buffering=1)


def _rss_now() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _max_rss() -> int:
    # The same as dasllama.bench.probe.process_peak_rss_bytes, repeated because this file
    # runs where dasllama is not importable (see the module docstring).
    try:
        import resource   # not on Windows
    except ImportError:
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024   # Linux reports KiB


def _value(x):
    """Bindings differ on what is a property and what a method; accept both."""
    return x() if callable(x) else x


# llama.h's llama_flash_attn_type: the values the context parameter takes.
FLASH_ATTN = {"auto": -1, "off": 0, "on": 1}


def _devices(cy) -> list:
    """The backend devices llama.cpp sees (after ggml_backend_load_all): name, description,
    type ("CPU", "GPU", "iGPU", "ACCEL"); empty when the bindings cannot say."""
    try:
        found = cy.ggml_backend_dev_info()
    except Exception:   # older bindings: the ready message then says nothing of devices
        return []
    return [{k: str(d.get(k, "")) for k in ("name", "description", "type")} for d in found]


def _llama_cpp_build() -> str:
    """The llama.cpp release the wheel was built from (recorded in its build_config.json)."""
    import cyllama
    path = os.path.join(os.path.dirname(cyllama.__file__), "build_config.json")
    try:
        with open(path) as f:
            return json.load(f)["versions"]["llama_cpp_version"]
    except (OSError, KeyError, ValueError):
        return "unknown"


class Runner:
    def __init__(self, args):
        import cyllama
        import cyllama.llama.llama_cpp as cy
        self.cy = cy
        if not args.verbose:
            cy.disable_logging()
        cy.llama_backend_init()
        cy.ggml_backend_load_all()
        self.baseline_rss = _rss_now()
        devices = _devices(cy)
        mp = cy.LlamaModelParams()
        mp.n_gpu_layers = args.n_gpu_layers
        self.model = cy.LlamaModel(args.model, mp)
        cp = cy.LlamaContextParams()
        cp.n_ctx = args.n_ctx
        cp.n_batch = args.n_batch
        cp.n_ubatch = args.n_ubatch
        cp.n_threads = cp.n_threads_batch = args.threads
        cp.flash_attn_type = FLASH_ATTN[args.flash_attn]
        self.ctx = cy.LlamaContext(self.model, cp)
        self.vocab = self.model.get_vocab()
        self.n_batch = args.n_batch
        try:
            flash_attn = cy.llama_flash_attn_type_name(cp.flash_attn_type)
        except Exception:   # older bindings: record the raw value
            flash_attn = str(cp.flash_attn_type)
        self.ready = {
            "event": "ready",
            "engine": "llama.cpp",
            "version": _llama_cpp_build(),
            "bindings": f"cyllama {cyllama.__version__}",
            "ggml": f"{cy.ggml_version()} ({cy.ggml_commit()})",
            "system_info": cy.llama_print_system_info().strip(),
            "model_desc": _value(self.model.desc),
            "model_size": int(_value(self.model.size)),
            "n_params": int(_value(self.model.n_params)),
            "n_vocab": int(self.vocab.n_vocab),
            "bos": int(self.vocab.token_bos()),
            "add_bos": bool(self.vocab.get_add_bos()),
            "n_ctx": int(_value(self.ctx.n_ctx)),
            "n_batch": int(_value(self.ctx.n_batch)),
            "n_ubatch": int(_value(self.ctx.n_ubatch)),
            "threads": int(_value(self.ctx.n_threads)),
            "flash_attn": flash_attn,
            "n_gpu_layers": int(mp.n_gpu_layers),
            "gpu_offload": bool(getattr(cy, "llama_supports_gpu_offload", lambda: False)()),
            "devices": devices,
            "baseline_rss": self.baseline_rss,
        }

    def _decode(self, tokens, pos):
        self.ctx.decode(self.cy.llama_batch_get_one(tokens, pos))

    def run(self, test, tokens, depth=()):
        if test not in ("pp", "tg"):
            raise ValueError(f"unknown test {test!r} (expected 'pp' or 'tg')")
        self.ctx.kv_cache_clear()
        d = len(depth)
        for i in range(0, d, self.n_batch):
            self._decode(list(depth[i:i + self.n_batch]), i)
        self.ctx.synchronize()
        t0 = time.perf_counter_ns()
        if test == "pp":
            for i in range(0, len(tokens), self.n_batch):
                self._decode(tokens[i:i + self.n_batch], d + i)
            self.ctx.synchronize()
        elif test == "tg":
            for i, tok in enumerate(tokens):
                self._decode([tok], d + i)
                self.ctx.synchronize()
        else:
            raise ValueError(f"unknown test {test!r} (expected 'pp' or 'tg')")
        return time.perf_counter_ns() - t0

    def top(self, tokens, k):
        self.ctx.kv_cache_clear()
        self._decode(tokens, 0)
        logits = self.ctx.get_logits_ith(-1)
        return sorted(range(len(logits)), key=lambda i: -logits[i])[:k]

    def handle(self, req):
        cmd = req.get("cmd")
        if cmd == "run":
            depth = [int(t) for t in req.get("depth", ())]
            return {"ok": True, "ns": self.run(req["test"], [int(t) for t in req["tokens"]],
                                               depth)}
        if cmd == "top":
            top = self.top([int(t) for t in req["tokens"]], int(req.get("k", 5)))
            return {"ok": True, "top": top}
        if cmd == "rss":
            return {"ok": True, "max_rss": _max_rss(), "rss": _rss_now()}
        if cmd == "quit":
            return {"ok": True}
        raise ValueError(f"unknown command {cmd!r}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description="llama.cpp benchmark runner (JSON lines on stdin/stdout)")
    p.add_argument("model")
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--n-ctx", type=int, required=True)
    p.add_argument("--n-batch", type=int, default=2048)
    p.add_argument("--n-ubatch", type=int, default=512)
    p.add_argument("--n-gpu-layers", type=int, default=0,
                   help="layers to offload to the GPU (99: all of them)")
    p.add_argument("--flash-attn", choices=sorted(FLASH_ATTN), default="auto",
                   help="llama.cpp's flash attention (default auto: its own choice)")
    p.add_argument("--verbose", action="store_true", help="keep llama.cpp's log on stderr")
    args = p.parse_args(argv)
    out = _protocol_stream()
    try:
        runner = Runner(args)
    except Exception as e:   # report any load failure on the protocol, then stop
        out.write(json.dumps({"event": "error", "error": f"{type(e).__name__}: {e}"}) + "\n")
        return 1
    out.write(json.dumps(runner.ready) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            reply = runner.handle(req)
        except Exception as e:   # a bad request must not kill the loaded model
            req, reply = {}, {"ok": False, "error": f"{type(e).__name__}: {e}"}
        out.write(json.dumps(reply) + "\n")
        if req.get("cmd") == "quit":
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())

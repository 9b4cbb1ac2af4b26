"""Peak resident memory of an LLM run against what it must hold: the model file plus a full
KV cache. Loads the model in a fresh process, evaluates an N-token prompt and M single-token
steps, and prints the growth of the peak RSS (VmHWM) over the process's size before loading.

usage: python bench/llm_memory.py [MODEL ...] [--threads 2] [--n-prompt 512] [--n-gen 128]
       (Linux only: reads /proc/self/status)
"""

import argparse
import os
import subprocess
import sys

CHILD = r"""
import os, sys
from dasllama import _core, models

def peak_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM"):
                return int(line.split()[1]) / 1024

name, threads, n_prompt, n_gen = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
path = str(models.find(name))
before = peak_mib()
m = _core.LLMModel(path, n_ctx=n_prompt + n_gen, n_threads=threads)
m.eval([1 + i % 1000 for i in range(n_prompt)])
for i in range(n_gen):
    m.eval([1 + i % 1000])
print(path, os.path.getsize(path) / 2**20, peak_mib() - before, m.n_ctx)
"""


def kv_mib(path: str, n_ctx: int) -> float:
    """A full f16 KV cache for n_ctx positions, from the file's hyperparameters."""
    import dasllama
    with dasllama.gguf.open(path) as f:
        meta = f.metadata
        arch = meta["general.architecture"]
        n_layer = meta[f"{arch}.block_count"]
        n_head = meta[f"{arch}.attention.head_count"]
        n_head_kv = meta.get(f"{arch}.attention.head_count_kv", n_head)
        n_embd = meta[f"{arch}.embedding_length"]
        k_len = meta.get(f"{arch}.attention.key_length", n_embd // n_head)
        v_len = meta.get(f"{arch}.attention.value_length", n_embd // n_head)
    return n_layer * n_ctx * n_head_kv * (k_len + v_len) * 2 / 2**20


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="*", default=["smollm2", "gemma3"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--n-prompt", type=int, default=512)
    p.add_argument("--n-gen", type=int, default=128)
    a = p.parse_args()
    print(f"{'model':<36} {'file MiB':>9} {'KV MiB':>7} {'peak growth':>12} {'ratio':>6}")
    for name in a.models:
        out = subprocess.run([sys.executable, "-c", CHILD, name, str(a.threads), str(a.n_prompt),
                              str(a.n_gen)], capture_output=True, text=True, check=True)
        path, file_mib, growth, n_ctx = out.stdout.split()
        kv = kv_mib(path, int(n_ctx))
        ratio = float(growth) / (float(file_mib) + kv)
        print(f"{os.path.basename(path):<36} {float(file_mib):9.1f} {kv:7.1f} "
              f"{float(growth):12.1f} {ratio:6.2f}")
    print("(ratio = peak RSS growth / (file + full f16 KV cache); the goal is at most 1.25)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""LLM throughput of dasllama against llama.cpp, in one run on this machine.

    python bench/llm_bench.py [--model smollm2|gemma3|PATH ...] [--threads 2] [--reps 5]
                              [--n-prompt 512] [--n-gen 128] [--out bench/records/llm-{box}.json]

The same as `dasllama bench llm`; the code lives in the package (dasllama.bench). Without
--out it writes bench/records/llm-<box>.json, <box> being the machine's label. README.md
beside this script describes the method and the record.
"""

import sys
from pathlib import Path

from dasllama.bench.cli import llm_main

if __name__ == "__main__":
    records = Path(__file__).resolve().parent / "records"
    sys.exit(llm_main(default_out=str(records / "llm-{box}.json")))

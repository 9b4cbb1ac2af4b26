#!/usr/bin/env python3
"""`dasllama serve` under ten minutes of mixed requests: errors, liveness and RSS growth.

    python bench/serve_soak.py [--model smollm2] [--duration 600] [--clients 4] [--parallel 4]
                               [--out bench/records/soak/soak-{box}.json]

The code lives in the package (dasllama.bench.soak, whose docstring describes the method and
the summary). Without --out it writes bench/records/soak/soak-<box>.json, <box> being the
machine's label. The exit code is 1 when a goal fails.
"""

import sys
from pathlib import Path

from dasllama.bench.soak import main

if __name__ == "__main__":
    records = Path(__file__).resolve().parent / "records" / "soak"
    sys.exit(main(default_out=str(records / "soak-{box}.json")))

"""The CPU probe from Python, and DASLLAMA_CPU_ISA capping the kernel level."""

import json
import subprocess
import sys

import dasllama
from dasllama import _core

LADDER = {"generic": 0, "avx2": 1, "avx512": 2, "amx": 3, "neon": 1, "neon_dotprod": 2}


def probe(isa=None):
    code = ("import json, dasllama, dasllama._core as c; "
            "print(json.dumps([dasllama.cpu_features(), c.dot_variants()]))")
    env = None
    if isa is not None:
        import os
        env = {**os.environ, "DASLLAMA_CPU_ISA": isa}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True)
    return json.loads(out.stdout)


def test_features_are_consistent():
    f = dasllama.cpu_features()
    assert f["isa"] in LADDER and f["best_isa"] in LADDER
    if f["avx512f"]:
        assert f["avx2"] and f["fma"]
    if f["amx_usable"]:
        assert f["amx_tile"] and f["amx_int8"]
    variants = _core.dot_variants()
    assert variants[-1] == "generic"
    assert LADDER[variants[0]] <= LADDER[f["isa"]]  # no kernel above the level in use


def test_isa_cap_lowers_the_level_and_never_raises_it():
    best = dasllama.cpu_features()["best_isa"]
    features, variants = probe("generic")
    assert features["isa"] == "generic" and variants == ["generic"]
    features, _ = probe("bogus")
    assert features["isa"] == best and features["isa_request"] == "bogus"

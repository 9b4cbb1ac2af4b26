"""shaders/stamp.py's SPIR-V cache and parallel stamping: a second run of the same stamps
compiles nothing and writes the same bytes; a changed stamp misses the cache and compiles."""

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from requires import in_ci

ROOT = Path(__file__).resolve().parents[1]
NAMES = ("matvec_f32", "gk_selftest_axpy", "gk_selftest_reduce")


@pytest.fixture()
def counting_glslc(tmp_path):
    """glslc behind a wrapper that logs each compile (not each -E preprocessing run)."""
    glslc = shutil.which("glslc")
    if glslc is None:
        if in_ci():
            pytest.fail("CI needs glslc (apt install glslc)")
        pytest.skip("glslc is not installed (apt install glslc)")
    log = tmp_path / "compiles.log"
    wrapper = tmp_path / "glslc"
    wrapper.write_text("#!/bin/sh\n"
                       f'case " $* " in *" -E "*) ;; *) echo x >> "{log}" ;; esac\n'
                       f'exec "{glslc}" "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    return wrapper, log


def stamp(out: Path, glslc: Path, cache: Path, stamps: Path = ROOT / "shaders" / "stamps.txt"):
    r = subprocess.run([sys.executable, str(ROOT / "shaders" / "stamp.py"), "--out", str(out),
                        "--glslc", str(glslc), "--no-metal", "--cache", str(cache),
                        "--stamps", str(stamps), "--only", ",".join(NAMES), "--jobs", "2"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def compiles(log: Path) -> int:
    return len(log.read_text().split()) if log.exists() else 0


def spirv(out: Path) -> dict:
    return {n: (out / "vulkan" / f"{n}.spv").read_bytes() for n in NAMES}


def test_a_second_build_reuses_every_spirv(counting_glslc, tmp_path):
    glslc, log = counting_glslc
    cache = tmp_path / "cache"
    stamp(tmp_path / "a", glslc, cache)
    assert compiles(log) == len(NAMES) and len(list(cache.glob("*.spv"))) == len(NAMES)
    stamp(tmp_path / "b", glslc, cache)
    assert compiles(log) == len(NAMES)              # nothing compiled the second time
    assert spirv(tmp_path / "a") == spirv(tmp_path / "b")
    assert (tmp_path / "a" / "gk_stamps.cpp").read_text() == \
        (tmp_path / "b" / "gk_stamps.cpp").read_text()


def test_a_changed_stamp_misses_the_cache(counting_glslc, tmp_path):
    glslc, log = counting_glslc
    cache = tmp_path / "cache"
    stamp(tmp_path / "a", glslc, cache)
    text = (ROOT / "shaders" / "stamps.txt").read_text()
    changed = tmp_path / "stamps.txt"
    # the self-test's workgroup is a define: another value is another kernel
    line = next(l for l in text.splitlines() if l.startswith("matvec_f32 "))
    changed.write_text(text.replace(line, line.replace("GK_FMT_F32=1", "GK_FMT_F32=1,GK_PROBE=7")))
    stamp(tmp_path / "b", glslc, cache, changed)
    assert compiles(log) == len(NAMES) + 1           # only the changed stamp compiled again
    assert spirv(tmp_path / "a")["gk_selftest_axpy"] == spirv(tmp_path / "b")["gk_selftest_axpy"]

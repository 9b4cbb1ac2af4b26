"""What a benchmark record says about the machine and the build that produced it.

``machine()`` gathers the CPU model, the instruction-set flags that matter to the kernels, core
and memory counts, the load average (others working on the box show up there), the OS and
Python, and the GPUs when there are any (name, driver, Vulkan API version): when a GPU is
benchmarked, as dasllama's own runtime sees them (``_core.gpu_devices()``), else through
``vulkaninfo`` or ``nvidia-smi``. ``build()`` gives dasllama's version and, in a git checkout,
the commit and whether the tree had local changes. The RSS helpers read the kernel's own
counters: the peak can be reset on Linux (``/proc/self/clear_refs``), so each model gets its
own peak.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

__all__ = ["machine", "gpus", "runtime_gpus", "parse_vulkaninfo_summary", "build", "box_name",
           "this_box", "loadavg", "rss_bytes", "peak_rss_bytes", "reset_peak_rss",
           "process_peak_rss_bytes"]

# Flags named as Linux spells them in /proc/cpuinfo; the ones the kernels choose between.
_X86_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw",
              "avx512vl", "avx512dq", "avx512_vnni", "avx512_bf16", "avx512_fp16",
              "amx_tile", "amx_int8", "amx_bf16")
_ARM_FLAGS = ("asimd", "asimdhp", "asimddp", "i8mm", "bf16", "sve", "sve2", "sme")
_API_VERSION = re.compile(r"[0-9]+\.[0-9]+(\.[0-9]+)?")     # "1.3.277" of "1.3.277 (...)"


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _sysctl(name: str) -> str:
    try:
        return subprocess.run(["sysctl", "-n", name], capture_output=True, text=True,
                              timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _cpu_model(cpuinfo: str) -> str:
    for key in ("model name", "Hardware", "Processor", "cpu model"):
        m = re.search(rf"^{key}\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
        if m:
            return m.group(1).strip()
    if sys.platform == "darwin":
        return _sysctl("machdep.cpu.brand_string") or platform.processor()
    return platform.processor() or platform.machine()


def _physical_cores(cpuinfo: str) -> Optional[int]:
    pairs = set(re.findall(r"^physical id\s*:\s*(\d+)\s*\n(?:.*\n)*?core id\s*:\s*(\d+)",
                           cpuinfo, re.MULTILINE))
    if pairs:
        return len(pairs)
    if sys.platform == "darwin":
        n = _sysctl("hw.physicalcpu")
        return int(n) if n.isdigit() else None
    return None


def _memory_bytes() -> Optional[int]:
    m = re.search(r"^MemTotal:\s*(\d+) kB", _read("/proc/meminfo"), re.MULTILINE)
    if m:
        return int(m.group(1)) * 1024
    if sys.platform == "darwin":
        n = _sysctl("hw.memsize")
        return int(n) if n.isdigit() else None
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def loadavg() -> Optional[float]:
    """The 1-minute load average (None where the OS has none)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def machine(gpu: bool = False) -> dict:
    """The probe a record carries: CPU, flags subset, cores, memory, load, OS, Python, GPUs.
    ``gpu``: a GPU is benchmarked, so ask dasllama's runtime for the devices first (that
    opens a Vulkan instance in this process, which a CPU run does not need)."""
    cpuinfo = _read("/proc/cpuinfo")
    m = re.search(r"^(?:flags|Features)\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
    present = set(m.group(1).split()) if m else set()
    wanted = _ARM_FLAGS if platform.machine().lower() in ("arm64", "aarch64") else _X86_FLAGS
    info = {
        "cpu": _cpu_model(cpuinfo),
        "arch": platform.machine(),
        "flags": [f for f in wanted if f in present],
        "logical_cores": os.cpu_count(),
        "physical_cores": _physical_cores(cpuinfo),
        "memory_bytes": _memory_bytes(),
        "loadavg_1m": loadavg(),
        "os": platform.platform(),
        "python": platform.python_version(),
    }
    try:   # what dasllama itself selected; absent when the extension is not built
        from .. import cpu_features
        info["dasllama_isa"] = cpu_features().get("isa")
    except ImportError:
        info["dasllama_isa"] = None
    found = gpus(runtime=gpu)
    if found:
        info["gpus"] = found
    return info


def _run(cmd) -> str:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return r.stdout if r.returncode == 0 else ""


def parse_vulkaninfo_summary(text: str) -> list:
    """GPUs from ``vulkaninfo --summary``: name, driver and Vulkan API version per device."""
    out = []
    for block in re.split(r"\n(?=GPU\d+:)", text)[1:]:
        field = dict(re.findall(r"^\s*(\w+)\s*=\s*(.+?)\s*$", block, re.MULTILINE))
        if "deviceName" not in field:
            continue
        gpu = {"name": field["deviceName"], "source": "vulkaninfo"}
        api = _API_VERSION.match(field.get("apiVersion", ""))
        if api:
            gpu["vulkan_api"] = api.group(0)
        driver = field.get("driverInfo") or field.get("driverName")
        if driver:
            gpu["driver"] = driver
        out.append(gpu)
    return out


def runtime_gpus(core=None) -> Optional[list]:
    """The GPUs as dasllama's runtime enumerates them (``_core.gpu_devices()``: the devices
    ``--device vulkan:N`` counts), in the probe's fields; None when this build has no GPU
    runtime or it cannot enumerate (no loader, no driver)."""
    if core is None:
        try:
            from .. import _core as core
        except ImportError:
            return None
    list_devices = getattr(core, "gpu_devices", None)
    if list_devices is None:
        return None
    try:
        found = list_devices()
    except Exception:   # the runtime's DeviceError: the other probes may still see the GPU
        return None
    out = []
    for d in found:
        if not d.get("name"):
            continue
        gpu = {"name": str(d["name"]), "source": "dasllama"}
        api = _API_VERSION.match(str(d.get("api_version", "")))
        if api:
            gpu["vulkan_api"] = api.group(0)
        for key in ("driver", "type", "backend"):
            if d.get(key):
                gpu[key] = str(d[key])
        for key in ("index", "memory_bytes", "subgroup_size"):
            if isinstance(d.get(key), int) and d[key] >= 0:
                gpu[key] = d[key]
        out.append(gpu)
    return out


def gpus(runtime: bool = False) -> list:
    """The GPUs the machine shows: with ``runtime``, dasllama's own enumeration when it has
    one; else Vulkan devices through vulkaninfo, else NVIDIA's through nvidia-smi; empty when
    nothing answers. A record carries them when present."""
    if runtime:
        found = runtime_gpus()
        if found:
            return found
    found = parse_vulkaninfo_summary(_run(["vulkaninfo", "--summary"])) \
        if shutil.which("vulkaninfo") else []
    if not found and shutil.which("nvidia-smi"):
        text = _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                     "--format=csv,noheader,nounits"])
        for line in text.strip().splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) >= 2 and parts[0]:
                gpu = {"name": parts[0], "driver": parts[1], "source": "nvidia-smi"}
                if len(parts) > 2 and parts[2].isdigit():
                    gpu["memory_bytes"] = int(parts[2]) * 2**20
                found.append(gpu)
    return found


def _git(args, cwd: Path) -> Optional[str]:
    try:
        r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def build() -> dict:
    """dasllama's version, and its commit when the package sits in a git checkout."""
    from .. import __version__
    info = {"version": __version__, "git_sha": None, "git_dirty": None}
    here = Path(__file__).resolve().parent
    for d in (here, *here.parents):
        if (d / ".git").exists():
            sha = _git(["rev-parse", "--short=12", "HEAD"], d)
            if sha:
                info["git_sha"] = sha
                status = _git(["status", "--porcelain", "--untracked-files=no"], d)
                info["git_dirty"] = bool(status) if status is not None else None
            break
    return info


def box_name(probe: dict) -> str:
    """A short file-name label for the machine: the CPU's make and the logical core count."""
    words = re.sub(r"\((r|tm)\)|cpu|processor|@.*$|\d+-core", " ", probe["cpu"].lower())
    slug = "-".join(re.findall(r"[a-z0-9]+", words)[:3]) or probe["arch"].lower()
    return f"{slug}-{probe['logical_cores']}c"


def this_box() -> str:
    """box_name() of this machine from the CPU model and core count alone (no GPU probe, no
    subprocess: cheap enough for the engine's start)."""
    return box_name({"cpu": _cpu_model(_read("/proc/cpuinfo")), "arch": platform.machine(),
                     "logical_cores": os.cpu_count()})


def rss_bytes() -> Optional[int]:
    """The resident set size now (Linux); None where the kernel does not say."""
    m = re.search(r"^VmRSS:\s*(\d+) kB", _read("/proc/self/status"), re.MULTILINE)
    return int(m.group(1)) * 1024 if m else None


def reset_peak_rss() -> bool:
    """Restart the peak-RSS counter (Linux 4.0+). False where that is not possible: the peak
    is then the whole process's."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> int:
    """The peak RSS since the last reset (Linux VmHWM), else since the process started."""
    m = re.search(r"^VmHWM:\s*(\d+) kB", _read("/proc/self/status"), re.MULTILINE)
    if m:
        return int(m.group(1)) * 1024
    return process_peak_rss_bytes()


def process_peak_rss_bytes() -> int:
    """The peak RSS since the process started (getrusage; 0 where there is none)."""
    try:
        import resource   # not on Windows
    except ImportError:
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024   # Linux counts KiB

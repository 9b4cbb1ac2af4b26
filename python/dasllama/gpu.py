"""GPU devices: which there are, how a device is named, and ``dasllama devices``.

A device spec is ``"cpu"``, ``"vulkan"`` (the best GPU: discrete, then integrated, then
virtual; never a CPU-type driver such as lavapipe unless named), ``"vulkan:N"`` (index N in
:func:`devices`) or ``"vulkan:NAME"`` (the first device whose name contains NAME, any case).
Without an explicit spec the environment variable ``DASLLAMA_DEVICE`` decides, else the CPU.
"""

from __future__ import annotations

import os

from . import _core
from .errors import DeviceError

__all__ = ["devices", "unavailable_reason", "resolve_device", "add_devices_parser",
           "format_devices"]

def devices() -> list:
    """Every GPU device this build can use, as dicts (name, type, subgroup_size, memory_bytes,
    api_version, coopmat_khr, ...); empty when there is none (see :func:`unavailable_reason`)."""
    return _core.gpu_devices()


def unavailable_reason() -> str:
    """Why :func:`devices` is empty ("" when it is not)."""
    return _core.gpu_unavailable_reason()


def resolve_device(spec: str | None = None) -> str:
    """The device spec to use: ``spec`` when given, else ``$DASLLAMA_DEVICE``, else ``"cpu"``.
    Checks the spelling only; opening the device says whether it exists."""
    source = "device"
    if spec is None:
        spec = os.environ.get("DASLLAMA_DEVICE", "").strip() or "cpu"
        source = "DASLLAMA_DEVICE"
    text = str(spec).strip()
    low = text.lower()
    if low in ("cpu", "vulkan", "metal"):
        return low
    for home in ("vulkan", "metal"):
        if low.startswith(home + ":") and len(text) > len(home) + 1:
            return home + ":" + text[len(home) + 1:]
    raise DeviceError(f"{source}={spec!r} is not a device: use cpu, vulkan, vulkan:N "
                      f"(an index), vulkan:NAME (part of a device name), or metal, metal:N, "
                      f"metal:NAME on Apple platforms")


def _memory(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def format_devices(infos: list | None = None) -> str:
    """The table ``dasllama devices`` prints, or the reason there is no device."""
    infos = devices() if infos is None else infos
    if not infos:
        return f"no GPU devices: {unavailable_reason() or 'none found'}"
    rows = [("spec", "name", "type", "subgroup", "memory", "coopmat", "api")]
    for d in infos:
        coop = "+".join(k for k, on in (("khr", d["coopmat_khr"]), ("nv2", d["coopmat_nv"])) if on)
        rows.append((f"{d['backend']}:{d['index']}", d["name"], d["type"], str(d["subgroup_size"]),
                     _memory(d["memory_bytes"]), coop or "-", d["api_version"]))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _cmd_devices(args) -> int:
    print(format_devices())
    return 0


def add_devices_parser(sub) -> None:
    """Register ``dasllama devices`` on the CLI's subparsers."""
    p = sub.add_parser("devices", help="list the GPU devices dasllama can use")
    p.set_defaults(run=_cmd_devices)

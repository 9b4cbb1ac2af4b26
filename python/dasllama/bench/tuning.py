"""The tuning sidecar: a per-box JSON file of kernel choices that benchmarks raced.

The C++ core reads some choices at run time instead of from constants: named integer knobs
("cpu.matmul.token_tile"), each with a default and a valid range (csrc/core/tuning.h).
``dasllama bench tune`` races a knob's candidates on a real model and writes the winner here;
the engine applies the file when it starts.

Where: ``$DASLLAMA_TUNING`` (a path; ``off`` or an empty value: no sidecar), else
``$XDG_CONFIG_HOME/dasllama/tuning/<box>.json`` (``~/.config`` when XDG_CONFIG_HOME is unset),
``<box>`` being the machine's label (``amd-epyc-2c``).

What (bench/tuning.schema.json): ``schema`` ("dasllama.tuning/1"), ``dasllama_version``,
``box``, ``created``, and ``devices``: one entry per device the choices were raced on (``id``:
``cpu:<isa>`` for the CPU at a kernel level, later ``vulkan:<device name>``) with ``knobs``
(name -> integer) and ``races`` (what was measured, for the record).

The file is all or nothing:

* a file that does not follow the schema, or that names a knob this build lacks, or gives a
  value outside a knob's range, is refused whole, with a message (no knob is set);
* a file written by another dasllama version, or for another box, is inert: ignored with a
  message, never half-applied, since an older version's best choice may not be this one's;
* a device entry for a device this process does not use (another ISA level) is skipped.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..errors import DasllamaError

__all__ = ["SCHEMA", "ENV", "TuningError", "Outcome", "default_path", "sidecar_path",
           "validate", "read", "apply", "apply_at_start", "knobs", "get", "set_knob",
           "cpu_device_id", "new_sidecar", "write"]

SCHEMA = "dasllama.tuning/1"
ENV = "DASLLAMA_TUNING"
log = logging.getLogger("dasllama.tuning")

_KNOB_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+$")
_DEVICE_ID = re.compile(r"^(cpu|vulkan|metal):.+$")


class TuningError(DasllamaError, ValueError):
    """A tuning file or knob value that cannot be used (the message says which and why)."""


# --- the C++ registry ------------------------------------------------------------------------

def _core():
    from .. import _core
    if not hasattr(_core, "tuning_knobs"):
        raise TuningError("this build of dasllama._core has no tuning knobs (bind_tuning)")
    return _core


def knobs() -> dict:
    """Every knob of this build: name -> {value, default, min, max, description}."""
    return {k["name"]: k for k in _core().tuning_knobs()}


def get(name: str) -> int:
    return _core().tuning_get(name)


def set_knob(name: str, value: int) -> None:
    """Set one knob (TuningError naming the knob and its range when refused)."""
    _core().tuning_set(name, int(value))


def cpu_device_id() -> str:
    """The CPU as a sidecar keys it: the kernel level in use (``cpu:avx512``)."""
    from .. import cpu_features
    return f"cpu:{cpu_features()['isa']}"


# --- the file --------------------------------------------------------------------------------

def _config_home() -> Path:
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")


def default_path(box: str) -> Path:
    return _config_home() / "dasllama" / "tuning" / f"{box}.json"


def _this_box() -> str:
    from . import probe
    return probe.this_box()


def sidecar_path(box: Optional[str] = None) -> Optional[Path]:
    """$DASLLAMA_TUNING, else the per-user default for this box; None when turned off."""
    if ENV in os.environ:
        value = os.environ[ENV].strip()
        return None if value.lower() in ("", "off", "0", "none") else Path(value)
    return default_path(box or _this_box())


def _fail(path, where: str, what: str):
    raise TuningError(f"{path}: {where}: {what}")


def validate(doc, path="tuning file") -> dict:
    """Check ``doc`` against the sidecar schema (the same rules as bench/tuning.schema.json,
    written out so that the engine needs no jsonschema at start). Returns it; raises
    TuningError naming the first field at fault."""
    if not isinstance(doc, dict):
        _fail(path, "top level", f"expected an object, got {type(doc).__name__}")
    for key in ("schema", "dasllama_version", "box", "created", "devices"):
        if key not in doc:
            _fail(path, key, "missing")
    if doc["schema"] != SCHEMA:
        _fail(path, "schema", f"{doc['schema']!r} is not {SCHEMA!r}")
    for key in ("dasllama_version", "box", "created"):
        if not isinstance(doc[key], str) or not doc[key]:
            _fail(path, key, f"expected a non-empty string, got {doc[key]!r}")
    extra = set(doc) - {"schema", "dasllama_version", "box", "created", "devices", "machine",
                        "note"}
    if extra:
        _fail(path, "top level", f"unknown fields {sorted(extra)}")
    if not isinstance(doc["devices"], list) or not doc["devices"]:
        _fail(path, "devices", "expected a non-empty list")
    seen = set()
    for i, dev in enumerate(doc["devices"]):
        where = f"devices[{i}]"
        if not isinstance(dev, dict):
            _fail(path, where, "expected an object")
        if not isinstance(dev.get("id"), str) or not _DEVICE_ID.match(dev["id"]):
            _fail(path, f"{where}.id", f"{dev.get('id')!r} is not cpu:<isa>, vulkan:<name> "
                                       f"or metal:<name>")
        if dev["id"] in seen:
            _fail(path, f"{where}.id", f"{dev['id']!r} appears twice")
        seen.add(dev["id"])
        extra = set(dev) - {"id", "name", "driver", "api_version", "threads", "knobs", "races"}
        if extra:
            _fail(path, where, f"unknown fields {sorted(extra)}")
        kn = dev.get("knobs")
        if not isinstance(kn, dict) or not kn:
            _fail(path, f"{where}.knobs", "expected a non-empty object of name: integer")
        family = dev["id"].split(":", 1)[0] + "."
        for name, value in kn.items():
            if not _KNOB_NAME.match(name) or not name.startswith(family):
                _fail(path, f"{where}.knobs", f"{name!r} is not a {family}* knob name")
            if isinstance(value, bool) or not isinstance(value, int):
                _fail(path, f"{where}.knobs.{name}", f"expected an integer, got {value!r}")
        if "threads" in dev and (not isinstance(dev["threads"], int) or dev["threads"] < 1):
            _fail(path, f"{where}.threads", f"expected a positive integer, got {dev['threads']!r}")
        if "races" in dev and not isinstance(dev["races"], list):
            _fail(path, f"{where}.races", "expected a list")
    return doc


def read(path) -> dict:
    """The validated sidecar at ``path`` (TuningError when unreadable or invalid)."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise TuningError(f"{path}: cannot read: {e}") from e
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise TuningError(f"{path}: not JSON: {e}") from e
    return validate(doc, path)


@dataclass
class Outcome:
    """What became of a sidecar: ``applied``, ``inert`` (another version or box), ``refused``
    (invalid), ``absent`` (no file) or ``off`` ($DASLLAMA_TUNING=off)."""
    status: str
    path: Optional[Path] = None
    message: str = ""
    applied: dict = field(default_factory=dict)


def apply(path, *, version: Optional[str] = None, box: Optional[str] = None,
          device_ids: Optional[list] = None) -> Outcome:
    """Apply the sidecar at ``path`` to this process's knobs, all or nothing (the module
    docstring gives the rules). Never raises for a bad file: the Outcome says what happened."""
    from .. import __version__
    version = version or __version__
    path = Path(path)
    if not path.exists():
        return Outcome("absent", path, f"no tuning file at {path}")
    try:
        doc = read(path)
    except TuningError as e:
        return Outcome("refused", path, f"tuning file refused, nothing applied: {e}")
    if doc["dasllama_version"] != version:
        return Outcome("inert", path, f"tuning file {path} ignored: written by dasllama "
                                      f"{doc['dasllama_version']}, this is {version} (run "
                                      f"`dasllama bench tune` again)")
    box = box or _this_box()
    if doc["box"] != box:
        return Outcome("inert", path, f"tuning file {path} ignored: it is for box "
                                      f"{doc['box']!r}, this is {box!r}")
    device_ids = device_ids if device_ids is not None else [cpu_device_id()]
    chosen = {}
    for dev in doc["devices"]:
        if dev["id"] in device_ids:
            chosen.update(dev["knobs"])
    # Check every value against the registry before setting any, so nothing is half-applied.
    try:
        registry = knobs()
    except TuningError as e:
        return Outcome("refused", path, f"tuning file {path} not applied: {e}")
    for name, value in chosen.items():
        k = registry.get(name)
        if k is None:
            return Outcome("refused", path, f"tuning file refused, nothing applied: {path}: "
                                            f"this build has no knob {name!r} (it has "
                                            f"{', '.join(sorted(registry))})")
        if not k["min"] <= value <= k["max"]:
            return Outcome("refused", path, f"tuning file refused, nothing applied: {path}: "
                                            f"{name} = {value} is outside [{k['min']}, "
                                            f"{k['max']}]")
    before = {name: registry[name]["value"] for name in chosen}
    try:
        for name, value in chosen.items():
            set_knob(name, value)
    except TuningError as e:        # not expected after the checks; undo what was set
        for name, value in before.items():
            set_knob(name, value)
        return Outcome("refused", path, f"tuning file refused, nothing applied: {e}")
    skipped = [d["id"] for d in doc["devices"] if d["id"] not in device_ids]
    note = f" (entries for {', '.join(skipped)} not used here)" if skipped else ""
    return Outcome("applied", path, f"tuning file {path} applied: {chosen}{note}", chosen)


_started: Optional[Outcome] = None


def apply_at_start() -> Outcome:
    """Apply this box's sidecar once per process (the engine calls it as it starts). Refused
    and inert files are reported as warnings on the ``dasllama.tuning`` logger."""
    global _started
    if _started is not None:
        return _started
    path = sidecar_path()
    if path is None:
        _started = Outcome("off", None, f"${ENV} turns the tuning file off")
    else:
        _started = apply(path)
    if _started.status in ("refused", "inert"):
        log.warning("dasllama: %s", _started.message)
    elif _started.status == "applied":
        log.info("dasllama: %s", _started.message)
    return _started


def new_sidecar(box: str, version: str, machine: Optional[dict] = None) -> dict:
    doc = {"schema": SCHEMA, "dasllama_version": version, "box": box,
           "created": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "devices": []}
    if machine:
        doc["machine"] = machine
    return doc


def write(doc: dict, path) -> Path:
    """Validate, then write atomically (a reader never sees half a file)."""
    validate(doc, path)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, path)
    return path

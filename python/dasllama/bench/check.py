"""The regression check: a fresh run's rows against the stored record of the same box.

``dasllama bench check NEW.json`` (or ``dasllama bench llm --check``, which runs first) finds,
for every dasllama row of the new record, the stored row of the same box, kind, backend,
device (a GPU's name; none on the CPU), engine, model file (name and sha256), test and thread
count, and compares the means:

* more than 5% worse than the stored mean: FAIL (the command exits 1);
* more than 3% worse: WARN;
* otherwise ok. "Worse" is lower for throughputs (t/s, x real time), higher for times (ms).

Only dasllama's rows decide; the reference rows' change is printed beside them, because a
reference that moved as much says the box, not dasllama, changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

from . import record

__all__ = ["FAIL_DROP", "WARN_DROP", "Finding", "row_key", "drop", "compare", "stored_rows",
           "format_findings", "exit_code"]

FAIL_DROP = 0.05
WARN_DROP = 0.03
_SLACK = 1e-9    # a drop of exactly 5% (or 3%) is on the good side of its edge


def row_key(row: dict) -> tuple:
    # The device too: two GPUs of one box (the box is named by its CPU) are different cells.
    return (row.get("kind", "llm"), row.get("backend", "cpu"), row.get("device"), row["engine"],
            row["model"], row.get("model_sha256"), row["test"], row.get("threads"))


def drop(stored_mean: float, new_mean: float, higher_is_better: bool) -> float:
    """How much worse the new mean is, as a fraction of the stored one (negative: better)."""
    if stored_mean == 0:
        return 0.0
    change = (new_mean - stored_mean) / stored_mean
    return -change if higher_is_better else change


@dataclass(frozen=True)
class Finding:
    status: str          # "fail", "warn", "ok", or "new" (no stored row to compare with)
    row: dict
    stored: Optional[dict]
    drop: Optional[float]
    reference_drop: Optional[float] = None

    def line(self) -> str:
        r = self.row
        backend = r.get("backend", "cpu") + (f" ({r['device']})" if r.get("device") else "")
        where = f"{r['model']} {r['test']} {backend} {r['threads']}t"
        if self.stored is None:
            return f"{'NEW':<5} {where}: no stored row for this box, file and test"
        ref = ("" if self.reference_drop is None else
               f"; reference {-100 * self.reference_drop:+.1f}%")
        return (f"{self.status.upper():<5} {where}: mean {r['mean']:.2f} {r['unit']} against "
                f"stored {self.stored['mean']:.2f} ({-100 * self.drop:+.1f}%{ref})")


def box_of(rec: dict) -> str:
    """The record's box label (records before schema 2 carry only the machine probe)."""
    if rec.get("box"):
        return rec["box"]
    from .probe import box_name
    return box_name(rec["machine"])


def stored_rows(records: Iterable[dict], box: str) -> dict:
    """The stored rows of ``box`` by row key; a later record's row replaces an earlier one."""
    out = {}
    for rec in sorted(records, key=lambda r: r.get("created", "")):
        if box_of(rec) == box:
            for row in rec["rows"]:
                out[row_key(row)] = row
    return out


def compare(new: dict, records: Iterable[dict]) -> list:
    """A Finding for every dasllama row of ``new`` against ``records`` of the same box."""
    stored = stored_rows(records, box_of(new))
    refs = {record.pair_key(r): r for r in new["rows"] if r["engine"] != record.OURS}
    findings = []
    for row in new["rows"]:
        if row["engine"] != record.OURS:
            continue
        old = stored.get(row_key(row))
        if old is None:
            findings.append(Finding("new", row, None, None))
            continue
        better_up = record.higher_is_better(row)
        d = drop(old["mean"], row["mean"], better_up)
        ref_drop = None
        ref = refs.get(record.pair_key(row))
        if ref is not None and row_key(ref) in stored:
            ref_drop = drop(stored[row_key(ref)]["mean"], ref["mean"], better_up)
        status = ("fail" if d > FAIL_DROP + _SLACK else "warn" if d > WARN_DROP + _SLACK
                  else "ok")
        findings.append(Finding(status, row, old, d, ref_drop))
    return findings


def format_findings(findings: list, box: str) -> str:
    lines = [f"regression check against the stored records of {box} (fail past "
             f"{100 * FAIL_DROP:.0f}% below the stored mean, warn past {100 * WARN_DROP:.0f}%):"]
    lines += ["  " + f.line() for f in findings]
    counts = {s: sum(f.status == s for f in findings) for s in ("fail", "warn", "ok", "new")}
    lines.append("  " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    return "\n".join(lines)


def exit_code(findings: list) -> int:
    """1 when a row failed; 2 when nothing could be compared; else 0 (warnings pass)."""
    if any(f.status == "fail" for f in findings):
        return 1
    if not any(f.stored is not None for f in findings):
        return 2
    return 0


def load_records(folder) -> list:
    return [record.load(p) for p in sorted(Path(folder).glob("*.json"))]

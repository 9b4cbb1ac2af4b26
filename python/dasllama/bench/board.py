"""``dasllama bench board``: the records as one static HTML page and a PNG chart per box.

    dasllama bench board [--records bench/records] [--out bench/board]

For every box (machine label) the page has a table: one line per (kind, backend and device,
model, test, threads) with dasllama's median, the reference's median and the ratio dasllama / reference
(from medians, derived here: records store no ratios), coloured by who is ahead (for times in
ms lower is better, so a ratio below 1 is ahead). Hovering a figure shows mean, sd, n, cv,
min and max; a cell whose row stayed noisy after its re-run is marked. Below the table, the
box's chart (box-<label>.png, matplotlib). The page is plain HTML and CSS: no script, no
fetch, nothing outside the folder.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

from . import record
from .check import box_of

__all__ = ["collect", "render", "TEMPLATE"]


def collect(records: list) -> dict:
    """box -> {"records": [...newest first], "cells": [cell, ...]}: for each (kind, backend,
    model, test, device, threads) the newest record's pair. A GPU row is a cell of its own,
    apart from the CPU row of the same model and test, and one per GPU of a box."""
    boxes: dict = {}
    for rec in sorted(records, key=lambda r: r.get("created", "")):
        box = boxes.setdefault(box_of(rec), {"records": [], "cells": {}})
        box["records"].insert(0, rec)
        for ours, ref, q in record.pairs(rec["rows"]):
            key = record.pair_key(ours) + (ours.get("device"), ours.get("threads"))
            better_up = record.higher_is_better(ours)
            box["cells"][key] = {
                "kind": ours.get("kind", "llm"), "backend": ours.get("backend", "cpu"),
                "device": ours.get("device") or "",
                "model": ours["model"], "test": ours["test"], "threads": ours.get("threads"),
                "unit": ours.get("unit", "t/s"), "ours": ours, "ref": ref, "ratio": q,
                "ahead": (q > 1) if better_up else (q < 1),
                "noisy": bool(ours.get("noisy") or ref.get("noisy")),
                "created": rec.get("created", ""), "ref_engine": ref["engine"],
                "ref_version": ref.get("version", "")}
    for box in boxes.values():
        box["cells"] = sorted(box["cells"].values(), key=lambda c: (
            c["kind"], c["backend"], c["device"], c["model"], c["test"][:2] != "pp", c["test"],
            c["threads"] or 0))
    return boxes


def _figure(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.1f}" if abs(x) >= 10 else f"{x:,.2f}"


def _percent(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}%"


def _hover(row: dict) -> str:
    cv_text = _percent(row.get("cv"))
    text = (f"{row['engine']} {row.get('version', '')}: median {row['median']:.2f}, mean "
            f"{row['mean']:.2f} ± {row['sd']:.2f} (sd), n = {row['n']}, cv {cv_text}, "
            f"min {row['min']:.2f}, max {row['max']:.2f} {row.get('unit', 't/s')}")
    if row.get("reruns"):
        text += f"; re-run once (first cv {100 * row.get('first_cv', 0):.1f}%)"
    if row.get("noisy"):
        text += "; still noisy after the re-run"
    return text


def _slug(box: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in box)


def chart(box: str, cells: list, path: Path) -> Path:
    """A horizontal bar per cell: the ratio dasllama / reference, 1 marked."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = [f"{c['model'].removesuffix('.gguf')}  {c['test']}" +
              (f"  [{c['backend']}{' ' + c['device'] if c['device'] else ''}]"
               if c["backend"] != "cpu" else "") for c in cells]
    ratios = [c["ratio"] for c in cells]
    colours = ["#2e7d32" if c["ahead"] else "#c62828" for c in cells]
    fig, ax = plt.subplots(figsize=(8, 0.55 * len(cells) + 1.4), dpi=100)
    y = list(range(len(cells)))[::-1]
    ax.barh(y, ratios, color=colours, height=0.6)
    for yi, c in zip(y, cells):
        ax.text(c["ratio"], yi, f" {c['ratio']:.2f}×" + (" (noisy)" if c["noisy"] else ""),
                va="center", fontsize=9)
    ax.axvline(1.0, color="#444", linewidth=1)
    ax.set_yticks(y, labels, fontsize=9)
    ax.set_xlim(0, max(ratios + [1.0]) * 1.25)
    ax.set_xlabel("dasllama / reference (medians; t/s: above 1 is ahead, ms: below 1)")
    ax.set_title(f"{box}", fontsize=11)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    fig.savefig(path, bbox_inches="tight")   # long row labels must not clip the axis label
    plt.close(fig)
    return path


TEMPLATE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>dasllama benchmarks</title>
<style>
 body { font: 14px/1.45 system-ui, sans-serif; margin: 2rem auto; max-width: 72rem;
        padding: 0 1rem; color: #222; }
 h1 { font-size: 1.5rem; margin-bottom: .2rem; }
 h2 { font-size: 1.15rem; margin: 2rem 0 .3rem; }
 p.note, p.box { color: #555; margin: .2rem 0 .8rem; }
 table { border-collapse: collapse; margin: .5rem 0 1rem; }
 th, td { padding: .3rem .7rem; border-bottom: 1px solid #ddd; text-align: left; }
 th { background: #f4f4f4; font-weight: 600; }
 th.num { text-align: right; }
 td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
 td.ratio { font-weight: 700; font-size: 1.05em; }
 td.noise { color: #555; white-space: nowrap; font-variant-numeric: tabular-nums; }
 td.ahead { background: #e3f4e5; color: #1b5e20; }
 td.behind { background: #fbe4e4; color: #b71c1c; }
 .sd { color: #777; font-weight: 400; font-size: .85em; }
 .noisy { display: inline-block; margin-left: .4rem; padding: 0 .3rem; border-radius: 3px;
          background: #fff3cd; color: #7a5b00; font-size: .75em; font-weight: 600; }
 img { max-width: 100%; border: 1px solid #eee; }
</style>
</head>
<body>
<h1>dasllama benchmarks</h1>
<p class="note">Each cell: dasllama against its reference engine, measured in the same run on the
same machine, repetitions alternating. Ratio = dasllama / reference from medians; green is
ahead, red behind (throughput: higher is better; times in ms: lower). Hover a figure for its
mean, sd, n and cv. <span class="noisy">noisy</span> marks a row whose cv stayed above
{{ noise_pct }}% after one re-run. Generated from {{ n_records }} record(s).</p>
{% for box in boxes %}
<section id="box-{{ box.slug }}">
<h2>{{ box.name }}</h2>
<p class="box">{{ box.machine }}<br>{{ box.run }}</p>
<table class="board" data-box="{{ box.name }}">
<thead><tr><th>model</th><th>test</th><th>backend</th><th>threads</th>
<th class="num">dasllama</th><th class="num">{{ box.reference }}</th><th class="num">ratio</th>
<th>noise (cv)</th></tr></thead>
<tbody>
{% for c in box.cells %}
<tr class="cell" data-model="{{ c.model }}" data-test="{{ c.test }}" data-backend="{{ c.backend }}"
    data-device="{{ c.device }}" data-threads="{{ c.threads }}" data-ratio="{{ '%.6f' % c.ratio }}"
    data-ours-median="{{ c.ours.median }}" data-ref-median="{{ c.ref.median }}">
<td>{{ c.model }}</td><td>{{ c.test }}</td><td>{{ c.backend }}{% if c.device %} <span class="sd">{{ c.device }}</span>{% endif %}</td><td>{{ c.threads }}</td>
<td class="num" title="{{ c.ours_hover }}">{{ c.ours_text }} <span class="sd">± {{ c.ours_sd }} {{ c.unit }}</span></td>
<td class="num" title="{{ c.ref_hover }}">{{ c.ref_text }} <span class="sd">± {{ c.ref_sd }} {{ c.unit }}</span></td>
<td class="num ratio {{ 'ahead' if c.ahead else 'behind' }}" title="{{ c.ratio_hover }}">{{ '%.2f' % c.ratio }}×</td>
<td class="noise" title="cv = sd / mean of the repetitions (dasllama / reference)">{{ c.ours_cv }} / {{ c.ref_cv }}{% if c.noisy %}<span class="noisy">noisy</span>{% endif %}</td>
</tr>
{% endfor %}
</tbody>
</table>
<img src="{{ box.chart }}" alt="ratios dasllama / reference on {{ box.name }}">
</section>
{% endfor %}
</body>
</html>
"""


def _machine_line(rec: dict) -> str:
    m = rec.get("machine", {})
    mem = m.get("memory_bytes")
    parts = [m.get("cpu", "?"), f"{m.get('logical_cores', '?')} logical cores",
             f"{mem / 2**30:.0f} GiB" if mem else None,
             f"dasllama ISA {m['dasllama_isa']}" if m.get("dasllama_isa") else None]
    for gpu in m.get("gpus", []):
        parts.append(" ".join(str(x) for x in (gpu.get("name"), gpu.get("driver"),
                                               gpu.get("vulkan_api")) if x))
    return ", ".join(p for p in parts if p)


def _run_line(rec: dict) -> str:
    b = rec.get("build", {})
    engines = rec.get("engines", {})
    peers = "; ".join(f"{name} {info.get('version', '?')}" for name, info in engines.items()
                      if name != record.OURS)
    sha = f" ({b['git_sha']})" if b.get("git_sha") else ""
    return (f"newest run {rec.get('created', '?')}: dasllama {b.get('version', '?')}{sha}"
            f" against {peers or '?'}")


def render(records: list, out_dir, *, charts: bool = True) -> Path:
    """Write out_dir/index.html (and box-<label>.png per box); returns the page's path."""
    import jinja2
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    boxes = []
    for name, box in sorted(collect(records).items()):
        if not box["cells"]:
            continue
        slug = _slug(name)
        png = f"box-{slug}.png"
        if charts:
            chart(name, box["cells"], out / png)
        cells = []
        for c in box["cells"]:
            ratio_hover = (f"dasllama {c['ours']['median']:.2f} / {c['ref_engine']} "
                           f"{c['ref']['median']:.2f} {c['unit']} (medians, run "
                           f"{c['created']})")
            cells.append({**c, "ours_text": _figure(c["ours"]["median"]),
                          "ref_text": _figure(c["ref"]["median"]),
                          "ours_sd": _figure(c["ours"]["sd"]), "ref_sd": _figure(c["ref"]["sd"]),
                          "ours_hover": _hover(c["ours"]), "ref_hover": _hover(c["ref"]),
                          "ours_cv": _percent(c["ours"].get("cv")),
                          "ref_cv": _percent(c["ref"].get("cv")),
                          "ratio_hover": ratio_hover})
        newest = box["records"][0]
        engines = sorted({c["ref_engine"] for c in cells})
        boxes.append({"name": name, "slug": slug, "cells": cells, "chart": png,
                      "reference": engines[0] if len(engines) == 1 else "reference",
                      "machine": _machine_line(newest), "run": _run_line(newest)})
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    page = env.from_string(TEMPLATE).render(boxes=boxes, n_records=len(records),
                                             noise_pct=f"{100 * record.NOISE_CV:.0f}")
    index = out / "index.html"
    index.write_text(page)
    return index


def load_folder(folder) -> list:
    recs = []
    for p in sorted(Path(folder).glob("*.json")):
        rec = record.load(p)
        if isinstance(rec, dict) and isinstance(rec.get("rows"), list):
            recs.append(rec)
    return recs


def main_render(records_dir, out_dir, charts: Optional[bool] = True) -> Path:
    return render(load_folder(records_dir), out_dir, charts=bool(charts))

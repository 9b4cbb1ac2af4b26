"""The board (dasllama bench board): rendered from the committed records and from synthetic
ones into a temporary folder, parsed back (every paired row with its ratio, colour and noise
mark), and opened in a real headless browser (Debian's chromium) whose screenshot must be a
plausible, non-blank page."""

import copy
import json
import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from dasllama.bench import board, cli, record

pytest.importorskip("matplotlib", reason="the board's charts need matplotlib (test extra)")

RECORDS_DIR = Path(__file__).resolve().parent.parent / "bench" / "records"


class Cells(HTMLParser):
    """The board's <tr class="cell"> rows: their data-* attributes and their cells' classes."""

    def __init__(self):
        super().__init__()
        self.rows, self.imgs, self.scripts, self.links, self._row = [], [], 0, [], None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and a.get("class") == "cell":
            self._row = {**a, "td_classes": [], "text": ""}
            self.rows.append(self._row)
        elif tag == "td" and self._row is not None:
            self._row["td_classes"].append(a.get("class") or "")
        elif tag == "img":
            self.imgs.append(a["src"])
        elif tag == "script":
            self.scripts += 1
        elif tag == "link":
            self.links.append(a.get("href"))

    def handle_endtag(self, tag):
        if tag == "tr":
            self._row = None

    def handle_data(self, data):
        if self._row is not None:
            self._row["text"] += data


def parse(index: Path) -> Cells:
    p = Cells()
    p.feed(index.read_text())
    return p


def test_the_committed_records_render_with_the_right_ratios(tmp_path):
    records = board.load_folder(RECORDS_DIR)
    index = board.render(records, tmp_path)
    page = parse(index)
    expected = {}
    for rec in records:
        for ours, ref, q in record.pairs(rec["rows"]):
            expected[(ours["model"], ours["test"])] = (q, ours, ref)
    assert expected, "the committed records hold paired rows"
    found = {(r["data-model"], r["data-test"]): r for r in page.rows}
    assert set(found) == set(expected)
    for key, (q, ours, ref) in expected.items():
        row = found[key]
        print(key, row["data-ratio"], q)
        # data-ratio carries six decimals.
        assert float(row["data-ratio"]) == pytest.approx(ours["median"] / ref["median"],
                                                         abs=5.1e-7)
        assert f"{q:.2f}×" in row["text"]
        ahead = (q > 1) == record.higher_is_better(ours)
        assert any(("ahead" if ahead else "behind") in c for c in row["td_classes"])
        assert ("noisy" in row["text"]) == bool(ours["noisy"] or ref["noisy"])
    assert page.scripts == 0 and not page.links            # static: no script, no fetch
    for src in page.imgs:
        assert not src.startswith(("http:", "https:", "//")) and (tmp_path / src).stat().st_size
    # negative control: a ratio off by 1% would not pass the comparison above
    assert float(page.rows[0]["data-ratio"]) != pytest.approx(
        float(page.rows[0]["data-ratio"]) * 1.01, rel=1e-6)


def test_behind_cells_times_and_noise(tmp_path):
    # the llm record of the amd-epyc-2c box, whose rows the synthetic boxes below rescale
    rec = json.loads((RECORDS_DIR / "llm-amd-epyc-2c.json").read_text())
    slow = copy.deepcopy(rec)
    slow["box"], slow["created"] = "synthetic-4c", "2026-12-01T00:00:00Z"
    for r in slow["rows"]:
        if r["engine"] == "dasllama":
            for k in ("mean", "median", "min", "max"):
                r[k] = r[k] / 4                   # a quarter of the reference: behind
            r["noisy"], r["cv"] = False, 0.01
        else:
            r["noisy"], r["cv"] = False, 0.01
    tts = copy.deepcopy(slow)
    tts["box"] = "synthetic-tts-2c"
    tts["rows"] = []
    for engine, ms in (("dasllama", 100.0), ("pocket-tts", 150.0)):
        tts["rows"].append({"kind": "tts", "engine": engine, "backend": "cpu", "version": "v",
                            "threads": 2, "model": "pocket.safetensors",
                            "model_sha256": "ab" * 32, "arch": "pocket-tts",
                            "test": "first_audio", "unit": "ms", "n": 5, "mean": ms, "sd": 1.0,
                            "median": ms, "min": ms - 1, "max": ms + 1, "cv": 0.01,
                            "noisy": False})
    index = board.render([rec, slow, tts], tmp_path)
    page = parse(index)
    by_box = {}
    text = index.read_text()
    for box in ("amd-epyc-2c", "synthetic-4c", "synthetic-tts-2c"):
        assert f'data-box="{box}"' in text and (tmp_path / f"box-{box}.png").stat().st_size
    for row in page.rows:
        by_box.setdefault(row["data-model"], []).append(row)
    tts_row = by_box["pocket.safetensors"][0]
    # 100 ms against 150 ms: ratio 0.67, and ahead, since lower times are better
    assert tts_row["data-ratio"].startswith("0.6666") and "0.67×" in tts_row["text"]
    assert any("ahead" in c for c in tts_row["td_classes"])
    behind = [r for r in page.rows
              if float(r["data-ratio"]) < 1 and r["data-model"] != "pocket.safetensors"]
    assert len(behind) == 4 and all(any("behind" in c for c in r["td_classes"])
                                    for r in behind)
    assert all("noisy" not in r["text"] for r in behind)


def test_the_command_line_writes_the_board(tmp_path):
    args = type("A", (), {"records": str(RECORDS_DIR), "out": str(tmp_path / "b")})
    assert cli.run_board(args) == 0
    assert (tmp_path / "b" / "index.html").is_file()


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("CI") == "true":
        pytest.fail("CI needs chromium for the board's browser test (apt-get install chromium)")
    pytest.skip("no chromium here (apt-get install -y chromium) to open the board in")


def test_the_board_in_a_headless_browser(tmp_path):
    browser = _chromium()
    index = board.render(board.load_folder(RECORDS_DIR), tmp_path / "board")
    shot = tmp_path / "shot.png"
    width, height = 1280, 900
    r = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", f"--screenshot={shot}",
                        f"--window-size={width},{height}", index.as_uri()],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and shot.is_file(), r.stderr[-2000:]
    import matplotlib.image
    img = matplotlib.image.imread(str(shot))          # floats in [0, 1], height x width x ch
    print(f"screenshot {img.shape}, {shot.stat().st_size} bytes, pixel sd {img.std():.3f}")
    assert img.shape[:2] == (height, width)
    assert shot.stat().st_size > 20_000                 # a blank page compresses to ~5 KB
    rgb = img[..., :3]
    ink = (rgb.min(axis=2) < 0.8).mean()               # share of pixels that are not white-ish
    green = ((rgb[..., 1] > rgb[..., 0] + 0.2) & (rgb[..., 1] > rgb[..., 2] + 0.2)).mean()
    print(f"ink {ink:.3f}, green {green:.4f}")
    assert 0.01 < ink < 0.9                             # text and chart, not a blank or black
    assert green > 0.001                                 # the ahead colour (cells, chart bars)

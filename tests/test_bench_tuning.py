"""The tuning sidecar and the knob registry: the file's schema (bench/tuning.schema.json and
the loader's own check agree), a version bump or another box makes a file inert, a bad file is
refused whole, a knob set from a file reaches the C++ core, and the results do not depend on
the knob (each candidate gives the same logits, bit for bit)."""

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dasllama
from dasllama import _core
from dasllama.bench import tuning, tune
from dasllama.testing.random_gguf import write_random_model

KNOB = "cpu.matmul.token_tile"
SCHEMA = json.loads((Path(__file__).resolve().parent.parent / "bench" /
                     "tuning.schema.json").read_text())
BOX = "test-box-2c"


@pytest.fixture(autouse=True)
def default_knobs():
    _core.tuning_reset_all()
    yield
    _core.tuning_reset_all()


def sidecar(value=32, version=None, box=BOX, device=None) -> dict:
    doc = tuning.new_sidecar(box, version or dasllama.__version__)
    doc["devices"].append({"id": device or tuning.cpu_device_id(), "threads": 2,
                           "knobs": {KNOB: value},
                           "races": [{"knob": KNOB, "default": 64, "chosen": value,
                                      "test": "pp512", "unit": "t/s",
                                      "results": [{"value": value, "median": 1.0, "n": 3}]}]})
    return doc


# --- the registry --------------------------------------------------------------------------

def test_the_registry_lists_the_cpu_matmul_knob():
    k = tuning.knobs()[KNOB]
    assert (k["value"], k["default"], k["min"], k["max"]) == (64, 64, 4, 1024)
    assert k["description"]


def test_out_of_range_and_unknown_knobs_are_refused_with_a_message():
    _core.tuning_set(KNOB, 128)
    with pytest.raises(tuning.TuningError, match=r"3 is outside the range \[4, 1024\] of knob "
                                                 r"'cpu.matmul.token_tile'"):
        _core.tuning_set(KNOB, 3)
    with pytest.raises(ValueError):        # TuningError is a ValueError too
        _core.tuning_set(KNOB, 1025)
    assert _core.tuning_get(KNOB) == 128   # a refused value leaves the knob as it was
    with pytest.raises(tuning.TuningError, match="no knob named 'cpu.matmul.nope'.*token_tile"):
        _core.tuning_get("cpu.matmul.nope")
    _core.tuning_reset(KNOB)
    assert _core.tuning_get(KNOB) == 64


# --- the file ------------------------------------------------------------------------------

def test_schema_and_loader_agree_on_a_good_file():
    jsonschema = pytest.importorskip("jsonschema", reason="the test extra installs jsonschema")
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    doc = sidecar()
    jsonschema.validate(doc, SCHEMA, format_checker=jsonschema.FormatChecker())
    assert tuning.validate(doc) is doc


BREAKAGES = {
    "no_version": lambda d: d.pop("dasllama_version"),
    "wrong_schema": lambda d: d.update(schema="dasllama.tuning/0"),
    "no_devices": lambda d: d.update(devices=[]),
    "bad_device_id": lambda d: d["devices"][0].update(id="gpu0"),
    "string_value": lambda d: d["devices"][0]["knobs"].update({KNOB: "32"}),
    "float_value": lambda d: d["devices"][0]["knobs"].update({KNOB: 32.5}),
    "bad_knob_name": lambda d: d["devices"][0]["knobs"].update({"Token Tile": 32}),
    "empty_knobs": lambda d: d["devices"][0].update(knobs={}),
    "unknown_field": lambda d: d.update(colour="blue"),
    "duplicate_device": lambda d: d["devices"].append(copy.deepcopy(d["devices"][0])),
}


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_schema_and_loader_refuse_the_same_broken_files(breakage):
    doc = sidecar()
    BREAKAGES[breakage](doc)
    with pytest.raises(tuning.TuningError):
        tuning.validate(doc)
    if breakage == "duplicate_device":
        return        # the one rule the schema cannot state (ids unique); the loader holds it
    jsonschema = pytest.importorskip("jsonschema", reason="the test extra installs jsonschema")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, SCHEMA)


def _write(tmp_path, doc, name="tuning.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return path


def test_a_good_file_is_applied(tmp_path):
    out = tuning.apply(_write(tmp_path, sidecar(32)), box=BOX)
    print(out.message)
    assert out.status == "applied" and out.applied == {KNOB: 32}
    assert _core.tuning_get(KNOB) == 32


def test_a_version_bump_makes_the_file_inert(tmp_path):
    _core.tuning_set(KNOB, 128)
    out = tuning.apply(_write(tmp_path, sidecar(32, version="0.0.1")), box=BOX)
    print(out.message)
    assert out.status == "inert" and "written by dasllama 0.0.1" in out.message
    assert _core.tuning_get(KNOB) == 128          # untouched
    # also inert when the old version names knobs this one lacks: no refusal, no partial set
    doc = sidecar(32, version="0.0.1")
    doc["devices"][0]["knobs"]["cpu.matmul.gone"] = 7
    assert tuning.apply(_write(tmp_path, doc), box=BOX).status == "inert"
    out = tuning.apply(_write(tmp_path, sidecar(32, box="other-box-8c")), box=BOX)
    assert out.status == "inert" and "other-box-8c" in out.message
    assert _core.tuning_get(KNOB) == 128


@pytest.mark.parametrize("content, words", [
    ("{not json", "not JSON"),
    ("[]", "expected an object"),
    ("unknown_knob", "no knob 'cpu.matmul.gone'"),
    ("out_of_range", "= 3 is outside [4, 1024]"),
])
def test_a_bad_file_is_refused_whole(tmp_path, content, words):
    _core.tuning_set(KNOB, 128)
    if content == "unknown_knob":
        doc = sidecar(32)
        doc["devices"][0]["knobs"]["cpu.matmul.gone"] = 7    # a good knob beside a bad one
        content = doc
    elif content == "out_of_range":
        content = sidecar(3)
    out = tuning.apply(_write(tmp_path, content), box=BOX)
    print(out.message)
    assert out.status == "refused" and words in out.message
    assert "nothing applied" in out.message
    assert _core.tuning_get(KNOB) == 128          # never half-applied


def test_another_devices_entry_is_skipped(tmp_path):
    doc = sidecar(32, device="cpu:some-other-isa")
    out = tuning.apply(_write(tmp_path, doc), box=BOX)
    assert out.status == "applied" and out.applied == {}
    assert _core.tuning_get(KNOB) == 64


def test_the_path_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(tuning.ENV, str(tmp_path / "x.json"))
    assert tuning.sidecar_path() == tmp_path / "x.json"
    monkeypatch.setenv(tuning.ENV, "off")
    assert tuning.sidecar_path() is None
    monkeypatch.delenv(tuning.ENV)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert tuning.sidecar_path("amd-epyc-2c") == tmp_path / "dasllama/tuning/amd-epyc-2c.json"


def _child(env_path, code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, tuning.ENV: str(env_path)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120)


def test_the_engine_applies_this_boxs_file_at_start(tmp_path):
    """`import dasllama` applies the file: the knob reaches the C++ core before any model."""
    from dasllama.bench import probe
    box = probe.box_name(probe.machine())
    path = _write(tmp_path, sidecar(32, box=box))
    r = _child(path, "import dasllama; from dasllama import _core; "
                     f"print(_core.tuning_get({KNOB!r}))")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "32", (r.stdout, r.stderr)
    stale = _write(tmp_path, sidecar(32, version="0.0.1", box=box), "stale.json")
    r = _child(stale, "import dasllama; from dasllama import _core; "
                      f"print(_core.tuning_get({KNOB!r}))")
    assert r.stdout.strip() == "64" and "ignored: written by dasllama 0.0.1" in r.stderr


# --- the knob changes speed only --------------------------------------------------------------

@pytest.mark.parametrize("weight_type", ["Q8_0", "Q4_K"])
def test_results_do_not_depend_on_the_token_tile(tmp_path, weight_type):
    path = write_random_model(tmp_path / "m.gguf", "llama", weight_type=weight_type,
                              n_embd=256, n_ff=512, n_head=4, n_head_kv=2)
    ids = [int(i) for i in np.random.default_rng(0).integers(0, 512, 150)]
    model = _core.LLMModel(str(path), n_ctx=160, n_threads=2)
    try:
        out = {}
        for tile in (4, 16, 64, 1024):     # 150 tokens: tails of every width but 1024
            _core.tuning_set(KNOB, tile)
            model.reset()
            out[tile] = np.array(model.eval(ids, all_logits=True))
        model.reset()
        other = np.array(model.eval(ids[:-1] + [(ids[-1] + 1) % 512], all_logits=True))
    finally:
        model.close()
    for tile, logits in out.items():
        diff = float(np.max(np.abs(logits - out[64])))
        print(f"token_tile {tile}: max |logits - logits(64)| = {diff}")
        assert np.array_equal(logits, out[64]), tile
    # negative control: one changed token changes the last logits, so equality can fail
    assert not np.array_equal(other[-1], out[64][-1])


def test_race_and_choice_on_a_random_model(tmp_path):
    path = write_random_model(tmp_path / "m.gguf", "llama", weight_type="Q8_0")
    model = _core.LLMModel(str(path), n_ctx=32, n_threads=1)
    try:
        _core.tuning_set(KNOB, 48)
        rates = tune.race(model, KNOB, [8, 16], n_prompt=32, reps=2, pause=0)
    finally:
        model.close()
    assert set(rates) == {8, 16} and all(len(r) == 2 and min(r) > 0 for r in rates.values())
    assert _core.tuning_get(KNOB) == 48              # the race leaves the knob as it was
    # the choice: the best median, unless within the margin of the default
    assert tune.choose({16: [100.0], 64: [101.0]}, default=64) == 64
    assert tune.choose({16: [110.0], 64: [100.0]}, default=64) == 16
    assert tune.choose({16: [102.0], 64: [100.0]}, default=64) == 64     # within the margin
    # a better median but a spread that reaches below the default's median: noise, kept
    assert tune.choose({16: [90.0, 115.0, 120.0], 64: [100.0, 100.0, 101.0]}, default=64) == 64
    assert tune.choose({16: [105.0, 115.0, 120.0], 64: [100.0, 100.0, 101.0]}, default=64) == 16
    with pytest.raises(tuning.TuningError, match="outside the range"):
        model = _core.LLMModel(str(path), n_ctx=32, n_threads=1)
        try:
            tune.race(model, KNOB, [2], n_prompt=8, reps=1, pause=0)
        finally:
            model.close()


def test_tune_writes_a_sidecar_that_applies(tmp_path):
    path = write_random_model(tmp_path / "m.gguf", "llama", weight_type="Q8_0")
    out = tmp_path / "side.json"
    res = tune.run_tune(path, threads=1, n_prompt=32, reps=1, candidates=[16, 64], out=out)
    doc = json.loads(out.read_text())
    tuning.validate(doc)
    jsonschema = pytest.importorskip("jsonschema", reason="the test extra installs jsonschema")
    jsonschema.validate(doc, SCHEMA)
    (dev,) = doc["devices"]
    assert dev["knobs"] == {KNOB: res["chosen"]} and dev["races"][0]["chosen"] == res["chosen"]
    assert [r["value"] for r in dev["races"][0]["results"]] == [16, 64]
    _core.tuning_reset_all()
    assert tuning.apply(out, box=doc["box"]).status == "applied"
    assert _core.tuning_get(KNOB) == res["chosen"]

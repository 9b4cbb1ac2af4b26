"""Benchmark records against bench/schema.json, and the pairing rule the schema cannot state:
every dasllama row has the reference engine's row for the same kind, backend, model and test.
Also: the row type carries tts (and asr) rows, checked here with a synthetic tts record."""

import copy
import json
from pathlib import Path

import pytest

from dasllama.bench import record

jsonschema = pytest.importorskip("jsonschema", reason="the test extra installs jsonschema")

BENCH = Path(__file__).resolve().parent.parent / "bench"
SCHEMA = json.loads((BENCH / "schema.json").read_text())
RECORDS = sorted((BENCH / "records").glob("*.json"))
# The breakage cases edit an llm record's fields (quant, the GPU probe, the llm test names).
LLM_RECORD = next(p for p in RECORDS if p.name.startswith("llm-"))


def check(rec: dict) -> None:
    jsonschema.validate(rec, SCHEMA, format_checker=jsonschema.FormatChecker())
    reference = {record.pair_key(r) for r in rec["rows"] if r["engine"] != record.OURS}
    for row in rec["rows"]:
        if row["engine"] == record.OURS and record.pair_key(row) not in reference:
            raise ValueError(f"dasllama row {row['model']} {row['test']} has no reference row")
        if not row["min"] <= row["median"] <= row["max"]:
            raise ValueError(f"{row['model']} {row['test']}: median outside [min, max]")
        if row["noisy"] != (row["cv"] > record.NOISE_CV):
            raise ValueError(f"{row['model']} {row['test']}: noisy is {row['noisy']} but cv "
                             f"is {row['cv']:.3f}")


def test_schema_is_valid():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_there_are_records():
    assert RECORDS, "bench/records holds at least one run"


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: p.name)
def test_record_follows_the_schema(path):
    check(json.loads(path.read_text()))


@pytest.mark.parametrize("breakage", ["no_median", "string_mean", "unpaired", "bad_sha",
                                      "median_above_max", "stored_ratios", "no_noisy",
                                      "noisy_wrong", "no_kind", "no_backend", "bad_box",
                                      "bad_vulkan_api", "llm_without_quant"])
def test_broken_records_are_refused(breakage):
    rec = copy.deepcopy(json.loads(LLM_RECORD.read_text()))
    row = next(r for r in rec["rows"] if r["engine"] == "dasllama")
    if breakage == "no_median":
        del row["median"]
    elif breakage == "string_mean":
        row["mean"] = "fast"
    elif breakage == "unpaired":
        rec["rows"] = [r for r in rec["rows"] if r["engine"] == "dasllama"]
    elif breakage == "bad_sha":
        row["model_sha256"] = "xyz"
    elif breakage == "median_above_max":
        row["median"] = row["max"] * 2
    elif breakage == "stored_ratios":
        rec["ratios"] = [{"model": row["model"], "test": row["test"], "ratio": 2.0}]
    elif breakage == "no_noisy":
        del row["noisy"]
    elif breakage == "noisy_wrong":
        row["noisy"] = not row["noisy"]
    elif breakage == "no_kind":
        del row["kind"]
    elif breakage == "no_backend":
        del row["backend"]
    elif breakage == "bad_box":
        rec["box"] = "AMD EPYC / 2"
    elif breakage == "bad_vulkan_api":
        rec["machine"]["gpus"] = [{"name": "llvmpipe", "vulkan_api": "one point three"}]
    else:
        del row["quant"]
    with pytest.raises((jsonschema.ValidationError, ValueError)):
        check(rec)


def test_optional_gpu_probe_is_accepted():
    rec = copy.deepcopy(json.loads(LLM_RECORD.read_text()))
    rec["machine"]["gpus"] = [{"name": "NVIDIA H200", "driver": "550.54.15",
                               "vulkan_api": "1.3.277", "source": "vulkaninfo"}]
    check(rec)


def _tts_row(engine: str, test: str, unit: str, median: float) -> dict:
    return {"kind": "tts", "engine": engine, "backend": "cpu",
            "version": "0.1.0" if engine == "dasllama" else "1.0.1", "threads": 2,
            "model": "pocket-tts-b6369a24.safetensors", "model_sha256": "ab" * 32,
            "arch": "pocket-tts", "quant": "bf16", "test": test, "unit": unit, "n": 5,
            "mean": median, "sd": median * 0.01, "median": median, "min": median * 0.98,
            "max": median * 1.02, "cv": 0.01, "noisy": False, "reruns": 0,
            "samples": [median] * 5, "text_chars": 120, "audio_seconds": 7.5, "voice": "alba"}


def synthetic_tts_record() -> dict:
    rec = copy.deepcopy(json.loads(LLM_RECORD.read_text()))
    rec["config"] = {"reps": 5, "threads": 2, "warmup": 1, "alternate": True}
    rec["engines"] = {"dasllama": {"version": "0.1.0"}, "pocket-tts": {"version": "1.0.1"}}
    rec.pop("memory"), rec.pop("validation")
    rec["rows"] = [_tts_row(e, t, u, m) for e, scale in (("dasllama", 1.0), ("pocket-tts", 1.5))
                   for t, u, m in (("request_wall", "ms", 900 * scale),
                                   ("first_audio", "ms", 150 * scale),
                                   ("rtf", "x", 8.0 / scale))]
    return rec


def test_a_tts_record_fits_the_row_type():
    rec = synthetic_tts_record()
    check(rec)
    found = {o["test"]: q for o, _, q in record.pairs(rec["rows"])}
    assert found == pytest.approx({"request_wall": 1 / 1.5, "first_audio": 1 / 1.5,
                                   "rtf": 1.5})
    # milliseconds: lower is better, so a ratio below 1 is dasllama ahead
    assert not record.higher_is_better(rec["rows"][0])
    assert record.higher_is_better(rec["rows"][2])


@pytest.mark.parametrize("breakage", ["ms_rtf", "llm_test_name", "wrong_engine", "x_wall"])
def test_broken_tts_rows_are_refused(breakage):
    rec = synthetic_tts_record()
    row = rec["rows"][0]
    if breakage == "ms_rtf":
        rec["rows"][2]["unit"] = "ms"
    elif breakage == "llm_test_name":
        row["test"] = "pp512"
    elif breakage == "wrong_engine":
        for r in rec["rows"]:
            if r["engine"] == "pocket-tts":
                r["engine"] = "llama.cpp"
    else:
        row["unit"] = "x"
    with pytest.raises((jsonschema.ValidationError, ValueError)):
        check(rec)


def test_an_asr_row_fits_the_row_type():
    rec = synthetic_tts_record()
    for r in rec["rows"]:
        r["kind"] = "asr"
        r["engine"] = "faster-whisper" if r["engine"] != "dasllama" else "dasllama"
        r["test"] = {"first_audio": "first_text"}.get(r["test"], r["test"])
    check(rec)

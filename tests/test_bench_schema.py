"""Benchmark records against bench/schema.json, and the pairing rule the schema cannot state:
every dasllama row has the reference engine's row for the same model and test."""

import copy
import json
from pathlib import Path

import pytest

jsonschema = pytest.importorskip("jsonschema", reason="the test extra installs jsonschema")

BENCH = Path(__file__).resolve().parent.parent / "bench"
SCHEMA = json.loads((BENCH / "schema.json").read_text())
RECORDS = sorted((BENCH / "records").glob("*.json"))


def check(record: dict) -> None:
    jsonschema.validate(record, SCHEMA, format_checker=jsonschema.FormatChecker())
    reference = {(r["model"], r["test"]) for r in record["rows"] if r["engine"] != "dasllama"}
    for row in record["rows"]:
        if row["engine"] == "dasllama" and (row["model"], row["test"]) not in reference:
            raise ValueError(f"dasllama row {row['model']} {row['test']} has no reference row")
        if not row["min"] <= row["median"] <= row["max"]:
            raise ValueError(f"{row['model']} {row['test']}: median outside [min, max]")


def test_schema_is_valid():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_there_are_records():
    assert RECORDS, "bench/records holds at least one run"


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: p.name)
def test_record_follows_the_schema(path):
    check(json.loads(path.read_text()))


@pytest.mark.parametrize("breakage", ["no_median", "string_mean", "unpaired", "bad_sha",
                                      "median_above_max"])
def test_broken_records_are_refused(breakage):
    record = copy.deepcopy(json.loads(RECORDS[0].read_text()))
    row = next(r for r in record["rows"] if r["engine"] == "dasllama")
    if breakage == "no_median":
        del row["median"]
    elif breakage == "string_mean":
        row["mean"] = "fast"
    elif breakage == "unpaired":
        record["rows"] = [r for r in record["rows"] if r["engine"] == "dasllama"]
    elif breakage == "bad_sha":
        row["model_sha256"] = "xyz"
    else:
        row["median"] = row["max"] * 2
    with pytest.raises((jsonschema.ValidationError, ValueError)):
        check(record)

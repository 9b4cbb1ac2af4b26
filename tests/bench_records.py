"""The check every bench test runs on the records it makes: the schema (bench/schema.json) and
the rules the schema cannot state."""

import json
from pathlib import Path

from dasllama.bench import record
from requires import require

BENCH = Path(__file__).resolve().parent.parent / "bench"


def check_record(rec: dict) -> None:
    """The schema; every dasllama row has its reference row; min <= median <= max; noisy is
    exactly cv above the bar."""
    jsonschema = require("jsonschema")
    schema = json.loads((BENCH / "schema.json").read_text())
    jsonschema.validate(rec, schema, format_checker=jsonschema.FormatChecker())
    reference = {record.pair_key(r) for r in rec["rows"] if r["engine"] != record.OURS}
    for row in rec["rows"]:
        if row["engine"] == record.OURS:
            assert record.pair_key(row) in reference, f"{row['test']} has no reference row"
        assert row["min"] <= row["median"] <= row["max"]
        assert row["noisy"] == (row["cv"] > record.NOISE_CV)

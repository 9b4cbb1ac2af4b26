"""JSON schemas for constrained-decoding tests (this module holds no tests): 20 generated
object schemas, fixed by their seeds, covering bounded strings (maxLength, patterns), integer
ranges, enums, booleans, nullables (anyOf), consts, arrays with minItems/maxItems, nested
objects and arrays of objects. Every string, number and array is bounded, so a complete value
is at most a few hundred tokens of a small test vocabulary.

tests/test_grammar.py runs them through dasllama.grammar directly; tests/test_server_schemas.py
sends them through the server as response_format json_schema."""

from __future__ import annotations

import random

__all__ = ["N_SCHEMAS", "PATTERNS", "SCHEMAS", "leaf_schema", "array_schema", "object_schema"]

N_SCHEMAS = 20
PATTERNS = [r"^[a-z]{1,6}$", r"^[A-Z][0-9]{2}$", r"^(yes|no|maybe)$", r"^[0-9]{3}-[0-9]{4}$"]


def leaf_schema(rng: random.Random) -> dict:
    kind = rng.choice(["string_len", "string_pattern", "integer", "enum", "boolean", "nullable",
                       "const"])
    if kind == "string_len":
        return {"type": "string", "maxLength": rng.randint(1, 10)}
    if kind == "string_pattern":
        return {"type": "string", "pattern": rng.choice(PATTERNS)}
    if kind == "integer":
        lo = rng.randint(-50, 50)
        return {"type": "integer", "minimum": lo, "maximum": lo + rng.randint(0, 500)}
    if kind == "enum":
        values = ["red", "green", "blue", 1, 2, 3, None, True]
        return {"enum": rng.sample(values, rng.randint(1, 4))}
    if kind == "boolean":
        return {"type": "boolean"}
    if kind == "nullable":
        return {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 9}, {"type": "null"}]}
    return {"const": rng.choice(["v1", 42, False])}


def array_schema(rng: random.Random, depth: int) -> dict:
    lo = rng.randint(0, 2)
    items = object_schema(rng, depth + 1) if depth < 1 and rng.random() < 0.3 else leaf_schema(rng)
    return {"type": "array", "items": items, "minItems": lo, "maxItems": lo + rng.randint(0, 3)}


def object_schema(rng: random.Random, depth: int = 0) -> dict:
    props = {}
    for i in range(rng.randint(1, 4 if depth == 0 else 2)):
        r = rng.random()
        if r < 0.2 and depth < 2:
            props[f"obj{i}"] = object_schema(rng, depth + 1)
        elif r < 0.45:
            props[f"list{i}"] = array_schema(rng, depth)
        else:
            props[f"field{i}"] = leaf_schema(rng)
    names = list(props)
    required = rng.sample(names, rng.randint(1, len(names)))
    return {"type": "object", "properties": props, "required": required,
            "additionalProperties": False}


SCHEMAS = [object_schema(random.Random(1000 + i)) for i in range(N_SCHEMAS)]

"""The optional packages some tests need (torch, pocket-tts, tokenizers, sentencepiece,
jsonschema; all in the `test` extra): require() imports one, or fails under CI=true (CI installs
them) and skips elsewhere, saying how to install it."""

import os

import pytest

INSTALL = "pip install torch==2.13.0 && pip install -e '.[test]'"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(module: str):
    try:
        return __import__(module)
    except ImportError as e:
        if in_ci():
            pytest.fail(f"CI needs {module} ({INSTALL}): {e}")
        pytest.skip(f"{module} is not installed ({e}): {INSTALL}")

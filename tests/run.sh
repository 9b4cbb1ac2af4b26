#!/usr/bin/env bash
# The whole test run: the Python tests, then the C++ unit tests built with AddressSanitizer
# and UndefinedBehaviorSanitizer, the GGUF fuzz test seeded with the real models' headers.
# Needs `pip install -e '.[test]'` and `dasllama pull smollm2 gemma3 whisper-tiny.en whisper-base` first (see README).
# Arguments go to pytest. DASLLAMA_FUZZ_ITERATIONS sets the C++ fuzz mutants per seed.
set -euo pipefail
cd "$(dirname "$0")/.."

python -m pytest "$@"

seeds=$(python -c "from dasllama.models import find; print(':'.join(str(find(n)) for n in ('smollm2', 'gemma3')))")
cmake --preset asan
cmake --build --preset asan
DASLLAMA_FUZZ_SEEDS="$seeds" DASLLAMA_FUZZ_ITERATIONS="${DASLLAMA_FUZZ_ITERATIONS:-12000}" \
  ctest --preset asan

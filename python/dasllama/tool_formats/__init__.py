"""Tool-call formats, one module each: how a family of models writes tool calls, how such a
reply is parsed (whole and streamed), the grammar of a forced call, and how calls and results
are written as text for templates that render none. dasllama.tools picks one per model
(``detect``) and holds the request-level logic (validation, rendering, the plan).

| name           | models                                        | module      |
|----------------|-----------------------------------------------|-------------|
| hermes         | Qwen 2.5/3, Hermes; the injected tools prompt | hermes.py   |
| llama3         | Llama 3.1-3.3 JSON calls                      | llama3.py   |
| mistral        | Mistral v0.3, Nemo: ``[TOOL_CALLS] [...]``    | mistral.py  |
| mistral_args   | Mistral v11+: ``[TOOL_CALLS]name[ARGS]{...}`` | mistral.py  |
| deepseek       | DeepSeek V3, R1: fenced json per call         | deepseek.py |
| deepseek_v31   | DeepSeek V3.1: ``name<｜tool▁sep｜>{...}``    | deepseek.py |
| gemma          | Gemma 3: ``tool_code`` blocks                 | gemma.py    |
| functionary    | Functionary v3: ``>>>name\\n{...}`` messages   | functionary.py |
| phi4           | Phi-4-mini: ``<|tool_call|>[...]<|/tool_call|>`` | phi4.py  |
"""

from __future__ import annotations

import re
from typing import Dict

from .base import ToolFormat
from .deepseek import CALLS_BEGIN, DeepSeekFormat, DeepSeekV31Format
from .functionary import FUNCTIONARY_ALL, FUNCTIONARY_SEP, FunctionaryFormat
from .gemma import GemmaFormat
from .hermes import HERMES_OPEN, HermesFormat
from .llama3 import PYTHON_TAG, Llama3Format
from .mistral import ARGS, TOOL_CALLS, MistralArgsFormat, MistralFormat
from .phi4 import PHI4_TOOLS_CLOSE, Phi4Format

__all__ = ["FORMATS", "TOOL_FORMATS", "ToolFormat", "detect", "get"]

FORMATS: Dict[str, ToolFormat] = {f.name: f for f in (
    HermesFormat(), Llama3Format(), MistralFormat(), MistralArgsFormat(), DeepSeekFormat(),
    DeepSeekV31Format(), GemmaFormat(), FunctionaryFormat(), Phi4Format())}
TOOL_FORMATS = tuple(FORMATS)

_GEMMA_TURN = "<start_of_turn>"


def detect(kind: str, template: str) -> str:
    """The format of a model's chat format: kind ("jinja", "gemma", "plain") and, for jinja,
    its template text. The markers a template writes decide; a Gemma turn template without
    tool support gets "gemma"; everything else "hermes" (the injected tools prompt)."""
    if kind == "gemma":
        return "gemma"
    t = template or ""
    if HERMES_OPEN in t:
        return "hermes"
    if TOOL_CALLS in t:
        return "mistral_args" if ARGS in t else "mistral"
    if CALLS_BEGIN in t:
        return "deepseek" if "```json" in t else "deepseek_v31"
    if FUNCTIONARY_SEP + FUNCTIONARY_ALL in t:
        return "functionary"
    if PHI4_TOOLS_CLOSE in t:
        return "phi4"
    if PYTHON_TAG in t or ('"parameters"' in t and "<|start_header_id|>" in t):
        return "llama3"
    if _GEMMA_TURN in t and not re.search(r"\btools\b", t):
        return "gemma"
    return "hermes"


def get(name: str) -> ToolFormat:
    """The format called name; KeyError otherwise."""
    return FORMATS[name]

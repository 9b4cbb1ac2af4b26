"""Llama 3.1-3.3 JSON calls: the whole reply is the call, ``{"name": ..., "parameters": {...}}``,
optionally after ``<|python_tag|>``; several calls are separated by ``;``. Anything else is
content. While streaming, a reply that starts with ``{`` (or the tag) is held until it ends."""

from __future__ import annotations

import json
from typing import List, Optional

from .base import ToolFormat, call_from_object, join_calls, json_call_schema, json_term

__all__ = ["Llama3Format", "PYTHON_TAG"]

PYTHON_TAG = "<|python_tag|>"


def llama3_calls(text: str, make_id) -> Optional[list]:
    """The calls of a whole llama3-format reply, or None when it is not only calls."""
    rest = text.lstrip()
    if rest.startswith(PYTHON_TAG):
        rest = rest[len(PYTHON_TAG):].lstrip()
    if not rest.startswith("{"):
        return None
    decoder, calls, pos = json.JSONDecoder(), [], 0
    while True:
        try:
            obj, end = decoder.raw_decode(rest, pos)
        except (ValueError, RecursionError):
            return None
        call = call_from_object(obj, make_id, ("parameters", "arguments"))
        if call is None:
            return None
        calls.append(call)
        pos = end
        while pos < len(rest) and rest[pos].isspace():
            pos += 1
        if pos == len(rest):
            return calls
        if rest[pos] != ";":
            return None
        pos += 1
        while pos < len(rest) and rest[pos].isspace():
            pos += 1
        if pos == len(rest):
            return calls


class Llama3Stream:
    """Words stream at once; a reply that opens with "{" or the tag waits for its end."""

    def __init__(self, fmt: "Llama3Format", make_id):
        self._fmt, self._make_id = fmt, make_id
        self._buf = ""
        self._mode = None         # None undecided, "content" or "hold"
        self.n_calls = 0

    def push(self, text: str) -> List[dict]:
        self._buf += text
        if self._mode is None:
            head = self._buf.lstrip()
            if not head or (PYTHON_TAG.startswith(head) and head != PYTHON_TAG):
                return []      # only whitespace, or what may still become <|python_tag|>
            self._mode = "hold" if head.startswith(("{", PYTHON_TAG)) else "content"
        if self._mode == "content" and self._buf:
            out, self._buf = [{"content": self._buf}], ""
            return out
        return []

    def finish(self) -> List[dict]:
        out: list = []
        if self._buf:
            content, calls = self._fmt.parse(self._buf, self._make_id)
            for call in calls:
                out.append({"tool_calls": [dict(call, index=self.n_calls)]})
                self.n_calls += 1
            if content:
                out.append({"content": content})
        self._buf = ""
        return out


class Llama3Format(ToolFormat):
    name = "llama3"
    markers = (PYTHON_TAG,)

    def parse(self, text, make_id):
        calls = llama3_calls(text, make_id)
        return (None, calls) if calls else (text, [])

    def stream(self, make_id):
        return Llama3Stream(self, make_id)

    def lark(self, calls, several, special):
        bodies = [json_call_schema(name, params, "parameters") for name, params in calls]
        body = bodies[0] if len(bodies) == 1 else {"anyOf": bodies}
        start = join_calls("call", several, '";" " "?')
        return f"{start}\ncall: {json_term(body)}\n"

    def call_text(self, name, arguments):
        return json.dumps({"name": name, "parameters": arguments}, ensure_ascii=False)

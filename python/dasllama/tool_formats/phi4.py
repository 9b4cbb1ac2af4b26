"""Phi-4-mini: calls are one JSON list between ``<|tool_call|>`` and ``<|/tool_call|>`` (both
single control tokens of its vocabulary),
``<|tool_call|>[{"name": ..., "arguments": {...}}, ...]<|/tool_call|>``. The closing token is
often left out (the block then runs to the end of the reply), and several calls sometimes come
as bare objects separated by commas rather than a list; both are read.

The template reads no ``tools`` variable: the tool list is a JSON text in the ``tools`` field of
the system message (``<|system|>...<|tool|>[...]<|/tool|><|end|>``), and it writes neither the
assistant's calls nor anything but the content of a message. ``template_messages`` puts the
tools on the system message (adding an empty one when there is none) and writes an assistant's
calls into its content in the format above; tool results keep their ``tool`` role, which the
template renders as it renders any role.
"""

from __future__ import annotations

import json

from .base import BlockFormat, arguments_object, call_from_object, json_call_schema, json_term, \
    lark_literal

__all__ = ["Phi4Format", "PHI4_OPEN", "PHI4_CLOSE", "PHI4_TOOLS_CLOSE"]

PHI4_OPEN, PHI4_CLOSE = "<|tool_call|>", "<|/tool_call|>"
PHI4_TOOLS_CLOSE = "<|/tool|>"     # what its template writes after the tool list


def _objects(body: str):
    """The JSON values of a body: a list's items, or comma-separated objects; None when it is
    neither."""
    text = body.strip()
    for candidate in (text, f"[{text}]"):
        try:
            value = json.loads(candidate)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, list) and value:
            return value
        if isinstance(value, dict):
            return [value]
    return None


class Phi4Format(BlockFormat):
    name = "phi4"
    open, close = PHI4_OPEN, PHI4_CLOSE
    markers = (PHI4_OPEN, PHI4_CLOSE)

    def body_calls(self, body, make_id):
        items = _objects(body)
        if items is None:
            return None
        calls = [call_from_object(item, make_id) for item in items]
        return None if None in calls else calls

    def lark(self, calls, several, special):
        bodies = [json_call_schema(name, params) for name, params in calls]
        body = bodies[0] if len(bodies) == 1 else {"anyOf": bodies}
        more = ' ("," " " call)*' if several else ""
        open_, close = lark_literal(PHI4_OPEN, special), lark_literal(PHI4_CLOSE, special)
        return (f"start: {open_} \"[\" call{more} \"]\" {close}\n"
                f"call: {json_term(body)}\n")

    def call_text(self, name, arguments):
        return self.calls_text([(name, arguments)])

    def calls_text(self, calls) -> str:
        """(name, arguments) pairs as one block."""
        items = [{"name": n, "arguments": arguments_object(a)} for n, a in calls]
        return f"{PHI4_OPEN}{json.dumps(items, ensure_ascii=False)}{PHI4_CLOSE}"

    def template_messages(self, messages: list, tools: list) -> list:
        """The conversation as Phi-4-mini's template reads it (see the module docstring)."""
        out = []
        for m in messages:
            if m.get("tool_calls"):
                calls = [(c["function"]["name"], c["function"].get("arguments"))
                         for c in m["tool_calls"]]
                m = {"role": m["role"], "content": (m.get("content") or "") +
                     self.calls_text(calls)}
            out.append(m)
        if tools:
            listed = json.dumps([t["function"] for t in tools], ensure_ascii=False)
            if out and out[0]["role"] == "system":
                out[0] = dict(out[0], tools=listed)
            else:
                out.insert(0, {"role": "system", "content": "", "tools": listed})
        return out

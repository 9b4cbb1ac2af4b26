"""Hermes / Qwen 2.5 and 3: each call is
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, whitespace around the JSON
allowed, anywhere in the reply. Also the format of the tools prompt
that templates without tool support get (``INJECTED_TOOLS_PROMPT``)."""

from __future__ import annotations

import json

from .base import BlockFormat, join_calls, json_body_calls, json_call_schema, json_term, \
    lark_literal

__all__ = ["HermesFormat", "INJECTED_TOOLS_PROMPT", "HERMES_OPEN", "HERMES_CLOSE"]

HERMES_OPEN, HERMES_CLOSE = "<tool_call>", "</tool_call>"

# What a template without tool support gets in its system prompt; {tools} is one JSON
# signature a line.
INJECTED_TOOLS_PROMPT = (
    "# Tools\n\n"
    "You may call one or more of the functions below. Their signatures, one JSON object a "
    "line, are between <tools> and </tools>:\n"
    "<tools>\n{tools}\n</tools>\n\n"
    "To call functions, answer with one JSON object per call, each between <tool_call> and "
    "</tool_call>:\n"
    "<tool_call>\n"
    "{{\"name\": <function name>, \"arguments\": <the arguments as a JSON object>}}\n"
    "</tool_call>"
)


class HermesFormat(BlockFormat):
    name = "hermes"
    open, close = HERMES_OPEN, HERMES_CLOSE
    markers = (HERMES_OPEN, HERMES_CLOSE)

    def body_calls(self, body, make_id):
        return json_body_calls(body, make_id)

    def lark(self, calls, several, special):
        bodies = [json_call_schema(name, params) for name, params in calls]
        body = bodies[0] if len(bodies) == 1 else {"anyOf": bodies}
        open_, close = lark_literal(self.open, special), lark_literal(self.close, special)
        return (f"{join_calls('call', several, json.dumps(chr(10)))}\n"
                f"call: {open_} \"\\n\" body \"\\n\" {close}\n"
                f"body: {json_term(body)}\n")

    def call_text(self, name, arguments):
        body = {"name": name, "arguments": arguments}
        return f"{HERMES_OPEN}\n{json.dumps(body, ensure_ascii=False)}\n{HERMES_CLOSE}"

    def tools_prompt(self, tool_lines: str) -> str:
        return INJECTED_TOOLS_PROMPT.format(tools=tool_lines)

    def results_text(self, results) -> str:
        return "\n".join(f"<tool_response>\n{r}\n</tool_response>" for r in results)

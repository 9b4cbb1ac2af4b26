"""DeepSeek V3 / R1 and V3.1: a section of calls between ``<｜tool▁calls▁begin｜>`` and
``<｜tool▁calls▁end｜>``, each call between ``<｜tool▁call▁begin｜>`` and
``<｜tool▁call▁end｜>``:

- ``deepseek`` (V3, V3-0324, R1 and its distills; templates that write a json fence):
  ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```<｜tool▁call▁end｜>``.
- ``deepseek_v31`` (V3.1): ``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>``.

Either parser reads either form. Calls in a section are separated by whitespace (the
templates write a newline). A section whose closing token never came (the reply ended) counts
when its calls are complete; one that does not parse stays content as written. The R1
template renders calls and results but not the tool list: tools then go into the system
prompt, in ``TOOLS_PROMPT``'s words (dasllama.tools). The templates concatenate arguments as
text, so they get the JSON text.
"""

from __future__ import annotations

import json

from .base import BlockFormat, NAME_PATTERN, join_calls, json_term, lark_literal, make_call

__all__ = ["DeepSeekFormat", "DeepSeekV31Format", "CALLS_BEGIN", "CALLS_END", "CALL_BEGIN",
           "CALL_END", "SEP", "TOOLS_PROMPT"]

CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
FENCE_OPEN, FENCE_CLOSE = "```json\n", "\n```"
OUTPUTS_BEGIN, OUTPUTS_END = "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>"
OUTPUT_BEGIN, OUTPUT_END = "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>"

TOOLS_PROMPT = (
    "## Tools\n\n"
    "You may call the functions below. Their signatures, one JSON object a line:\n"
    "{tools}\n\n"
    "To call functions, answer with:\n"
    + CALLS_BEGIN + CALL_BEGIN + "function" + SEP + "<function name>\n" + FENCE_OPEN
    + "<the arguments as a JSON object>" + FENCE_CLOSE + CALL_END + CALLS_END + "\n"
    "with one " + CALL_BEGIN + "..." + CALL_END + " per call, a newline between them."
)


def _one_call(inner: str, make_id):
    head, sep, tail = inner.partition(SEP)
    if not sep:
        return None
    tail = tail.strip()
    if tail.startswith("{"):                 # V3.1: NAME<sep>{...}
        name, args = head.strip(), tail
    else:                                    # V3 / R1: function<sep>NAME\n```json\n{...}\n```
        name, nl, fenced = tail.partition("\n")
        fenced = fenced.strip()
        if not nl or not fenced.startswith("```json") or not fenced.endswith("```"):
            return None
        name, args = name.strip(), fenced[len("```json"):-len("```")]
    if not NAME_PATTERN.match(name):
        return None
    try:
        value = json.loads(args)
    except (ValueError, RecursionError):
        return None
    return make_call(name, value, make_id)


class DeepSeekFormat(BlockFormat):
    name = "deepseek"
    open, close = CALLS_BEGIN, CALLS_END
    markers = (CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, SEP)
    args_as_text = True

    def body_calls(self, body, make_id):
        calls, rest = [], body.strip()
        while rest:
            if not rest.startswith(CALL_BEGIN):
                return None
            end = rest.find(CALL_END)
            if end < 0:
                return None
            call = _one_call(rest[len(CALL_BEGIN):end], make_id)
            if call is None:
                return None
            calls.append(call)
            rest = rest[end + len(CALL_END):].strip()
        return calls or None

    def _call_rule(self, i, name, special):
        return (f"call_{i}: {lark_literal(CALL_BEGIN, special)} \"function\" "
                f"{lark_literal(SEP, special)} {json.dumps(name + chr(10) + FENCE_OPEN)} "
                f"args_{i} {json.dumps(FENCE_CLOSE)} {lark_literal(CALL_END, special)}")

    def lark(self, calls, several, special):
        rules = ["start: " + lark_literal(CALLS_BEGIN, special) + " calls "
                 + lark_literal(CALLS_END, special),
                 join_calls("call", several, json.dumps("\n")).replace("start:", "calls:", 1),
                 "call: " + " | ".join(f"call_{i}" for i in range(len(calls)))]
        for i, (name, params) in enumerate(calls):
            rules.append(self._call_rule(i, name, special))
            rules.append(f"args_{i}: {json_term(params)}")
        return "\n".join(rules) + "\n"

    def call_text(self, name, arguments):
        return (CALLS_BEGIN + CALL_BEGIN + "function" + SEP + name + "\n" + FENCE_OPEN
                + json.dumps(arguments, ensure_ascii=False) + FENCE_CLOSE + CALL_END
                + CALLS_END)

    def tools_prompt(self, tool_lines: str) -> str:
        return TOOLS_PROMPT.format(tools=tool_lines)

    def results_text(self, results) -> str:
        return (OUTPUTS_BEGIN + "\n".join(OUTPUT_BEGIN + r + OUTPUT_END for r in results)
                + OUTPUTS_END)


class DeepSeekV31Format(DeepSeekFormat):
    name = "deepseek_v31"

    def _call_rule(self, i, name, special):
        return (f"call_{i}: {lark_literal(CALL_BEGIN, special)} {json.dumps(name)} "
                f"{lark_literal(SEP, special)} args_{i} {lark_literal(CALL_END, special)}")

    def call_text(self, name, arguments):
        return (CALLS_BEGIN + CALL_BEGIN + name + SEP + json.dumps(arguments, ensure_ascii=False)
                + CALL_END + CALLS_END)

"""Gemma 3: its template has no tool support and its vocabulary no tool tokens. dasllama follows
the convention of Google's Gemma function-calling guide: a call is a fenced ``tool_code`` block
and a result a fenced ``tool_output`` block. Inside the block dasllama asks for one JSON object,
``{"name": ..., "arguments": {...}}`` (so a forced call's arguments can follow the tool's
schema), and also reads the Python call form the guide shows, ``name(key=value, ...)``, one call
a line or a list of calls, with literal values only (parsed with ``ast``, never evaluated).

The tools go into the system text (Gemma folds it into the first user turn), the assistant's
calls become ``tool_code`` blocks and each run of tool results one user turn of ``tool_output``
blocks (dasllama.tools).
"""

from __future__ import annotations

import ast
import json

from .base import (BlockFormat, NAME_PATTERN, call_from_object, join_calls, json_call_schema,
                   json_term, make_call)

__all__ = ["GemmaFormat", "CODE_OPEN", "CODE_CLOSE", "TOOLS_PROMPT"]

CODE_OPEN, CODE_CLOSE = "```tool_code", "```"
OUTPUT_OPEN = "```tool_output"

TOOLS_PROMPT = (
    "# Tools\n\n"
    "You may call the functions below. Their signatures, one JSON object a line:\n"
    "{tools}\n\n"
    "To call a function, answer with a tool_code block holding one JSON object, one block "
    "per call:\n"
    "```tool_code\n"
    "{{\"name\": <function name>, \"arguments\": <the arguments as a JSON object>}}\n"
    "```\n"
    "Results come back in tool_output blocks."
)


def _python_call(node, make_id):
    if not isinstance(node, ast.Call) or node.args:
        return None
    name = ast.unparse(node.func)      # a dotted name stays dotted; anything else fails below
    if not NAME_PATTERN.match(name) or any(k.arg is None for k in node.keywords):
        return None
    try:
        args = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
        json.dumps(args)
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return None
    return make_call(name, args, make_id)


def _python_calls(body: str, make_id):
    try:
        tree = ast.parse(body.strip(), mode="exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    nodes = []
    for stmt in tree.body:
        if not isinstance(stmt, ast.Expr):
            return None
        value = stmt.value
        nodes.extend(value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value])
    calls = [_python_call(n, make_id) for n in nodes]
    return None if not calls or None in calls else calls


class GemmaFormat(BlockFormat):
    name = "gemma"
    open, close = CODE_OPEN, CODE_CLOSE

    def body_calls(self, body, make_id):
        text = body.strip()
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError):
            return _python_calls(text, make_id)     # [f(a=1), g(b=2)] is no JSON either
        items = obj if isinstance(obj, list) else [obj]
        calls = [call_from_object(item, make_id) for item in items]
        return None if not calls or None in calls else calls

    def lark(self, calls, several, special):
        bodies = [json_call_schema(name, params) for name, params in calls]
        body = bodies[0] if len(bodies) == 1 else {"anyOf": bodies}
        return (f"{join_calls('call', several, json.dumps(chr(10)))}\n"
                f"call: {json.dumps(CODE_OPEN + chr(10))} body {json.dumps(chr(10) + CODE_CLOSE)}\n"
                f"body: {json_term(body)}\n")

    def call_text(self, name, arguments):
        body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
        return f"{CODE_OPEN}\n{body}\n{CODE_CLOSE}"

    def tools_prompt(self, tool_lines: str) -> str:
        return TOOLS_PROMPT.format(tools=tool_lines)

    def results_text(self, results) -> str:
        return "\n".join(f"{OUTPUT_OPEN}\n{r}\n{CODE_CLOSE}" for r in results)

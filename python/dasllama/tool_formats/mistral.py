"""Mistral: calls after the ``[TOOL_CALLS]`` token, to the end of the reply.

- ``mistral`` (Mistral 7B v0.3, Nemo, Small 2409; templates without ``[ARGS]``):
  ``[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]``, one JSON list.
- ``mistral_args`` (the tokenizers from v11 on: Small 3.1/3.2, Devstral, Magistral; templates
  that write ``[ARGS]``): ``[TOOL_CALLS]name[ARGS]{...}`` per call, optionally
  ``[TOOL_CALLS]name[CALL_ID]id[ARGS]{...}``.

Either parser reads either form, so a model that switches form is still understood; the
grammar of a forced call writes the form of the model's template. Text before
``[TOOL_CALLS]`` is content; a section that does not parse stays content, marker included.
The templates accept only 9-character alphanumeric call ids: ids are made that way, and the
conversation's other ids are mapped onto such ids when it is rendered (dasllama.tools).
"""

from __future__ import annotations

import json

from .base import (BlockFormat, NAME_PATTERN, call_from_object, join_calls, json_call_schema,
                   json_term, lark_literal, make_call)

__all__ = ["MistralFormat", "MistralArgsFormat", "TOOL_CALLS", "ARGS", "CALL_ID"]

TOOL_CALLS, ARGS, CALL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"
MISTRAL_ID_LENGTH = 9     # the templates raise for any other length


def _list_calls(body: str, make_id):
    try:
        items = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(items, list) or not items:
        return None
    calls = [call_from_object(item, make_id) for item in items]
    return None if None in calls else calls


def _args_calls(body: str, make_id):
    calls = []
    for part in body.split(TOOL_CALLS):
        head, sep, args = part.partition(ARGS)
        if not sep:
            return None
        name, _, call_id = head.partition(CALL_ID)
        name, call_id = name.strip(), call_id.strip()
        if not NAME_PATTERN.match(name):
            return None
        try:
            value = json.loads(args)
        except (ValueError, RecursionError):
            return None
        call = make_call(name, value, make_id)
        if call is None:
            return None
        if call_id.isalnum() and call_id.isascii():
            call["id"] = call_id
        calls.append(call)
    return calls


class MistralFormat(BlockFormat):
    name = "mistral"
    open, close = TOOL_CALLS, None
    markers = (TOOL_CALLS, ARGS, CALL_ID)
    id_length = MISTRAL_ID_LENGTH

    def body_calls(self, body, make_id):
        if body.lstrip().startswith("["):
            return _list_calls(body, make_id)
        return _args_calls(body, make_id)

    def lark(self, calls, several, special):
        bodies = [json_call_schema(name, params) for name, params in calls]
        body = bodies[0] if len(bodies) == 1 else {"anyOf": bodies}
        more = ' ("," " " call)*' if several else ""
        return (f"start: {lark_literal(TOOL_CALLS, special)} \"[\" call{more} \"]\"\n"
                f"call: {json_term(body)}\n")

    def call_text(self, name, arguments):
        return TOOL_CALLS + json.dumps([{"name": name, "arguments": arguments}],
                                       ensure_ascii=False)


class MistralArgsFormat(MistralFormat):
    name = "mistral_args"

    def lark(self, calls, several, special):
        marker, args = lark_literal(TOOL_CALLS, special), lark_literal(ARGS, special)
        rules = [join_calls("call", several, ""),
                 "call: " + " | ".join(f"call_{i}" for i in range(len(calls)))]
        for i, (name, params) in enumerate(calls):
            rules.append(f"call_{i}: {marker} {json.dumps(name)} {args} args_{i}")
            rules.append(f"args_{i}: {json_term(params)}")
        return "\n".join(rules) + "\n"

    def call_text(self, name, arguments):
        return f"{TOOL_CALLS}{name}{ARGS}{json.dumps(arguments, ensure_ascii=False)}"

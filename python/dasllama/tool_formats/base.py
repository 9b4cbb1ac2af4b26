"""What every tool-call format shares: the OpenAI call shape, the JSON call object, and the
"block" machinery most formats are made of (an opening marker, a body, an optional closing
marker), whole and streamed.

A block format's reply is content with tool-call blocks in it. A block whose body parses is
replaced by its calls; one that does not stays in content as written. A format without a
closing marker (Mistral's ``[TOOL_CALLS]``) has one block running to the end of the reply.

Streaming (``BlockStream``): content before a block streams as it comes (trailing whitespace,
and what may be the start of the opening marker, wait for what follows); a block is held until
its closing marker or the end of the reply, then sent as whole calls. The deltas of a reply
add up to what ``parse_blocks`` gives for it, however the text is split.
"""

from __future__ import annotations

import json
import re
import secrets
import string
from typing import Callable, List, Optional, Sequence, Tuple

__all__ = ["ToolFormat", "BlockFormat", "BlockStream", "call_from_object", "json_call_schema",
           "new_call_id", "lark_literal", "longest_prefix_suffix", "arguments_object",
           "json_body_calls", "json_term", "join_calls", "make_call", "NAME_PATTERN"]

_ID_CHARS = string.ascii_letters + string.digits
_ID_LENGTH = 24     # random characters after "call_", as OpenAI's ids have


def new_call_id() -> str:
    """A fresh tool call id, "call_" and 24 random letters and digits."""
    return "call_" + "".join(secrets.choice(_ID_CHARS) for _ in range(_ID_LENGTH))


def arguments_object(arguments):
    """Arguments as a mapping when they are a JSON object's text (OpenAI sends a JSON text;
    templates write them with tojson and expect a mapping); anything else as it is."""
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments)
        except (ValueError, RecursionError):
            return arguments
        return value if isinstance(value, dict) else arguments
    return {} if arguments is None else arguments


def call_from_object(obj, make_id: Callable[[], str], args_keys=("arguments", "parameters")):
    """An OpenAI tool call from a parsed {"name", "arguments"} object, or None."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    args = None
    for key in args_keys:
        if key in obj:
            args = obj[key]
            break
    return make_call(obj["name"], {} if args is None else args, make_id)


def make_call(name: str, args, make_id: Callable[[], str]):
    """An OpenAI tool call of name with args (a mapping, or a JSON object's text), or None
    when args are neither."""
    if isinstance(args, str):    # some models write the arguments as a JSON text
        try:
            if not isinstance(json.loads(args), dict):
                return None
        except (ValueError, RecursionError):
            return None
        text = args
    elif isinstance(args, dict):
        text = json.dumps(args, ensure_ascii=False)
    else:
        return None
    return {"id": make_id(), "type": "function", "function": {"name": name, "arguments": text}}


def json_body_calls(body: str, make_id) -> Optional[list]:
    """[the call] of a body that is one {"name", "arguments"} JSON object (whitespace around
    it allowed), or None."""
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError):
        return None
    call = call_from_object(obj, make_id)
    return None if call is None else [call]


def json_call_schema(name: str, params: dict, key: str = "arguments") -> dict:
    """The JSON schema of one {"name": name, key: <params>} call object."""
    return {"type": "object", "properties": {"name": {"const": name}, key: params},
            "required": ["name", key], "additionalProperties": False}


def json_term(schema: dict) -> str:
    """A Lark %json term for schema, its whitespace bounded as the response formats' is."""
    from ..grammar import JSON_WHITESPACE
    return "%json " + json.dumps(dict(schema, **{"x-guidance": {
        "whitespace_pattern": JSON_WHITESPACE}}))


def lark_literal(text: str, special: Callable[[str], Optional[int]]) -> str:
    """A Lark term for marker text: the special token itself when the vocabulary has it as one
    control token (special(text) gives its id; control tokens never match literal text), else
    the text."""
    token = special(text)
    return f"<[{token}]>" if token is not None else json.dumps(text)


def longest_prefix_suffix(text: str, token: str) -> int:
    """Length of the longest end of text that is a proper start of token."""
    for k in range(min(len(token) - 1, len(text)), 0, -1):
        if text.endswith(token[:k]):
            return k
    return 0


class ToolFormat:
    """How one family of models writes tool calls. Subclasses set ``name`` and implement
    ``parse``, ``stream`` and ``lark``; the rest has defaults.

    markers: texts of the format that may be single special tokens (rendered into the reply's
    text, referenced as tokens in grammars). args_as_text: the family's templates concatenate a
    call's arguments as a JSON text (they get the text, not a mapping). id_length: the length
    of the call ids the family's templates accept (None: any)."""

    name = ""
    markers: Tuple[str, ...] = ()
    args_as_text = False
    id_length: Optional[int] = None

    def parse(self, text: str, make_id) -> Tuple[Optional[str], List[dict]]:
        raise NotImplementedError

    def stream(self, make_id):
        raise NotImplementedError

    def lark(self, calls: Sequence[Tuple[str, dict]], several: bool,
             special: Callable[[str], Optional[int]]) -> str:
        """An llguidance Lark grammar whose sentences are calls of the given (name, parameters
        schema) pairs: one, or one or more when several."""
        raise NotImplementedError

    def call_text(self, name: str, arguments) -> str:
        """One call written in this format (for templates that render no tool calls)."""
        raise NotImplementedError

    def make_id(self) -> str:
        """A call id this family's templates accept."""
        if self.id_length is None:
            return new_call_id()
        return "".join(secrets.choice(_ID_CHARS) for _ in range(self.id_length))


class BlockFormat(ToolFormat):
    """A format of blocks: ``open``, a body, ``close`` (None: the block runs to the end).
    ``body_calls(body, make_id)`` gives the block's calls, or None when it is not a call."""

    open = ""
    close: Optional[str] = None

    def body_calls(self, body: str, make_id) -> Optional[list]:
        raise NotImplementedError

    def parse(self, text: str, make_id) -> Tuple[Optional[str], List[dict]]:
        parts, calls, pos = [], [], 0
        while True:
            start = text.find(self.open, pos)
            if start < 0:
                parts.append(text[pos:])
                break
            parts.append(text[pos:start])
            body_at = start + len(self.open)
            end = text.find(self.close, body_at) if self.close else -1
            body = text[body_at:] if end < 0 else text[body_at:end]
            found = self.body_calls(body, make_id)
            if found:
                calls.extend(found)
            else:
                parts.append(text[start:] if end < 0 else text[start:end + len(self.close)])
            if end < 0:
                break
            pos = end + len(self.close)
        content = "".join(parts)
        return (None if calls and not content.strip() else content), calls

    def stream(self, make_id):
        return BlockStream(self, make_id)


class BlockStream:
    """Text pieces in, OpenAI streaming deltas out, for a BlockFormat (see the module
    docstring)."""

    def __init__(self, fmt: BlockFormat, make_id: Callable[[], str]):
        self.fmt = fmt
        self._make_id = make_id
        self._buf = ""            # text not yet resolved
        self._in_block = False
        self._ws = ""             # trailing whitespace of content, not yet sent
        self._sent_text = False   # content other than whitespace has been sent
        self.n_calls = 0

    def _content(self, text: str, out: list):
        text = self._ws + text
        body = text.rstrip()
        self._ws = text[len(body):]
        if body:
            self._sent_text = True
            out.append({"content": body})

    def _calls(self, calls: list, out: list):
        for call in calls:
            out.append({"tool_calls": [dict(call, index=self.n_calls)]})
            self.n_calls += 1

    def push(self, text: str) -> List[dict]:
        out: list = []
        self._buf += text
        fmt = self.fmt
        while True:
            if self._in_block:
                end = self._buf.find(fmt.close) if fmt.close else -1
                if end < 0:
                    return out
                body, self._buf = self._buf[:end], self._buf[end + len(fmt.close):]
                self._in_block = False
                found = fmt.body_calls(body, self._make_id)
                if found:
                    self._calls(found, out)
                else:
                    self._content(fmt.open + body + fmt.close, out)
            else:
                start = self._buf.find(fmt.open)
                if start < 0:
                    keep = longest_prefix_suffix(self._buf, fmt.open)
                    cut = len(self._buf) - keep
                    self._content(self._buf[:cut], out)
                    self._buf = self._buf[cut:]
                    return out
                self._content(self._buf[:start], out)
                self._buf = self._buf[start + len(fmt.open):]
                self._in_block = True

    def finish(self) -> List[dict]:
        out: list = []
        if self._in_block:
            found = self.fmt.body_calls(self._buf, self._make_id)
            if found:
                self._calls(found, out)
            else:
                self._content(self.fmt.open + self._buf, out)
        else:
            self._content(self._buf, out)
        self._buf = ""
        if self._ws and (self._sent_text or not self.n_calls):
            out.append({"content": self._ws})
        self._ws = ""
        return out


def join_calls(call_rule: str, several: bool, separator: str) -> str:
    """The Lark start rule: one call_rule, or one or more separated by separator (a Lark
    term, or "" for none)."""
    if not several:
        return f"start: {call_rule}"
    sep = f"{separator} " if separator else ""
    return f"start: {call_rule} ({sep}{call_rule})*"


# Names a tool may have (OpenAI's rule); it also keeps names safe inside grammars and prompts.
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")

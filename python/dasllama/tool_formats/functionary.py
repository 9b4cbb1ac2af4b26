"""Functionary v3 (meetkai functionary v3.2, Llama 3 based): a reply is a run of messages, each
``>>>RECIPIENT\\n`` and its text. Recipient ``all`` is text for the user; any other recipient
is a function and its text the call's arguments, a JSON object::

    >>>all\\nLet me look.>>>get_weather\\n{"city": "Paris"}>>>get_time\\n{"zone": "CET"}

The generation prompt ends with ``>>>``, so the reply itself starts with the first recipient;
a reply that starts with ``>>>`` is read the same. The template reads ``tools`` (as TypeScript
signatures), writes an assistant's calls this way with the arguments concatenated as a JSON
text (``args_as_text``), and results as ``tool`` turns. A message to a function whose text is
not a JSON object stays in content as written.

Streaming: the text of an ``all`` message streams as it comes (what may be the start of the
next ``>>>`` waits); a call is held until the next ``>>>`` or the end of the reply, then sent
whole.
"""

from __future__ import annotations

import json
from typing import List, Optional, Tuple

from .base import NAME_PATTERN, ToolFormat, join_calls, json_term, longest_prefix_suffix, \
    make_call

__all__ = ["FunctionaryFormat", "FUNCTIONARY_SEP", "FUNCTIONARY_ALL"]

FUNCTIONARY_SEP = ">>>"
FUNCTIONARY_ALL = "all"


def _message(text: str, bare: bool, make_id) -> Tuple[str, Optional[dict]]:
    """One message (the text after a separator, its recipient line first): (content, None)
    for text to the user or a message that is no call, ("", call) for a call. bare: the
    reply's first message with no separator before it (the prompt wrote that one)."""
    recipient, newline, body = text.partition("\n")
    as_written = text if bare else FUNCTIONARY_SEP + text
    if not newline:
        return as_written, None
    if recipient == FUNCTIONARY_ALL:
        return body, None
    if not NAME_PATTERN.match(recipient):
        return as_written, None
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return as_written, None
    call = make_call(recipient, value, make_id) if isinstance(value, dict) else None
    return (as_written, None) if call is None else ("", call)


def _split(text: str) -> List[str]:
    """The messages of a reply (a leading separator dropped)."""
    if text.startswith(FUNCTIONARY_SEP):
        text = text[len(FUNCTIONARY_SEP):]
    return text.split(FUNCTIONARY_SEP)


class FunctionaryStream:
    """Text pieces in, OpenAI streaming deltas out (see the module docstring)."""

    def __init__(self, make_id):
        self._make_id = make_id
        self._buf = ""             # the current message's text not yet resolved
        self._bare = True          # the current message has no separator before it
        self._started = False      # a leading separator has been ruled in or out
        self._recipient: Optional[str] = None    # once its line is complete
        self._ws = ""              # trailing whitespace of content, not yet sent
        self._sent_text = False
        self.n_calls = 0

    def _content(self, text: str, out: list) -> None:
        text = self._ws + text
        body = text.rstrip()
        self._ws = text[len(body):]
        if body:
            self._sent_text = True
            out.append({"content": body})

    def _resolve(self, text: str, out: list) -> None:
        content, call = _message(text, self._bare, self._make_id)
        if call is not None:
            out.append({"tool_calls": [dict(call, index=self.n_calls)]})
            self.n_calls += 1
        else:
            self._content(content, out)

    def push(self, text: str) -> List[dict]:
        out: list = []
        self._buf += text
        if not self._started:
            if FUNCTIONARY_SEP.startswith(self._buf):
                return out            # may still be the leading separator
            if self._buf.startswith(FUNCTIONARY_SEP):
                self._buf = self._buf[len(FUNCTIONARY_SEP):]
                self._bare = False
            self._started = True
        while True:
            end = self._buf.find(FUNCTIONARY_SEP)
            if self._recipient is None:
                line = self._buf.find("\n")
                if line >= 0 and (end < 0 or line < end):
                    self._recipient = self._buf[:line]
            if end >= 0:
                message, self._buf = self._buf[:end], self._buf[end + len(FUNCTIONARY_SEP):]
                self._emit_message(message, out)
                continue
            if self._recipient == FUNCTIONARY_ALL:
                head = len(FUNCTIONARY_ALL) + 1
                keep = longest_prefix_suffix(self._buf, FUNCTIONARY_SEP)
                cut = max(head, len(self._buf) - keep)
                self._content(self._buf[head:cut], out)
                self._buf = self._buf[:head] + self._buf[cut:]
            return out

    def _emit_message(self, message: str, out: list) -> None:
        """A message whose end (the next separator) has come; an ``all`` message's text went
        out already but for what the buffer still held."""
        if self._recipient == FUNCTIONARY_ALL:
            self._content(message[len(FUNCTIONARY_ALL) + 1:], out)
        else:
            self._resolve(message, out)
        self._bare = False
        self._recipient = None

    def finish(self) -> List[dict]:
        out: list = []
        if not self._started and self._buf.startswith(FUNCTIONARY_SEP):
            self._buf = self._buf[len(FUNCTIONARY_SEP):]
            self._bare = False
        if self._buf or not self._bare:
            if self._recipient is None and "\n" in self._buf:
                self._recipient = self._buf.partition("\n")[0]
            self._emit_message(self._buf, out)
        self._buf = ""
        if self._ws and (self._sent_text or not self.n_calls):
            out.append({"content": self._ws})
        self._ws = ""
        return out


class FunctionaryFormat(ToolFormat):
    name = "functionary"
    args_as_text = True

    def parse(self, text, make_id):
        parts, calls = [], []
        bare = not text.startswith(FUNCTIONARY_SEP)
        for i, message in enumerate(_split(text)):
            content, call = _message(message, bare and i == 0, make_id)
            if call is not None:
                calls.append(call)
            else:
                parts.append(content)
        content = "".join(parts)
        return (None if calls and not content.strip() else content), calls

    def stream(self, make_id):
        return FunctionaryStream(make_id)

    def lark(self, calls, several, special):
        rules = [join_calls("call", several, json.dumps(FUNCTIONARY_SEP)),
                 "call: " + " | ".join(f"call_{i}" for i in range(len(calls)))]
        for i, (name, params) in enumerate(calls):
            rules.append(f"call_{i}: {json.dumps(name + chr(10))} args_{i}")
            rules.append(f"args_{i}: {json_term(params)}")
        return "\n".join(rules) + "\n"

    def call_text(self, name, arguments):
        args = arguments if isinstance(arguments, str) else json.dumps(arguments,
                                                                       ensure_ascii=False)
        return f"{FUNCTIONARY_SEP}{name}\n{args}"

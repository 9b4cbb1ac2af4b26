"""Chat prompts: a model's chat template (GGUF ``tokenizer.chat_template``, a Jinja2 text)
rendered the way Hugging Face's ``apply_chat_template`` renders it, and plain formats for
files that carry none.

``ChatFormat.from_model(template, bos_token=..., eos_token=..., has_token=...)`` picks:

- ``jinja``: the file's template, in a sandboxed Jinja2 environment with ``messages``,
  ``add_generation_prompt``, ``bos_token``, ``eos_token``, ``raise_exception(msg)`` and
  ``strftime_now(fmt)``, trim_blocks and lstrip_blocks on (as transformers sets them).
- ``gemma``: no template, but the vocabulary has ``<start_of_turn>``/``<end_of_turn>``
  (Gemma 3 270M ships without one): Gemma's turn format, the system message folded into
  the first user turn, the assistant's role named ``model``.
- ``plain``: otherwise ``role: content`` lines ending in ``assistant:``.

The rendered prompt holds special tokens as text; tokenize it with ``parse_special=True``.

``read_chat_template(path)`` reads a GGUF file's template alone: it walks the metadata and
skips every other value where it lies, so the vocabulary's arrays (262,144 strings and scores
for Gemma 3) are never built as Python objects, as reading the whole metadata does (92 MB of
peak memory for Gemma-3 270M, 20 MB for SmolLM2).
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Callable, Optional, Sequence

from .errors import DasllamaError

__all__ = ["ChatFormat", "ChatTemplateError", "validate_messages", "read_chat_template",
           "CHAT_TEMPLATE_KEY"]

CHAT_TEMPLATE_KEY = "tokenizer.chat_template"

GEMMA_TURN_START = "<start_of_turn>"
GEMMA_TURN_END = "<end_of_turn>"


class ChatTemplateError(DasllamaError, ValueError):
    """A chat template that does not parse, or that rejects the messages it was given."""


def validate_messages(messages) -> list:
    """The messages as a list of dicts, each with a string ``role`` and string ``content``;
    ValueError naming the first bad entry otherwise. Tool use: an assistant message may carry
    ``tool_calls`` (a list of {"function": {"name", "arguments"}}; its content may then be None
    or absent), and a message may carry a string ``tool_call_id`` (a ``tool`` role's result)."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise ValueError(f"messages must be a list of {{'role': ..., 'content': ...}} dicts, "
                         f"got {type(messages).__name__}")
    if not messages:
        raise ValueError("messages is empty; give at least one {'role': 'user', 'content': ...}")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise ValueError(f"messages[{i}] must be a dict, got {type(m).__name__}")
        if not isinstance(m.get("role"), str):
            raise ValueError(f"messages[{i}]['role'] must be a string, got {m.get('role')!r}")
        calls = m.get("tool_calls")
        if calls is not None:
            _check_tool_calls(i, m["role"], calls)
        if not isinstance(m.get("content"), str) and not (calls and m.get("content") is None):
            raise ValueError(f"messages[{i}]['content'] must be a string, got {m.get('content')!r}")
        if m.get("tool_call_id") is not None and not isinstance(m["tool_call_id"], str):
            raise ValueError(f"messages[{i}]['tool_call_id'] must be a string, got "
                             f"{m['tool_call_id']!r}")
        out.append(dict(m, content=m.get("content")))
    return out


def _check_tool_calls(i: int, role: str, calls):
    if role != "assistant":
        raise ValueError(f"messages[{i}]['tool_calls'] belongs on an assistant message, not "
                         f"role {role!r}")
    if not isinstance(calls, list):
        raise ValueError(f"messages[{i}]['tool_calls'] must be a list, got {type(calls).__name__}")
    for k, call in enumerate(calls):
        where = f"messages[{i}]['tool_calls'][{k}]"
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict):
            raise ValueError(f"{where}['function'] must be a dict with 'name' and 'arguments'")
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ValueError(f"{where}['function']['name'] must be a non-empty string, got "
                             f"{fn.get('name')!r}")
        if not isinstance(fn.get("arguments", "{}"), (str, dict)):
            raise ValueError(f"{where}['function']['arguments'] must be a JSON string or a dict, "
                             f"got {type(fn['arguments']).__name__}")


# GGUF metadata value types (gguf's GGUFValueType) and the byte size of the fixed-size ones.
_GGUF_STRING, _GGUF_ARRAY = 8, 9
_GGUF_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
# Array nesting a metadata value may have before the file is taken as malformed (real files
# nest at most once).
_GGUF_MAX_NESTING = 8


class _GGUFWalk:
    """Offsets through the metadata of a mapped GGUF file (little-endian, version 2 or 3)."""

    def __init__(self, buf):
        self.buf, self.pos = buf, 0

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.buf):
            raise ValueError("the metadata runs past the end of the file")
        value = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return value[0] if len(value) == 1 else value

    def string(self, keep: bool = True):
        n = self.take("<Q")
        if self.pos + n > len(self.buf):
            raise ValueError("a metadata string runs past the end of the file")
        start, self.pos = self.pos, self.pos + n
        return bytes(self.buf[start:self.pos]).decode("utf-8", "replace") if keep else None

    def skip(self, kind: int, depth: int = 0):
        if kind in _GGUF_FIXED:
            self.pos += _GGUF_FIXED[kind]
        elif kind == _GGUF_STRING:
            self.string(keep=False)
        elif kind == _GGUF_ARRAY and depth < _GGUF_MAX_NESTING:
            inner, count = self.take("<IQ")
            if inner in _GGUF_FIXED:
                self.pos += _GGUF_FIXED[inner] * count
            else:
                for _ in range(count):
                    self.skip(inner, depth + 1)
        else:
            raise ValueError(f"metadata value type {kind} is not one GGUF defines")
        if self.pos > len(self.buf):
            raise ValueError("a metadata value runs past the end of the file")


def read_chat_template(path, key: str = CHAT_TEMPLATE_KEY) -> Optional[str]:
    """The chat template a GGUF file carries (the string at key), or None when it has none.
    Only that value is decoded (see the module docstring). ValueError for a file that is not
    GGUF version 2 or 3 or whose metadata is cut short."""
    with open(os.fspath(path), "rb") as f, \
            mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        walk = _GGUFWalk(buf)
        magic, version = walk.take("<4sI")
        if magic != b"GGUF" or version not in (2, 3):
            raise ValueError(f"{path}: not a GGUF file of version 2 or 3")
        _, n_kv = walk.take("<QQ")
        for _ in range(n_kv):
            name = walk.string()
            kind = walk.take("<I")
            if name == key and kind == _GGUF_STRING:
                return walk.string()
            walk.skip(kind)
    return None


def _raise_exception(message):
    raise ChatTemplateError(f"the chat template rejected the messages: {message}")


def _tojson(value, indent=None, separators=None, sort_keys=False, ensure_ascii=False):
    # transformers' version: no HTML escaping (Jinja2's built-in escapes <, >, &, ').
    return json.dumps(value, indent=indent, separators=separators, sort_keys=sort_keys,
                      ensure_ascii=ensure_ascii)


@lru_cache(maxsize=8)
def _compile(template: str):
    try:
        from jinja2 import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError as e:  # pragma: no cover - jinja2 is a dependency
        raise DasllamaError("rendering a chat template needs jinja2 (pip install jinja2)") from e
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    env.filters["tojson"] = _tojson
    try:
        return env.from_string(template)
    except TemplateError as e:
        raise ChatTemplateError(f"the model's chat template does not parse: {e}") from e


@dataclass(frozen=True)
class ChatFormat:
    """How one model's conversations become a prompt.

    kind: "jinja", "gemma" or "plain". stop: strings that end a reply besides the model's
    end-of-generation tokens (the plain format's next turn, Gemma's end of turn)."""

    kind: str
    template: Optional[str] = None
    bos_token: str = ""
    eos_token: str = ""
    stop: tuple = field(default=())

    @classmethod
    def from_model(cls, template: Optional[str], *, bos_token: str = "", eos_token: str = "",
                   has_token: Callable[[str], bool] = lambda text: False) -> "ChatFormat":
        """The format for a model: its template if it has one, else Gemma's turns when the
        vocabulary has them (has_token(text): is text one special token), else plain."""
        if template:
            _compile(template)   # fail now, naming the template, not at the first chat
            return cls("jinja", template, bos_token, eos_token)
        if has_token(GEMMA_TURN_START) and has_token(GEMMA_TURN_END):
            return cls("gemma", None, bos_token, eos_token, stop=(GEMMA_TURN_END,))
        return cls("plain", None, bos_token, eos_token, stop=("\nuser:",))

    def render(self, messages, add_generation_prompt: bool = True, **variables) -> str:
        """The prompt text for these messages (extra variables reach a Jinja template)."""
        messages = validate_messages(messages)
        if self.kind == "jinja":
            from jinja2 import TemplateError
            try:
                return _compile(self.template).render(
                    messages=messages, add_generation_prompt=add_generation_prompt,
                    bos_token=self.bos_token, eos_token=self.eos_token, **variables)
            except ChatTemplateError:
                raise
            except TemplateError as e:
                raise ChatTemplateError(f"the model's chat template failed: {e}") from e
        if self.kind == "gemma":
            return _render_gemma(messages, add_generation_prompt)
        return _render_plain(messages, add_generation_prompt)


def _render_gemma(messages: list, add_generation_prompt: bool) -> str:
    # Gemma has no system role: its own template puts the system text, then a blank line,
    # at the start of the first user turn.
    system = ""
    if messages[0]["role"] == "system":
        system, messages = messages[0]["content"] + "\n\n", messages[1:]
    parts = []
    for i, m in enumerate(messages):
        role = "model" if m["role"] == "assistant" else m["role"]
        prefix = system if i == 0 else ""
        content = (m["content"] or "").strip()   # None: an assistant turn of tool calls only
        parts.append(f"{GEMMA_TURN_START}{role}\n{prefix}{content}{GEMMA_TURN_END}\n")
    if not messages and system:
        parts.append(f"{GEMMA_TURN_START}user\n{system.rstrip()}{GEMMA_TURN_END}\n")
    if add_generation_prompt:
        parts.append(f"{GEMMA_TURN_START}model\n")
    return "".join(parts)


def _render_plain(messages: list, add_generation_prompt: bool) -> str:
    text = "".join(f"{m['role']}: {m['content'] or ''}\n" for m in messages)
    return text + ("assistant:" if add_generation_prompt else "")

"""Tool calling: OpenAI ``tools`` / ``tool_choice`` rendered through a model's chat template,
tool calls parsed back out of the generated text (whole or streamed), forced calls enforced
by a grammar.

::

    plan = plan_tools(llm.chat_format, tools, tool_choice="auto")
    prompt = plan.render(messages)                 # text; tokenize with parse_special=True
    constraint = plan.constraint(llm)              # None unless a call is forced
    content, tool_calls = plan.parse(generated_text)
    stream = plan.stream()                         # or piece by piece:
    for piece in pieces: deltas = stream.push(piece)
    deltas = stream.finish()

Public API (what the server calls):

- ``plan_tools(chat_format, tools=None, tool_choice=None, parallel_tool_calls=True) ->
  ToolPlan``: validates tools and tool_choice (ToolError naming the field) and decides how this
  model speaks tools. ``ToolPlan.render(messages, add_generation_prompt=True) -> str``,
  ``.constraint(llm_or_tokenizer, extra_eog=()) -> GrammarConstraint | None``,
  ``.parse(text, make_id=None) -> (content, tool_calls)``, ``.stream(make_id=None) ->
  ToolCallStream``, ``.active`` (False for tool_choice "none" or no tools: no calls parsed).
- ``parse_tool_calls(text, fmt="hermes", make_id=None) -> (content | None, tool_calls)`` and
  ``ToolCallStream(fmt="hermes", make_id=None)`` with ``push(text) -> [delta]`` and
  ``finish() -> [delta]``: the parsers on their own. fmt None passes text through as content.
- ``tool_format(chat_format) -> name``, ``template_renders_tools(chat_format)``,
  ``template_renders_tool_turns(chat_format)``, ``validate_tools(tools)``,
  ``validate_tool_choice(tool_choice, tools)``, ``new_call_id()``.
- ``ToolPlan.rendered_tokens(llm_or_tokenizer) -> {token id: text}``: the format's markers that
  are control tokens of the model (Mistral's ``[TOOL_CALLS]``, Llama's ``<|python_tag|>``).
  Generated text leaves control tokens out; the parsers need these, so whoever turns the reply's
  tokens into text writes them as their text (the server's chat route does).
- ``ToolError``: a DasllamaError and a ValueError (the server answers 400).

Shapes are OpenAI's. A tool call: ``{"id": "call_...", "type": "function", "function": {"name":
..., "arguments": "<a JSON text>"}}``. A streamed delta is ``{"content": "..."}`` or
``{"tool_calls": [{"index": n, "id", "type", "function": {"name", "arguments"}}]}``: a call is
sent whole, in one delta, once its text is complete. When a reply holds tool calls and its
other text is only whitespace, content is None (and the stream sends no content for it).
The server reports finish_reason "tool_calls" when tool_calls is not empty.

Formats (chosen from the template text, ``tool_format``; one module each in
dasllama.tool_formats, whose docstrings give the exact forms): ``hermes`` (``<tool_call>``
JSON blocks: Qwen 2.5/3, Hermes), ``llama3`` (the whole reply is ``{"name", "parameters"}``
JSON), ``mistral`` (``[TOOL_CALLS]`` and a JSON list), ``mistral_args``
(``[TOOL_CALLS]name[ARGS]{...}``), ``deepseek`` and ``deepseek_v31`` (``<｜tool▁calls▁begin｜>``
sections), ``gemma`` (``tool_code`` blocks), ``functionary`` (``>>>name\\n{...}`` messages), ``phi4``
(``<|tool_call|>[...]<|/tool_call|>``). In every format a call that does not parse stays
in content as written, and a call left open at the end of the text counts when it is
complete.

Rendering: a template that reads ``tools`` gets them (``native``); call ids are mapped onto the
ids a family's templates accept (Mistral's 9 characters) and arguments given as the templates
expect them. A template that writes tool calls and results but never the tool list (DeepSeek
R1) gets the tools in the system prompt in its format's words (``native_turns``). A format with
``template_messages`` (Phi-4-mini, whose template reads the tool list from the system message)
places the tools and calls in the messages itself. Templates that
render no tools at all (the plain fallback, Jinja templates that never mention ``tools``) get
the tool list in the system prompt in the fixed text of ``INJECTED_TOOLS_PROMPT`` (hermes
format), and the conversation's tool turns rewritten as text: an assistant's calls as
``<tool_call>`` blocks after its content, and each run of ``tool`` results as one user turn of
``<tool_response>\\n...\\n</tool_response>`` blocks; Gemma's turns get the same in its
``tool_code`` / ``tool_output`` words.

tool_choice: "none" renders no tools and parses no calls; "auto" (the default when tools are
given) renders them and parses whatever the model writes; "required" and
``{"type": "function", "function": {"name": ...}}`` also force the output, through a grammar
(dasllama.grammar), to be calls (one or more for "required" unless parallel_tool_calls is False;
exactly one of the named function) whose arguments follow the tool's parameter schema.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from . import tool_formats
from .chat import ChatFormat, validate_messages
from .errors import DasllamaError
from .tool_formats import TOOL_FORMATS
from .tool_formats.base import NAME_PATTERN as _NAME
from .tool_formats.base import arguments_object, new_call_id
from .tool_formats.hermes import INJECTED_TOOLS_PROMPT

__all__ = ["ToolError", "ToolPlan", "ToolCallStream", "plan_tools", "parse_tool_calls",
           "tool_format", "template_renders_tools", "template_renders_tool_turns",
           "validate_tools", "validate_tool_choice", "new_call_id", "INJECTED_TOOLS_PROMPT",
           "TOOL_FORMATS"]


class ToolError(DasllamaError, ValueError):
    """tools or tool_choice that are malformed or do not fit together; the message names the
    field."""


# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------

def validate_tools(tools) -> list:
    """tools as a list of {"type": "function", "function": {"name", "description"?,
    "parameters"?}} (copies); ToolError naming the first bad field."""
    if tools is None:
        return []
    if not isinstance(tools, (list, tuple)):
        raise ToolError(f"tools must be a list, got {type(tools).__name__}")
    out, names = [], set()
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise ToolError(f"{where} must be an object, got {type(tool).__name__}")
        if tool.get("type", "function") != "function":
            raise ToolError(f"{where}.type must be 'function', got {tool.get('type')!r}")
        fn = tool.get("function")
        if not isinstance(fn, dict):
            raise ToolError(f"{where}.function must be an object with a 'name'")
        name = fn.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise ToolError(f"{where}.function.name must be 1-64 letters, digits, '_', '.' or "
                            f"'-', got {name!r}")
        if name in names:
            raise ToolError(f"{where}.function.name {name!r} is given twice")
        names.add(name)
        if fn.get("description") is not None and not isinstance(fn["description"], str):
            raise ToolError(f"{where}.function.description must be a string")
        params = fn.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise ToolError(f"{where}.function.parameters must be a JSON schema object, got "
                            f"{type(params).__name__}")
        out.append({"type": "function", "function": dict(fn)})
    return out


def validate_tool_choice(tool_choice, tools: Sequence[dict]):
    """tool_choice as "none", "auto", "required" or the name of the forced function (a str
    wrapped in a 1-tuple: ("name",)); None means "auto" with tools, "none" without."""
    if tool_choice is None:
        return "auto" if tools else "none"
    if isinstance(tool_choice, str):
        if tool_choice not in ("none", "auto", "required"):
            raise ToolError(f"tool_choice must be 'none', 'auto', 'required' or "
                            f"{{'type': 'function', 'function': {{'name': ...}}}}, got "
                            f"{tool_choice!r}")
        if tool_choice != "none" and not tools:
            raise ToolError(f"tool_choice {tool_choice!r} needs tools, and none are given")
        return tool_choice
    if not isinstance(tool_choice, dict):
        raise ToolError(f"tool_choice must be a string or an object, got "
                        f"{type(tool_choice).__name__}")
    fn = tool_choice.get("function")
    if tool_choice.get("type") != "function" or not isinstance(fn, dict):
        raise ToolError("tool_choice must look like {'type': 'function', 'function': "
                        "{'name': ...}}")
    name = fn.get("name")
    known = [t["function"]["name"] for t in tools]
    if name not in known:
        raise ToolError(f"tool_choice.function.name {name!r} is not among the tools "
                        f"({', '.join(map(repr, known)) or 'none given'})")
    return (name,)


# ---------------------------------------------------------------------------------------------
# How a template speaks tools
# ---------------------------------------------------------------------------------------------

def _template(chat_format: ChatFormat) -> str:
    return (chat_format.template or "") if chat_format.kind == "jinja" else ""


def template_renders_tools(chat_format: ChatFormat) -> bool:
    """True for a Jinja template that reads a ``tools`` variable."""
    return bool(re.search(r"\btools\b", _template(chat_format)))


def template_renders_tool_turns(chat_format: ChatFormat) -> bool:
    """True for a Jinja template that writes assistant tool_calls itself (DeepSeek R1's writes
    calls and results but never the tool list)."""
    return "tool_calls" in _template(chat_format)


def tool_format(chat_format: ChatFormat) -> str:
    """The name of the format this model writes tool calls in (see dasllama.tool_formats):
    from the markers its template writes; "gemma" for Gemma's turns without tool support;
    else "hermes" (the format of the injected tools prompt)."""
    return tool_formats.detect(chat_format.kind, _template(chat_format))


def _format(fmt: str):
    try:
        return tool_formats.get(fmt)
    except (KeyError, TypeError):
        raise ToolError(f"tool call format must be one of {TOOL_FORMATS}, got {fmt!r}") from None


# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------

def _template_id(call_id, length: Optional[int], fallback: str) -> str:
    """call_id as the family's templates accept it: as it is when they accept any, else (when
    it is not already such an id) a stable alphanumeric id of that length derived from it, so a
    call and its result keep matching."""
    if length is None:
        return call_id if call_id is not None else fallback
    if isinstance(call_id, str) and len(call_id) == length and call_id.isalnum() \
            and call_id.isascii():
        return call_id
    digest = hashlib.sha256(str(call_id if call_id is not None else fallback).encode())
    return digest.hexdigest()[:length]


def _template_arguments(arguments, as_text: bool):
    if not as_text:
        return arguments_object(arguments)
    if isinstance(arguments, str):
        return arguments
    return json.dumps({} if arguments is None else arguments, ensure_ascii=False)


def _for_template(messages: list, fmt) -> list:
    """Messages as the family's templates read them: arguments a mapping (or a JSON text where
    the templates concatenate them), ids of the length the templates demand."""
    out = []
    for i, m in enumerate(messages):
        if m.get("tool_calls"):
            calls = []
            for k, call in enumerate(m["tool_calls"]):
                fn = dict(call["function"])
                fn["arguments"] = _template_arguments(fn.get("arguments"), fmt.args_as_text)
                call = dict(call, type=call.get("type", "function"), function=fn)
                if fmt.id_length is not None or "id" in call:
                    call["id"] = _template_id(call.get("id"), fmt.id_length, f"{i}.{k}")
                calls.append(call)
            m = dict(m, tool_calls=calls)
        if m.get("tool_call_id") is not None and fmt.id_length is not None:
            m = dict(m, tool_call_id=_template_id(m["tool_call_id"], fmt.id_length, ""))
        out.append(m)
    return out


def _tool_lines(tools: list) -> str:
    return "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)


def _with_system_text(messages: list, text: str) -> list:
    """text at the end of the system message (one is added first when there is none)."""
    out = list(messages)
    if out and out[0]["role"] == "system":
        out[0] = dict(out[0], content=f"{out[0]['content']}\n\n{text}")
    else:
        out.insert(0, {"role": "system", "content": text})
    return out


def _as_text_turns(messages: list, tools: list, fmt) -> list:
    """The conversation for a template that knows no tools: tools in the system prompt, calls
    and results as text in fmt's words."""
    out = []
    for m in messages:
        if m.get("tool_calls"):
            parts = ([m["content"]] if m.get("content") else []) + \
                    [fmt.call_text(c["function"]["name"],
                                   arguments_object(c["function"].get("arguments")))
                     for c in m["tool_calls"]]
            out.append({"role": m["role"], "content": "\n".join(parts)})
        elif m["role"] == "tool":
            if out and out[-1].get("_tool_results") is not None:
                out[-1]["_tool_results"].append(m["content"])
            else:
                out.append({"role": "user", "_tool_results": [m["content"]]})
        else:
            out.append({"role": m["role"], "content": m["content"]})
    for m in out:
        results = m.pop("_tool_results", None)
        if results is not None:
            m["content"] = fmt.results_text(results)
    return _with_system_text(out, fmt.tools_prompt(_tool_lines(tools))) if tools else out


# ---------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------

def parse_tool_calls(text: str, fmt: Optional[str] = "hermes",
                     make_id: Optional[Callable[[], str]] = None
                     ) -> Tuple[Optional[str], List[dict]]:
    """(content, tool_calls) of a whole reply in format fmt (a name of TOOL_FORMATS, or None
    for no parsing). Malformed calls stay in content; content is None when calls were found
    and the rest is whitespace. make_id gives call ids (default: the format's, new_call_id for
    most)."""
    if fmt is None:
        return text, []
    f = _format(fmt)
    return f.parse(text, make_id or f.make_id)


class ToolCallStream:
    """Text pieces in, OpenAI streaming deltas out (see the module docstring). Content before a
    call streams as it comes (trailing whitespace waits for what follows it); text from a call's
    opening on is held until the call is complete. The deltas of a whole reply add up to what
    parse_tool_calls gives for it, however the text is split."""

    def __init__(self, fmt: Optional[str] = "hermes",
                 make_id: Optional[Callable[[], str]] = None):
        self.fmt = fmt
        if fmt is None:
            self._impl = None
        else:
            f = _format(fmt)
            self._impl = f.stream(make_id or f.make_id)
        self._finished = False

    def push(self, text: str) -> List[dict]:
        """Deltas that text makes certain."""
        if self._finished:
            raise RuntimeError("push after finish")
        if self._impl is None:
            return [{"content": text}] if text else []
        return self._impl.push(text)

    def finish(self) -> List[dict]:
        """The deltas of whatever was held, at the end of the reply."""
        if self._finished:
            return []
        self._finished = True
        return self._impl.finish() if self._impl is not None else []

    @property
    def n_calls(self) -> int:
        """Tool calls sent so far (finish_reason "tool_calls" when above 0 at the end)."""
        return self._impl.n_calls if self._impl is not None else 0


def _special_lookup(llm_or_tokenizer) -> Callable[[str], Optional[int]]:
    """text -> the id of the one control token that text is in this vocabulary, or None."""
    tok = getattr(llm_or_tokenizer, "tokenizer", llm_or_tokenizer)

    def special(text: str) -> Optional[int]:
        ids = list(tok.encode(text, add_special=False, parse_special=True))
        return ids[0] if len(ids) == 1 and tok.is_control(ids[0]) else None
    return special


# ---------------------------------------------------------------------------------------------
# The plan for one request
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ToolPlan:
    """How one request's tools are rendered, enforced and parsed (build it with plan_tools).

    tools: the validated tools offered to the model (empty for tool_choice "none"); choice:
    "none", "auto", "required" or "function"; function: the forced function's name; fmt: a
    name of TOOL_FORMATS; native: the template renders tools itself; native_turns: it renders
    tool calls and results but not the tool list (which then goes into the system prompt in
    the format's words); parallel: "required" may give several calls."""

    chat_format: ChatFormat
    tools: tuple
    choice: str
    function: Optional[str]
    fmt: str
    native: bool
    parallel: bool
    native_turns: bool = False

    @property
    def active(self) -> bool:
        """True when the reply may hold tool calls (they are parsed out)."""
        return self.choice != "none" and bool(self.tools)

    def render(self, messages, add_generation_prompt: bool = True) -> str:
        """The prompt text: the conversation (tool calls and tool results included) and, unless
        tool_choice is "none", the tools."""
        messages = validate_messages(messages)
        tools = list(self.tools) if self.active else []
        fmt = _format(self.fmt)
        if self.native:
            messages = _for_template(messages, fmt)
            place = getattr(fmt, "template_messages", None)
            if place is not None:    # a template that reads the tools from a message (Phi-4)
                return self.chat_format.render(place(messages, tools), add_generation_prompt)
            variables = {"tools": tools} if tools else {}
            return self.chat_format.render(messages, add_generation_prompt, **variables)
        if self.native_turns:
            messages = _for_template(messages, fmt)
            if tools:
                messages = _with_system_text(messages, fmt.tools_prompt(_tool_lines(tools)))
            return self.chat_format.render(messages, add_generation_prompt)
        return self.chat_format.render(_as_text_turns(messages, tools, fmt),
                                       add_generation_prompt)

    def constraint(self, llm_or_tokenizer, extra_eog: Sequence[int] = ()):
        """A GrammarConstraint forcing tool calls for "required" and a named function; None
        otherwise. GrammarError (a 400) naming the tool whose parameters cannot be enforced."""
        if self.choice not in ("required", "function") or not self.tools:
            return None
        from . import grammar
        calls = []
        for i, t in enumerate(self.tools):
            name = t["function"]["name"]
            if self.choice == "function" and name != self.function:
                continue
            params = t["function"].get("parameters") or {"type": "object"}
            grammar.check_json_schema(params, f"tools[{i}].function.parameters")
            calls.append((name, params))
        several = self.choice == "required" and self.parallel
        lark = _format(self.fmt).lark(calls, several, _special_lookup(llm_or_tokenizer))
        return grammar.constraint_for_lark(llm_or_tokenizer, lark, extra_eog=extra_eog)

    def rendered_tokens(self, llm_or_tokenizer) -> Dict[int, str]:
        """{token id: text} of the format's markers that are control tokens of this vocabulary.
        A reply's text leaves control tokens out, and the parsers need these: whoever turns the
        reply's tokens into text writes these ones as their text (the server does)."""
        if not self.active:
            return {}
        special = _special_lookup(llm_or_tokenizer)
        out = {}
        for text in _format(self.fmt).markers:
            token = special(text)
            if token is not None:
                out[token] = text
        return out

    def parse(self, text: str, make_id: Optional[Callable[[], str]] = None):
        """(content, tool_calls) of a whole reply (no calls when not active)."""
        return parse_tool_calls(text, self.fmt if self.active else None, make_id)

    def stream(self, make_id: Optional[Callable[[], str]] = None) -> ToolCallStream:
        """A streaming parser for one reply (a pass-through when not active)."""
        return ToolCallStream(self.fmt if self.active else None, make_id)


def plan_tools(chat_format: ChatFormat, tools=None, tool_choice=None,
               parallel_tool_calls: bool = True) -> ToolPlan:
    """The ToolPlan of one request: tools and tool_choice as OpenAI's request gives them
    (ToolError naming the field when malformed), for a model whose chat format is
    chat_format (LLM.chat_format)."""
    tools = validate_tools(tools)
    choice = validate_tool_choice(tool_choice, tools)
    if not isinstance(parallel_tool_calls, bool):
        raise ToolError(f"parallel_tool_calls must be a boolean, got {parallel_tool_calls!r}")
    function = choice[0] if isinstance(choice, tuple) else None
    fmt = tool_format(chat_format)
    native = template_renders_tools(chat_format)
    writes_prompt = hasattr(_format(fmt), "tools_prompt")
    native_turns = (not native and fmt != "hermes" and writes_prompt
                    and template_renders_tool_turns(chat_format))
    if not native and not writes_prompt:
        fmt = "hermes"     # a format that has no words for a tool list of its own
    return ToolPlan(chat_format=chat_format, tools=tuple(tools),
                    choice="function" if function else choice, function=function,
                    fmt=fmt, native=native, parallel=parallel_tool_calls,
                    native_turns=native_turns)

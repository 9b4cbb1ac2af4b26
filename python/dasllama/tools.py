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
- ``tool_format(chat_format) -> "hermes" | "llama3"``, ``template_renders_tools(chat_format)``,
  ``validate_tools(tools)``, ``validate_tool_choice(tool_choice, tools)``, ``new_call_id()``.
- ``ToolError``: a DasllamaError and a ValueError (the server answers 400).

Shapes are OpenAI's. A tool call: ``{"id": "call_...", "type": "function", "function": {"name":
..., "arguments": "<a JSON text>"}}``. A streamed delta is ``{"content": "..."}`` or
``{"tool_calls": [{"index": n, "id", "type", "function": {"name", "arguments"}}]}``: a call is
sent whole, in one delta, once its text is complete. When a reply holds tool calls and its
other text is only whitespace, content is None (and the stream sends no content for it).
The server reports finish_reason "tool_calls" when tool_calls is not empty.

Formats (chosen from the template text, ``tool_format``):

- ``hermes`` (Qwen 2.5/3, Hermes, and every template that says ``<tool_call>``): each call is
  ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, whitespace around the JSON
  allowed. A block whose JSON does not parse, or lacks a name, stays in content as written.
  A block left open at the end of the text counts when its JSON is complete.
- ``llama3`` (templates that mention ``<|python_tag|>`` or a ``"parameters"`` answer with
  Llama's headers): the whole reply is the call, ``{"name": ..., "parameters": {...}}``,
  optionally after ``<|python_tag|>``; several calls are separated by ``;``. Anything else is
  content. Text starting with ``{`` is held back while streaming until the reply ends.

Templates that render no tools (the plain and Gemma fallbacks, and Jinja templates that never
mention ``tools``) get the tool list in the system prompt, in the fixed text of
``INJECTED_TOOLS_PROMPT`` (hermes format), and the conversation's tool turns rewritten as text:
an assistant's calls as ``<tool_call>`` blocks after its content, and each run of ``tool``
results as one user turn of ``<tool_response>\\n...\\n</tool_response>`` blocks.

tool_choice: "none" renders no tools and parses no calls; "auto" (the default when tools are
given) renders them and parses whatever the model writes; "required" and
``{"type": "function", "function": {"name": ...}}`` also force the output, through a grammar
(dasllama.grammar), to be calls (one or more for "required" unless parallel_tool_calls is False;
exactly one of the named function) whose arguments follow the tool's parameter schema.
"""

from __future__ import annotations

import json
import re
import secrets
import string
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

from .chat import ChatFormat, validate_messages
from .errors import DasllamaError

__all__ = ["ToolError", "ToolPlan", "ToolCallStream", "plan_tools", "parse_tool_calls",
           "tool_format", "template_renders_tools", "validate_tools", "validate_tool_choice",
           "new_call_id", "INJECTED_TOOLS_PROMPT", "TOOL_FORMATS"]

TOOL_FORMATS = ("hermes", "llama3")
HERMES_OPEN, HERMES_CLOSE = "<tool_call>", "</tool_call>"
PYTHON_TAG = "<|python_tag|>"

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

# OpenAI's rule for function names; it also keeps names safe inside grammars and prompts.
_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_ID_CHARS = string.ascii_letters + string.digits
_ID_LENGTH = 24     # random characters after "call_", as OpenAI's ids have


class ToolError(DasllamaError, ValueError):
    """tools or tool_choice that are malformed or do not fit together; the message names the
    field."""


def new_call_id() -> str:
    """A fresh tool call id, "call_" and 24 random letters and digits."""
    return "call_" + "".join(secrets.choice(_ID_CHARS) for _ in range(_ID_LENGTH))


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


def tool_format(chat_format: ChatFormat) -> str:
    """"llama3" for templates that ask for Llama 3's JSON calls, else "hermes" (the templates
    that say <tool_call>, and the format of the injected tools prompt)."""
    t = _template(chat_format)
    if HERMES_OPEN in t:
        return "hermes"
    if PYTHON_TAG in t or ('"parameters"' in t and "<|start_header_id|>" in t):
        return "llama3"
    return "hermes"


# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------

def _arguments_object(arguments):
    """Templates write arguments with tojson and expect a mapping; OpenAI sends a JSON text."""
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments)
        except (ValueError, RecursionError):
            return arguments
        return value if isinstance(value, dict) else arguments
    return {} if arguments is None else arguments


def _for_template(messages: list) -> list:
    out = []
    for m in messages:
        if m.get("tool_calls"):
            calls = []
            for call in m["tool_calls"]:
                fn = dict(call["function"])
                fn["arguments"] = _arguments_object(fn.get("arguments"))
                calls.append(dict(call, type=call.get("type", "function"), function=fn))
            m = dict(m, tool_calls=calls)
        out.append(m)
    return out


def _call_text(fn: dict) -> str:
    body = {"name": fn["name"], "arguments": _arguments_object(fn.get("arguments"))}
    return f"{HERMES_OPEN}\n{json.dumps(body, ensure_ascii=False)}\n{HERMES_CLOSE}"


def _as_text_turns(messages: list, tools: list) -> list:
    """The conversation for a template that knows no tools: tools in the system prompt, calls
    and results as text."""
    out = []
    for m in messages:
        if m.get("tool_calls"):
            parts = ([m["content"]] if m.get("content") else []) + \
                    [_call_text(c["function"]) for c in m["tool_calls"]]
            out.append({"role": m["role"], "content": "\n".join(parts)})
        elif m["role"] == "tool":
            block = f"<tool_response>\n{m['content']}\n</tool_response>"
            if out and out[-1].get("_tool_results"):
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block, "_tool_results": True})
        else:
            out.append({"role": m["role"], "content": m["content"]})
    for m in out:
        m.pop("_tool_results", None)
    if tools:
        block = INJECTED_TOOLS_PROMPT.format(
            tools="\n".join(json.dumps(t, ensure_ascii=False) for t in tools))
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{block}"}
        else:
            out.insert(0, {"role": "system", "content": block})
    return out


# ---------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------

def _call_from_object(obj, make_id: Callable[[], str], args_keys=("arguments", "parameters")):
    """An OpenAI tool call from a parsed {"name", "arguments"} object, or None."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    args = None
    for key in args_keys:
        if key in obj:
            args = obj[key]
            break
    if args is None:
        args = {}
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
    return {"id": make_id(), "type": "function", "function": {"name": obj["name"],
                                                              "arguments": text}}


def _hermes_call(body: str, make_id):
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return _call_from_object(obj, make_id)


def _llama3_calls(text: str, make_id) -> Optional[list]:
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
        call = _call_from_object(obj, make_id, ("parameters", "arguments"))
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


def parse_tool_calls(text: str, fmt: Optional[str] = "hermes",
                     make_id: Optional[Callable[[], str]] = None
                     ) -> Tuple[Optional[str], List[dict]]:
    """(content, tool_calls) of a whole reply in format fmt ("hermes", "llama3", or None for no
    parsing). Malformed calls stay in content; content is None when calls were found and the
    rest is whitespace. make_id gives call ids (default new_call_id)."""
    make_id = make_id or new_call_id
    if fmt is None:
        return text, []
    if fmt == "llama3":
        calls = _llama3_calls(text, make_id)
        return (None, calls) if calls else (text, [])
    if fmt != "hermes":
        raise ToolError(f"tool call format must be one of {TOOL_FORMATS}, got {fmt!r}")
    parts, calls, pos = [], [], 0
    while True:
        start = text.find(HERMES_OPEN, pos)
        if start < 0:
            parts.append(text[pos:])
            break
        parts.append(text[pos:start])
        body_at = start + len(HERMES_OPEN)
        end = text.find(HERMES_CLOSE, body_at)
        body = text[body_at:] if end < 0 else text[body_at:end]
        call = _hermes_call(body, make_id)
        if call is not None:
            calls.append(call)
        else:
            parts.append(text[start:] if end < 0 else text[start:end + len(HERMES_CLOSE)])
        if end < 0:
            break
        pos = end + len(HERMES_CLOSE)
    content = "".join(parts)
    return (None if calls and not content.strip() else content), calls


def _longest_prefix_suffix(text: str, token: str) -> int:
    """Length of the longest end of text that is a proper start of token."""
    for k in range(min(len(token) - 1, len(text)), 0, -1):
        if text.endswith(token[:k]):
            return k
    return 0


class ToolCallStream:
    """Text pieces in, OpenAI streaming deltas out (see the module docstring). Content before a
    call streams as it comes (trailing whitespace waits for what follows it); text from a call's
    opening on is held until the call is complete. The deltas of a whole reply add up to what
    parse_tool_calls gives for it, however the text is split."""

    def __init__(self, fmt: Optional[str] = "hermes",
                 make_id: Optional[Callable[[], str]] = None):
        if fmt is not None and fmt not in TOOL_FORMATS:
            raise ToolError(f"tool call format must be one of {TOOL_FORMATS}, got {fmt!r}")
        self.fmt = fmt
        self._make_id = make_id or new_call_id
        self._buf = ""            # text not yet resolved
        self._in_call = False     # hermes: inside <tool_call>
        self._mode = None         # llama3: None undecided, "content" or "hold"
        self._ws = ""             # trailing whitespace of content, not yet sent
        self._sent_text = False   # content other than whitespace has been sent
        self._calls = 0
        self._finished = False

    # -- output helpers ------------------------------------------------------------------
    def _content(self, text: str, out: list):
        text = self._ws + text
        body = text.rstrip()
        self._ws = text[len(body):]
        if body:
            self._sent_text = True
            out.append({"content": body})

    def _call(self, call: dict, out: list):
        out.append({"tool_calls": [dict(call, index=self._calls)]})
        self._calls += 1

    # -- input ---------------------------------------------------------------------------
    def push(self, text: str) -> List[dict]:
        """Deltas that text makes certain."""
        if self._finished:
            raise RuntimeError("push after finish")
        out: list = []
        if self.fmt is None:
            if text:
                out.append({"content": text})
            return out
        self._buf += text
        if self.fmt == "llama3":
            self._push_llama3(out)
        else:
            self._push_hermes(out)
        return out

    def _push_hermes(self, out: list):
        while True:
            if self._in_call:
                end = self._buf.find(HERMES_CLOSE)
                if end < 0:
                    return
                body, self._buf = self._buf[:end], self._buf[end + len(HERMES_CLOSE):]
                self._in_call = False
                call = _hermes_call(body, self._make_id)
                if call is not None:
                    self._call(call, out)
                else:
                    self._content(HERMES_OPEN + body + HERMES_CLOSE, out)
            else:
                start = self._buf.find(HERMES_OPEN)
                if start < 0:
                    keep = _longest_prefix_suffix(self._buf, HERMES_OPEN)
                    cut = len(self._buf) - keep
                    self._content(self._buf[:cut], out)
                    self._buf = self._buf[cut:]
                    return
                self._content(self._buf[:start], out)
                self._buf = self._buf[start + len(HERMES_OPEN):]
                self._in_call = True

    def _push_llama3(self, out: list):
        if self._mode is None:
            head = self._buf.lstrip()
            if not head or (PYTHON_TAG.startswith(head) and head != PYTHON_TAG):
                return      # only whitespace, or what may still become <|python_tag|>
            self._mode = "hold" if head.startswith(("{", PYTHON_TAG)) else "content"
        if self._mode == "content" and self._buf:
            out.append({"content": self._buf})
            self._buf = ""

    def finish(self) -> List[dict]:
        """The deltas of whatever was held, at the end of the reply."""
        if self._finished:
            return []
        self._finished = True
        out: list = []
        if self.fmt == "llama3":
            if self._buf:
                content, calls = parse_tool_calls(self._buf, "llama3", self._make_id)
                for call in calls:
                    self._call(call, out)
                if content:
                    out.append({"content": content})
            return out
        if self.fmt == "hermes":
            if self._in_call:
                call = _hermes_call(self._buf, self._make_id)
                if call is not None:
                    self._call(call, out)
                else:
                    self._content(HERMES_OPEN + self._buf, out)
            else:
                self._content(self._buf, out)
            self._buf = ""
            if self._ws and (self._sent_text or not self._calls):
                out.append({"content": self._ws})
            self._ws = ""
        return out

    @property
    def n_calls(self) -> int:
        """Tool calls sent so far (finish_reason "tool_calls" when above 0 at the end)."""
        return self._calls


# ---------------------------------------------------------------------------------------------
# The plan for one request
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ToolPlan:
    """How one request's tools are rendered, enforced and parsed (build it with plan_tools).

    tools: the validated tools offered to the model (empty for tool_choice "none"); choice:
    "none", "auto", "required" or "function"; function: the forced function's name; fmt:
    "hermes" or "llama3"; native: the template renders tools itself; parallel: "required" may
    give several calls."""

    chat_format: ChatFormat
    tools: tuple
    choice: str
    function: Optional[str]
    fmt: str
    native: bool
    parallel: bool

    @property
    def active(self) -> bool:
        """True when the reply may hold tool calls (they are parsed out)."""
        return self.choice != "none" and bool(self.tools)

    def render(self, messages, add_generation_prompt: bool = True) -> str:
        """The prompt text: the conversation (tool calls and tool results included) and, unless
        tool_choice is "none", the tools."""
        messages = validate_messages(messages)
        tools = list(self.tools) if self.active else []
        if self.native:
            variables = {"tools": tools} if tools else {}
            return self.chat_format.render(_for_template(messages), add_generation_prompt,
                                           **variables)
        return self.chat_format.render(_as_text_turns(messages, tools), add_generation_prompt)

    def constraint(self, llm_or_tokenizer, extra_eog: Sequence[int] = ()):
        """A GrammarConstraint forcing tool calls for "required" and a named function; None
        otherwise. GrammarError (a 400) naming the tool whose parameters cannot be enforced."""
        if self.choice not in ("required", "function") or not self.tools:
            return None
        from . import grammar
        key = "parameters" if self.fmt == "llama3" else "arguments"
        bodies = []
        for i, t in enumerate(self.tools):
            name = t["function"]["name"]
            if self.choice == "function" and name != self.function:
                continue
            params = t["function"].get("parameters") or {"type": "object"}
            grammar.check_json_schema(params, f"tools[{i}].function.parameters")
            bodies.append({"type": "object", "properties": {"name": {"const": name}, key: params},
                           "required": ["name", key], "additionalProperties": False})
        body = bodies[0] if len(bodies) == 1 else {"anyOf": bodies}
        body = dict(body, **{"x-guidance": {"whitespace_pattern": grammar.JSON_WHITESPACE}})
        several = self.choice == "required" and self.parallel
        if self.fmt == "llama3":
            start = 'start: call (";" " "? call)*' if several else "start: call"
            lark = f"{start}\ncall: %json {json.dumps(body)}\n"
        else:
            start = 'start: call ("\\n" call)*' if several else "start: call"
            lark = (f"{start}\n"
                    f"call: {json.dumps(HERMES_OPEN + chr(10))} body "
                    f"{json.dumps(chr(10) + HERMES_CLOSE)}\n"
                    f"body: %json {json.dumps(body)}\n")
        return grammar.constraint_for_lark(llm_or_tokenizer, lark, extra_eog=extra_eog)

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
    return ToolPlan(chat_format=chat_format, tools=tuple(tools),
                    choice="function" if function else choice, function=function,
                    fmt=tool_format(chat_format), native=template_renders_tools(chat_format),
                    parallel=parallel_tool_calls)

"""Tool calls through the live server on a model whose chat template renders tools natively:
a random-weight qwen2 model (byte-level BPE vocabulary) carrying the Qwen2.5-style template of
tests/tool_templates.py, driven by the real openai client.

- The prompt the server evaluates is the conversation as the template writes it, tool list
  included: its token count (usage.prompt_tokens) equals /tokenize of the text written out by
  hand here, and a greedy completion from those tokens continues exactly as the chat reply.
- A forced call (tool_choice naming a function) comes back as OpenAI tool_calls whose arguments
  validate against the tool's parameters, finish_reason "tool_calls", streamed and not.
- The call and a role "tool" result fed back render as the template writes them and get a
  normal reply.
- tool_choice "none" renders no tools; "auto" renders them and leaves the reply free.

A random-weight model writes whatever the grammar lets it, so the checks are about rendering,
the constraint and the parser, not about what a trained model would choose."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from requires import require
from test_server_support import client, httpx, serve, spec
from tool_templates import QWEN_TOOLS_TEMPLATE

from dasllama.testing import write_random_model

jsonschema = require("jsonschema")
require("llguidance")

CTX = 2048
SLOTS = 2
# A forced call's arguments are bounded by the parameters below (a 12-character city, a unit,
# a 3-letter zone); on the test vocabulary a whole call takes well under this.
CALL_TOKENS = 200
FREE_TOKENS = 12           # free replies: enough to compare texts, short to keep the file fast

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["c", "f"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The time in a zone",
    "parameters": {"type": "object", "properties": {
        "zone": {"type": "string", "pattern": "^[A-Z]{3}$"}},
        "required": ["zone"], "additionalProperties": False}}}
TOOLS = [WEATHER, TIME]
PARAMETERS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
QUESTION = "Weather in Paris?"
USER = [{"role": "user", "content": QUESTION}]
FORCE_WEATHER = {"type": "function", "function": {"name": "get_weather"}}


# --------------------------------------------------------------------------------------------
# The prompts as the template writes them (the oracle: written out here, not rendered by the
# code under test)
# --------------------------------------------------------------------------------------------
def system_with_tools(tools) -> str:
    listed = "".join("\n" + json.dumps(t, ensure_ascii=False) for t in tools)
    return ("<|im_start|>system\nYou are a helpful assistant.\n\n# Tools\n\nFunctions you may "
            "call are listed inside <tools></tools>:\n<tools>" + listed + "\n</tools>\n\n"
            "To call one, reply with a JSON object inside <tool_call></tool_call>:\n"
            "<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
            "</tool_call><|im_end|>\n")


def user_turn(text: str) -> str:
    return f"<|im_start|>user\n{text}<|im_end|>\n"


GENERATION_PROMPT = "<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    path = write_random_model(tmp_path_factory.mktemp("tools_native") / "qwen2-tools.gguf",
                              "qwen2", tokenizer="bpe", chat_template=QWEN_TOOLS_TEMPLATE,
                              seed=11)
    with serve([spec("qwen", path)], n_ctx=CTX, parallel=SLOTS) as srv:
        yield srv


@pytest.fixture(scope="module")
def api(server):
    return client(server)


@pytest.fixture(scope="module")
def tokenize(server):
    def ids(text: str) -> list:
        r = httpx.post(server.url + "/tokenize", timeout=60,
                       json={"model": "qwen", "content": text, "add_special": True,
                             "parse_special": True})
        assert r.status_code == 200, r.text
        return r.json()["tokens"]
    return ids


def chat(api, **kw):
    kw.setdefault("model", "qwen")
    kw.setdefault("messages", USER)
    return api.chat.completions.create(**kw)


def streamed_chat(api, **kw):
    """(content or None, {index: {"id", "name", "arguments"}}, finish_reason) of a streamed
    reply, accumulated as a client does."""
    content, calls, finish = "", {}, None
    for chunk in chat(api, stream=True, **kw):
        for c in chunk.choices:
            finish = c.finish_reason or finish
            content += c.delta.content or ""
            for d in c.delta.tool_calls or []:
                entry = calls.setdefault(d.index, {"id": "", "name": "", "arguments": ""})
                entry["id"] += d.id or ""
                entry["name"] += d.function.name or ""
                entry["arguments"] += d.function.arguments or ""
    return content or None, calls, finish


def check_call(call, name: str = None):
    """A tool call of one of TOOLS (of `name` when given) whose arguments follow its schema;
    returns the parsed arguments."""
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name in PARAMETERS
    if name is not None:
        assert call.function.name == name
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, PARAMETERS[call.function.name])
    return args


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------
def test_the_prompt_lists_the_tools_as_the_template_writes_them(api, tokenize):
    expected = system_with_tools(TOOLS) + user_turn(QUESTION) + GENERATION_PROMPT
    assert json.dumps(WEATHER) in expected and json.dumps(TIME) in expected
    r = chat(api, tools=TOOLS, tool_choice="auto", max_tokens=1)
    assert r.usage.prompt_tokens == len(tokenize(expected))
    # Negative control: the count tells these prompts apart (a tool missing, a description
    # shortened); the next test checks the tokens themselves.
    fewer = system_with_tools([WEATHER]) + user_turn(QUESTION) + GENERATION_PROMPT
    shorter = expected.replace("Current weather of a city", "Weather")
    assert len({len(tokenize(expected)), len(tokenize(fewer)), len(tokenize(shorter))}) == 3


def test_the_evaluated_tokens_are_those_of_the_written_prompt(api, tokenize):
    # Equal counts could hide a different text: a greedy completion from the written prompt's
    # tokens must continue exactly as the chat reply does.
    ids = tokenize(system_with_tools(TOOLS) + user_turn(QUESTION) + GENERATION_PROMPT)
    reply = chat(api, tools=TOOLS, max_tokens=FREE_TOKENS, temperature=0)
    content = reply.choices[0].message.content
    assert content and reply.choices[0].message.tool_calls is None, reply
    completion = api.completions.create(model="qwen", prompt=ids, max_tokens=FREE_TOKENS,
                                        temperature=0).choices[0].text
    assert completion.startswith(content), (completion, content)
    # Negative control: without the tool list the greedy reply is another text.
    bare = chat(api, max_tokens=FREE_TOKENS, temperature=0).choices[0].message.content
    assert bare != content


# --------------------------------------------------------------------------------------------
# Forced calls
# --------------------------------------------------------------------------------------------
def test_a_forced_call_follows_the_tool_schema(api):
    def forced(seed):
        return chat(api, tools=TOOLS, tool_choice=FORCE_WEATHER, max_tokens=CALL_TOKENS,
                    temperature=1.0, seed=seed)
    with ThreadPoolExecutor(3) as pool:
        replies = list(pool.map(forced, (1, 2, 3)))
    arguments = []
    for r in replies:
        choice = r.choices[0]
        assert choice.finish_reason == "tool_calls", choice
        assert choice.message.content is None, choice.message.content
        (call,) = choice.message.tool_calls
        arguments.append(check_call(call, "get_weather"))
        assert r.usage.completion_tokens < CALL_TOKENS
    assert len({json.dumps(a) for a in arguments}) > 1, f"seeds 1-3 called alike: {arguments}"


def test_a_streamed_forced_call_equals_the_plain_one(api):
    kw = dict(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_time"}},
              max_tokens=CALL_TOKENS, temperature=1.0, seed=5)
    plain = chat(api, **kw).choices[0]
    (call,) = plain.message.tool_calls
    check_call(call, "get_time")
    content, calls, finish = streamed_chat(api, **kw)
    assert finish == "tool_calls" and content is None
    assert list(calls) == [0]
    assert calls[0]["id"].startswith("call_")
    assert (calls[0]["name"], calls[0]["arguments"]) == (call.function.name,
                                                         call.function.arguments)


def test_without_forcing_no_call_comes_out(api):
    # Negative control for the forced calls: the same requests with tool_choice "auto".
    for seed in (1, 2, 3):
        r = chat(api, tools=TOOLS, tool_choice="auto", max_tokens=60, temperature=1.0,
                 seed=seed)
        assert r.choices[0].message.tool_calls is None, r.choices[0].message
        assert r.choices[0].finish_reason in ("stop", "length")


def test_required_calls_only_the_given_tools(api):
    r = chat(api, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
             max_tokens=CALL_TOKENS, seed=8)
    assert r.choices[0].finish_reason == "tool_calls"
    (call,) = r.choices[0].message.tool_calls
    check_call(call)


# --------------------------------------------------------------------------------------------
# The result fed back
# --------------------------------------------------------------------------------------------
def test_a_tool_result_fed_back_gets_a_normal_reply(api, tokenize):
    first = chat(api, tools=TOOLS, tool_choice=FORCE_WEATHER, max_tokens=CALL_TOKENS, seed=7)
    (call,) = first.choices[0].message.tool_calls
    args = check_call(call, "get_weather")
    history = USER + [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"}]
    follow = chat(api, messages=history, tools=TOOLS, max_tokens=FREE_TOKENS, temperature=0)
    choice = follow.choices[0]
    assert choice.finish_reason in ("stop", "length")
    assert choice.message.tool_calls is None and isinstance(choice.message.content, str)
    # The call and its result are in the prompt as the template writes them.
    written = (system_with_tools(TOOLS) + user_turn(QUESTION)
               + "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", "
               + "\"arguments\": " + json.dumps(args, ensure_ascii=False) + "}\n</tool_call>"
               + "<|im_end|>\n"
               + "<|im_start|>user\n<tool_response>\nsunny, 21 C\n</tool_response><|im_end|>\n"
               + GENERATION_PROMPT)
    assert follow.usage.prompt_tokens == len(tokenize(written))
    # Streamed, the same reply.
    content, calls, finish = streamed_chat(api, messages=history, tools=TOOLS,
                                           max_tokens=FREE_TOKENS, temperature=0)
    assert (content or "", calls, finish) == (choice.message.content, {}, choice.finish_reason)


# --------------------------------------------------------------------------------------------
# tool_choice "none" and "auto"
# --------------------------------------------------------------------------------------------
def test_tool_choice_none_renders_no_tools_and_calls_nothing(api, tokenize):
    bare = user_turn(QUESTION) + GENERATION_PROMPT
    none = chat(api, tools=TOOLS, tool_choice="none", max_tokens=FREE_TOKENS, temperature=0)
    assert none.usage.prompt_tokens == len(tokenize(bare))
    no_tools = chat(api, max_tokens=FREE_TOKENS, temperature=0)
    assert none.choices[0].message.content == no_tools.choices[0].message.content
    assert none.choices[0].message.tool_calls is None
    assert none.choices[0].finish_reason in ("stop", "length")


def test_tool_choice_auto_renders_the_tools_and_streams_like_plain(api, tokenize):
    kw = dict(tools=TOOLS, tool_choice="auto", max_tokens=FREE_TOKENS, temperature=0)
    plain = chat(api, **kw)
    choice = plain.choices[0]
    assert plain.usage.prompt_tokens == len(tokenize(
        system_with_tools(TOOLS) + user_turn(QUESTION) + GENERATION_PROMPT))
    assert choice.message.tool_calls is None and choice.finish_reason in ("stop", "length")
    content, calls, finish = streamed_chat(api, **kw)
    assert (content, calls, finish) == (choice.message.content, {}, choice.finish_reason)

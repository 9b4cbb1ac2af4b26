"""Tool calls and JSON output through the server (dasllama.tools and dasllama.grammar behind
/v1/chat/completions): a forced call comes back as OpenAI tool_calls whose arguments follow
the tool's schema, whole or streamed; tool results go back in as role "tool" messages; a
json_schema response validates. A random-weight model writes whatever the grammar lets it,
so every check here is about what the constraint and the parser guarantee."""

from __future__ import annotations

import json

import pytest

from test_server_support import assert_error_shape, client, httpx, random_model, serve, spec
from requires import require

jsonschema = require("jsonschema")
require("llguidance")

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
                   "required": ["city"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
FORCED = {"type": "function", "function": {"name": "get_weather"}}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    path = random_model(tmp_path_factory.mktemp("tools_model"), "tools")
    with serve([spec("tools", path)], n_ctx=2048, parallel=2) as srv:
        yield srv


@pytest.fixture(scope="module")
def api(server):
    return client(server)


def test_forced_tool_call_follows_the_schema(api):
    r = api.chat.completions.create(model="tools", messages=ASK, tools=[WEATHER, TIME],
                                    tool_choice=FORCED, max_tokens=120, temperature=0.8,
                                    seed=3)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    assert call.id.startswith("call_")
    jsonschema.validate(json.loads(call.function.arguments),
                        WEATHER["function"]["parameters"])


def test_streamed_forced_call_equals_the_plain_one(api):
    kw = dict(model="tools", messages=ASK, tools=[WEATHER], tool_choice=FORCED, max_tokens=120,
              temperature=0.8, seed=5)
    plain = api.chat.completions.create(**kw).choices[0].message.tool_calls[0]
    calls, finish = {}, None
    for chunk in api.chat.completions.create(stream=True, **kw):
        for c in chunk.choices:
            finish = c.finish_reason or finish
            for d in c.delta.tool_calls or []:
                entry = calls.setdefault(d.index, {"name": "", "arguments": ""})
                entry["name"] += d.function.name or ""
                entry["arguments"] += d.function.arguments or ""
    assert finish == "tool_calls"
    assert calls == {0: {"name": plain.function.name, "arguments": plain.function.arguments}}


def test_tool_results_feed_back_as_tool_messages(api):
    first = api.chat.completions.create(model="tools", messages=ASK, tools=[WEATHER],
                                        tool_choice=FORCED, max_tokens=120, seed=7)
    call = first.choices[0].message.tool_calls[0]
    history = ASK + [{"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                     {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"}]
    follow = api.chat.completions.create(model="tools", messages=history, tools=[WEATHER],
                                         max_tokens=8, temperature=0)
    assert follow.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert follow.usage.prompt_tokens > first.usage.prompt_tokens


def test_tool_choice_none_renders_no_tools(api):
    with_tools = api.chat.completions.create(model="tools", messages=ASK, tools=[WEATHER],
                                             max_tokens=1)
    none = api.chat.completions.create(model="tools", messages=ASK, tools=[WEATHER],
                                       tool_choice="none", max_tokens=1)
    bare = api.chat.completions.create(model="tools", messages=ASK, max_tokens=1)
    assert none.usage.prompt_tokens == bare.usage.prompt_tokens
    assert with_tools.usage.prompt_tokens > bare.usage.prompt_tokens


def test_json_schema_response_validates(api):
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10},
                                               "age": {"type": "integer", "minimum": 0,
                                                       "maximum": 120}},
              "required": ["name", "age"], "additionalProperties": False}
    r = api.chat.completions.create(
        model="tools", messages=ASK, max_tokens=100, seed=9,
        response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": schema}})
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(r.choices[0].message.content), schema)


def test_bad_tools_are_400s_naming_the_field(server):
    url = server.url + "/v1/chat/completions"
    r = httpx.post(url, json={"model": "tools", "messages": ASK, "tools": [WEATHER],
                              "tool_choice": {"type": "function",
                                              "function": {"name": "unknown"}}})
    assert_error_shape(r, 400, "tool_choice")
    r = httpx.post(url, json={"model": "tools", "messages": ASK, "tools": [WEATHER, WEATHER]})
    assert_error_shape(r, 400, "tools")
    r = httpx.post(url, json={"model": "tools", "messages": ASK, "tool_choice": "required"})
    assert_error_shape(r, 400, "tool_choice")
    r = httpx.post(url, json={"model": "tools", "messages": ASK, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "http://x/y"}}}})
    assert_error_shape(r, 400, "response_format")

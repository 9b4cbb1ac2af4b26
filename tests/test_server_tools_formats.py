"""Tool calls through the live server in the Mistral, DeepSeek and Gemma formats, with the real
openai client, on random-weight models carrying the templates of tests/test_tool_formats.py:

- mistral: a llama model whose vocabulary has ``[TOOL_CALLS]`` and ``[ARGS]`` as control
  tokens (as Mistral's files have them) and the v11 template. The engine's text leaves control
  tokens out, so these calls parse only because the chat route writes the format's markers
  back into the reply (ToolPlan.rendered_tokens).
- mistral03: the v0.3 template, which refuses call ids that are not 9 characters long; OpenAI
  clients send "call_..." ids, which the server maps.
- deepseek: the R1 template (no tool list of its own: the tools go into the system prompt).
- gemma: Gemma 3's template (no tool support: tool_code / tool_output blocks).

Random weights write whatever the grammar lets them; the checks are about rendering, the
constraint, the parsers and the response shape."""

from __future__ import annotations

import json

import pytest

from requires import require
from test_server_support import client, serve, spec
from test_server_tools_native import FORCE_WEATHER, PARAMETERS, TOOLS, USER, chat, streamed_chat
from test_tool_formats import DEEPSEEK_R1, GEMMA3, MISTRAL_V03, MISTRAL_V11, write_mistral_model

from dasllama.testing import write_random_model

jsonschema = require("jsonschema")
require("llguidance")

CTX = 2048
CALL_TOKENS = 400          # a forced call of the tools' bounded parameters takes far fewer
FREE_TOKENS = 12
MODELS = ("mistral", "mistral03", "deepseek", "gemma")


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    d = tmp_path_factory.mktemp("tool_formats_server")
    specs = [spec("mistral", write_mistral_model(d / "mistral.gguf", MISTRAL_V11))]
    for name, template in (("mistral03", MISTRAL_V03), ("deepseek", DEEPSEEK_R1),
                           ("gemma", GEMMA3)):
        specs.append(spec(name, write_random_model(d / f"{name}.gguf", "qwen2", tokenizer="bpe",
                                                   chat_template=template, seed=11)))
    with serve(specs, n_ctx=CTX, parallel=2) as srv:
        yield client(srv)


def check_call(model: str, call, name: str = None) -> dict:
    """A tool call of one of TOOLS (of name when given), arguments valid; returns them."""
    assert call.type == "function"
    if model.startswith("mistral"):
        assert len(call.id) == 9 and call.id.isalnum(), call.id     # what the templates take
    else:
        assert call.id.startswith("call_")
    assert call.function.name == (name or call.function.name) and call.function.name in PARAMETERS
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, PARAMETERS[call.function.name])
    return args


@pytest.mark.parametrize("model", MODELS)
def test_a_forced_call_comes_back_as_tool_calls(api, model):
    r = chat(api, model=model, tools=TOOLS, tool_choice=FORCE_WEATHER, max_tokens=CALL_TOKENS,
             temperature=1.0, seed=1)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert choice.message.content is None, choice.message.content
    (call,) = choice.message.tool_calls
    check_call(model, call, "get_weather")
    assert r.usage.completion_tokens < CALL_TOKENS


@pytest.mark.parametrize("model", MODELS)
def test_a_streamed_forced_call_equals_the_plain_one(api, model):
    kw = dict(model=model, tools=TOOLS, max_tokens=CALL_TOKENS, temperature=1.0, seed=5,
              tool_choice="required", parallel_tool_calls=False)
    plain = chat(api, **kw).choices[0]
    (call,) = plain.message.tool_calls
    check_call(model, call)
    content, calls, finish = streamed_chat(api, **kw)
    assert (content, finish, list(calls)) == (None, "tool_calls", [0])
    assert (calls[0]["name"], calls[0]["arguments"]) == (call.function.name,
                                                         call.function.arguments)


@pytest.mark.parametrize("model", MODELS)
def test_a_result_fed_back_gets_a_normal_reply(api, model):
    first = chat(api, model=model, tools=TOOLS, tool_choice=FORCE_WEATHER,
                 max_tokens=CALL_TOKENS, seed=7)
    (call,) = first.choices[0].message.tool_calls
    for call_id in (call.id, "call_" + "q" * 24):    # as returned, and as OpenAI writes ids
        history = USER + [
            {"role": "assistant", "content": None,
             "tool_calls": [dict(call.model_dump(), id=call_id)]},
            {"role": "tool", "tool_call_id": call_id, "content": "sunny, 21 C"}]
        follow = chat(api, model=model, messages=history, tools=TOOLS,
                      max_tokens=FREE_TOKENS, temperature=0)
        choice = follow.choices[0]
        assert choice.finish_reason in ("stop", "length")
        assert choice.message.tool_calls is None and isinstance(choice.message.content, str)
        assert follow.usage.prompt_tokens > first.usage.prompt_tokens


@pytest.mark.parametrize("model", MODELS)
def test_without_forcing_no_call_comes_out(api, model):
    # Negative control for the forced calls: the same model and tools, tool_choice "auto".
    for seed in (1, 2):
        r = chat(api, model=model, tools=TOOLS, tool_choice="auto", max_tokens=40,
                 temperature=1.0, seed=seed)
        assert r.choices[0].message.tool_calls is None, r.choices[0].message
        assert r.choices[0].finish_reason in ("stop", "length")

"""dasllama.tools: tool definitions rendered through chat templates, tool calls parsed back
(whole and streamed), forced calls through a grammar, and a round trip on a random-weight qwen2
model whose template has tools."""

import codecs
import itertools
import json

import numpy as np
import pytest

import dasllama
from requires import require
from dasllama.chat import ChatFormat
from dasllama.testing import CHATML_TEMPLATE, write_random_model
from tool_templates import LLAMA3_TOOLS_TEMPLATE, QWEN_TOOLS_TEMPLATE
from dasllama.tools import (INJECTED_TOOLS_PROMPT, ToolCallStream, ToolError, parse_tool_calls,
                            plan_tools, template_renders_tools, tool_format)

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["c", "f"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {
        "zone": {"type": "string", "pattern": "^[A-Z]{3}$"}},
        "required": ["zone"], "additionalProperties": False}}}
USER = [{"role": "user", "content": "Weather in Paris?"}]


def ids_from(prefix="call_"):
    counter = itertools.count()
    return lambda: f"{prefix}{next(counter)}"


def call(name, arguments, id_):
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": arguments}}


# ---------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------

def test_hermes_calls_are_parsed():
    text = ('Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", '
            '"unit": "c"}}\n</tool_call>\n<tool_call>{"name":"get_time","arguments":"{\\"zone\\": '
            '\\"CET\\"}"}</tool_call>')
    content, calls = parse_tool_calls(text, "hermes", ids_from())
    assert content == "Let me look.\n\n"
    assert calls == [call("get_weather", '{"city": "Paris", "unit": "c"}', "call_0"),
                     call("get_time", '{"zone": "CET"}', "call_1")]
    # only whitespace besides the calls: content None; arguments absent: {}
    assert parse_tool_calls('\n<tool_call>{"name": "f"}</tool_call>\n', "hermes", ids_from()) == \
        (None, [call("f", "{}", "call_0")])
    # braces and tags inside strings
    body = '{"name": "f", "arguments": {"s": "}</tool_ca{"}}'
    assert parse_tool_calls(f"<tool_call>{body}</tool_call>", "hermes", ids_from())[1] == \
        [call("f", '{"s": "}</tool_ca{"}', "call_0")]


@pytest.mark.parametrize("text", [
    '<tool_call>{"name": "f", "arguments": {"a": 1}</tool_call>',        # a brace short
    "<tool_call>not json</tool_call>",
    '<tool_call>{"arguments": {}}</tool_call>',                           # no name
    '<tool_call>{"name": "", "arguments": {}}</tool_call>',
    '<tool_call>{"name": "f", "arguments": [1]}</tool_call>',
    '<tool_call>{"name": "f", "arguments": "{not json"}</tool_call>',
    '<tool_call>["f"]</tool_call>',
    '<tool_call>{"name": "f", "arguments": {"a":',                       # cut off
    "<tool_call>",
    "plain text with a <tool_ca",
])
def test_malformed_hermes_calls_stay_content(text):
    assert parse_tool_calls(text, "hermes") == (text, [])


def test_hermes_edge_cases():
    ok = '{"name": "f", "arguments": {}}'
    # a malformed block, then a good one: the bad stays content
    content, calls = parse_tool_calls(f"<tool_call>x</tool_call> <tool_call>{ok}</tool_call>",
                                      "hermes", ids_from())
    assert content == "<tool_call>x</tool_call> " and len(calls) == 1
    # a block left open whose JSON is complete counts (generation ended at the turn end)
    assert parse_tool_calls(f"<tool_call>\n{ok}\n", "hermes", ids_from()) == \
        (None, [call("f", "{}", "call_0")])
    # no calls: content kept as it is, whitespace included
    assert parse_tool_calls("  \n", "hermes") == ("  \n", [])
    assert parse_tool_calls("", "hermes") == ("", [])


def test_llama3_calls_are_parsed():
    one = '{"name": "get_weather", "parameters": {"city": "Paris", "unit": "c"}}'
    assert parse_tool_calls(one, "llama3", ids_from()) == \
        (None, [call("get_weather", '{"city": "Paris", "unit": "c"}', "call_0")])
    assert parse_tool_calls(f"<|python_tag|>{one}", "llama3", ids_from())[1][0]["function"][
        "name"] == "get_weather"
    two = f' {one}; {{"name": "get_time", "arguments": {{"zone": "CET"}}}}\n'
    content, calls = parse_tool_calls(two, "llama3", ids_from())
    assert content is None and [c["function"]["name"] for c in calls] == ["get_weather", "get_time"]
    # a separator with nothing after it
    assert parse_tool_calls(one + ";", "llama3", ids_from())[1][0]["function"]["name"] == \
        "get_weather"


@pytest.mark.parametrize("text", [
    "The weather is fine.",
    '{"answer": 42}',                                   # JSON, but not a call
    '{"name": "f", "parameters": {"a": 1}',             # cut off
    '{"name": "f", "parameters": {}} and then text',
    "<|python_tag|>nothing",
    "Sure: " + '{"name": "f", "parameters": {}}',       # a call only when it is the whole reply
])
def test_llama3_non_calls_stay_content(text):
    assert parse_tool_calls(text, "llama3", ids_from()) == (text, [])


def test_bad_format_name():
    with pytest.raises(ToolError, match="format"):
        parse_tool_calls("x", "pythonic")
    with pytest.raises(ToolError, match="format"):
        ToolCallStream("pythonic")


# ---------------------------------------------------------------------------------------------
# Streaming == one shot, wherever the text is split
# ---------------------------------------------------------------------------------------------

STREAM_TEXTS = {
    "hermes": [
        "Hello there, no tools here.\n",
        'Let me check. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
        '</tool_call>\n<tool_call>{"name": "get_time", "arguments": {"zone": "CET"}}</tool_call>'
        " Done.  ",
        '\n<tool_call>{"name": "f", "arguments": {}}</tool_call>\n',
        "<tool_call>broken</tool_call> then <tool_call>{\"name\": \"g\"}</tool_call>",
        'Text <tool_call>{"name": "f", "arguments": {"x": "</tool_call>"}}',
        "a <tool_ca b <tool_call",
        '<tool_call>{"name": "open", "arguments": {}}',
        "   ",
        "",
    ],
    "llama3": [
        '{"name": "get_weather", "parameters": {"city": "Paris"}}',
        '  <|python_tag|>{"name": "f", "parameters": {}}; {"name": "g", "parameters": {}}',
        "<|python_ta and text",
        "Just words. {\"name\": \"f\", \"parameters\": {}}",
        '{"not": "a call"}',
        "\n \n",
        "<|python_tag|>",
    ],
}


def collect(deltas):
    """The reply that a client accumulating these deltas holds."""
    content, calls = "", []
    for d in deltas:
        assert set(d) in ({"content"}, {"tool_calls"}), d
        if "content" in d:
            assert d["content"], "empty content delta"
            content += d["content"]
        else:
            for c in d["tool_calls"]:
                assert c.pop("index") == len(calls)
                calls.append(c)
    return (None if calls and not content else content), calls


def streamed(fmt, pieces):
    s = ToolCallStream(fmt, ids_from())
    deltas = [d for p in pieces for d in s.push(p)] + s.finish()
    return collect(deltas)


@pytest.mark.parametrize("fmt", ["hermes", "llama3"])
def test_stream_equals_one_shot_at_every_split(fmt):
    for text in STREAM_TEXTS[fmt]:
        whole = parse_tool_calls(text, fmt, ids_from())
        for k in range(len(text) + 1):
            assert streamed(fmt, [text[:k], text[k:]]) == whole, (text, k)
        assert streamed(fmt, list(text)) == whole, text
        for a, b in itertools.combinations(range(0, len(text) + 1, 7), 2):
            assert streamed(fmt, [text[:a], text[a:b], text[b:]]) == whole, (text, a, b)


def test_stream_sends_content_before_a_call_and_holds_the_call():
    s = ToolCallStream("hermes", ids_from())
    assert s.push("I will check. ") == [{"content": "I will check."}]    # the space waits
    assert s.push("<tool_") == []
    assert s.push('call>{"name": "f", "arguments": {"a": 1}}') == []
    assert s.push("</tool_call>") == [{"tool_calls": [dict(call("f", '{"a": 1}', "call_0"),
                                                           index=0)]}]
    assert s.push(" ok") == [{"content": "  ok"}]
    assert s.finish() == [] and s.n_calls == 1
    # llama3: words stream at once, a reply that opens with "{" waits for the end
    s = ToolCallStream("llama3", ids_from())
    assert s.push("Hi") == [{"content": "Hi"}]
    s = ToolCallStream("llama3", ids_from())
    assert s.push('{"name": "f", "parameters": {}}') == []
    assert s.finish() == [{"tool_calls": [dict(call("f", "{}", "call_0"), index=0)]}]


# ---------------------------------------------------------------------------------------------
# tools / tool_choice validation
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("tools,choice,text", [
    ("get_weather", None, "tools must be a list"),
    ([{"type": "function"}], None, r"tools\[0\].function must be an object"),
    ([{"type": "code", "function": {"name": "f"}}], None, r"tools\[0\].type must be 'function'"),
    ([{"function": {"name": "a b"}}], None, r"tools\[0\].function.name must be"),
    ([WEATHER, WEATHER], None, r"tools\[1\].function.name 'get_weather' is given twice"),
    ([{"function": {"name": "f", "parameters": "x"}}], None, "parameters must be a JSON schema"),
    ([WEATHER], "sometimes", "tool_choice must be 'none', 'auto', 'required'"),
    ([WEATHER], {"type": "function", "function": {"name": "nope"}}, "'nope' is not among"),
    ([WEATHER], {"type": "function"}, "tool_choice must look like"),
    ([WEATHER], 3, "tool_choice must be a string or an object"),
    (None, "required", "needs tools"),
    ([], {"type": "function", "function": {"name": "f"}}, "not among the tools"),
])
def test_bad_tools_and_choices(tools, choice, text):
    with pytest.raises(ToolError, match=text) as info:
        plan_tools(ChatFormat.from_model(QWEN_TOOLS_TEMPLATE), tools, choice)
    assert isinstance(info.value, ValueError)


def test_choices():
    fmt = ChatFormat.from_model(QWEN_TOOLS_TEMPLATE)
    assert plan_tools(fmt, [WEATHER]).choice == "auto"
    assert plan_tools(fmt, None).choice == "none" and not plan_tools(fmt, None).active
    named = plan_tools(fmt, [WEATHER, TIME], {"type": "function", "function": {"name": "get_time"}})
    assert (named.choice, named.function, named.active) == ("function", "get_time", True)
    none = plan_tools(fmt, [WEATHER], "none")
    assert not none.active
    text = '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>'
    assert none.parse(text) == (text, [])       # "none": nothing is parsed as a call
    assert none.constraint(None) is None and plan_tools(fmt, [WEATHER]).constraint(None) is None


# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------

def conversation(arguments='{"city": "Paris", "unit": "c"}'):
    return USER + [
        {"role": "assistant", "content": None,
         "tool_calls": [call("get_weather", arguments, "call_1")]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C"}]


def test_format_detection():
    qwen = ChatFormat.from_model(QWEN_TOOLS_TEMPLATE)
    llama = ChatFormat.from_model(LLAMA3_TOOLS_TEMPLATE)
    plain = ChatFormat.from_model(None)
    chatml = ChatFormat.from_model(CHATML_TEMPLATE)
    assert (tool_format(qwen), template_renders_tools(qwen)) == ("hermes", True)
    assert (tool_format(llama), template_renders_tools(llama)) == ("llama3", True)
    assert (tool_format(plain), template_renders_tools(plain)) == ("hermes", False)
    assert (tool_format(chatml), template_renders_tools(chatml)) == ("hermes", False)


def test_qwen_template_renders_tools_calls_and_results():
    plan = plan_tools(ChatFormat.from_model(QWEN_TOOLS_TEMPLATE), [WEATHER])
    assert plan.native and plan.fmt == "hermes"
    expected = (
        "<|im_start|>system\nYou are a helpful assistant.\n\n# Tools\n\nFunctions you may call "
        "are listed inside <tools></tools>:\n<tools>\n" + json.dumps(WEATHER) + "\n</tools>\n\n"
        "To call one, reply with a JSON object inside <tool_call></tool_call>:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}\n'
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n18 C\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n")
    assert plan.render(conversation()) == expected
    # arguments given as a dict render the same
    assert plan.render(conversation({"city": "Paris", "unit": "c"})) == expected
    # tool_choice "none": the conversation, no tool list
    none = plan_tools(plan.chat_format, [WEATHER], "none").render(conversation())
    assert "<tools>" not in none and none.startswith("<|im_start|>user\nWeather in Paris?")
    assert "<tool_response>\n18 C\n</tool_response>" in none


def test_templates_without_tools_get_them_in_the_system_prompt():
    plan = plan_tools(ChatFormat.from_model(None), [WEATHER, TIME])
    assert not plan.native
    msgs = [{"role": "system", "content": "Be brief."}] + conversation() + \
        [{"role": "tool", "tool_call_id": "call_2", "content": "sunny"}]
    tools_text = json.dumps(WEATHER) + "\n" + json.dumps(TIME)
    system = (
        "Be brief.\n\n# Tools\n\nYou may call one or more of the functions below. Their "
        "signatures, one JSON object a line, are between <tools> and </tools>:\n<tools>\n"
        + tools_text + "\n</tools>\n\nTo call functions, answer with one JSON object per call, "
        "each between <tool_call> and </tool_call>:\n<tool_call>\n"
        '{"name": <function name>, "arguments": <the arguments as a JSON object>}\n</tool_call>')
    assert INJECTED_TOOLS_PROMPT.format(tools=tools_text) == system[len("Be brief.\n\n"):]
    assert plan.render(msgs) == (
        f"system: {system}\n"
        "user: Weather in Paris?\n"
        'assistant: <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", '
        '"unit": "c"}}\n</tool_call>\n'
        "user: <tool_response>\n18 C\n</tool_response>\n<tool_response>\nsunny\n"
        "</tool_response>\n"
        "assistant:")
    # a ChatML template that never mentions tools: a system turn is added
    chatml = plan_tools(ChatFormat.from_model(CHATML_TEMPLATE), [WEATHER]).render(USER)
    assert chatml.startswith("<|im_start|>system\n# Tools\n\n") and \
        json.dumps(WEATHER) in chatml and chatml.endswith("<|im_start|>assistant\n")
    # Gemma's fallback folds that system text into the first user turn, in the gemma format's
    # words (tests/test_tool_formats.py checks them)
    gemma = ChatFormat.from_model(None, has_token={"<start_of_turn>", "<end_of_turn>"}.__contains__)
    text = plan_tools(gemma, [WEATHER]).render(conversation())
    assert text.startswith("<start_of_turn>user\n# Tools") and "```tool_output" in text


def test_llama3_template_renders_calls_with_parameters():
    plan = plan_tools(ChatFormat.from_model(LLAMA3_TOOLS_TEMPLATE, bos_token="<s>"), [WEATHER])
    assert plan.fmt == "llama3"
    text = plan.render(conversation()[:2], add_generation_prompt=False)
    assert text == (
        "<s><|start_header_id|>user<|end_header_id|>\n\nAnswer with {\"name\": function name, "
        "\"parameters\": dictionary of arguments}. " + json.dumps(WEATHER) + "\n\n"
        "Weather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", "unit": "c"}}'
        "<|eot_id|>")


# ---------------------------------------------------------------------------------------------
# Forced calls on a random-weight qwen2 model, and the round trip
# ---------------------------------------------------------------------------------------------

MAX_TOKENS = 300


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    require("llguidance")
    path = write_random_model(tmp_path_factory.mktemp("tools") / "qwen2.gguf", "qwen2",
                              tokenizer="bpe", chat_template=QWEN_TOOLS_TEMPLATE, seed=11)
    with dasllama.LLM(path, n_ctx=2048, threads=1) as llm:
        yield llm


def generate(llm, prompt_ids, constraint=None, seed=0, max_tokens=MAX_TOKENS, extra_eog=()):
    """Seeded sampling at temperature 1 over llm.model.eval's logits, the constraint's mask
    applied (-inf where a bit is clear). Returns (text, pieces): pieces as a stream gives them,
    whole UTF-8 characters (a character split over tokens comes with its last token)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    rng = np.random.default_rng(seed)
    model, tok = llm.model, llm.tokenizer
    model.reset()
    logits = np.array(model.eval(list(prompt_ids))[-1], dtype=np.float64)
    pieces = []
    t = np.arange(llm.n_vocab)
    for _ in range(max_tokens):
        if constraint is not None:
            mask = constraint.mask()
            logits[((mask[t // 32] >> (t % 32).astype(np.uint32)) & 1) == 0] = -np.inf
        p = np.exp(logits - logits.max())
        token = int(rng.choice(len(p), p=p / p.sum()))
        if constraint is not None:
            constraint.advance(token)
        if tok.is_eog(token) or token in extra_eog:
            break
        pieces.append(decoder.decode(bytes(tok.piece(token))))
        if constraint is not None and constraint.is_done():
            break
        logits = np.array(model.eval([token])[-1], dtype=np.float64)
    pieces.append(decoder.decode(b"", final=True))
    return "".join(pieces), pieces


def prompt_ids(llm, text):
    return llm.tokenize(text, add_special=False, parse_special=True)


def test_forced_call_round_trip(qwen):
    jsonschema = require("jsonschema")
    im_end = prompt_ids(qwen, "<|im_end|>")
    plan = plan_tools(qwen.chat_format, [WEATHER, TIME],
                      {"type": "function", "function": {"name": "get_weather"}})
    assert plan.native and plan.fmt == "hermes"
    prompt = plan.render(USER)
    assert "<tools>\n" + json.dumps(WEATHER) in prompt
    ids = prompt_ids(qwen, prompt)
    for seed in range(3):
        text, pieces = generate(qwen, ids, plan.constraint(qwen, extra_eog=im_end), seed=seed,
                                extra_eog=im_end)
        content, calls = plan.parse(text)
        assert content is None and len(calls) == 1, text
        fn = calls[0]["function"]
        assert fn["name"] == "get_weather" and calls[0]["id"].startswith("call_")
        args = json.loads(fn["arguments"])
        jsonschema.validate(args, WEATHER["function"]["parameters"])
        # the same text streamed piece by piece gives the same call
        s = plan.stream(ids_from())
        deltas = [d for p in pieces for d in s.push(p)] + s.finish()
        assert collect(deltas) == plan.parse(text, ids_from())
    # the result goes back as a tool message and renders as the template writes it
    msgs = USER + [{"role": "assistant", "content": content, "tool_calls": calls},
                   {"role": "tool", "tool_call_id": calls[0]["id"], "content": "18 C"}]
    again = plan_tools(qwen.chat_format, [WEATHER, TIME]).render(msgs)
    expected_call = ('<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": '
                     + json.dumps(args, ensure_ascii=False) + "}\n</tool_call><|im_end|>\n")
    assert expected_call in again
    assert again.endswith("<|im_start|>user\n<tool_response>\n18 C\n</tool_response><|im_end|>\n"
                          "<|im_start|>assistant\n")
    # the turn markers are special tokens again: system, user, assistant, tool results, and
    # the generation prompt
    turns = prompt_ids(qwen, again).count(prompt_ids(qwen, "<|im_start|>")[0])
    assert turns == 5 and len(prompt_ids(qwen, again)) < qwen.n_ctx


def test_without_the_grammar_no_call_comes_out(qwen):
    # Negative control for the round trip: the same loop and seeds, no constraint.
    im_end = prompt_ids(qwen, "<|im_end|>")
    plan = plan_tools(qwen.chat_format, [WEATHER], "required")
    ids = prompt_ids(qwen, plan.render(USER))
    for seed in range(3):
        text, _ = generate(qwen, ids, None, seed=seed, max_tokens=80, extra_eog=im_end)
        assert plan.parse(text)[1] == [], text


def test_required_gives_calls_of_the_given_tools(qwen):
    jsonschema = require("jsonschema")
    im_end = prompt_ids(qwen, "<|im_end|>")
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, TIME)}
    for parallel in (True, False):
        plan = plan_tools(qwen.chat_format, [WEATHER, TIME], "required",
                          parallel_tool_calls=parallel)
        ids = prompt_ids(qwen, plan.render(USER))
        text, _ = generate(qwen, ids, plan.constraint(qwen, extra_eog=im_end), seed=5,
                           extra_eog=im_end)
        content, calls = plan.parse(text)
        assert calls and content is None, text
        assert parallel or len(calls) == 1
        for c in calls:
            jsonschema.validate(json.loads(c["function"]["arguments"]),
                                schemas[c["function"]["name"]])


def test_llama3_forced_call(qwen):
    # The grammar for Llama's format, over the same vocabulary.
    plan = plan_tools(ChatFormat.from_model(LLAMA3_TOOLS_TEMPLATE), [WEATHER],
                      {"type": "function", "function": {"name": "get_weather"}})
    text, _ = generate(qwen, prompt_ids(qwen, plan.render(USER)), plan.constraint(qwen), seed=2)
    content, calls = plan.parse(text)
    assert content is None and [c["function"]["name"] for c in calls] == ["get_weather"], text
    assert set(json.loads(calls[0]["function"]["arguments"])) == {"city", "unit"}


def test_parameters_that_cannot_be_enforced_are_a_400(qwen):
    from dasllama.grammar import GrammarError
    bad = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"xs": {"type": "array", "uniqueItems": True}}}}}
    plan = plan_tools(qwen.chat_format, [WEATHER, bad], "required")
    with pytest.raises(GrammarError, match=r"tools\[1\].function.parameters .*uniqueItems"):
        plan.constraint(qwen)
    # auto mode does not enforce anything, so it does not refuse
    assert plan_tools(qwen.chat_format, [WEATHER, bad]).constraint(qwen) is None

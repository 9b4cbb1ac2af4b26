"""dasllama.tool_formats: Functionary v3 (``>>>recipient`` messages) and Phi-4-mini
(``<|tool_call|>`` JSON lists): detection from their templates (written here in the shape the
formats document: the tool parts of the real templates), rendering of tools, calls and results
through them, parsing of literal replies, the parse of call_text round trip, streaming split at
every point equal to the whole parse, malformed calls as content, and the forced-call grammar."""

import json

import pytest

from dasllama.chat import ChatFormat
from dasllama.tools import ToolCallStream, parse_tool_calls, plan_tools, tool_format
from dasllama.tool_formats import get
from requires import require
from test_tools import TIME, USER, WEATHER, call, collect, ids_from

# ---------------------------------------------------------------------------------------------
# Templates
# ---------------------------------------------------------------------------------------------

# Functionary v3.2 (Llama 3 based): the tools as a TypeScript namespace in the first system
# turn (shortened here to the names and descriptions), the reply format ">>>${recipient}\n
# ${content}", calls written ">>>" + name + "\n" + arguments (a JSON text), the generation
# prompt ending with ">>>".
FUNCTIONARY_V32 = (
    "{%- if not tools -%}{%- set tools = [] -%}{%- endif -%}"
    "{{ bos_token + '<|start_header_id|>system<|end_header_id|>\\n\\nYou are capable of "
    "executing available function(s) if required.\\nRespond in this format:\\n"
    ">>>${recipient}\\n${content}\\nAvailable functions:\\n// Supported function definitions "
    "that should be called when necessary.\\nnamespace functions {\\n\\n' }}"
    "{%- for tool in tools -%}{%- set f = tool.get('function', tool) -%}"
    "{{ '// ' + f.get('description', '') + '\\ntype ' + f['name'] + ' = (_: any) => any;\\n\\n' }}"
    "{%- endfor -%}"
    "{{ '} // namespace functions<|eot_id|>' }}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'user' or message['role'] == 'system' -%}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content']"
    " + '<|eot_id|>' }}"
    "{%- elif message['role'] == 'tool' -%}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content']"
    " + '<|eot_id|>' }}"
    "{%- else -%}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'}}"
    "{%- if message['content'] -%}{{ '>>>all\\n' + message['content'] }}{%- endif -%}"
    "{%- if 'tool_calls' in message and message['tool_calls'] -%}"
    "{%- for tool_call in message['tool_calls'] -%}"
    "{{ '>>>' + tool_call['function']['name'] + '\\n' + tool_call['function']['arguments'] }}"
    "{%- endfor -%}{%- endif -%}"
    "{{ '<|eot_id|>' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n>>>' }}"
    "{% endif %}"
)

# Phi-4-mini-instruct: the tools as a JSON text in the system message's "tools" field between
# <|tool|> and <|/tool|>; every message <|role|>content<|end|>; the generation prompt
# <|assistant|>.
PHI4_MINI = (
    "{% for message in messages %}"
    "{% if message['role'] == 'system' and 'tools' in message and message['tools'] is not none %}"
    "{{ '<|' + message['role'] + '|>' + message['content'] + '<|tool|>' + message['tools'] + "
    "'<|/tool|>' + '<|end|>' }}"
    "{% else %}{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% else %}{{ eos_token }}{% endif %}"
)

CALLED = [{"role": "user", "content": "Weather in Paris?"},
          {"role": "assistant", "content": None, "tool_calls": [
              call("get_weather", '{"city": "Paris", "unit": "c"}', "call_a")]},
          {"role": "tool", "tool_call_id": "call_a", "content": "18 C, clear"}]


def fmt_of(template):
    return ChatFormat("jinja", template, bos_token="<|begin_of_text|>", eos_token="<|end|>")


def stream_all_splits(text, fmt):
    """collect() of the stream at every split of text in two, and piece by piece."""
    out = []
    for cut in range(len(text) + 1):
        s = ToolCallStream(fmt, ids_from())
        out.append(collect(s.push(text[:cut]) + s.push(text[cut:]) + s.finish()))
    s = ToolCallStream(fmt, ids_from())
    deltas = []
    for ch in text:
        deltas += s.push(ch)
    out.append(collect(deltas + s.finish()))
    return out


# ---------------------------------------------------------------------------------------------
# Functionary
# ---------------------------------------------------------------------------------------------

def test_functionary_is_detected_and_renders_natively():
    chat = fmt_of(FUNCTIONARY_V32)
    assert tool_format(chat) == "functionary"
    plan = plan_tools(chat, [WEATHER, TIME])
    assert plan.native and plan.fmt == "functionary"
    prompt = plan.render(CALLED)
    assert "type get_weather = (_: any) => any;" in prompt
    # The call as the template writes it: its arguments a JSON text after the name's line.
    assert ('<|start_header_id|>assistant<|end_header_id|>\n\n>>>get_weather\n'
            '{"city": "Paris", "unit": "c"}<|eot_id|>') in prompt
    assert "<|start_header_id|>tool<|end_header_id|>\n\n18 C, clear<|eot_id|>" in prompt
    assert prompt.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n>>>")


def test_functionary_arguments_given_as_a_mapping_reach_the_template_as_text():
    chat = fmt_of(FUNCTIONARY_V32)
    messages = [USER[0], {"role": "assistant", "content": "Looking.", "tool_calls": [
        {"id": "x", "type": "function",
         "function": {"name": "get_time", "arguments": {"zone": "CET"}}}]}]
    prompt = plan_tools(chat, [TIME]).render(messages, add_generation_prompt=False)
    assert '>>>all\nLooking.>>>get_time\n{"zone": "CET"}<|eot_id|>' in prompt


def test_functionary_replies_are_parsed():
    text = 'all\nLet me look.>>>get_weather\n{"city": "Paris", "unit": "c"}>>>get_time\n{"zone": "CET"}'
    content, calls = parse_tool_calls(text, "functionary", ids_from())
    assert content == "Let me look."
    assert calls == [call("get_weather", '{"city": "Paris", "unit": "c"}', "call_0"),
                     call("get_time", '{"zone": "CET"}', "call_1")]
    # Calls only (the prompt's ">>>" took the first separator): content None.
    content, calls = parse_tool_calls('get_time\n{"zone": "CET"}', "functionary", ids_from())
    assert content is None and calls == [call("get_time", '{"zone": "CET"}', "call_0")]
    # Plain text to the user, with and without its own leading separator.
    assert parse_tool_calls("all\nIt is sunny.", "functionary") == ("It is sunny.", [])
    assert parse_tool_calls(">>>all\nIt is sunny.", "functionary") == ("It is sunny.", [])


@pytest.mark.parametrize("text, content", [
    ("get_weather\n{not json", "get_weather\n{not json"),        # arguments that are no JSON
    ('get_weather\n["Paris"]', 'get_weather\n["Paris"]'),          # JSON but no object
    ("bad name!\n{}", "bad name!\n{}"),                          # no function name
    ('get_weather {"city": "Paris"}', 'get_weather {"city": "Paris"}'),  # no recipient line
    ('all\nok>>>get_time\n{"zone": "CET"', 'ok>>>get_time\n{"zone": "CET"'),  # unfinished
])
def test_functionary_malformed_messages_stay_content(text, content):
    assert parse_tool_calls(text, "functionary", ids_from()) == (content, [])


def test_functionary_call_text_round_trip():
    f = get("functionary")
    args = {"city": "Zürich", "unit": "c"}
    text = f.call_text("get_weather", args) + f.call_text("get_time", '{"zone": "CET"}')
    content, calls = parse_tool_calls(text, "functionary", ids_from())
    assert content is None
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [args, {"zone": "CET"}]
    assert [c["function"]["name"] for c in calls] == ["get_weather", "get_time"]


@pytest.mark.parametrize("text", [
    'all\nLet me look.>>>get_weather\n{"city": "Paris", "unit": "c"}>>>get_time\n{"zone": "CET"}',
    'get_time\n{"zone": "CET"}',
    ">>>all\nIt is > 3 and >> 2.\n",
    "all\nonly text >>",
    "get_weather\n{not json>>>all\nsorry",
    "",
])
def test_functionary_stream_equals_the_whole_parse(text):
    whole = parse_tool_calls(text, "functionary", ids_from())
    expected = (whole[0] or None if whole[1] else whole[0], whole[1])
    for got in stream_all_splits(text, "functionary"):
        assert got == expected, text


def test_functionary_stream_sends_text_before_the_reply_ends():
    s = ToolCallStream("functionary", ids_from())
    assert s.push("all\nHel") == [{"content": "Hel"}]
    assert s.push("lo>") == [{"content": "lo"}]      # ">" may start the next separator
    assert s.push('>>get_time\n{"zone": ') == []
    assert s.push('"CET"}') == []                    # a call waits for its end
    assert s.finish() == [{"tool_calls": [dict(call("get_time", '{"zone": "CET"}', "call_0"),
                                               index=0)]}]


def validate_lark(lark):
    llg = require("llguidance")
    is_error, messages = llg.LLMatcher.validate_grammar_with_warnings(
        llg.LLMatcher.grammar_from_lark(lark), None)
    return not is_error, messages


def test_functionary_forced_call_grammar():
    lark = get("functionary").lark([("get_time", TIME["function"]["parameters"]),
                                    ("get_weather", WEATHER["function"]["parameters"])], True,
                                   lambda text: None)
    assert lark.startswith('start: call (">>>" call)*\ncall: call_0 | call_1\n')
    assert 'call_0: "get_time\\n" args_0' in lark
    ok, messages = validate_lark(lark)
    assert ok, messages
    # negative control: the validator rejects a broken grammar
    assert not validate_lark(lark.replace("call_1\n", "call_9\n", 1))[0]


# ---------------------------------------------------------------------------------------------
# Phi-4-mini
# ---------------------------------------------------------------------------------------------

def test_phi4_is_detected_and_places_tools_on_the_system_message():
    chat = fmt_of(PHI4_MINI)
    assert tool_format(chat) == "phi4"
    plan = plan_tools(chat, [WEATHER])
    assert plan.native and plan.fmt == "phi4"
    prompt = plan.render([{"role": "system", "content": "Be brief."}] + CALLED)
    listed = json.dumps([WEATHER["function"]])
    assert prompt.startswith(f"<|system|>Be brief.<|tool|>{listed}<|/tool|><|end|>")
    assert ('<|assistant|><|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", '
            '"unit": "c"}}]<|/tool_call|><|end|>') in prompt
    assert "<|tool|>18 C, clear<|end|>" in prompt
    assert prompt.endswith("<|assistant|>")
    # Without a system message one is added to carry the tools; without tools none is.
    assert plan.render(USER).startswith(f"<|system|><|tool|>{listed}<|/tool|><|end|><|user|>")
    assert plan_tools(chat, [WEATHER], "none").render(USER) == \
        "<|user|>Weather in Paris?<|end|><|assistant|>"


def test_phi4_replies_are_parsed():
    text = ('<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}, '
            '{"name": "get_time", "arguments": {"zone": "CET"}}]<|/tool_call|>')
    content, calls = parse_tool_calls(text, "phi4", ids_from())
    assert content is None
    assert calls == [call("get_weather", '{"city": "Paris", "unit": "c"}', "call_0"),
                     call("get_time", '{"zone": "CET"}', "call_1")]
    # The closing token left out, and bare objects instead of a list: both still calls.
    unclosed = 'Sure. <|tool_call|>{"name": "get_time", "arguments": {"zone": "CET"}}'
    assert parse_tool_calls(unclosed, "phi4", ids_from()) == \
        ("Sure. ", [call("get_time", '{"zone": "CET"}', "call_0")])
    bare = ('<|tool_call|>{"name": "get_time", "arguments": {"zone": "CET"}}, '
            '{"name": "get_time", "arguments": {"zone": "UTC"}}<|/tool_call|>')
    assert [c["function"]["arguments"] for c in parse_tool_calls(bare, "phi4")[1]] == \
        ['{"zone": "CET"}', '{"zone": "UTC"}']


@pytest.mark.parametrize("text", [
    "<|tool_call|>[not json]<|/tool_call|>",
    '<|tool_call|>[{"arguments": {}}]<|/tool_call|>',          # no name
    "<|tool_call|>[]<|/tool_call|>",
    '<|tool_call|>"just text"<|/tool_call|>',
])
def test_phi4_malformed_calls_stay_content(text):
    assert parse_tool_calls(text, "phi4", ids_from()) == (text, [])


def test_phi4_call_text_round_trip():
    f = get("phi4")
    text = f.call_text("get_weather", {"city": "Zürich", "unit": "c"})
    assert text.startswith("<|tool_call|>[") and text.endswith("]<|/tool_call|>")
    content, calls = parse_tool_calls(text, "phi4", ids_from())
    assert content is None
    assert calls == [call("get_weather", '{"city": "Zürich", "unit": "c"}', "call_0")]


@pytest.mark.parametrize("text", [
    'Sure. <|tool_call|>[{"name": "get_time", "arguments": {"zone": "CET"}}]<|/tool_call|>',
    '<|tool_call|>{"name": "get_time", "arguments": {"zone": "CET"}}',
    "No tools needed <|tool_call|>[oops]<|/tool_call|> here.",
    "plain <|tool_ca",
])
def test_phi4_stream_equals_the_whole_parse(text):
    whole = parse_tool_calls(text, "phi4", ids_from())
    for got in stream_all_splits(text, "phi4"):
        assert got == (whole[0] if whole[0] else (None if whole[1] else whole[0]), whole[1])


def test_phi4_markers_are_the_vocabulary_control_tokens():
    assert get("phi4").markers == ("<|tool_call|>", "<|/tool_call|>")


def test_phi4_forced_call_grammar_uses_the_control_tokens():
    lark = get("phi4").lark([("get_time", TIME["function"]["parameters"])], False,
                            {"<|tool_call|>": 7, "<|/tool_call|>": 8}.get)
    assert lark.startswith('start: <[7]> "[" call "]" <[8]>\n')
    text_lark = get("phi4").lark([("get_time", TIME["function"]["parameters"])], True,
                                 lambda text: None)
    assert text_lark.startswith('start: "<|tool_call|>" "[" call ("," " " call)* "]" '
                                '"<|/tool_call|>"\n')
    ok, messages = validate_lark(text_lark)
    assert ok, messages

"""dasllama.tool_formats: Mistral (JSON list and [ARGS] forms), DeepSeek (V3/R1 and V3.1) and
Gemma 3 tool calls - detection from templates written here (small Jinja texts equal to the
real templates' tool parts), rendering of tools, calls and results, parsing of literal model
outputs whole and streamed, malformed calls as content, and forced calls through the grammar
on random-weight models (one whose vocabulary has Mistral's markers as control tokens)."""

import itertools
import json

import pytest

import dasllama
from dasllama.chat import ChatFormat, ChatTemplateError
from dasllama.testing import random_gguf, write_random_model
from dasllama.testing.tokenizer_vocab import CONTROL
from dasllama.tools import ToolCallStream, parse_tool_calls, plan_tools, tool_format
from requires import require
from test_tools import TIME, USER, WEATHER, call, collect, generate, ids_from, prompt_ids

# ---------------------------------------------------------------------------------------------
# Templates: the tool parts of the real ones
# ---------------------------------------------------------------------------------------------

# Mistral 7B Instruct v0.3: tools before the last user turn, calls as a JSON list after
# [TOOL_CALLS] with 9-character ids, results as [TOOL_RESULTS] JSON.
MISTRAL_V03 = (
    "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] %}"
    "{%- set loop_messages = messages[1:] %}{%- else %}{%- set loop_messages = messages %}"
    "{%- endif %}"
    "{%- if not tools is defined %}{%- set tools = none %}{%- endif %}"
    "{%- set user_messages = loop_messages | selectattr('role', 'equalto', 'user') | list %}"
    "{{- bos_token }}"
    "{%- for message in loop_messages %}"
    "{%- if message['role'] == 'user' %}"
    "{%- if tools is not none and (message == user_messages[-1]) %}"
    "{{- '[AVAILABLE_TOOLS] [' }}"
    "{%- for tool in tools %}{%- set tool = tool.function %}"
    "{{- '{\"type\": \"function\", \"function\": {' }}"
    "{%- for key, val in tool.items() if key != 'return' %}"
    "{%- if val is string %}{{- '\"' + key + '\": \"' + val + '\"' }}"
    "{%- else %}{{- '\"' + key + '\": ' + val|tojson }}{%- endif %}"
    "{%- if not loop.last %}{{- ', ' }}{%- endif %}"
    "{%- endfor %}{{- '}}' }}"
    "{%- if not loop.last %}{{- ', ' }}{%- else %}{{- ']' }}{%- endif %}"
    "{%- endfor %}{{- '[/AVAILABLE_TOOLS]' }}"
    "{%- endif %}"
    "{%- if loop.last and system_message is defined %}"
    "{{- '[INST] ' + system_message + '\\n\\n' + message['content'] + '[/INST]' }}"
    "{%- else %}{{- '[INST] ' + message['content'] + '[/INST]' }}{%- endif %}"
    "{%- elif message.tool_calls is defined and message.tool_calls is not none %}"
    "{{- '[TOOL_CALLS] [' }}"
    "{%- for tool_call in message.tool_calls %}"
    "{%- set out = tool_call.function|tojson %}{{- out[:-1] }}"
    "{%- if not tool_call.id is defined or tool_call.id|length != 9 %}"
    "{{- raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}"
    "{%- endif %}"
    "{{- ', \"id\": \"' + tool_call.id + '\"}' }}"
    "{%- if not loop.last %}{{- ', ' }}{%- else %}{{- ']' + eos_token }}{%- endif %}"
    "{%- endfor %}"
    "{%- elif message['role'] == 'assistant' %}{{- ' ' + message['content']|trim + eos_token }}"
    "{%- elif message['role'] == 'tool_results' or message['role'] == 'tool' %}"
    "{{- '[TOOL_RESULTS] {\"content\": ' + message.content|string + ', ' }}"
    "{%- if not message.tool_call_id is defined or message.tool_call_id|length != 9 %}"
    "{{- raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}"
    "{%- endif %}"
    "{{- '\"call_id\": \"' + message.tool_call_id + '\"}[/TOOL_RESULTS]' }}"
    "{%- else %}{{- raise_exception('Only user and assistant roles are supported!') }}"
    "{%- endif %}"
    "{%- endfor %}"
)

# Mistral Small 3.2 / Devstral (tokenizer v11+): tools as JSON, calls as name[ARGS]{...}.
MISTRAL_V11 = (
    "{{- bos_token }}"
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '[SYSTEM_PROMPT]' + messages[0]['content'] + '[/SYSTEM_PROMPT]' }}"
    "{%- set loop_messages = messages[1:] %}{%- else %}{%- set loop_messages = messages %}"
    "{%- endif %}"
    "{%- if tools is defined and tools %}"
    "{{- '[AVAILABLE_TOOLS]' + tools|tojson + '[/AVAILABLE_TOOLS]' }}{%- endif %}"
    "{%- for message in loop_messages %}"
    "{%- if message['role'] == 'user' %}{{- '[INST]' + message['content'] + '[/INST]' }}"
    "{%- elif message['role'] == 'assistant' %}"
    "{%- if message['content'] %}{{- message['content'] }}{%- endif %}"
    "{%- if message['tool_calls'] %}{%- for tool in message['tool_calls'] %}"
    "{%- set arguments = tool['function']['arguments'] %}"
    "{%- if arguments is not string %}{%- set arguments = arguments|tojson %}{%- endif %}"
    "{{- '[TOOL_CALLS]' + tool['function']['name'] + '[ARGS]' + arguments }}"
    "{%- endfor %}{%- endif %}"
    "{{- eos_token }}"
    "{%- elif message['role'] == 'tool' %}"
    "{{- '[TOOL_RESULTS]' + message['content']|string + '[/TOOL_RESULTS]' }}"
    "{%- endif %}"
    "{%- endfor %}"
)

# DeepSeek R1: calls and results, no tool list; arguments concatenated as text.
DEEPSEEK_R1 = (
    "{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, "
    "system_prompt='') %}"
    "{%- for message in messages %}{%- if message['role'] == 'system' %}"
    "{% set ns.system_prompt = message['content'] %}{%- endif %}{%- endfor %}"
    "{{bos_token}}{{ns.system_prompt}}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'user' %}{%- set ns.is_tool = false -%}"
    "{{'<｜User｜>' + message['content']}}{%- endif %}"
    "{%- if message['role'] == 'assistant' and message['content'] is none %}"
    "{%- set ns.is_tool = false -%}"
    "{%- for tool in message['tool_calls']%}"
    "{%- if not ns.is_first %}"
    "{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + "
    "'<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + '```json' + '\\n' + "
    "tool['function']['arguments'] + '\\n' + '```' + '<｜tool▁call▁end｜>'}}"
    "{%- set ns.is_first = true -%}"
    "{%- else %}"
    "{{'\\n' + '<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + "
    "tool['function']['name'] + '\\n' + '```json' + '\\n' + tool['function']['arguments'] + "
    "'\\n' + '```' + '<｜tool▁call▁end｜>'}}"
    "{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}"
    "{%- endif %}{%- endfor %}{%- endif %}"
    "{%- if message['role'] == 'assistant' and message['content'] is not none %}"
    "{%- if ns.is_tool %}{{'<｜tool▁outputs▁end｜>' + message['content'] + "
    "'<｜end▁of▁sentence｜>'}}{%- set ns.is_tool = false -%}"
    "{%- else %}{{'<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}"
    "{%- endif %}{%- endif %}"
    "{%- if message['role'] == 'tool' %}{%- set ns.is_tool = true -%}"
    "{%- if ns.is_output_first %}{{'<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + "
    "message['content'] + '<｜tool▁output▁end｜>'}}{%- set ns.is_output_first = false %}"
    "{%- else %}{{'\\n<｜tool▁output▁begin｜>' + message['content'] + "
    "'<｜tool▁output▁end｜>'}}{%- endif %}{%- endif %}"
    "{%- endfor -%}"
    "{% if ns.is_tool %}{{'<｜tool▁outputs▁end｜>'}}{% endif %}"
    "{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜>'}}{% endif %}"
)

# DeepSeek V3.1: the template lists the tools itself; calls as name<｜tool▁sep｜>{...}.
DEEPSEEK_V31 = (
    "{{ bos_token }}"
    "{%- if tools %}{{- '## Tools\\nYou have access to the following tools:\\n' }}"
    "{%- for tool in tools %}{{- '\\n### ' + tool.function.name + '\\nParameters: ' + "
    "(tool.function.parameters | tojson) + '\\n' }}{%- endfor %}"
    "{{- '\\nIMPORTANT: ALWAYS adhere to this exact format for tool use:\\n"
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>tool_call_name<｜tool▁sep｜>tool_call_arguments"
    "<｜tool▁call▁end｜><｜tool▁calls▁end｜>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'user' %}{{ '<｜User｜>' + message['content'] }}"
    "{%- elif message['role'] == 'assistant' and message['tool_calls'] %}"
    "{{ '<｜Assistant｜></think><｜tool▁calls▁begin｜>' }}"
    "{%- for tool in message['tool_calls'] %}"
    "{{ '<｜tool▁call▁begin｜>' + tool['function']['name'] + '<｜tool▁sep｜>' + "
    "tool['function']['arguments'] + '<｜tool▁call▁end｜>' }}{%- endfor %}"
    "{{ '<｜tool▁calls▁end｜><｜end▁of▁sentence｜>' }}"
    "{%- elif message['role'] == 'assistant' %}"
    "{{ '<｜Assistant｜></think>' + message['content'] + '<｜end▁of▁sentence｜>' }}"
    "{%- elif message['role'] == 'tool' %}"
    "{{ '<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<｜Assistant｜></think>' }}{%- endif %}"
)

# Gemma 3: no tool support; the system text is folded into the first user turn.
GEMMA3 = (
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}{%- set first_user_prefix = '' -%}{%- set loop_messages = messages -%}"
    "{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{%- endif -%}"
    "{%- if (message['role'] == 'assistant') -%}{%- set role = 'model' -%}"
    "{%- else -%}{%- set role = message['role'] -%}{%- endif -%}"
    "{{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else '') }}"
    "{{ message['content'] | trim }}{{ '<end_of_turn>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}"
)


def conversation(call_id="call_abcdefghijklmnopqrstuvwx"):
    return USER + [
        {"role": "assistant", "content": None,
         "tool_calls": [call("get_weather", '{"city": "Paris", "unit": "c"}', call_id)]},
        {"role": "tool", "tool_call_id": call_id, "content": "18 C"}]


# ---------------------------------------------------------------------------------------------
# Detection and rendering
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("template,fmt,native,native_turns", [
    (MISTRAL_V03, "mistral", True, False),
    (MISTRAL_V11, "mistral_args", True, False),
    (DEEPSEEK_R1, "deepseek", False, True),
    (DEEPSEEK_V31, "deepseek_v31", True, False),
    (GEMMA3, "gemma", False, False),
])
def test_detection(template, fmt, native, native_turns):
    plan = plan_tools(ChatFormat.from_model(template), [WEATHER])
    assert (tool_format(plan.chat_format), plan.fmt, plan.native, plan.native_turns) == \
        (fmt, fmt, native, native_turns)


def test_a_deepseek_template_that_writes_no_tool_turns_gets_them_as_text():
    # Only the section markers in the text (no tools, no tool_calls, no json fence, so V3.1's
    # form): tools, calls and results are written in DeepSeek's words.
    template = ("{%- for m in messages %}{{ '<｜' + m['role'] + '｜>' + m['content'] }}"
                "{%- endfor %}{{ '<｜Assistant｜>' }}"
                "{#- calls look like <｜tool▁calls▁begin｜> -#}")
    plan = plan_tools(ChatFormat.from_model(template), [WEATHER])
    assert (plan.fmt, plan.native, plan.native_turns) == ("deepseek_v31", False, False)
    text = plan.render(conversation())
    assert text.startswith("<｜system｜>## Tools\n\n")
    assert ("<｜assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
            '{"city": "Paris", "unit": "c"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
            "<｜user｜><｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>18 C"
            "<｜tool▁output▁end｜><｜tool▁outputs▁end｜><｜Assistant｜>") in text
    # and what the model writes back in that form parses
    call_text = text.split("<｜assistant｜>")[1].split("<｜user｜>")[0]
    assert parse_tool_calls(call_text, "deepseek_v31", ids_from())[1][0]["function"]["name"] == \
        "get_weather"


def test_gemma_without_template_and_plain_fallback():
    gemma = ChatFormat.from_model(None, has_token={"<start_of_turn>", "<end_of_turn>"}.__contains__)
    assert plan_tools(gemma, [WEATHER]).fmt == "gemma"
    assert plan_tools(ChatFormat.from_model(None), [WEATHER]).fmt == "hermes"


def test_mistral_v03_renders_tools_and_maps_ids_to_nine_characters():
    plan = plan_tools(ChatFormat.from_model(MISTRAL_V03, bos_token="<s>", eos_token="</s>"),
                      [WEATHER])
    text = plan.render(conversation())
    fn = WEATHER["function"]
    tools = ('[AVAILABLE_TOOLS] [{"type": "function", "function": {"name": "get_weather", '
             '"description": "Current weather of a city", "parameters": '
             + json.dumps(fn["parameters"]) + "}}][/AVAILABLE_TOOLS]")
    assert text.startswith("<s>" + tools + "[INST] Weather in Paris?[/INST][TOOL_CALLS] [")
    ids = [s.split('"')[0] for s in text.split('"id": "')[1:]] + \
          [s.split('"')[0] for s in text.split('"call_id": "')[1:]]
    assert len(ids) == 2 and ids[0] == ids[1] and len(ids[0]) == 9 and ids[0].isalnum()
    assert ('{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}, "id": "'
            + ids[0] + '"}]</s>[TOOL_RESULTS] {"content": 18 C, ') in text
    # negative control: the template itself refuses OpenAI's ids
    with pytest.raises(ChatTemplateError, match="length 9"):
        plan.chat_format.render(conversation())
    # an id already of 9 characters is kept as it is
    assert '"call_id": "abc123XYZ"' in plan.render(conversation("abc123XYZ"))
    # the ids the format makes are ones the template accepts
    _, calls = plan.parse('[TOOL_CALLS][{"name": "get_weather", "arguments": {}}]')
    assert len(calls[0]["id"]) == 9 and calls[0]["id"].isalnum()


def test_mistral_v11_renders_calls_with_args():
    plan = plan_tools(ChatFormat.from_model(MISTRAL_V11, bos_token="<s>", eos_token="</s>"),
                      [WEATHER])
    assert plan.render(conversation()) == (
        "<s>[AVAILABLE_TOOLS]" + json.dumps([WEATHER]) + "[/AVAILABLE_TOOLS]"
        "[INST]Weather in Paris?[/INST]"
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "unit": "c"}</s>'
        "[TOOL_RESULTS]18 C[/TOOL_RESULTS]")


def test_deepseek_r1_gets_the_tools_in_its_system_prompt_and_text_arguments():
    plan = plan_tools(ChatFormat.from_model(DEEPSEEK_R1), [WEATHER, TIME])
    text = plan.render([{"role": "system", "content": "Be brief."}] + conversation())
    head, _, rest = text.partition("<｜User｜>")
    assert head.startswith("Be brief.\n\n## Tools\n\n")
    assert json.dumps(WEATHER) + "\n" + json.dumps(TIME) in head
    assert "<｜tool▁call▁begin｜>function<｜tool▁sep｜><function name>\n```json\n" in head
    # the call written by the template itself: arguments as the JSON text the client sent
    assert rest == ('Weather in Paris?<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>'
                    'function<｜tool▁sep｜>get_weather\n```json\n{"city": "Paris", "unit": "c"}\n'
                    "```<｜tool▁call▁end｜><｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>18 C"
                    "<｜tool▁output▁end｜><｜tool▁outputs▁end｜>")
    # arguments given as a mapping are written as JSON text too
    msgs = conversation()
    msgs[1]["tool_calls"][0]["function"]["arguments"] = {"city": "Paris", "unit": "c"}
    assert plan.render(msgs).partition("<｜User｜>")[2] == rest
    # tool_choice "none": no tool list
    assert "## Tools" not in plan_tools(plan.chat_format, [WEATHER], "none").render(USER)


def test_deepseek_v31_renders_its_own_tool_list():
    plan = plan_tools(ChatFormat.from_model(DEEPSEEK_V31), [WEATHER])
    text = plan.render(conversation())
    assert text.startswith("## Tools\nYou have access to the following tools:\n\n### get_weather")
    assert ('<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris", "unit": "c"}'
            "<｜tool▁call▁end｜><｜tool▁calls▁end｜>") in text


def test_gemma_renders_tool_code_and_tool_output_blocks():
    plan = plan_tools(ChatFormat.from_model(GEMMA3, bos_token="<bos>"), [WEATHER])
    text = plan.render(conversation() + [{"role": "assistant", "content": "18 C in Paris."}])
    assert text.startswith("<bos><start_of_turn>user\n# Tools\n\nYou may call the functions "
                           "below. Their signatures, one JSON object a line:\n"
                           + json.dumps(WEATHER) + "\n\n")
    assert text.endswith(
        "Weather in Paris?<end_of_turn>\n"
        '<start_of_turn>model\n```tool_code\n{"name": "get_weather", "arguments": {"city": '
        '"Paris", "unit": "c"}}\n```<end_of_turn>\n'
        "<start_of_turn>user\n```tool_output\n18 C\n```<end_of_turn>\n"
        "<start_of_turn>model\n18 C in Paris.<end_of_turn>\n<start_of_turn>model\n")


# ---------------------------------------------------------------------------------------------
# Parsing literal model outputs
# ---------------------------------------------------------------------------------------------

ARGS_PARIS = '{"city": "Paris", "unit": "c"}'


@pytest.mark.parametrize("fmt,text,content,names", [
    ("mistral", '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris", '
                '"unit": "c"}}]', None, ["get_weather"]),
    ("mistral", 'Sure.[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", '
                '"unit": "c"}, "id": "a1b2c3d4e"}, {"name": "get_time", "arguments": '
                '{"zone": "CET"}}]', "Sure.", ["get_weather", "get_time"]),
    ("mistral_args", '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "unit": "c"}',
     None, ["get_weather"]),
    ("mistral_args", '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "unit": "c"}'
                     '[TOOL_CALLS]get_time[ARGS]{"zone": "CET"}', None, ["get_weather", "get_time"]),
    ("mistral", '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "unit": "c"}', None,
     ["get_weather"]),                                 # either parser reads either form
    ("deepseek", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
                 '```json\n{"city": "Paris", "unit": "c"}\n```<｜tool▁call▁end｜>\n'
                 "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n"
                 '{"zone": "CET"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
     None, ["get_weather", "get_time"]),
    ("deepseek", "<think>\nThe user wants the weather.\n</think>\n\n"
                 "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
                 '```json\n{"city": "Paris", "unit": "c"}\n```<｜tool▁call▁end｜>',   # no end
     "<think>\nThe user wants the weather.\n</think>\n\n", ["get_weather"]),
    ("deepseek_v31", '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>'
                     '{"city": "Paris", "unit": "c"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
     None, ["get_weather"]),
    ("gemma", '```tool_code\n{"name": "get_weather", "arguments": {"city": "Paris", '
              '"unit": "c"}}\n```', None, ["get_weather"]),
    ("gemma", 'Let me look that up.\n```tool_code\nget_weather(city="Paris", unit="c")\n```\n',
     "Let me look that up.\n\n", ["get_weather"]),
    ("gemma", "```tool_code\n[get_weather(city='Paris', unit='c'), get_time(zone='CET')]\n```",
     None, ["get_weather", "get_time"]),
])
def test_literal_outputs_parse(fmt, text, content, names):
    got_content, calls = parse_tool_calls(text, fmt, ids_from())
    assert got_content == content
    assert [c["function"]["name"] for c in calls] == names
    assert json.loads(calls[0]["function"]["arguments"]) == json.loads(ARGS_PARIS)
    assert all(c["type"] == "function" and c["id"] for c in calls)


def test_mistral_call_ids_from_the_model_are_kept():
    text = '[TOOL_CALLS]get_time[CALL_ID]x9Y8z7W6v[ARGS]{"zone": "CET"}'
    assert parse_tool_calls(text, "mistral_args", ids_from()) == \
        (None, [call("get_time", '{"zone": "CET"}', "x9Y8z7W6v")])


@pytest.mark.parametrize("fmt,text", [
    ("mistral", '[TOOL_CALLS] [{"name": "f", "arguments": {"a": 1}}'),          # cut off
    ("mistral", "[TOOL_CALLS] []"),
    ("mistral", '[TOOL_CALLS] [{"arguments": {}}]'),                            # no name
    ("mistral", '[TOOL_CALLS] [{"name": "f", "arguments": [1]}]'),
    ("mistral", 'I would call [TOOL_CALLS] but no'),
    ("mistral_args", '[TOOL_CALLS]get_weather{"city": "Paris"}'),               # no [ARGS]
    ("mistral_args", '[TOOL_CALLS]bad name[ARGS]{}'),
    ("mistral_args", '[TOOL_CALLS]f[ARGS]{"a": '),
    ("mistral_args", '[TOOL_CALLS]f[ARGS]{}[TOOL_CALLS]g'),                     # second broken
    ("deepseek", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n"
                 '```json\n{"a": 1\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'),
    ("deepseek", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n"
                 '{"a": 1}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'),            # fence missing
    ("deepseek", "<｜tool▁calls▁begin｜>f<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
    ("deepseek", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{}"),
    ("deepseek_v31", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>[1]"
                     "<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
    ("gemma", "```tool_code\nimport os\n```"),
    ("gemma", "```tool_code\nget_weather('Paris')\n```"),                       # positional
    ("gemma", "```tool_code\nget_weather(city=open('x'))\n```"),               # not a literal
    ("gemma", "```tool_code\nget_weather(city={1, 2})\n```"),                  # not JSON
    ("gemma", '```tool_code\n{"name": "f", "arguments": {}\n```'),
    ("gemma", "```python\nprint(1)\n```"),
    ("gemma", "```tool_code\n" + "(" * 400 + "\n```"),
])
def test_malformed_calls_stay_content(fmt, text):
    assert parse_tool_calls(text, fmt, ids_from()) == (text, [])


def test_a_malformed_block_stays_and_a_good_one_after_it_counts():
    text = ("```tool_code\nnot a call(\n```\nthen\n```tool_code\n"
            '{"name": "f", "arguments": {}}\n```')
    content, calls = parse_tool_calls(text, "gemma", ids_from())
    assert content == "```tool_code\nnot a call(\n```\nthen\n" and len(calls) == 1


STREAM_TEXTS = {
    "mistral": ['Sure.[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}]',
                '[TOOL_CALLS]get_weather[ARGS]{"a": "[TOOL_CALLS]"}', "Just [TOOL_CALL words",
                '[TOOL_CALLS] [{"name": "f"', "  "],
    "mistral_args": ['[TOOL_CALLS]f[ARGS]{}[TOOL_CALLS]g[ARGS]{"x": 1} ', "[TOOL_CALLS]",
                     "No calls [ARGS] here."],
    "deepseek": ["Okay.\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n"
                 '```json\n{"a": 1}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜> after',
                 "<｜tool▁calls▁begin｜>broken<｜tool▁calls▁end｜> and "
                 "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>g<｜tool▁sep｜>{}<｜tool▁call▁end｜>",
                 "<｜tool▁calls"],
    "gemma": ['Checking.\n```tool_code\nget_weather(city="Paris")\n```\n```tool_code\n'
              '{"name": "f", "arguments": {}}\n``` done', "```tool_cod", "``` plain ```",
              "```tool_code\nf(a=1)"],
}


@pytest.mark.parametrize("fmt", sorted(STREAM_TEXTS))
def test_stream_equals_one_shot_at_every_split(fmt):
    def streamed(pieces):
        s = ToolCallStream(fmt, ids_from())
        return collect([d for p in pieces for d in s.push(p)] + s.finish())

    for text in STREAM_TEXTS[fmt]:
        whole = parse_tool_calls(text, fmt, ids_from())
        for k in range(len(text) + 1):
            assert streamed([text[:k], text[k:]]) == whole, (text, k)
        assert streamed(list(text)) == whole, text
        for a, b in itertools.combinations(range(0, len(text) + 1, 9), 2):
            assert streamed([text[:a], text[a:b], text[b:]]) == whole, (text, a, b)


def test_stream_sends_content_then_whole_calls():
    s = ToolCallStream("deepseek", ids_from())
    assert s.push("I will check. <｜tool▁calls") == [{"content": "I will check."}]
    assert s.push("▁begin｜><｜tool▁call▁begin｜>g<｜tool▁sep｜>{}<｜tool▁call▁end｜>") == []
    assert s.push("<｜tool▁calls▁end｜>") == [{"tool_calls": [dict(call("g", "{}", "call_0"),
                                                                index=0)]}]
    # the space held after the content goes out at the end, as the whole reply has it
    assert s.finish() == [{"content": " "}] and s.n_calls == 1


# ---------------------------------------------------------------------------------------------
# Forced calls on random-weight models
# ---------------------------------------------------------------------------------------------

# Enough for a few forced calls of the random models (they write long random strings).
MAX_TOKENS = 1000

MISTRAL_SPECIALS = ("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[INST]", "[/INST]",
                    "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]",
                    "[/TOOL_RESULTS]")


def write_mistral_model(path, template):
    """A random-weight llama model whose vocabulary has Mistral's markers as control tokens
    (in place of padding tokens), as Mistral's GGUF files have them."""
    original = random_gguf.make_vocab

    def with_specials(*args, **kwargs):
        vocab = original(*args, **kwargs)
        pads = [i for i, t in enumerate(vocab.tokens) if t.startswith("[PAD")]
        for i, text in zip(pads, MISTRAL_SPECIALS):
            vocab.tokens[i], vocab.token_types[i] = text, CONTROL
        return vocab

    random_gguf.make_vocab = with_specials
    try:
        return write_random_model(path, "llama", tokenizer="bpe", n_vocab=512 + 16,
                                  chat_template=template, seed=3)
    finally:
        random_gguf.make_vocab = original


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    require("llguidance")
    d = tmp_path_factory.mktemp("formats")
    out = {"mistral_args": write_mistral_model(d / "mistral_args.gguf", MISTRAL_V11)}
    for name, template in (("deepseek", DEEPSEEK_R1), ("deepseek_v31", DEEPSEEK_V31),
                           ("gemma", GEMMA3), ("mistral", MISTRAL_V03)):
        out[name] = write_random_model(d / f"{name}.gguf", "qwen2", tokenizer="bpe",
                                       chat_template=template, seed=11)
    return out


@pytest.mark.parametrize("fmt", ["mistral", "mistral_args", "deepseek", "deepseek_v31", "gemma"])
def test_forced_calls_follow_the_schema(models, fmt):
    jsonschema = require("jsonschema")
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, TIME)}
    with dasllama.LLM(models[fmt], n_ctx=2048, threads=1) as llm:
        for choice, parallel, seed in (
                ({"type": "function", "function": {"name": "get_time"}}, True, 1),
                ("required", False, 2), ("required", True, 3)):
            plan = plan_tools(llm.chat_format, [WEATHER, TIME], choice,
                              parallel_tool_calls=parallel)
            assert plan.fmt == fmt
            ids = prompt_ids(llm, plan.render(USER))
            text, pieces = generate(llm, ids, plan.constraint(llm), seed=seed,
                                    max_tokens=MAX_TOKENS)
            content, calls = plan.parse(text)
            assert content is None and calls, text
            if choice != "required":
                assert [c["function"]["name"] for c in calls] == ["get_time"]
            elif not parallel:
                assert len(calls) == 1
            for c in calls:
                jsonschema.validate(json.loads(c["function"]["arguments"]),
                                    schemas[c["function"]["name"]])
            s = plan.stream(ids_from())
            assert collect([d for p in pieces for d in s.push(p)] + s.finish()) == \
                plan.parse(text, ids_from())
        # negative control: the same loop without the grammar writes no call
        text, _ = generate(llm, ids, None, seed=2, max_tokens=60)
        assert plan.parse(text)[1] == [], text


def test_mistral_markers_are_control_tokens_that_the_grammar_emits(models):
    with dasllama.LLM(models["mistral_args"], n_ctx=2048, threads=1) as llm:
        plan = plan_tools(llm.chat_format, [WEATHER],
                          {"type": "function", "function": {"name": "get_weather"}})
        rendered = plan.rendered_tokens(llm)
        assert sorted(rendered.values()) == ["[ARGS]", "[CALL_ID]", "[TOOL_CALLS]"]
        tok = llm.tokenizer
        assert all(tok.is_control(t) for t in rendered)
        ids = prompt_ids(llm, plan.render(USER))
        text, _ = generate(llm, ids, plan.constraint(llm), seed=4)
        # generate() writes control pieces as their text; the markers are those tokens
        tokens = llm.tokenize(text, add_special=False, parse_special=True)
        assert tokens[0] in rendered and rendered[tokens[0]] == "[TOOL_CALLS]"
        assert plan.parse(text)[1][0]["function"]["name"] == "get_weather"
        # negative control: text that leaves the control tokens out holds no call
        bare = text.replace("[TOOL_CALLS]", "").replace("[ARGS]", "")
        assert plan.parse(bare)[1] == []

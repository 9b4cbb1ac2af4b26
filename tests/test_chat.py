"""dasllama.chat: chat templates rendered like transformers' apply_chat_template, the fallbacks,
and chats with the real models."""

import pytest

import dasllama
from dasllama import _core
from dasllama.chat import ChatFormat, ChatTemplateError, validate_messages

needs_model = pytest.mark.skipif(not hasattr(_core, "LLMModel"), reason="no _core.LLMModel")

# SmolLM2-135M-Instruct's template, as its GGUF file carries it.
SMOLLM2 = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
           "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
           "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
           "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
           "{{ '<|im_start|>assistant\n' }}{% endif %}")
USER = [{"role": "user", "content": "Hi!"}]


def test_smollm2_template_renders_its_default_system_turn():
    fmt = ChatFormat.from_model(SMOLLM2, bos_token="<|im_start|>", eos_token="<|im_end|>")
    assert fmt.kind == "jinja"
    assert fmt.render(USER) == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n")
    with_system = [{"role": "system", "content": "Be terse."}] + USER
    assert fmt.render(with_system, add_generation_prompt=False) == (
        "<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n")


def test_template_environment_matches_transformers():
    # trim_blocks + lstrip_blocks: block tags take their own line's newline and indentation.
    t = "{% for m in messages %}\n    {% if m.role == 'user' %}\n[{{ m.content }}]\n    {% endif %}\n{% endfor %}"
    assert ChatFormat.from_model(t).render(USER) == "[Hi!]\n"
    # bos/eos variables, tojson without HTML escaping, loop controls
    t = "{{ bos_token }}{{ messages | tojson }}{% for m in messages %}{% break %}{% endfor %}{{ eos_token }}"
    out = ChatFormat.from_model(t, bos_token="<s>", eos_token="</s>").render(
        [{"role": "user", "content": "a<b & 'c'"}])
    assert out == '<s>[{"role": "user", "content": "a<b & \'c\'"}]</s>'
    assert "2" in ChatFormat.from_model("{{ strftime_now('%Y') }}").render(USER)


def test_raise_exception_and_broken_templates_are_chat_template_errors():
    t = ("{% if messages[0]['role'] != 'user' %}{{ raise_exception('Conversation must start "
         "with user') }}{% endif %}ok")
    fmt = ChatFormat.from_model(t)
    assert fmt.render(USER) == "ok"
    with pytest.raises(ChatTemplateError, match="rejected the messages: Conversation must start"):
        fmt.render([{"role": "assistant", "content": "x"}])
    with pytest.raises(ChatTemplateError, match="does not parse"):
        ChatFormat.from_model("{% for m in messages %}")
    # the sandbox refuses to reach Python internals
    with pytest.raises(ChatTemplateError, match="failed"):
        ChatFormat.from_model("{{ ''.__class__.__mro__[1].__subclasses__() }}").render(USER)
    assert issubclass(ChatTemplateError, ValueError)


def test_gemma_turns_when_the_file_has_no_template():
    vocab = {"<start_of_turn>", "<end_of_turn>"}
    fmt = ChatFormat.from_model(None, has_token=vocab.__contains__)
    assert fmt.kind == "gemma" and fmt.stop == ("<end_of_turn>",)
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Bye"}]
    assert fmt.render(msgs) == (
        "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
        "<start_of_turn>model\nHello<end_of_turn>\n"
        "<start_of_turn>user\nBye<end_of_turn>\n"
        "<start_of_turn>model\n")


def test_plain_format_otherwise():
    fmt = ChatFormat.from_model("", has_token=lambda s: False)
    assert fmt.kind == "plain" and fmt.stop == ("\nuser:",)
    assert fmt.render(USER + [{"role": "assistant", "content": "Yo"}], add_generation_prompt=False) \
        == "user: Hi!\nassistant: Yo\n"


@pytest.mark.parametrize("messages,text", [
    ([], "messages is empty"),
    ("hi", "must be a list"),
    ([{"role": "user"}], r"messages\[0\]\['content'\] must be a string, got None"),
    ([{"role": "user", "content": "a"}, "b"], r"messages\[1\] must be a dict"),
])
def test_bad_messages(messages, text):
    with pytest.raises(ValueError, match=text):
        validate_messages(messages)


TOOL_TURNS = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
]


def test_tool_calls_and_tool_results_are_valid_messages():
    out = validate_messages(TOOL_TURNS)
    assert out[1]["content"] is None and out[2]["content"] is None   # absent becomes None
    assert out[1]["tool_calls"] == TOOL_TURNS[1]["tool_calls"]
    assert out[3]["tool_call_id"] == "call_1"
    # templates see them as they are
    t = ("{% for m in messages %}{{ m.role }}:{{ m.content }}:{{ m.tool_calls | length }};"
         "{% endfor %}")
    assert ChatFormat.from_model(t).render(TOOL_TURNS, add_generation_prompt=False) == \
        "user:Weather in Paris?:0;assistant:None:1;assistant:None:1;tool:18 C:0;"
    # the fallbacks render a content-less assistant turn as empty
    assert ChatFormat.from_model(None).render(TOOL_TURNS[:2]) == \
        "user: Weather in Paris?\nassistant: \nassistant:"
    gemma = ChatFormat.from_model(None, has_token={"<start_of_turn>", "<end_of_turn>"}.__contains__)
    assert "<start_of_turn>model\n<end_of_turn>" in gemma.render(TOOL_TURNS[:2])


@pytest.mark.parametrize("message,text", [
    ({"role": "user", "content": "x", "tool_calls": []},
     r"messages\[0\]\['tool_calls'\] belongs on an assistant message, not role 'user'"),
    ({"role": "assistant", "content": None, "tool_calls": "f()"},
     r"\['tool_calls'\] must be a list"),
    ({"role": "assistant", "content": None, "tool_calls": []},
     r"messages\[0\]\['content'\] must be a string, got None"),    # no calls: content needed
    ({"role": "assistant", "tool_calls": [{"name": "f"}]},
     r"\['tool_calls'\]\[0\]\['function'\] must be a dict"),
    ({"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]},
     r"\['function'\]\['name'\] must be a non-empty string, got None"),
    ({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": [1]}}]},
     r"\['arguments'\] must be a JSON string or a dict, got list"),
    ({"role": "tool", "tool_call_id": 7, "content": "18 C"},
     r"messages\[0\]\['tool_call_id'\] must be a string, got 7"),
    ({"role": 3, "content": "x"}, r"messages\[0\]\['role'\] must be a string, got 3"),
])
def test_bad_tool_messages(message, text):
    with pytest.raises(ValueError, match=text):
        validate_messages([message])


@needs_model
def test_smollm2_chat_reuses_the_previous_turn(real_model):
    with dasllama.LLM(real_model("smollm2"), n_ctx=1024) as llm:
        assert llm.chat_format.kind == "jinja"
        msgs = [{"role": "user", "content": "What is the capital of France?"}]
        reply = llm.chat(msgs, temperature=0, max_tokens=12)
        print(f"reply: {reply!r} {llm.stats}")
        # The answer itself is a near-tie for this small model ("The" vs "L'"), so what is
        # checked is the mechanics: a reply of the asked length, then a reused prefix.
        assert reply.strip() and llm.stats["gen_tokens"] == 12
        first = llm.stats
        # special tokens in the rendered prompt became single tokens
        ids = llm.tokenize(llm.chat_format.render(msgs), parse_special=True)
        assert ids[0] == llm.tokenize("<|im_start|>", parse_special=True)[0]
        assert first["prompt_tokens"] == len(ids)
        msgs += [{"role": "assistant", "content": reply}, {"role": "user", "content": "And Italy?"}]
        llm.chat(msgs, temperature=0, max_tokens=4)
        assert llm.stats["cached_tokens"] >= first["prompt_tokens"]


@needs_model
def test_gemma3_chat_uses_gemma_turns(real_model):
    with dasllama.LLM(real_model("gemma3"), n_ctx=512) as llm:
        fmt = llm.chat_format
        assert fmt.kind == "gemma"
        text = fmt.render(USER)
        ids = llm.tokenize(text, parse_special=True)
        turn = llm.tokenize("<start_of_turn>", add_special=False, parse_special=True)
        assert len(turn) == 1 and ids[:2] == [llm.tokenizer.bos_id, turn[0]]
        reply = llm.chat(USER, temperature=0, max_tokens=8)
        print(f"reply: {reply!r} {llm.stats}")
        assert "<end_of_turn>" not in reply and llm.stats["gen_tokens"] >= 1

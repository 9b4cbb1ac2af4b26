"""The server with the packaged SmolLM2: streamed and plain replies agree at temperature 0,
a seeded reply equals LLM.chat at that seed, and ignore_eos runs past the end of turn."""

from __future__ import annotations

import pytest

from test_server_support import client, serve, spec

from dasllama import LLM

CTX = 1024
HI = [{"role": "user", "content": "Say hi."}]
QUESTION = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Write one sentence about rivers."}]


@pytest.fixture(scope="module")
def smollm2(real_model):
    return real_model("smollm2")


@pytest.fixture(scope="module")
def api(smollm2):
    with serve([spec("smollm2", smollm2)], n_ctx=CTX, parallel=2) as srv:
        yield client(srv)


def test_stream_equals_plain_at_temperature_0(api):
    plain = api.chat.completions.create(model="smollm2", messages=QUESTION, max_tokens=40,
                                        temperature=0)
    text = "".join(c.choices[0].delta.content or ""
                   for c in api.chat.completions.create(model="smollm2", messages=QUESTION,
                                                        max_tokens=40, temperature=0,
                                                        stream=True) if c.choices)
    assert text == plain.choices[0].message.content
    assert len(text.split()) >= 5, f"a real model should say something: {text!r}"
    other = api.chat.completions.create(model="smollm2", messages=HI, max_tokens=40,
                                        temperature=0)
    assert other.choices[0].message.content != text     # the prompt matters


def test_seeded_reply_equals_llm_chat(api, smollm2):
    r = api.chat.completions.create(model="smollm2", messages=QUESTION, max_tokens=24,
                                    temperature=0.7, seed=1234)
    with LLM(smollm2, n_ctx=CTX) as llm:
        expected = llm.chat(QUESTION, max_tokens=24, temperature=0.7, seed=1234)
        different = llm.chat(QUESTION, max_tokens=24, temperature=0.7, seed=4321)
    assert r.choices[0].message.content == expected
    assert different != expected


def test_ignore_eos_runs_to_max_tokens(api):
    plain = api.chat.completions.create(model="smollm2", messages=HI, max_tokens=64,
                                        temperature=0)
    assert plain.choices[0].finish_reason == "stop"
    assert plain.usage.completion_tokens < 64
    forced = api.chat.completions.create(model="smollm2", messages=HI, max_tokens=64,
                                         temperature=0, extra_body={"ignore_eos": True})
    assert forced.choices[0].finish_reason == "length"
    assert forced.usage.completion_tokens == 64
    assert forced.choices[0].message.content.startswith(plain.choices[0].message.content)

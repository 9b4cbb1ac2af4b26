"""response_format json_schema through the live server: the 20 generated schemas of
tests/schema_cases.py, sent by the real openai client to a random-weight qwen2 model with a
byte-level BPE vocabulary (the vocabulary dasllama.grammar's masks are built over). Every reply
must parse and validate with jsonschema and end with finish_reason "stop"; the same requests
without response_format mostly do not validate (the negative control: the server, not luck,
makes the replies valid); streamed replies equal the plain ones at temperature 0.

A random-weight model writes whatever the mask lets it, so these checks are about what the
constraint guarantees, not about what a trained model would answer."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from requires import require
from schema_cases import N_SCHEMAS, SCHEMAS
from test_server_support import client, serve, spec

from dasllama.testing import write_random_model

jsonschema = require("jsonschema")
require("llguidance")

SLOTS = 4
# Requests in flight at once: every slot busy and as many again waiting in the queue.
CLIENTS = 2 * SLOTS
# Every schema bounds its strings, numbers, arrays and the whitespace between tokens, so every
# reply ends: sampled ones take 15-300 tokens of the test vocabulary, greedy ones up to ~500
# (at temperature 0 the random model takes nearly all the whitespace the grammar allows at each
# place). A reply cut at this cap ends with "length" and fails the test.
MAX_TOKENS = 800
# The prompt and a whole reply fit in a slot's context with room to spare.
CTX = 1024
ASK = [{"role": "user", "content": "Answer in JSON."}]
# Schemas also sent streamed: a pattern and an array of objects (3), nesting (6, 11), a
# nullable (16).
STREAMED = (3, 6, 11, 16)


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    path = write_random_model(tmp_path_factory.mktemp("schemas") / "qwen2-bpe.gguf", "qwen2",
                              tokenizer="bpe", chat_template=True, seed=3)
    with serve([spec("bpe", path)], n_ctx=CTX, parallel=SLOTS, max_queue=4 * CLIENTS) as srv:
        yield client(srv)


def response_format(i: int) -> dict:
    return {"type": "json_schema",
            "json_schema": {"name": f"schema_{i}", "schema": SCHEMAS[i], "strict": True}}


def request(i: int, constrained: bool = True, **kw) -> dict:
    body = dict(model="bpe", messages=ASK, max_tokens=MAX_TOKENS, temperature=1.0, seed=i)
    if constrained:
        body["response_format"] = response_format(i)
    body.update(kw)
    return body


def send_all(api, bodies: list) -> list:
    """The chat completions of bodies, sent CLIENTS at a time; in the order of bodies."""
    with ThreadPoolExecutor(CLIENTS) as pool:
        return list(pool.map(lambda b: api.chat.completions.create(**b), bodies))


def validation_error(text, schema):
    """None when text is JSON that follows schema, else why not."""
    try:
        jsonschema.validate(json.loads(text), schema)
    except (TypeError, ValueError, jsonschema.ValidationError) as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0]}"
    return None


def test_the_schemas_are_valid_and_distinct():
    assert len(SCHEMAS) == N_SCHEMAS == 20
    assert len({json.dumps(s, sort_keys=True) for s in SCHEMAS}) == N_SCHEMAS
    for s in SCHEMAS:
        jsonschema.Draft202012Validator.check_schema(s)


def test_every_reply_follows_its_schema(api):
    replies = send_all(api, [request(i) for i in range(N_SCHEMAS)])
    lengths = []
    for i, r in enumerate(replies):
        choice = r.choices[0]
        text = choice.message.content
        assert choice.finish_reason == "stop", (i, choice.finish_reason, text)
        error = validation_error(text, SCHEMAS[i])
        assert error is None, f"schema {i}: {error}; reply {text!r}"
        assert r.usage.completion_tokens < MAX_TOKENS
        lengths.append(r.usage.completion_tokens)
    # Replies of different schemas differ (no reply was answered for another request).
    assert len({r.choices[0].message.content for r in replies}) == N_SCHEMAS
    print(f"\ntokens per reply: {lengths}")


def test_without_response_format_replies_do_not_validate(api):
    # Negative control: the same requests and seeds, no response_format.
    replies = send_all(api, [request(i, constrained=False) for i in range(N_SCHEMAS)])
    valid = [i for i, r in enumerate(replies)
             if validation_error(r.choices[0].message.content, SCHEMAS[i]) is None]
    print(f"\nunconstrained replies that validate: {len(valid)} of {N_SCHEMAS}")
    assert len(valid) <= N_SCHEMAS // 4, f"unconstrained replies validated for schemas {valid}"


def test_several_choices_each_follow_the_schema(api):
    r = api.chat.completions.create(**request(6, n=3, seed=40))
    texts = [c.message.content for c in r.choices]
    assert [c.index for c in r.choices] == [0, 1, 2]
    for choice in r.choices:
        assert choice.finish_reason == "stop"
        assert validation_error(choice.message.content, SCHEMAS[6]) is None, texts
    assert len(set(texts)) > 1, f"choices of seeds 40, 41, 42 are alike: {texts}"


def streamed_reply(api, body: dict):
    """(content from the concatenated deltas, finish_reason, usage) of a streamed request."""
    pieces, finish, usage = [], None, None
    for chunk in api.chat.completions.create(stream=True,
                                             stream_options={"include_usage": True}, **body):
        usage = chunk.usage or usage
        for c in chunk.choices:
            pieces.append(c.delta.content or "")
            finish = c.finish_reason or finish
    return "".join(pieces), finish, usage


def test_streamed_replies_equal_plain_ones_at_temperature_0(api):
    bodies = [request(i, temperature=0) for i in STREAMED]
    plain = send_all(api, bodies)
    with ThreadPoolExecutor(len(bodies)) as pool:
        streamed = list(pool.map(lambda b: streamed_reply(api, b), bodies))
    for i, p, (text, finish, usage) in zip(STREAMED, plain, streamed):
        assert finish == "stop" and p.choices[0].finish_reason == "stop"
        assert validation_error(text, SCHEMAS[i]) is None, (i, text)
        assert text == p.choices[0].message.content, i
        assert usage.completion_tokens == p.usage.completion_tokens

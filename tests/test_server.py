"""The OpenAI-compatible server through the real openai client and httpx: chat, completions,
streaming, logprobs, stops, context limits, model routing, tokenize/detokenize, metrics and
malformed bodies. A real uvicorn server on 127.0.0.1 serves random-weight models; the text it
returns is checked against LLM.generate / LLM.chat on the same file (the sequential path, an
independent oracle for the batching engine behind the server)."""

from __future__ import annotations

import json

import pytest

from test_server_support import (assert_error_shape, client, httpx, metrics, openai,
                                 random_model, serve, spec, wait_for)

from dasllama import LLM

CTX = 256
PROMPT = "The quick brown fox"


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    folder = tmp_path_factory.mktemp("server_models")
    return {"tiny": random_model(folder, "tiny", seed=1),
            "tiny2": random_model(folder, "tiny2", seed=2)}


@pytest.fixture(scope="module")
def server(paths):
    with serve([spec("tiny", paths["tiny"]), spec("tiny2", paths["tiny2"])], parallel=2,
               n_ctx=CTX) as srv:
        yield srv


@pytest.fixture(scope="module")
def oracle(paths):
    """LLM objects on the same files, for expected outputs."""
    llms = {name: LLM(path, n_ctx=CTX, threads=1) for name, path in paths.items()}
    yield llms
    for llm in llms.values():
        llm.close()


@pytest.fixture(scope="module")
def api(server):
    return client(server)


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


# --------------------------------------------------------------------------------------------
# Health and models
# --------------------------------------------------------------------------------------------
def test_health_ok_when_models_are_loaded(http):
    r = http.get("/health")
    assert r.status_code == 200 and r.json() == {"status": "ok"}


def test_models_list_and_retrieve(api):
    listed = {m.id: m for m in api.models.list().data}
    assert set(listed) == {"tiny", "tiny2"}
    card = api.models.retrieve("tiny")
    assert card.id == "tiny" and card.object == "model"
    assert card.model_extra["status"] == "ready" and card.model_extra["n_ctx"] == CTX
    assert card.model_extra["slots"] == 2
    with pytest.raises(openai.NotFoundError):
        api.models.retrieve("no-such-model")


# --------------------------------------------------------------------------------------------
# Completions
# --------------------------------------------------------------------------------------------
def test_completion_matches_llm_generate_and_routes_by_model(api, oracle):
    texts = {}
    for name in ("tiny", "tiny2"):
        r = api.completions.create(model=name, prompt=PROMPT, max_tokens=16, temperature=0)
        expected = oracle[name].generate(PROMPT, max_tokens=16, temperature=0)
        assert r.choices[0].text == expected
        assert r.model == name
        texts[name] = r.choices[0].text
    assert texts["tiny"] != texts["tiny2"], "two different models answered alike"


def test_completion_prompts_times_n_seeded_and_echo(api, oracle):
    prompts = ["The quick brown fox", "In the morning"]
    r = api.completions.create(model="tiny", prompt=prompts, n=2, seed=5, max_tokens=8,
                               temperature=0.9, echo=True)
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    for i, choice in enumerate(r.choices):
        prompt, k = prompts[i // 2], i % 2
        assert choice.text.startswith(prompt)
        expected = oracle["tiny"].generate(prompt, max_tokens=8, temperature=0.9, seed=5 + k)
        assert choice.text == prompt + expected
    assert r.choices[0].text != r.choices[1].text, "choices of seed and seed+1 are alike"
    p_tokens = sum(len(oracle["tiny"].tokenize(p)) for p in prompts)
    assert r.usage.prompt_tokens == p_tokens
    assert r.usage.completion_tokens <= 4 * 8


def test_completion_from_token_ids_equals_text_prompt(api, oracle):
    ids = oracle["tiny"].tokenize(PROMPT)
    by_text = api.completions.create(model="tiny", prompt=PROMPT, max_tokens=12, temperature=0)
    by_ids = api.completions.create(model="tiny", prompt=ids, max_tokens=12, temperature=0)
    assert by_ids.choices[0].text == by_text.choices[0].text
    assert by_ids.usage.prompt_tokens == len(ids)


def test_completion_logprobs_greedy_picks_the_top_alternative(api):
    r = api.completions.create(model="tiny", prompt=PROMPT, max_tokens=10, temperature=0,
                               logprobs=3, extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == r.usage.completion_tokens == 10
    for token_lp, top in zip(lp.token_logprobs, lp.top_logprobs):
        assert token_lp <= 0.0
        assert 1 <= len(top) <= 3
        assert token_lp == pytest.approx(max(top.values()), abs=1e-6)
    assert lp.text_offset == sorted(lp.text_offset)


def test_stop_string_cuts_the_text_where_it_first_appears(api):
    free = api.completions.create(model="tiny", prompt=PROMPT, max_tokens=40, temperature=0,
                                  extra_body={"ignore_eos": True}).choices[0].text
    stop = free[12:15]
    assert len(stop) == 3 and stop.strip(), f"the free text is too short: {free!r}"
    cut = api.completions.create(model="tiny", prompt=PROMPT, max_tokens=40, temperature=0,
                                 stop=[stop, "\x00never"], extra_body={"ignore_eos": True})
    assert cut.choices[0].text == free[:free.index(stop)]
    assert cut.choices[0].finish_reason == "stop"


def test_max_tokens_is_capped_by_the_context(api):
    r = api.completions.create(model="tiny", prompt=PROMPT, max_tokens=10 ** 6, temperature=0,
                               extra_body={"ignore_eos": True})
    assert r.usage.prompt_tokens + r.usage.completion_tokens == CTX
    assert r.choices[0].finish_reason == "length"


def test_prompt_longer_than_the_context_is_a_400_naming_both_counts(http):
    ids = [5] * (CTX + 44)
    r = http.post("/v1/completions", json={"model": "tiny", "prompt": ids, "max_tokens": 4})
    err = assert_error_shape(r, 400, "prompt")
    assert str(CTX + 44) in err["message"] and str(CTX) in err["message"]
    long_text = "hello world " * 400
    r = http.post("/v1/chat/completions",
                  json={"model": "tiny", "messages": [{"role": "user", "content": long_text}]})
    err = assert_error_shape(r, 400, "messages")
    assert str(CTX) in err["message"] and "tokens" in err["message"]


def test_streamed_completion_equals_the_plain_one(api):
    plain = api.completions.create(model="tiny", prompt=PROMPT, max_tokens=24, temperature=0)
    pieces, finish, usage = [], None, None
    for chunk in api.completions.create(model="tiny", prompt=PROMPT, max_tokens=24,
                                        temperature=0, stream=True,
                                        stream_options={"include_usage": True}):
        for c in chunk.choices:
            pieces.append(c.text)
            finish = c.finish_reason or finish
        usage = chunk.usage or usage
    assert "".join(pieces) == plain.choices[0].text and plain.choices[0].text
    assert finish == plain.choices[0].finish_reason
    assert usage.completion_tokens == plain.usage.completion_tokens


# --------------------------------------------------------------------------------------------
# Chat
# --------------------------------------------------------------------------------------------
MESSAGES = [{"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Name three colours of the rainbow."}]


def test_chat_completion_shape_and_text(api, oracle):
    r = api.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=20,
                                    temperature=0)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    choice = r.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == oracle["tiny"].chat(MESSAGES, max_tokens=20, temperature=0)
    assert choice.finish_reason in ("stop", "length")
    ids, _, _ = oracle["tiny"].chat_prompt(MESSAGES)
    assert r.usage.prompt_tokens == len(ids)
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert r.usage.prompt_tokens_details.cached_tokens >= 0


def test_chat_reports_the_prompt_prefix_it_reused(api):
    messages = [{"role": "user", "content": "A question about rivers, winds and the seasons "
                                            "that nobody asked before: why?"}]
    first = api.chat.completions.create(model="tiny2", messages=messages, max_tokens=4,
                                        temperature=0)
    second = api.chat.completions.create(model="tiny2", messages=messages, max_tokens=4,
                                         temperature=0)
    c1 = first.usage.prompt_tokens_details.cached_tokens
    c2 = second.usage.prompt_tokens_details.cached_tokens
    assert c2 > c1 and c2 >= second.usage.prompt_tokens // 2, (c1, c2)
    assert second.choices[0].message.content == first.choices[0].message.content


def test_chat_n_choices_are_seeded_and_reproducible(api):
    kw = dict(model="tiny", messages=MESSAGES, max_tokens=12, temperature=1.0, seed=11, n=3)
    a = api.chat.completions.create(**kw)
    b = api.chat.completions.create(**kw)
    texts = [c.message.content for c in a.choices]
    assert [c.index for c in a.choices] == [0, 1, 2]
    assert texts == [c.message.content for c in b.choices]
    assert len(set(texts)) > 1, "n choices with seeds seed..seed+2 came out identical"
    assert a.usage.completion_tokens == b.usage.completion_tokens


def test_chat_logprobs_cover_every_token(api):
    r = api.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=12,
                                    temperature=0, logprobs=True, top_logprobs=2,
                                    extra_body={"ignore_eos": True})
    entries = r.choices[0].logprobs.content
    assert len(entries) == r.usage.completion_tokens == 12
    raw = b"".join(bytes(e.bytes) for e in entries)
    assert raw.decode("utf-8", errors="replace") == r.choices[0].message.content
    for e in entries:
        assert len(e.top_logprobs) == 2
        assert e.logprob == pytest.approx(e.top_logprobs[0].logprob, abs=1e-6)
        assert e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob


def test_chat_text_parts_and_developer_role_render_like_strings(api):
    as_parts = [{"role": "developer", "content": [{"type": "text", "text": "You are terse."}]},
                {"role": "user", "content": [{"type": "text", "text": "Name three colours"},
                                             {"type": "text", "text": "of the rainbow."}]}]
    as_text = [{"role": "system", "content": "You are terse."},
               {"role": "user", "content": "Name three colours\nof the rainbow."}]
    a = api.chat.completions.create(model="tiny", messages=as_parts, max_tokens=10,
                                    temperature=0)
    b = api.chat.completions.create(model="tiny", messages=as_text, max_tokens=10,
                                    temperature=0)
    assert a.choices[0].message.content == b.choices[0].message.content
    assert a.usage.prompt_tokens == b.usage.prompt_tokens


def test_streamed_chat_equals_the_plain_one(api):
    plain = api.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=30,
                                        temperature=0)
    chunks = list(api.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=30,
                                              temperature=0, stream=True,
                                              stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices
                and c.choices[0].finish_reason]
    assert text == plain.choices[0].message.content and text
    assert finishes == [plain.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == \
        plain.usage.completion_tokens


def test_stream_ends_with_done_and_has_no_usage_unless_asked(http):
    body = {"model": "tiny", "messages": MESSAGES, "max_tokens": 5, "temperature": 0,
            "stream": True}
    with http.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [line for line in r.iter_lines() if line]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    payloads = [json.loads(e[len("data: "):]) for e in events[:-1]]
    assert all(p["object"] == "chat.completion.chunk" and "usage" not in p for p in payloads)


# --------------------------------------------------------------------------------------------
# Tokenize, metrics
# --------------------------------------------------------------------------------------------
def test_tokenize_and_detokenize_round_trip(http, oracle):
    text = "hello world, the river"
    r = http.post("/tokenize", json={"model": "tiny", "content": text, "add_special": False})
    assert r.status_code == 200
    ids = r.json()["tokens"]
    assert ids == oracle["tiny"].tokenize(text, add_special=False)
    assert r.json()["count"] == len(ids) and r.json()["max_model_len"] == CTX
    pieces = http.post("/tokenize", json={"model": "tiny", "content": text,
                                          "add_special": False, "with_pieces": True}).json()
    assert "".join(p["piece"] for p in pieces["tokens"]) == text
    back = http.post("/detokenize", json={"model": "tiny", "tokens": ids})
    assert back.status_code == 200 and back.json() == {"content": text}


def _http_count(url: str, route: str, status: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(httpx.get(url + "/metrics").text):
        for sample in family.samples:
            if (sample.name == "dasllama_http_requests_total"
                    and sample.labels == {"route": route, "status": status}):
                return sample.value
    return 0.0


def test_metrics_count_tokens_and_requests(server, api):
    before = metrics(server.url)
    answered = _http_count(server.url, "/v1/completions", "200")
    r = api.completions.create(model="tiny2", prompt=PROMPT, max_tokens=20, temperature=0,
                               extra_body={"ignore_eos": True})
    after = metrics(server.url)

    def delta(name, model="tiny2"):
        return after.get((name, model), 0.0) - before.get((name, model), 0.0)

    assert delta("dasllama_generated_tokens_total") == 20
    assert delta("dasllama_prompt_tokens_total") == r.usage.prompt_tokens
    assert after[("dasllama_model_loaded", "tiny2")] == 1.0
    assert after[("dasllama_slots", "tiny2")] == 2.0
    assert after[("dasllama_kv_pool_bytes", "tiny2")] > 0
    assert after[("dasllama_requests_running", "tiny2")] == 0.0
    # On the CPU there are no GPU seats: no seat-step samples.
    assert ("dasllama_gpu_seat_steps_total", "tiny2") not in after
    assert _http_count(server.url, "/v1/completions", "200") == answered + 1



def test_a_client_gone_before_its_body_is_not_counted_as_a_server_error(server):
    import socket

    errors = _http_count(server.url, "unmatched", "500")
    gone = _http_count(server.url, "unmatched", "499")
    with socket.create_connection((server.host, server.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
    wait_for(lambda: _http_count(server.url, "unmatched", "499") == gone + 1,
             "the abandoned request to be counted")
    assert _http_count(server.url, "unmatched", "500") == errors

# --------------------------------------------------------------------------------------------
# Malformed requests: a 4xx in the OpenAI shape naming the field, and the server keeps serving
# --------------------------------------------------------------------------------------------
OK_MESSAGES = [{"role": "user", "content": "hi"}]
CHAT_BAD = [
    ({}, 400, "messages"),
    ({"messages": "hi"}, 400, "messages"),
    ({"messages": []}, 400, "messages"),
    ({"messages": [{"content": "x"}]}, 400, "messages[0].role"),
    ({"messages": [{"role": "user"}]}, 400, "messages[0]"),
    ({"messages": [{"role": 1, "content": "x"}]}, 400, "messages[0].role"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, 400, "messages[0].role"),
    ({"messages": [{"role": "user", "content": 5}]}, 400, "messages[0].content"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
     400, "messages[0].content[0]"),
    ({"messages": ["hello"]}, 400, "messages[0]"),
    ({"messages": OK_MESSAGES, "model": "nope"}, 404, "model"),
    ({"messages": OK_MESSAGES, "model": 7}, 400, "model"),
    ({"messages": OK_MESSAGES, "max_tokens": -1}, 400, "max_tokens"),
    ({"messages": OK_MESSAGES, "max_tokens": 2.5}, 400, "max_tokens"),
    ({"messages": OK_MESSAGES, "max_tokens": True}, 400, "max_tokens"),
    ({"messages": OK_MESSAGES, "max_completion_tokens": -3}, 400, "max_completion_tokens"),
    ({"messages": OK_MESSAGES, "temperature": 3}, 400, "temperature"),
    ({"messages": OK_MESSAGES, "temperature": -0.1}, 400, "temperature"),
    ({"messages": OK_MESSAGES, "temperature": "hot"}, 400, "temperature"),
    ({"messages": OK_MESSAGES, "top_p": 1.5}, 400, "top_p"),
    ({"messages": OK_MESSAGES, "top_k": -2}, 400, "top_k"),
    ({"messages": OK_MESSAGES, "min_p": 2}, 400, "min_p"),
    ({"messages": OK_MESSAGES, "presence_penalty": 9}, 400, "presence_penalty"),
    ({"messages": OK_MESSAGES, "repetition_penalty": 0}, 400, "repetition_penalty"),
    ({"messages": OK_MESSAGES, "n": 0}, 400, "n"),
    ({"messages": OK_MESSAGES, "n": 1000}, 400, "n"),
    ({"messages": OK_MESSAGES, "seed": "x"}, 400, "seed"),
    ({"messages": OK_MESSAGES, "seed": 2 ** 70}, 400, "seed"),
    ({"messages": OK_MESSAGES, "stop": 5}, 400, "stop"),
    ({"messages": OK_MESSAGES, "stop": [""]}, 400, "stop"),
    ({"messages": OK_MESSAGES, "stop": ["a"] * 40}, 400, "stop"),
    ({"messages": OK_MESSAGES, "logprobs": "yes"}, 400, "logprobs"),
    ({"messages": OK_MESSAGES, "top_logprobs": 3}, 400, "top_logprobs"),
    ({"messages": OK_MESSAGES, "logprobs": True, "top_logprobs": 50}, 400, "top_logprobs"),
    ({"messages": OK_MESSAGES, "stream": "yes"}, 400, "stream"),
    ({"messages": OK_MESSAGES, "stream_options": {"include_usage": "no"}}, 400,
     "stream_options.include_usage"),
    ({"messages": OK_MESSAGES, "response_format": {"type": "xml"}}, 400,
     "response_format.type"),
    ({"messages": OK_MESSAGES, "response_format": {"type": "json_schema"}}, 400,
     "response_format"),
    ({"messages": OK_MESSAGES, "tools": [{"type": "function"}]}, 400, "tools[0].function"),
    ({"messages": OK_MESSAGES, "tools": "all"}, 400, "tools"),
    ({"messages": OK_MESSAGES, "tool_choice": "sometimes"}, 400, "tool_choice"),
    ({"messages": OK_MESSAGES, "logit_bias": {"5": 10}}, 400, "logit_bias"),
    ({"messages": OK_MESSAGES, "ignore_eos": 1}, 400, "ignore_eos"),
]
COMPLETION_BAD = [
    ({}, 400, "prompt"),
    ({"prompt": 5}, 400, "prompt"),
    ({"prompt": []}, 400, "prompt"),
    ({"prompt": [[]]}, 400, "prompt"),
    ({"prompt": [[1, 2], "x"]}, 400, "prompt[0]"),
    ({"prompt": [10 ** 6]}, 400, "prompt"),
    ({"prompt": [-1]}, 400, "prompt"),
    ({"prompt": "x", "max_tokens": -1}, 400, "max_tokens"),
    ({"prompt": "x", "logprobs": 99}, 400, "logprobs"),
    ({"prompt": "x", "echo": True, "logprobs": 1}, 400, "echo"),
    ({"prompt": "x", "suffix": "y"}, 400, "suffix"),
    ({"prompt": "x", "best_of": 3}, 400, "best_of"),
    ({"prompt": "x", "model": "nope"}, 404, "model"),
]


@pytest.mark.parametrize("body,status,param", CHAT_BAD, ids=[str(i) for i in range(len(CHAT_BAD))])
def test_malformed_chat_body(http, body, status, param):
    body = {"model": "tiny", **body} if "model" not in body else body
    assert_error_shape(http.post("/v1/chat/completions", json=body), status, param)


@pytest.mark.parametrize("body,status,param", COMPLETION_BAD,
                         ids=[str(i) for i in range(len(COMPLETION_BAD))])
def test_malformed_completion_body(http, body, status, param):
    body = {"model": "tiny", **body} if "model" not in body else body
    assert_error_shape(http.post("/v1/completions", json=body), status, param)


def test_bodies_that_are_not_objects(http):
    for content in (b"{not json", b"[1, 2]", b"null", b'"text"', b"\xff\xfe"):
        r = http.post("/v1/chat/completions", content=content,
                      headers={"content-type": "application/json"})
        assert_error_shape(r, 400)


def test_tokenize_and_detokenize_reject_bad_bodies(http):
    assert_error_shape(http.post("/tokenize", json={"model": "tiny"}), 400, "content")
    assert_error_shape(http.post("/tokenize", json={"model": "tiny", "content": 5}), 400,
                       "content")
    assert_error_shape(http.post("/detokenize", json={"model": "tiny", "tokens": ["a"]}), 400,
                       "tokens[0]")
    assert_error_shape(http.post("/detokenize", json={"model": "tiny", "tokens": [1, 10 ** 9]}),
                       400, "tokens[1]")
    assert_error_shape(http.post("/tokenize", json={"model": "zzz", "content": "x"}), 404,
                       "model")


def test_several_models_need_the_model_field(http):
    r = http.post("/v1/chat/completions", json={"messages": OK_MESSAGES})
    err = assert_error_shape(r, 400, "model")
    assert "tiny" in err["message"] and "tiny2" in err["message"]


def test_unknown_routes_and_methods(http):
    err = assert_error_shape(http.get("/v1/nothing-here"), 404)
    assert err["code"] == "unknown_route"
    assert_error_shape(http.get("/v1/chat/completions"), 405)
    assert_error_shape(http.delete("/v1/models"), 405)


def test_openai_client_raises_on_bad_requests(api):
    with pytest.raises(openai.BadRequestError) as e:
        api.chat.completions.create(model="tiny", messages=OK_MESSAGES, temperature=5)
    assert e.value.body["param"] == "temperature"
    with pytest.raises(openai.NotFoundError):
        api.chat.completions.create(model="missing", messages=OK_MESSAGES)


def test_server_still_serves_after_the_bad_requests(api, http):
    assert http.get("/health").status_code == 200
    r = api.chat.completions.create(model="tiny", messages=OK_MESSAGES, max_tokens=3)
    assert r.choices[0].message.content is not None


def test_nan_and_infinity_are_refused(http):
    for field in ("temperature", "top_p", "min_p", "presence_penalty", "repetition_penalty"):
        for value in ("NaN", "Infinity", "-Infinity"):
            body = ('{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "%s": %s}'
                    % (field, value))
            r = http.post("/v1/chat/completions", content=body,
                          headers={"content-type": "application/json"})
            assert_error_shape(r, 400, field)

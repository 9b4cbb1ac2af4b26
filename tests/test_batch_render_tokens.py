"""Request.render_tokens in the batching engine: a rendered control token's text comes out whole
in the request's text, and stop strings never cut it nor match across it, while a stop string in
the text before or after it still stops there (both orders). The tokens are forced by a scripted
constraint so each case writes exactly the sequence it names; every case has a control that
shows the same stop string does cut the same characters written as plain text."""

from __future__ import annotations

import numpy as np
import pytest

from dasllama import LLM
from dasllama.batch import BatchEngine, Request, SamplingParams
from dasllama.testing.random_gguf import write_random_model

MARKER = "<tool_call>"      # the text the control token is rendered as (a tool format's marker)


class Script:
    """A constraint that allows exactly the next token of a fixed sequence, then is done."""

    def __init__(self, tokens, n_vocab):
        self.tokens, self.n_vocab, self.seen = list(tokens), n_vocab, []

    def mask(self):
        words = np.zeros((self.n_vocab + 31) // 32, np.uint32)
        t = self.tokens[len(self.seen)]
        words[t // 32] |= np.uint32(1 << (t % 32))
        return words

    def advance(self, token):
        self.seen.append(token)

    def is_done(self):
        return len(self.seen) >= len(self.tokens)


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    path = tmp_path_factory.mktemp("render") / "llama.gguf"
    write_random_model(path, "llama", weight_type="Q8_0", seed=5, n_embd=64, n_head=4,
                       n_head_kv=2, n_ff=128, n_layer=2, n_ctx=256)
    with LLM(str(path), n_ctx=256, threads=2) as m:
        yield m


@pytest.fixture(scope="module")
def marker(llm):
    """A control token of the vocabulary that does not end generation."""
    tok = llm.tokenizer
    ids = llm.tokenize("<|im_start|>", add_special=False, parse_special=True)
    assert len(ids) == 1 and tok.is_control(ids[0]) and not tok.is_eog(ids[0])
    return ids[0]


def plain(llm, text):
    """Token ids whose pieces join to exactly text (checked)."""
    ids = llm.tokenize(text, add_special=False)
    assert "".join(bytes(llm.tokenizer.piece(t)).decode() for t in ids).replace("▁", " ") \
        .lstrip(" ") == text.lstrip(" "), text
    return ids


def run(llm, script, stop, render=None):
    engine = BatchEngine(llm, slots=2)
    events = []
    c = Script(script, llm.n_vocab)
    engine.submit(Request(prompt=llm.tokenize("Hello"), max_tokens=len(script) + 5,
                          sampling=SamplingParams(temperature=0), stop=stop, constraint=c,
                          render_tokens=render, on_event=events.append))
    engine.run()
    done = events[-1]
    assert done.kind == "done", done
    return "".join(e.text for e in events), done.finish_reason, len(c.seen)


def text_of(llm, ids):
    return "".join(bytes(llm.tokenizer.piece(t)).decode() for t in ids).replace("▁", " ")


def test_without_render_tokens_a_control_token_leaves_no_text(llm, marker):
    body = plain(llm, "abc")
    text, reason, _ = run(llm, [marker] + body, stop=[])
    assert text == text_of(llm, body) and reason == "stop"
    text, _, _ = run(llm, [marker] + body, stop=[], render={marker: MARKER})
    assert text == MARKER + text_of(llm, body)


def test_a_stop_string_before_the_marker_stops_there(llm, marker):
    before, after = plain(llm, "say STOP now"), plain(llm, "xyz")
    text, reason, used = run(llm, before + [marker] + after, stop=["STOP"],
                             render={marker: MARKER})
    written = text_of(llm, before)
    assert text == written[:written.index("STOP")] and reason == "stop"
    assert used < len(before) + 1           # it never reached the marker


def test_a_stop_string_after_the_marker_stops_there_and_keeps_the_marker(llm, marker):
    body = plain(llm, "args STOP more")
    text, reason, used = run(llm, [marker] + body, stop=["STOP"], render={marker: MARKER})
    written = text_of(llm, body)
    assert text == MARKER + written[:written.index("STOP")] and reason == "stop"
    assert used < 1 + len(body)


def test_a_stop_string_inside_the_marker_does_not_cut_it(llm, marker):
    body = plain(llm, "abc")
    text, reason, used = run(llm, [marker] + body, stop=["<tool"], render={marker: MARKER})
    assert text == MARKER + text_of(llm, body) and used == 1 + len(body)
    # control: the same characters written as plain text are cut by that stop string
    literal = plain(llm, "x<tool_call>abc")
    text, reason, _ = run(llm, literal, stop=["<tool"])
    assert text == text_of(llm, literal).split("<tool")[0] and reason == "stop"


def test_a_stop_string_does_not_match_across_the_marker(llm, marker):
    # "ab<to" is held back (it may grow into the stop string "<tool"); the marker that follows
    # means it cannot, so it comes out whole with the marker after it.
    head, tail = plain(llm, "ab<to"), plain(llm, "ol done")
    text, reason, used = run(llm, head + [marker] + tail, stop=["<tool"],
                             render={marker: MARKER})
    assert text == text_of(llm, head) + MARKER + text_of(llm, tail)
    assert used == len(head) + 1 + len(tail)
    # control: without the marker between them the same pieces do form the stop string
    text, reason, _ = run(llm, head + tail, stop=["<tool"])
    assert text == text_of(llm, head).split("<to")[0] and reason == "stop"


def test_bad_render_tokens_are_rejected(llm, marker):
    engine = BatchEngine(llm, slots=1)
    with pytest.raises(ValueError, match="render_tokens: token .* outside the vocabulary"):
        engine.submit(Request(prompt=[1], render_tokens={llm.n_vocab: "x"}))
    with pytest.raises(ValueError, match="render_tokens: the text of token"):
        engine.submit(Request(prompt=[1], render_tokens={marker: 5}))

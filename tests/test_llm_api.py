"""dasllama.LLM: generation, streaming, stop strings, UTF-8, chat cache reuse, errors and
interrupts. The logic runs against a scripted fake model (FakeModel below, with the methods
of _core.LLMModel), then against real forward passes: random-weight models and SmolLM2."""

import os
import signal

import numpy as np
import pytest

import dasllama
from dasllama import LLM, _core
from dasllama.errors import DeviceError, ShapeError
from dasllama.testing.random_gguf import write_random_model
from parity import LLAMA_CPP_NOISE_BOUND

HAVE_MODEL = hasattr(_core, "LLMModel")
needs_model = pytest.mark.skipif(not HAVE_MODEL, reason="no _core.LLMModel in this build")


# ---------------------------------------------------------------------------------------------
# A byte-level fake: ids 0-255 are bytes, then four control tokens.
# ---------------------------------------------------------------------------------------------
SPECIALS = ["<bos>", "<eos>", "<|im_start|>", "<|im_end|>", "<start_of_turn>", "<end_of_turn>"]
BOS, EOS, IM_START, IM_END, SOT, EOT = range(256, 262)


class FakeTokenizer:
    n_vocab = 262
    bos_id, eos_id = BOS, EOS
    add_bos, add_eos = False, False
    kind = "bpe"
    eog_ids = [EOS, IM_END]

    def encode(self, text, add_special=True, parse_special=False):
        ids = [BOS] if add_special and self.add_bos else []
        while text:
            hit = next((s for s in SPECIALS if parse_special and text.startswith(s)), None)
            if hit:
                ids.append(256 + SPECIALS.index(hit))
                text = text[len(hit):]
            else:
                ids.extend(text[0].encode())
                text = text[1:]
        return ids

    def piece(self, i):
        return SPECIALS[i - 256].encode() if i >= 256 else bytes([i])

    def decode(self, ids):
        return b"".join(self.piece(i) for i in ids if i < 256)

    def is_eog(self, i):
        return i in self.eog_ids

    def is_control(self, i):
        return i >= 256


class FakeModel:
    """next_token(cache_ids) -> the token the model prefers after the cache (a logit of 10,
    the rest 0), or an array of logits."""

    def __init__(self, next_token, n_ctx=128, tokenizer=None):
        self.tokenizer = tokenizer or FakeTokenizer()
        self.n_vocab, self.n_ctx = self.tokenizer.n_vocab, n_ctx
        self.next_token = next_token
        self.cache, self.evals, self.closed = [], [], False
        self.interrupt_at = None   # eval number after which a Ctrl-C arrives

    @property
    def n_past(self):
        return len(self.cache)

    def _row(self):
        out = self.next_token(list(self.cache))
        if np.ndim(out) == 0:
            row = np.zeros(self.n_vocab, np.float32)
            row[int(out)] = 10.0
            return row
        return np.asarray(out, np.float32)

    def eval(self, ids, all_logits=False):
        assert not self.closed
        if not ids:
            raise ValueError("empty ids")
        if self.n_past + len(ids) > self.n_ctx:
            raise ShapeError(f"{self.n_past} + {len(ids)} > n_ctx {self.n_ctx}")
        rows = []
        for t in ids:
            self.cache.append(t)
            rows.append(self._row())
        self.evals.append(list(ids))
        if self.interrupt_at is not None and len(self.evals) == self.interrupt_at:
            os.kill(os.getpid(), signal.SIGINT)   # delivered as the C++ eval would return
        return np.stack(rows) if all_logits else rows[-1][None]

    def truncate(self, n):
        assert 0 <= n <= self.n_past
        del self.cache[n:]

    def reset(self):
        self.truncate(0)

    def close(self):
        self.closed = True


def script(prompt_len, data: bytes, end=EOS):
    """A model that answers any prompt of prompt_len tokens with data's bytes, then end."""
    def next_token(cache):
        k = len(cache) - prompt_len
        return data[k] if k < len(data) else end
    return next_token


def fake_llm(next_token, **kw) -> LLM:
    return LLM.from_model(FakeModel(next_token, **kw))


def stream(llm, prompt, **kw):
    return list(llm.generate(prompt, temperature=0, stream=True, **kw))


# ---------------------------------------------------------------------------------------------
# Generation on the fake
# ---------------------------------------------------------------------------------------------
def test_greedy_generation_and_stats():
    llm = fake_llm(script(5, b"Paris."))
    assert llm.generate("Hello", temperature=0) == "Paris."
    s = llm.stats
    assert s["prompt_tokens"] == 5 and s["gen_tokens"] == 6 and s["finish_reason"] == "eog"
    assert s["prompt_tokens_per_s"] > 0 and s["gen_tokens_per_s"] > 0
    assert llm.model.evals[0] == list(b"Hello")
    # the EOG token is sampled but never evaluated, the last text token is
    assert llm.model.cache == list(b"HelloParis.")


def test_max_tokens_and_a_full_context_end_the_run():
    llm = fake_llm(script(5, b"abcdefgh"))
    assert llm.generate("Hello", temperature=0, max_tokens=3) == "abc"
    assert llm.stats["finish_reason"] == "length" and llm.stats["gen_tokens"] == 3
    assert llm.generate("Hello", temperature=0, max_tokens=0) == ""
    llm = fake_llm(script(5, b"abcdefgh"), n_ctx=8)
    assert llm.generate("Hello", temperature=0, max_tokens=None) == "abcd"   # 5 + 3 evaluated
    assert llm.stats["finish_reason"] == "context"


def test_stop_strings_are_excluded_and_held_back_until_resolved():
    llm = fake_llm(script(2, b"abc wor wonder world!"))
    assert llm.generate("Hi", temperature=0, stop="world") == "abc wor wonder "
    assert llm.stats["finish_reason"] == "stop"
    pieces = stream(llm, "Hi", stop=["world", "xyz"])
    # "w", "wo", "wor" wait until the next character shows they are not "world".
    assert pieces == ["a", "b", "c", " ", "wor ", "won", "d", "e", "r", " "]
    # the earliest stop wins; a held-back prefix is released at the end of the run
    assert llm.generate("Hi", temperature=0, stop=["der", "c w"]) == "ab"
    llm = fake_llm(script(2, b"tail wo"))
    assert stream(llm, "Hi", stop="world")[-1] == "wo"
    assert llm.stats["finish_reason"] == "eog"


def test_streamed_text_never_splits_a_character():
    text = "é日😀 ok"
    llm = fake_llm(script(2, text.encode()))
    pieces = stream(llm, "Hi")
    assert pieces == ["é", "日", "😀", " ", "o", "k"]
    bad = fake_llm(script(2, b"a\xff\xe6\x97b"))   # an invalid byte, then a truncated character
    assert bad.generate("Hi", temperature=0) == "a\ufffd\ufffdb"
    cut = fake_llm(script(2, "x日".encode()[:-1]))   # ends mid-character
    assert cut.generate("Hi", temperature=0) == "x\ufffd"


def test_control_tokens_are_not_rendered():
    llm = fake_llm(lambda c: [104, IM_START, 105, EOS][len(c) - 2])
    assert llm.generate("Hi", temperature=0) == "hi"


def test_sampling_is_seeded():
    rng = np.random.default_rng(0)
    table = rng.standard_normal((262, 262)).astype(np.float32) * 2
    table[:, [EOS, IM_END]] = -30   # never end
    llm = fake_llm(lambda c: table[c[-1]])
    a = llm.generate("Hi", max_tokens=40, seed=123, temperature=1.0)
    assert a == llm.generate("Hi", max_tokens=40, seed=123, temperature=1.0)
    assert a != llm.generate("Hi", max_tokens=40, seed=124, temperature=1.0)
    greedy = llm.generate("Hi", max_tokens=40, temperature=0)
    assert llm.generate("Hi", max_tokens=40, temperature=1.0, top_k=1, seed=9) == greedy


def test_repeat_penalty_reaches_the_sampler():
    # The model always prefers "a" (10) over "b" (9). A penalty of 2 on a seen "a" makes it 5:
    # "b" wins; once both are seen, 5 > 4.5 and "a" wins again.
    def prefs(cache):
        row = np.zeros(262, np.float32)
        row[ord("a")], row[ord("b")] = 10.0, 9.0
        return row
    llm = fake_llm(prefs)
    assert llm.generate("x", temperature=0, max_tokens=4) == "aaaa"
    assert llm.generate("x", temperature=0, max_tokens=4, repeat_penalty=2.0) == "abaa"
    # the prompt is part of the history
    assert llm.generate("a", temperature=0, max_tokens=1, repeat_penalty=2.0) == "b"


def test_errors_come_before_any_eval():
    llm = fake_llm(script(5, b"x"), n_ctx=8)
    with pytest.raises(ValueError, match="prompt is empty"):
        llm.generate("")
    with pytest.raises(ShapeError, match=r"the prompt has 9 tokens but the context holds n_ctx=8"):
        llm.generate("123456789")
    with pytest.raises(ValueError, match="temperature must be"):
        llm.generate("Hello", temperature=-1, stream=True)
    with pytest.raises(ValueError, match="top_p must be in"):
        llm.generate("Hello", top_p=2.0)
    with pytest.raises(ValueError, match="max_tokens must be an integer >= 0"):
        llm.generate("Hello", max_tokens=-1)
    with pytest.raises(ValueError, match="stop strings must be non-empty"):
        llm.generate("Hello", stop=[""])
    with pytest.raises(ValueError, match="token id 999 at index 1"):
        llm.generate([1, 999])
    assert llm.model.evals == []


def test_logits_start_from_a_fresh_context():
    llm = fake_llm(lambda c: len(c) % 262)
    llm.generate("abc", temperature=0, max_tokens=2)
    out = llm.logits([5, 6, 7])
    assert out.shape == (3, 262) and out.dtype == np.float32
    assert list(out.argmax(axis=1)) == [1, 2, 3]   # positions counted from 0
    with pytest.raises(ValueError, match="empty"):
        llm.logits([])
    with pytest.raises(ShapeError, match="200 tokens"):
        llm.logits([1] * 200)


def test_tokenize_and_detokenize():
    llm = fake_llm(script(1, b""))
    assert llm.tokenize("a<|im_end|>") == [97] + list(b"<|im_end|>")
    assert llm.tokenize("a<|im_end|>", parse_special=True) == [97, IM_END]
    assert llm.detokenize([0xC3, 0xA9, 0xFF]) == "é\ufffd"


def test_interrupt_between_tokens_leaves_the_model_usable():
    llm = fake_llm(script(5, b"abcdefghij"))
    want = llm.generate("Hello", temperature=0)
    llm.model.interrupt_at = len(llm.model.evals) + 4   # prompt, "a", "b", "c" evaluated
    with pytest.raises(KeyboardInterrupt):
        llm.generate("Hello", temperature=0)
    assert llm.stats["finish_reason"] == "interrupted"
    assert llm._cache == llm.model.cache   # the mirror follows what the model holds
    llm.model.interrupt_at = None
    assert llm.generate("Hello", temperature=0) == want


def test_a_later_call_abandons_an_open_stream():
    llm = fake_llm(script(2, b"abcdef"))
    first = llm.generate("Hi", temperature=0, stream=True)
    assert next(first) == "a"
    assert llm.generate("Hi", temperature=0) == "abcdef"
    with pytest.raises(RuntimeError, match="abandoned"):
        next(first)


def test_close_device_and_context_manager(tmp_path):
    with fake_llm(script(1, b"")) as llm:
        model = llm.model
    assert model.closed
    with pytest.raises(dasllama.DasllamaError, match="closed"):
        llm.generate("x")
    with pytest.raises(DeviceError, match=r"'tpu' is not a device: use cpu"):
        LLM(tmp_path / "none.gguf", device="tpu")


# ---------------------------------------------------------------------------------------------
# Chat on the fake: templates, cache reuse
# ---------------------------------------------------------------------------------------------
CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + "
          "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\\n' }}{% endif %}")


def chat_bot(cache):
    """Replies "ok N" (N = its number of user turns seen) after '<|im_start|>assistant\\n'."""
    marker = [IM_START] + list(b"assistant\n")
    starts = [i for i in range(len(cache)) if cache[i:i + len(marker)] == marker]
    if not starts:
        return EOS
    reply = f"ok {len(starts)}".encode()
    k = len(cache) - starts[-1] - len(marker)
    return reply[k] if k < len(reply) else IM_END


def test_chat_renders_the_template_and_reuses_the_cache():
    llm = LLM.from_model(FakeModel(chat_bot, n_ctx=512), chat_template=CHATML)
    msgs = [{"role": "user", "content": "hi"}]
    assert llm.chat(msgs, temperature=0) == "ok 1"
    first_prompt = llm.model.evals[0]
    assert first_prompt[0] == IM_START and first_prompt.count(IM_START) == 2
    msgs += [{"role": "assistant", "content": "ok 1"}, {"role": "user", "content": "more"}]
    n_before = len(llm.model.evals)
    assert llm.chat(msgs, temperature=0) == "ok 2"
    # Only what follows the cached turn is evaluated: the generated "ok 1" was already in the
    # cache; the template's <|im_end|>\n and the new turn are new.
    suffix = llm.model.evals[n_before]
    assert suffix == [IM_END] + list(b"\n") + [IM_START] + list(b"user\nmore") + [IM_END] + \
        list(b"\n") + [IM_START] + list(b"assistant\n")
    assert llm.stats["cached_tokens"] == len(first_prompt) + len(b"ok 1")
    # the same conversation again: all but the last token is reused
    n_before = len(llm.model.evals)
    assert llm.chat(msgs, temperature=0) == "ok 2"
    assert len(llm.model.evals[n_before]) == 1
    # generate() starts from scratch
    llm.generate("x", temperature=0, max_tokens=1)
    assert llm.stats["cached_tokens"] == 0


def test_chat_falls_back_to_gemma_turns_and_stops_on_end_of_turn():
    def bot(cache):
        marker = [SOT] + list(b"model\n")
        starts = [i for i in range(len(cache)) if cache[i:i + len(marker)] == marker]
        k = len(cache) - starts[-1] - len(marker) if starts else 99
        return b"Hey"[k] if k < 3 else EOT   # <end_of_turn> is not an EOG of the tokenizer
    llm = LLM.from_model(FakeModel(bot, n_ctx=512), chat_template="")
    assert llm.chat_format.kind == "gemma"
    out = llm.chat([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Yo"}],
                   temperature=0)
    assert out == "Hey" and llm.stats["finish_reason"] == "eog"
    prompt = llm.model.evals[0]
    assert prompt[0] == SOT and bytes(t for t in prompt if t < 256).startswith(b"user\nBe brief.\n\nYo")


def test_chat_plain_fallback_without_special_tokens():
    class Plain(FakeTokenizer):
        def encode(self, text, add_special=True, parse_special=False):
            return super().encode(text, add_special, False)
    llm = LLM.from_model(FakeModel(script(0, b""), tokenizer=Plain()), chat_template=None)
    assert llm.chat_format.kind == "plain"
    assert llm.chat_format.render([{"role": "user", "content": "hi"}]) == "user: hi\nassistant:"


def test_chat_drops_a_doubled_bos():
    class WithBos(FakeTokenizer):
        add_bos = True
    template = "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"
    llm = LLM.from_model(FakeModel(script(0, b""), tokenizer=WithBos()), chat_template=template)
    llm.chat([{"role": "user", "content": "q"}], temperature=0, max_tokens=0)
    assert llm.model.evals[0] == [BOS, ord("q")]


# ---------------------------------------------------------------------------------------------
# Real forward passes
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def random_llm(tmp_path_factory):
    if not HAVE_MODEL:
        pytest.skip("no _core.LLMModel in this build")
    path = write_random_model(tmp_path_factory.mktemp("m") / "llama.gguf", "llama", n_ctx=256,
                              chat_template=True)
    with LLM(path, n_ctx=256, threads=1) as llm:
        yield llm


@needs_model
def test_random_model_greedy_equals_argmax_of_logits(random_llm):
    llm = random_llm
    ids = llm.tokenize("hello world")
    llm.generate(ids, temperature=0, max_tokens=8)
    gen = llm._cache[len(ids):]
    # the first generated token is the arg max of the prompt's last logits
    assert llm.logits(ids)[-1].argmax() == gen[0]
    full = llm.logits(ids + gen)
    assert list(full[len(ids) - 1:-1].argmax(axis=1)) == gen[:len(full) - len(ids)]


@needs_model
def test_random_model_chat_reuse_matches_a_fresh_context(random_llm):
    llm = random_llm
    msgs = [{"role": "user", "content": "hi"}]
    reply = llm.chat(msgs, temperature=0, max_tokens=6)
    msgs += [{"role": "assistant", "content": reply}, {"role": "user", "content": "again"}]
    second = llm.chat(msgs, temperature=0, max_tokens=6)
    cached = llm.stats["cached_tokens"]
    assert cached > 0
    llm.logits([1])   # empties the context
    assert llm.chat(msgs, temperature=0, max_tokens=6) == second
    assert llm.stats["cached_tokens"] == 0 and cached < llm.stats["prompt_tokens"]


@needs_model
def test_random_model_interrupt_with_a_real_signal(random_llm):
    llm = random_llm
    want = llm.generate("abc", temperature=0, max_tokens=20)

    class Interrupting:
        def __init__(self, inner):
            self.inner, self.calls = inner, 0

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def eval(self, ids, all_logits=False):
            out = self.inner.eval(ids, all_logits=all_logits)
            self.calls += 1
            if self.calls == 3:
                os.kill(os.getpid(), signal.SIGINT)
            return out

    inner = llm._model
    llm._model = Interrupting(inner)
    try:
        with pytest.raises(KeyboardInterrupt):
            llm.generate("abc", temperature=0, max_tokens=20)
        assert len(llm._cache) == inner.n_past
    finally:
        llm._model = inner
    assert llm.generate("abc", temperature=0, max_tokens=20) == want


@needs_model
def test_smollm2_greedy_matches_llama_cpp(real_model, llama_cpp_run):
    fx = llama_cpp_run("SmolLM2")
    with LLM(real_model("smollm2"), n_ctx=512) as llm:
        case = fx["greedy"][0]
        assert llm.tokenize(case["prompt"]) == case["prompt_ids"]
        # llama.cpp's tokens up to its first step the engines may part at are decided
        # (test_llm_greedy compares all 64 steps, teacher-forced)
        n = next((i for i, m in enumerate(case["margins"]) if m < LLAMA_CPP_NOISE_BOUND),
                 len(case["margins"]))
        text = llm.generate(case["prompt"], temperature=0, max_tokens=8)
        want = llm.detokenize(case["greedy_ids"][:n])
        print(f"{n} decided tokens {want!r}: {text!r}")
        assert n >= 1 and text.startswith(want)
        assert text.startswith(" Paris") and len(llm.tokenize(text)) >= 4

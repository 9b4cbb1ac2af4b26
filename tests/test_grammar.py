"""dasllama.grammar: response_format constraints over llguidance, checked by generating with a
masked sampling loop on random-weight models (a real BPE vocabulary) and validating every output
with jsonschema."""

import json

import numpy as np
import pytest

from requires import require

try:    # both in the test extra; the fixture below fails under CI or skips, saying why
    import jsonschema
    import llguidance
    from llguidance.numpy import (allocate_token_bitmask, apply_token_bitmask_inplace,
                                  fill_next_token_bitmask)
except ImportError:
    pass

import dasllama
from dasllama.errors import DasllamaError
from dasllama.grammar import (GrammarError, check_response_format, constraint_for_json_schema,
                              constraint_for_lark, constraint_for_response_format,
                              json_schema_grammar, llguidance_tokenizer)
from dasllama.testing import write_random_model
from schema_cases import N_SCHEMAS, SCHEMAS

# Tokens one generation may take: the schemas below bound every string, integer and array, so a
# complete object fits well inside this (they take 20-150 tokens); an output that does not
# finish within it fails the test.
MAX_TOKENS = 400


@pytest.fixture(scope="module", autouse=True)
def packages():
    require("jsonschema")
    require("llguidance")


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    path = write_random_model(tmp_path_factory.mktemp("grammar") / "qwen2.gguf", "qwen2",
                              tokenizer="bpe", seed=3)
    with dasllama.LLM(path, n_ctx=MAX_TOKENS + 64, threads=1) as model:
        yield model


def allowed(mask: np.ndarray, n_vocab: int) -> np.ndarray:
    """Bit t % 32 of word t // 32, read word by word (independent of the host's byte order)."""
    t = np.arange(n_vocab)
    return ((mask[t // 32] >> (t % 32).astype(np.uint32)) & 1).astype(bool)


def generate(llm, prompt_ids, constraint=None, max_tokens=MAX_TOKENS, seed=0):
    """Seeded sampling at temperature 1 over llm.model.eval's logits; with a constraint, the
    tokens its mask forbids get -inf. Ends at an end-of-generation token, when the constraint is
    done, or after max_tokens. Returns (text, token count, finished)."""
    rng = np.random.default_rng(seed)
    model, tok = llm.model, llm.tokenizer
    model.reset()
    logits = np.array(model.eval(list(prompt_ids))[-1], dtype=np.float64)
    out = []
    for _ in range(max_tokens):
        if constraint is not None:
            logits[~allowed(constraint.mask(), llm.n_vocab)] = -np.inf
        p = np.exp(logits - logits.max())
        token = int(rng.choice(len(p), p=p / p.sum()))
        if constraint is not None:
            constraint.advance(token)
        if tok.is_eog(token):
            return llm.detokenize(out), len(out), True
        out.append(token)
        if constraint is not None and constraint.is_done():
            return llm.detokenize(out), len(out), True
        logits = np.array(model.eval([token])[-1], dtype=np.float64)
    return llm.detokenize(out), len(out), False


# ---------------------------------------------------------------------------------------------
# 20 generated schemas (tests/schema_cases.py, shared with the server's tests)
# ---------------------------------------------------------------------------------------------

def test_the_generated_schemas_cover_the_features():
    text = json.dumps(SCHEMAS)
    for feature in ('"enum"', '"minItems"', '"maxItems"', '"minimum"', '"maximum"', '"pattern"',
                    '"maxLength"', '"required"', '"anyOf"', '"items": {"type": "object"'):
        assert feature in text, feature
    assert any(any(k.startswith("obj") for k in s["properties"]) for s in SCHEMAS)  # nesting
    for s in SCHEMAS:
        jsonschema.Draft202012Validator.check_schema(s)


def test_json_schema_outputs_validate(llm):
    prompt = llm.tokenize("Answer in JSON:")
    lengths = []
    for i, schema in enumerate(SCHEMAS):
        c = constraint_for_response_format(llm, {"type": "json_schema", "json_schema": {
            "name": f"s{i}", "schema": schema, "strict": True}})
        text, n, finished = generate(llm, prompt, c, seed=i)
        lengths.append(n)
        assert finished, f"schema {i} did not finish in {MAX_TOKENS} tokens: {text!r}"
        value = json.loads(text)
        jsonschema.validate(value, schema)
    print(f"tokens per output: {lengths}")


def test_without_the_mask_outputs_fail(llm):
    # Negative control: the same loop and seeds, no mask.
    prompt = llm.tokenize("Answer in JSON:")
    valid = 0
    for i, schema in enumerate(SCHEMAS):
        text, _, _ = generate(llm, prompt, None, max_tokens=60, seed=i)
        try:
            jsonschema.validate(json.loads(text), schema)
            valid += 1
        except (ValueError, jsonschema.ValidationError):
            pass
    assert valid <= N_SCHEMAS // 4, f"{valid} of {N_SCHEMAS} unmasked outputs validated"


def test_json_object_output_is_an_object(llm):
    # json_object bounds nothing (keys and strings of any length): on random weights some
    # outputs run to the cap. Every one that ends must be a JSON object; most must end.
    ended = 0
    for seed in range(8):
        c = constraint_for_response_format(llm, {"type": "json_object"})
        text, _, finished = generate(llm, llm.tokenize("{"), c, seed=seed)
        if finished:
            ended += 1
            assert isinstance(json.loads(text), dict), text
    assert ended >= 4, f"only {ended} of 8 outputs ended"


def test_spm_vocabulary(tmp_path):
    # SentencePiece pieces carry their space marker as a leading space; byte tokens are bytes.
    path = write_random_model(tmp_path / "spm.gguf", "llama", tokenizer="spm", seed=5)
    with dasllama.LLM(path, n_ctx=MAX_TOKENS + 64, threads=1) as spm:
        schema = SCHEMAS[0]
        c = constraint_for_json_schema(spm, schema)
        text, _, finished = generate(spm, spm.tokenize("Hi"), c, seed=1)
        assert finished, text
        jsonschema.validate(json.loads(text), schema)


def test_smollm2_real_vocabulary(real_model):
    with dasllama.LLM(real_model("smollm2"), n_ctx=512, threads=2) as real:
        prompt = real.tokenize(real.chat_format.render([{"role": "user", "content":
                               "Describe a person as JSON."}]), parse_special=True)
        c = constraint_for_response_format(real, {"type": "json_object"})
        text, _, finished = generate(real, prompt, c, max_tokens=120, seed=0)
        assert finished, text
        assert isinstance(json.loads(text), dict), text
        schema = SCHEMAS[3]
        c = constraint_for_json_schema(real, schema)
        text, _, finished = generate(real, prompt, c, max_tokens=160, seed=0)
        print(f"smollm2: {text!r}")
        assert finished, text
        jsonschema.validate(json.loads(text), schema)


# ---------------------------------------------------------------------------------------------
# The mask: layout, end tokens, misuse
# ---------------------------------------------------------------------------------------------

def test_mask_matches_llguidance_and_its_bit_layout(llm):
    schema = SCHEMAS[1]
    c = constraint_for_json_schema(llm, schema)
    matcher = llguidance.LLMatcher(llguidance_tokenizer(llm), json_schema_grammar(schema))
    lltok = llguidance_tokenizer(llm)
    steps = [int(t) for t in llm.tokenize('{"', add_special=False)]
    for step in range(len(steps) + 1):
        ours = c.mask()
        assert ours.dtype == np.uint32 and ours.shape == ((llm.n_vocab + 31) // 32,)
        theirs = allocate_token_bitmask(1, lltok.vocab_size)
        fill_next_token_bitmask(matcher, theirs)
        assert np.array_equal(ours, theirs[0].view(np.uint32)[:len(ours)])
        # llguidance's own reading of its layout: its -inf where our bit reading says "no".
        logits = np.zeros((1, llm.n_vocab), dtype=np.float32)
        apply_token_bitmask_inplace(logits, theirs)
        assert np.array_equal(np.isfinite(logits[0]), allowed(ours, llm.n_vocab))
        if step < len(steps):
            c.advance(steps[step])
            assert matcher.consume_token(steps[step])


def test_first_mask_of_json_object_allows_only_brace_tokens(llm):
    tok = llm.tokenizer
    ok = allowed(constraint_for_response_format(llm, {"type": "json_object"}).mask(), llm.n_vocab)
    pieces = [bytes(tok.piece(i)) for i in range(llm.n_vocab)]
    brace = llm.tokenize("{", add_special=False)
    letter = llm.tokenize("a", add_special=False)
    assert len(brace) == 1 and ok[brace[0]] and len(letter) == 1 and not ok[letter[0]]
    assert all(pieces[i].startswith(b"{") for i in np.flatnonzero(ok)), \
        [pieces[i] for i in np.flatnonzero(ok)]
    assert not any(ok[i] for i in range(llm.n_vocab) if tok.is_control(i))


def test_end_tokens_are_allowed_exactly_where_the_grammar_may_end(llm):
    eog = list(llm.tokenizer.eog_ids)
    extra = llm.tokenize("<|im_start|>", add_special=False, parse_special=True)[0]
    assert extra not in eog
    ends = eog + [extra]
    ids = {}
    for ch in "ac":
        (ids[ch],) = llm.tokenize(ch, add_special=False)
    # (A literal would force its bytes, and llguidance then allows only the canonical token.)
    grammar = "start: /[ab]/ | /[ab][cd][ab]/"
    c = constraint_for_lark(llm, grammar, extra_eog=[extra])
    for ch, may_end_before in (("a", False), ("c", True), ("a", False)):
        ok = allowed(c.mask(), llm.n_vocab)
        assert ok[ids[ch]], ch
        assert [bool(ok[t]) for t in ends] == [may_end_before] * len(ends), ch
        assert not c.is_done()
        c.advance(ids[ch])
    assert c.is_done()     # "aca" takes nothing more
    c = constraint_for_lark(llm, grammar, extra_eog=[extra])
    c.advance(ids["a"])
    c.advance(extra)
    assert c.is_done() and not allowed(c.mask(), llm.n_vocab).any()


def test_misuse_is_a_grammar_error(llm):
    c = constraint_for_response_format(llm, {"type": "json_object"})
    with pytest.raises(GrammarError, match="not allowed by the grammar"):
        c.advance(llm.tokenize("a", add_special=False)[0])
    c = constraint_for_response_format(llm, {"type": "json_object"})
    with pytest.raises(GrammarError, match="before the grammar was complete"):
        c.advance(llm.tokenizer.eog_ids[0])


def test_tokenizer_is_cached_per_model(llm):
    assert llguidance_tokenizer(llm) is llguidance_tokenizer(llm.tokenizer)
    assert llguidance_tokenizer(llm).vocab_size >= llm.n_vocab


# ---------------------------------------------------------------------------------------------
# What cannot be enforced, and malformed response_format values
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("schema,text", [
    ({"type": "array", "uniqueItems": True}, "uniqueItems"),
    ({"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}},
     "example.com"),
    ({"type": "string", "pattern": "(?=a)b"}, "look-around"),
    ({"type": "string", "format": "iri"}, "iri"),
    ({"not": {"type": "string"}}, "not"),
    ({"type": "array", "minItems": 3, "maxItems": 1}, "minItems"),
    ({"type": "strng"}, "strng"),
])
def test_unsupported_schemas_raise(llm, schema, text):
    rf = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    with pytest.raises(GrammarError, match=text) as info:
        constraint_for_response_format(llm, rf)
    assert "response_format.json_schema.schema" in str(info.value)
    with pytest.raises(GrammarError, match=text):
        check_response_format(rf)      # the same answer without a model
    assert isinstance(info.value, DasllamaError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize("rf,text", [
    ("json", "response_format must be an object"),
    ({"type": "xml"}, r"response_format.type must be .* got 'xml'"),
    ({}, "got None"),
    ({"type": "json_schema"}, "response_format.json_schema must be an object"),
    ({"type": "json_schema", "json_schema": {"name": "x"}}, "schema is missing"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": [1]}}, "got list"),
    ({"type": "json_schema", "json_schema": {"name": 5, "schema": {}}}, "name must be a string"),
    ({"type": "json_schema", "json_schema": {"schema": {}, "strict": "yes"}},
     "strict must be a boolean"),
    ({"type": "json_schema", "json_schema": {"schema": {"type": "number",
                                                        "maximum": float("nan")}}}, "not JSON"),
])
def test_malformed_response_formats_raise(llm, rf, text):
    with pytest.raises(GrammarError, match=text):
        constraint_for_response_format(llm, rf)


def test_text_and_none_need_no_constraint(llm):
    assert constraint_for_response_format(llm, None) is None
    assert constraint_for_response_format(llm, {"type": "text"}) is None
    assert check_response_format({"type": "json_object"}) == {"type": "object"}
    assert check_response_format({"type": "json_schema", "json_schema": {
        "name": "x", "schema": SCHEMAS[0]}}) == SCHEMAS[0]

"""Constrained decoding: a token mask at every step, so that the output follows a grammar
(OpenAI's ``response_format`` JSON modes, forced tool calls).

::

    from dasllama import LLM
    from dasllama.grammar import constraint_for_response_format
    with LLM("smollm2") as llm:
        c = constraint_for_response_format(llm, {"type": "json_schema", "json_schema": {
            "name": "city", "schema": {"type": "object", "properties": {"name": {"type": "string"}},
                                       "required": ["name"]}}})
        # c.mask() -> allowed next tokens; c.advance(token); c.is_done()

Public API (what the server calls):

- ``check_response_format(response_format) -> dict | None``: validates a request's
  ``response_format`` without a model and returns the JSON schema to enforce (None for
  ``{"type": "text"}`` or None). Raises GrammarError naming the field for a malformed value or a
  schema that cannot be enforced (unsupported keyword, remote ``$ref``, unsatisfiable bounds).
- ``check_json_schema(schema, what="schema")``: the same check for a bare schema (tool
  parameters); ``what`` names it in the message.
- ``constraint_for_response_format(llm_or_tokenizer, response_format, *, extra_eog=()) ->
  GrammarConstraint | None``: the same checks, then a constraint for one request (None when
  nothing is to be enforced).
- ``constraint_for_json_schema(llm_or_tokenizer, schema, *, extra_eog=())`` and
  ``constraint_for_lark(llm_or_tokenizer, lark, *, extra_eog=())``: constraints from a JSON
  schema or an llguidance Lark grammar (dasllama.tools builds forced tool calls with the latter).
- ``GrammarConstraint``: the batching engine's Constraint protocol (dasllama.batch):
  ``mask()`` is a uint32 bitmask over the model's vocabulary (bit ``t % 32`` of word ``t // 32``
  set when token t may come next); ``advance(token)`` records the sampled token;
  ``is_done()`` is True once the grammar is complete. The model's end-of-generation tokens (and
  ``extra_eog``, e.g. a chat template's turn end) are allowed exactly when the grammar may end
  there. One constraint serves one request; it is not thread-safe.
- ``llguidance_tokenizer(llm_or_tokenizer)``: the llguidance tokenizer built from a dasllama
  tokenizer, cached per tokenizer (building it walks the whole vocabulary).
- ``GrammarError``: a DasllamaError and a ValueError; the server answers it with a 400.

``llm_or_tokenizer`` is a dasllama.LLM (the mask then covers ``llm.n_vocab``, the width of the
model's logits) or a ``_core.Tokenizer`` (the mask covers ``tokenizer.n_vocab``).

Why llguidance: it computes the mask of a step fast enough to run at every decode step (it
walks a trie of the vocabulary with a lexer and an Earley parser, without a per-token loop in
Python), supports JSON Schema broadly (objects, arrays with bounds, enums, integer and number
ranges, string patterns and lengths, anyOf/allOf, local $ref) and answers an error for what it
cannot enforce instead of ignoring it, needs no torch (the mask is plain bytes, read here with
NumPy), and is what several serving engines use for the same job.

JSON output is constrained to bounded whitespace (``JSON_WHITESPACE``) unless the schema's own
top-level ``"x-guidance"`` options say otherwise. ``json_schema.strict`` is accepted and the
schema is always enforced, strict or not.
"""

from __future__ import annotations

import collections
import json
import threading
from typing import Any, Iterable, Optional, Sequence

import numpy as np

from .errors import DasllamaError

__all__ = ["GrammarError", "GrammarConstraint", "check_response_format", "check_json_schema",
           "constraint_for_response_format", "constraint_for_json_schema", "constraint_for_lark",
           "json_schema_grammar", "llguidance_tokenizer", "JSON_WHITESPACE"]

# Whitespace allowed at each place JSON allows it: one space, or a newline and up to 20 spaces
# or tabs of indentation (pretty-printed output ten levels deep). Bounded, so a model that keeps
# choosing whitespace cannot stall inside an object until max_tokens.
JSON_WHITESPACE = r"(?:\x20|\n[\x20\t]{0,20})"

# llguidance tokenizers kept alive at once: one per loaded model in practice; each holds a trie
# of the vocabulary (a few MB for a 150k vocabulary).
_TOKENIZER_CACHE_SIZE = 8
# Compiled grammars kept per tokenizer: a server sees the same few schemas again and again, and
# compiling a large schema costs far more than copying its compiled matcher.
_MATCHER_CACHE_SIZE = 64
# Bytes that llguidance puts before a special (control) token's text in its vocabulary, so
# that the literal text "<|im_end|>" in a grammar never matches the control token.
_SPECIAL_TOKEN_MARKER = b"\xff"


class GrammarError(DasllamaError, ValueError):
    """A response_format, schema or grammar that cannot be enforced, or a constraint used out of
    order (a token it did not allow). The message names the field or the problem."""


def _llguidance():
    try:
        import llguidance
    except ImportError as e:  # pragma: no cover - depends on the installation
        raise GrammarError("constrained decoding (response_format, forced tool calls) needs the "
                           "llguidance package: pip install llguidance") from e
    return llguidance


def _limits():
    # verbose_errors off: error messages then carry no parser state or grammar dump, since they
    # go back to clients in 400 answers.
    return _llguidance().LLParserLimits(verbose_errors=False)


# ---------------------------------------------------------------------------------------------
# The llguidance tokenizer of a dasllama tokenizer
# ---------------------------------------------------------------------------------------------

class _VocabView:
    """What llguidance.TokenizerWrapper reads: each token's bytes (control tokens are special:
    llguidance marks them), the end token ids, and a tokenize callable."""

    def __init__(self, tok):
        self._tok = tok
        self.tokens = [bytes(tok.piece(i)) for i in range(tok.n_vocab)]
        self.special_token_ids = [i for i in range(tok.n_vocab) if tok.is_control(i)]
        eog = list(tok.eog_ids)
        self.eos_token_id = eog[0] if eog else (tok.eos_id if tok.eos_id >= 0 else None)
        self.bos_token_id = tok.bos_id if tok.bos_id >= 0 else None
        # One-byte tokens, to spell text the model's tokenizer would change (a SentencePiece
        # vocabulary adds a leading space marker).
        self._byte_token = {}
        for i, p in enumerate(self.tokens):
            if len(p) == 1 and i not in self.special_token_ids:
                self._byte_token.setdefault(p, i)

    def __call__(self, data: bytes) -> list:
        # llguidance calls this from Rust and cannot take an exception: never raise.
        try:
            data = bytes(data)
            ids = list(self._tok.encode(data, add_special=False, parse_special=False))
            if b"".join(self.tokens[i] for i in ids) == data:
                return ids
            spelled = [self._byte_token.get(data[k:k + 1]) for k in range(len(data))]
            return ids if None in spelled else spelled
        except Exception:
            return []


_tokenizer_lock = threading.Lock()
_tokenizers: "collections.OrderedDict[int, tuple]" = collections.OrderedDict()


def _tokenizer_of(llm_or_tokenizer):
    tok = getattr(llm_or_tokenizer, "tokenizer", None)
    if tok is not None:   # an LLM: its logits may be wider than the tokenizer's vocabulary
        return tok, int(llm_or_tokenizer.n_vocab)
    tok = llm_or_tokenizer
    for attr in ("piece", "is_control", "eog_ids", "n_vocab", "encode"):
        if not hasattr(tok, attr):
            raise TypeError(f"expected a dasllama.LLM or a _core.Tokenizer, got "
                            f"{type(llm_or_tokenizer).__name__} (no {attr!r})")
    return tok, int(tok.n_vocab)


def llguidance_tokenizer(llm_or_tokenizer):
    """The llguidance.LLTokenizer of a dasllama LLM or tokenizer, built once per tokenizer and
    cached (the cache holds the tokenizer object, so its id stays its own while cached)."""
    tok, _ = _tokenizer_of(llm_or_tokenizer)
    key = id(tok)
    with _tokenizer_lock:
        hit = _tokenizers.get(key)
        if hit is not None and hit[0] is tok:
            _tokenizers.move_to_end(key)
            return hit[1]
    llg = _llguidance()
    view = _VocabView(tok)
    eog = sorted(set(tok.eog_ids))
    lltok = llg.LLTokenizer(llg.TokenizerWrapper(view), n_vocab=tok.n_vocab,
                            eos_token=eog or None)
    with _tokenizer_lock:
        _tokenizers[key] = (tok, lltok, {})
        _tokenizers.move_to_end(key)
        while len(_tokenizers) > _TOKENIZER_CACHE_SIZE:
            _tokenizers.popitem(last=False)
    return lltok


def _fresh_matcher(llm_or_tokenizer, grammar: str, what: str):
    """A matcher at the start of grammar (a copy of a cached compiled one); GrammarError naming
    what (e.g. "response_format.json_schema.schema") when llguidance rejects the grammar."""
    llg = _llguidance()
    lltok = llguidance_tokenizer(llm_or_tokenizer)
    tok, _ = _tokenizer_of(llm_or_tokenizer)
    with _tokenizer_lock:
        entry = _tokenizers.get(id(tok))
        matchers = entry[2] if entry is not None and entry[0] is tok else {}
        proto = matchers.get(grammar)
        if proto is not None:
            return proto.deep_copy()
    is_error, messages = llg.LLMatcher.validate_grammar_with_warnings(grammar, lltok,
                                                                     limits=_limits())
    if is_error:
        raise GrammarError(f"{what} cannot be enforced: {'; '.join(messages)}")
    proto = llg.LLMatcher(lltok, grammar, log_level=0, limits=_limits())
    if proto.is_error():
        raise GrammarError(f"{what} cannot be enforced: {proto.get_error()}")
    with _tokenizer_lock:
        matchers[grammar] = proto
        while len(matchers) > _MATCHER_CACHE_SIZE:
            matchers.pop(next(iter(matchers)))
    return proto.deep_copy()


# ---------------------------------------------------------------------------------------------
# The constraint
# ---------------------------------------------------------------------------------------------

def _set_bits(mask: np.ndarray, ids: Iterable[int], value: bool):
    for t in ids:
        if value:
            mask[t >> 5] |= np.uint32(1 << (t & 31))
        else:
            mask[t >> 5] &= np.uint32(~(1 << (t & 31)) & 0xFFFFFFFF)


class GrammarConstraint:
    """One request's constrained decoding over an llguidance matcher (see the module docstring).

    Build it with the constraint_for_* functions. n_vocab: the mask's width in tokens; eog: the
    token ids that end generation (allowed only where the grammar may end)."""

    def __init__(self, matcher, n_vocab: int, n_tokenizer_vocab: int, eog: Sequence[int]):
        self._m = matcher
        self.n_vocab = int(n_vocab)
        self._n_tok = min(int(n_tokenizer_vocab), self.n_vocab)
        self.eog = tuple(sorted({int(t) for t in eog if 0 <= int(t) < self.n_vocab}))
        self._eog_set = frozenset(self.eog)
        self._ended = False    # an end-of-generation token was accepted
        self.tokens = 0        # tokens advanced over

    @property
    def n_words(self) -> int:
        return (self.n_vocab + 31) // 32

    def _check(self):
        if self._m.is_error():
            raise GrammarError(f"the grammar matcher failed after {self.tokens} tokens: "
                               f"{self._m.get_error()}")

    def mask(self) -> np.ndarray:
        """Allowed next tokens: uint32[(n_vocab + 31) // 32], bit t % 32 of word t // 32 set when
        token t is allowed. End-of-generation tokens are set exactly when the grammar accepts
        what came so far. GrammarError if the matcher failed or allows nothing."""
        self._check()
        out = np.zeros(self.n_words, dtype=np.uint32)
        if self._ended:
            return out
        if not self._m.is_stopped():
            raw = np.frombuffer(self._m.compute_bitmask(), dtype="<u4")
            self._check()
            n = min(len(raw), self.n_words)
            out[:n] = raw[:n]
            # llguidance may pad its vocabulary; tokens past the tokenizer's are never allowed.
            full = self._n_tok // 32
            if full < self.n_words:
                out[full] &= np.uint32((1 << (self._n_tok % 32)) - 1)
                out[full + 1:] = 0
        _set_bits(out, self.eog, self._m.is_accepting())
        if not out.any():
            raise GrammarError(f"the grammar allows no token after {self.tokens} tokens")
        return out

    def advance(self, token: int) -> None:
        """Record the sampled token. GrammarError for a token the last mask did not allow."""
        token = int(token)
        self._check()
        if self._ended:
            raise GrammarError(f"token {token} came after the end of the constrained output")
        if token in self._eog_set:
            if not self._m.is_accepting():
                raise GrammarError(f"end-of-generation token {token} came before the grammar "
                                   f"was complete (after {self.tokens} tokens)")
            self._ended = True
        elif not 0 <= token < self._n_tok or not self._m.consume_token(token):
            why = f": {self._m.get_error()}" if self._m.is_error() else ""
            raise GrammarError(f"token {token} is not allowed by the grammar here (after "
                               f"{self.tokens} tokens){why}")
        self.tokens += 1

    def is_done(self) -> bool:
        """True once the output is complete: an end token was accepted, or the grammar can take
        nothing more."""
        return self._ended or (self._m.is_stopped() and not self._m.is_error())

    def is_accepting(self) -> bool:
        """True when the output so far is complete under the grammar (it may still go on)."""
        return self._ended or self._m.is_accepting()


def _constraint(llm_or_tokenizer, grammar: str, what: str, extra_eog) -> GrammarConstraint:
    tok, n_vocab = _tokenizer_of(llm_or_tokenizer)
    matcher = _fresh_matcher(llm_or_tokenizer, grammar, what)
    return GrammarConstraint(matcher, n_vocab, tok.n_vocab, list(tok.eog_ids) + list(extra_eog))


# ---------------------------------------------------------------------------------------------
# Grammars from schemas and response_format
# ---------------------------------------------------------------------------------------------

def json_schema_grammar(schema: Any, what: str = "schema") -> str:
    """The llguidance grammar (a JSON text) of a JSON schema (a dict or a bool), with bounded
    whitespace unless the schema's top-level "x-guidance" sets its own."""
    if not isinstance(schema, (dict, bool)):
        raise GrammarError(f"{what} must be a JSON schema object, got {type(schema).__name__}")
    try:
        text = json.dumps(schema, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as e:
        raise GrammarError(f"{what} is not JSON: {e}") from None
    try:
        return _llguidance().LLMatcher.grammar_from_json_schema(
            text, defaults={"whitespace_pattern": JSON_WHITESPACE})
    except ValueError as e:
        raise GrammarError(f"{what} cannot be enforced: {e}") from None


def _validate_grammar(grammar: str, what: str):
    llg = _llguidance()
    is_error, messages = llg.LLMatcher.validate_grammar_with_warnings(grammar, None,
                                                                     limits=_limits())
    if is_error:
        raise GrammarError(f"{what} cannot be enforced: {'; '.join(messages)}")


def check_json_schema(schema, what: str = "schema") -> None:
    """GrammarError naming what when schema cannot be enforced; needs no model."""
    _validate_grammar(json_schema_grammar(schema, what), what)


def check_response_format(response_format) -> Optional[dict]:
    """The JSON schema a response_format asks for ({"type": "object"} for json_object), or None
    for {"type": "text"} / None; GrammarError naming the field for anything malformed or a
    schema that cannot be enforced. Needs no model."""
    schema, what = _schema_of(response_format)
    if schema is not None:
        check_json_schema(schema, what)
    return schema


def _schema_of(response_format):
    if response_format is None:
        return None, None
    if not isinstance(response_format, dict):
        raise GrammarError(f"response_format must be an object like {{'type': 'json_object'}}, "
                           f"got {type(response_format).__name__}")
    kind = response_format.get("type")
    if kind == "text":
        return None, None
    if kind == "json_object":
        return {"type": "object"}, "response_format"
    if kind != "json_schema":
        raise GrammarError(f"response_format.type must be 'text', 'json_object' or "
                           f"'json_schema', got {kind!r}")
    spec = response_format.get("json_schema")
    if not isinstance(spec, dict):
        raise GrammarError(f"response_format.json_schema must be an object with 'name' and "
                           f"'schema', got {type(spec).__name__}")
    name = spec.get("name")
    if name is not None and not isinstance(name, str):
        raise GrammarError(f"response_format.json_schema.name must be a string, got {name!r}")
    strict = spec.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise GrammarError(f"response_format.json_schema.strict must be a boolean, got "
                           f"{strict!r}")
    if "schema" not in spec:
        raise GrammarError("response_format.json_schema.schema is missing")
    schema = spec["schema"]
    if not isinstance(schema, (dict, bool)):
        raise GrammarError(f"response_format.json_schema.schema must be a JSON schema object, "
                           f"got {type(schema).__name__}")
    return schema, "response_format.json_schema.schema"


def constraint_for_response_format(llm_or_tokenizer, response_format, *,
                                   extra_eog: Sequence[int] = ()) -> Optional[GrammarConstraint]:
    """A constraint enforcing response_format (OpenAI's shape: {"type": "json_object"} or
    {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}), or None for text.
    GrammarError for a malformed value or a schema that cannot be enforced."""
    schema, what = _schema_of(response_format)
    if schema is None:
        return None
    return _constraint(llm_or_tokenizer, json_schema_grammar(schema, what), what, extra_eog)


def constraint_for_json_schema(llm_or_tokenizer, schema, *,
                               extra_eog: Sequence[int] = ()) -> GrammarConstraint:
    """A constraint whose output is one JSON value valid under schema."""
    return _constraint(llm_or_tokenizer, json_schema_grammar(schema), "schema", extra_eog)


def constraint_for_lark(llm_or_tokenizer, lark: str, *,
                        extra_eog: Sequence[int] = ()) -> GrammarConstraint:
    """A constraint from an llguidance Lark grammar (``start`` is the top rule; ``%json {...}``
    inlines a JSON schema)."""
    if not isinstance(lark, str) or not lark.strip():
        raise GrammarError("the grammar must be a non-empty Lark text")
    grammar = _llguidance().LLMatcher.grammar_from_lark(lark)
    return _constraint(llm_or_tokenizer, grammar, "grammar", extra_eog)

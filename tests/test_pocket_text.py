"""Pocket TTS text handling in C++ (csrc/tts/pocket/text.h, tokenizer.h) against the packages.

- Normalization and chunking: _core.pocket_prepare_text and pocket_split_into_chunks against
  pocket-tts 4.0.1's prepare_text_prompt and split_into_best_sentences (with its JsonTokenizer
  on the test tokenizer), on a corpus of tricky strings under several rule sets: the same
  strings, the same guesses, the same ValueError for empty text, exactly.
- Tokenization: the test tokenizer (BPE with Metaspace, dasllama.testing.pocket) against the
  tokenizers package; a Unigram tokenizers JSON with SentencePiece's Precompiled normalizer
  (what a converted SentencePiece model looks like) against tokenizers; SentencePiece model
  protos (unigram and BPE, nmt_nfkc and identity normalization, with and without byte
  fallback) against the sentencepiece package. Ids and decoded text exactly.

Discrete outputs, so every bar is zero mismatches; each negative control is a plausible bug
(a skipped normalization step, an off-by-one chunk limit, a dropped merge, a dropped
normalizer, the wrong model type) that must change at least 10 results. The Unigram corpus
holds a case ("ii…日ﬁ.") whose ids depend on the scores' last bits, which the JSON reader
gets right only by parsing numbers as the tokenizers package (serde_json) does.
"""

from __future__ import annotations

import base64
import io
import json
import random

import pytest

from dasllama import _core
from requires import require as _require

MIN_CONTROL = 10  # results a negative control must change (the bar is 0)


def report(name: str, mismatches: int, total: int, control: int | None = None) -> None:
    line = f"{name}: {mismatches} mismatches of {total} (bar 0)"
    if control is not None:
        line += f", negative control changes {control}"
    print(line)
    assert mismatches == 0, line
    if control is not None:
        assert control >= MIN_CONTROL, line


# =============================================================================================
# The corpus
# =============================================================================================

_WORDS = ("hello world this is 3.5 and 2. ok. what? yes! no... hmm, well; so: fine - done – ok "
          "— “quoted” 'single' \"double\" (paren) [br] «fr» ß ǆ ﬁ é e\u0301 1² ٣.٤ 10.000 "
          "Dr. Mr. e.g. U.S.A. ’s it’s ‘x’ … ?, !; .: :) ;-) $4.99 50% #1 a&b 日本語 😀 "
          "\t \n \r \u00a0 \u2028 \x1c \u3000").split(" ")

TRICKY = [
    "", " ", "   ", "\n\t\r", "\u00a0\u2028", ".", "...", "…", "a", "hello", "Hello world.",
    "hello world", "Hi?\", she said", "\"Hi?\", she said.", "3.5 percent. Then 4.", "Pi is 3.14159.",
    "Version 2.0.1 is out. Update now!", "It costs $4.99. Cheap!", "Dr. Smith met Mr. Jones.",
    "ßtraße", "ǆungla", "ﬁne", "élan vital", "e\u0301lan", "wait...", "end,", "end -", "end —",
    "x )", "(a)", ". , ;", "'quoted'", "“Smart quotes,” he said.", "It’s fine; really: yes.",
    "¿Qué? ¡Sí!", "日本語のテキスト。", "emoji 😀 here", "tab\tinside", "line\nbreak\r\nhere",
    "double  space", "many     spaces     here", "UPPER CASE.", "1st place", "²nd", "٣ arabic digit",
    "a;b;c", "semi; colon", "a:b", "Hi?, ok", "Wow!; yes", "Done… next", "ok —", "«Bonjour»",
    " ".join(["this is a very long sentence without any stop"] * 20) + ".",
    ("A long sentence with a clause, and another clause; then a colon: and more words " * 8) + ".",
    "One. Two. Three. Four. Five. Six. Seven. Eight. Nine. Ten. " * 6,
]


def corpus(n: int = 1200, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    out = list(TRICKY)
    for _ in range(n):
        text = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(0, 60)))
        if rng.random() < 0.3:
            text = text.replace(" ", rng.choice(["", "  ", "\n"]))
        out.append(text)
    return out


RULE_SETS = [
    dict(),  # the package's defaults
    dict(replace={"\u2019": "'", "\u2018": "'"}),  # English
    dict(remove_semicolons=True, replace={'"': "", "\u201c": "", "\u201d": "", "\u00ab": "",
                                          "\u00bb": "", ":": ",", "(": "", ")": "",
                                          "\u2013": ",", "\u00df": "ss"}),  # French-like
    dict(pad_with_spaces=True, append_terminal_punctuation=False,
         capitalize_first_letter=False),
]


def package_kwargs(r: dict) -> dict:
    return dict(pad_with_spaces_for_short_inputs=r.get("pad_with_spaces", False),
                remove_semicolons=r.get("remove_semicolons", False),
                append_terminal_punctuation=r.get("append_terminal_punctuation", True),
                capitalize_first_letter=r.get("capitalize_first_letter", True),
                replace_characters=r.get("replace") or None)


def outcome(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except ValueError:
        return "ValueError"


# =============================================================================================
# Fixtures
# =============================================================================================

@pytest.fixture(scope="module")
def test_tokenizer(tmp_path_factory):
    """(tokenizers JSON text, the package's JsonTokenizer, our PocketTokenizer)."""
    _require("tokenizers")
    _require("torch")
    _require("pocket_tts")
    from pocket_tts.modules.text_conditioner import JsonTokenizer

    from dasllama.testing.pocket import N_BINS, train_tokenizer

    path = train_tokenizer(tmp_path_factory.mktemp("pocket_text") / "tokenizer.json")
    text = path.read_text(encoding="utf-8")
    return text, JsonTokenizer(N_BINS, str(path)), _core.PocketTokenizer.from_json(text)


def _proto_field(blob: bytes, number: int) -> list[bytes]:
    """The length-delimited fields `number` of a protobuf message (enough for ModelProto)."""
    out, i = [], 0

    def varint(i):
        value = shift = 0
        while True:
            b = blob[i]
            i += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return value, i

    while i < len(blob):
        key, i = varint(i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, i = varint(i)
        elif wire == 2:
            n, i = varint(i)
            if field == number:
                out.append(blob[i:i + n])
            i += n
        else:
            i += 4 if wire == 5 else 8
    return out


def train_sentencepiece(model_type: str, normalization: str, byte_fallback: bool) -> bytes:
    spm = _require("sentencepiece")
    from dasllama.testing.pocket import tokenizer_corpus

    lines = tokenizer_corpus(n_lines=3000) + \
        ["Élan vital, café — ½ ﬁne “quoted” ＡＢＣ １２３ tab\there"] * 5
    f = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=f, vocab_size=600, model_type=model_type,
        normalization_rule_name=normalization, byte_fallback=byte_fallback, minloglevel=2)
    return f.getvalue()


def unigram_json(proto: bytes, byte_fallback: bool, number_format=repr) -> str:
    """A tokenizers JSON of a SentencePiece unigram model, laid out as converted ones are."""
    spm = _require("sentencepiece")
    sp = spm.SentencePieceProcessor()
    sp.load_from_serialized_proto(proto)
    charsmap = _proto_field(_proto_field(proto, 3)[0], 2)[0]
    vocab = [[sp.id_to_piece(i), float(sp.get_score(i))] for i in range(sp.vocab_size())]
    metaspace = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
                 "split": True}
    decoder = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]} if byte_fallback else metaspace
    doc = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": sp.id_to_piece(i), "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": False, "special": True}
                         for i in range(3)],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(charsmap).decode()},
            {"type": "Strip", "strip_left": False, "strip_right": True},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": "\u2581"}]},
        "pre_tokenizer": metaspace, "post_processor": None, "decoder": decoder,
        "model": {"type": "Unigram", "unk_id": 0, "vocab": vocab, "byte_fallback": byte_fallback},
    }
    return json.dumps(doc)


def token_corpus(n: int = 1500, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    alphabet = "abcdefghij  .,!?;:'\"-…’‘é€\tＡ１½ﬁ\u00a0\u3000ǘxyz日"
    out = corpus(300) + ["<unk> <s>", "Café ＡＢＣ ½", "e\u0301 ü", "😀😀 x", "▁a▁▁b", "ii…日ﬁ."]
    out += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(n)]
    return out


# =============================================================================================
# Normalization and chunking
# =============================================================================================

def test_prepare_text_matches_package():
    _require("torch")
    _require("pocket_tts")
    from pocket_tts.models.text_chunking import prepare_text_prompt

    texts = corpus()
    mismatches = total = control = 0
    for r in RULE_SETS:
        rules = _core.PocketTextRules(**r)
        for t in texts:
            expected = outcome(prepare_text_prompt, t, **package_kwargs(r))
            got = outcome(_core.pocket_prepare_text, t, rules)
            total += 1
            mismatches += tuple(expected) != tuple(got)
            if r == RULE_SETS[0]:
                # Negative control: capitalization skipped (a step of the rules left out).
                skipped = outcome(_core.pocket_prepare_text, t,
                                  _core.PocketTextRules(capitalize_first_letter=False))
                control += tuple(expected) != tuple(skipped)
    report("prepare_text", mismatches, total, control)


def test_prepare_text_errors():
    with pytest.raises(ValueError, match="empty"):
        _core.pocket_prepare_text(" \n\t", _core.PocketTextRules())
    with pytest.raises(ValueError, match="empty"):  # everything replaced away
        _core.pocket_prepare_text('""', _core.PocketTextRules(replace={'"': ""}))
    with pytest.raises(ValueError, match="one character"):
        _core.pocket_prepare_text("ab", _core.PocketTextRules(replace={"ab": "x"}))


@pytest.mark.parametrize("max_tokens", [50, 8])
def test_chunks_match_package(test_tokenizer, max_tokens):
    from pocket_tts.models.text_chunking import split_into_best_sentences

    _, package_tok, tok = test_tokenizer
    texts = corpus()
    mismatches = total = boundaries = 0
    for r in RULE_SETS:
        rules = _core.PocketTextRules(**r)
        for t in texts:
            expected = outcome(split_into_best_sentences, package_tok, t, max_tokens,
                               **package_kwargs(r))
            got = outcome(_core.pocket_split_into_chunks, t, tok, rules, max_tokens)
            total += 1
            mismatches += expected != got
            boundaries += len(got) - 1 if isinstance(got, list) else 0
    # Negative control: an off-by-one chunk limit (max_tokens - 1).
    control = sum(
        outcome(split_into_best_sentences, package_tok, t, max_tokens, **package_kwargs({}))
        != outcome(_core.pocket_split_into_chunks, t, tok, _core.PocketTextRules(), max_tokens - 1)
        for t in texts)
    print(f"chunk boundaries compared: {boundaries}")
    report(f"split_into_chunks (max_tokens {max_tokens})", mismatches, total, control)


def test_plan_is_prepare_then_encode(test_tokenizer):
    from pocket_tts.models.text_chunking import prepare_text_prompt, split_into_best_sentences

    _, package_tok, tok = test_tokenizer
    rules = _core.PocketTextRules(replace={"\u2019": "'"})
    mismatches = total = 0
    for t in corpus(300):
        try:
            chunks = split_into_best_sentences(package_tok, t, 50, False, False,
                                               replace_characters={"\u2019": "'"})
        except ValueError:
            with pytest.raises(ValueError):
                _core.pocket_plan_text(t, tok, rules, 50)
            continue
        expected = []
        for chunk in chunks:
            prepared, guess = prepare_text_prompt(chunk, False, False,
                                                  replace_characters={"\u2019": "'"})
            expected.append((prepared, package_tok.encode(prepared), guess))
        got = [(p, list(ids), g) for p, ids, g in _core.pocket_plan_text(t, tok, rules, 50)]
        total += 1
        mismatches += expected != got
    report("plan_text", mismatches, total)


# =============================================================================================
# Tokenizers
# =============================================================================================

def _compare(name, reference_encode, reference_decode, ours, texts, control_encode=None):
    mismatches = control = 0
    for t in texts:
        ids = reference_encode(t)
        mismatches += ids != list(ours.encode(t))
        mismatches += reference_decode(ids) != ours.decode(ids)
        if control_encode is not None:
            control += ids != list(control_encode(t))
    report(name, mismatches, 2 * len(texts), control if control_encode else None)


def test_bpe_json_matches_tokenizers(test_tokenizer):
    tokenizers = _require("tokenizers")
    text, _, tok = test_tokenizer
    hf = tokenizers.Tokenizer.from_str(text)
    # Negative control: one early merge dropped from the file.
    doc = json.loads(text)
    del doc["model"]["merges"][3]
    broken = _core.PocketTokenizer.from_json(json.dumps(doc))
    assert tok.kind == "tokenizers" and tok.n_vocab == hf.get_vocab_size()
    assert tok.unk_id == hf.token_to_id("<unk>")
    _compare("BPE tokenizers JSON", lambda t: hf.encode(t).ids, hf.decode, tok, token_corpus(),
             broken.encode)


@pytest.mark.parametrize("byte_fallback", [False, True])
def test_unigram_json_matches_tokenizers(byte_fallback):
    tokenizers = _require("tokenizers")
    proto = train_sentencepiece("unigram", "nmt_nfkc", byte_fallback)
    text = unigram_json(proto, byte_fallback)
    hf = tokenizers.Tokenizer.from_str(text)
    ours = _core.PocketTokenizer.from_json(text)
    # Negative control: the Precompiled normalizer left out (no NFKC folding, no ½ -> 1⁄2).
    doc = json.loads(text)
    doc["normalizer"]["normalizers"].pop(0)
    broken = _core.PocketTokenizer.from_json(json.dumps(doc))
    _compare(f"Unigram tokenizers JSON (byte_fallback {byte_fallback})",
             lambda t: hf.encode(t).ids, hf.decode, ours, token_corpus(), broken.encode)


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
@pytest.mark.parametrize("normalization", ["nmt_nfkc", "identity"])
@pytest.mark.parametrize("byte_fallback", [False, True])
def test_sentencepiece_matches_package(model_type, normalization, byte_fallback):
    spm = _require("sentencepiece")
    proto = train_sentencepiece(model_type, normalization, byte_fallback)
    sp = spm.SentencePieceProcessor()
    sp.load_from_serialized_proto(proto)
    ours = _core.PocketTokenizer.from_sentencepiece(proto)
    assert ours.kind == "sentencepiece" and ours.n_vocab == sp.vocab_size()
    assert ours.unk_id == sp.unk_id()
    # Negative control: the model of the other type (trained on the same lines).
    other = train_sentencepiece("bpe" if model_type == "unigram" else "unigram", normalization,
                                byte_fallback)
    wrong = _core.PocketTokenizer.from_sentencepiece(other)
    _compare(f"SentencePiece {model_type} {normalization} byte_fallback {byte_fallback}",
             lambda t: sp.encode(t, out_type=int), sp.decode, ours, token_corpus(),
             wrong.encode)


def test_from_gguf(tmp_path, test_tokenizer):
    """The GGUF keys the converter writes, both kinds."""
    from dasllama.convert import GGUFWriter

    text, _, tok = test_tokenizer
    w = GGUFWriter()
    w.add("pocket.tokenizer.kind", "str", "tokenizers")
    w.add("tokenizer.huggingface.json", "str", text)
    w.write(tmp_path / "json.gguf")
    from_file = _core.PocketTokenizer.from_gguf(str(tmp_path / "json.gguf"))
    sample = "Hello world. It costs 3.5 dollars!"
    assert from_file.encode(sample) == tok.encode(sample)

    proto = train_sentencepiece("unigram", "nmt_nfkc", False)
    w = GGUFWriter()
    w.add("pocket.tokenizer.kind", "str", "sentencepiece")
    w.add("pocket.tokenizer.sentencepiece", "u8[]", proto)
    w.write(tmp_path / "sp.gguf")
    sp_file = _core.PocketTokenizer.from_gguf(str(tmp_path / "sp.gguf"))
    assert sp_file.encode(sample) == _core.PocketTokenizer.from_sentencepiece(proto).encode(sample)

    w = GGUFWriter()
    w.add("pocket.tokenizer.kind", "str", "wordpiece")
    w.write(tmp_path / "bad.gguf")
    with pytest.raises(ValueError, match="pocket.tokenizer.kind 'wordpiece'"):
        _core.PocketTokenizer.from_gguf(str(tmp_path / "bad.gguf"))


def test_bad_tokenizer_files():
    with pytest.raises(ValueError, match="invalid JSON at byte"):
        _core.PocketTokenizer.from_json('{"model": ')
    with pytest.raises(ValueError, match="model type 'WordPiece' is not supported"):
        _core.PocketTokenizer.from_json('{"model": {"type": "WordPiece", "vocab": {}}}')
    with pytest.raises(ValueError, match="not a SentencePiece model"):
        _core.PocketTokenizer.from_sentencepiece(b"\x0a\xff\xff\xff")
    tok = _core.PocketTokenizer.from_json(
        '{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}}')
    assert tok.encode("abab") == [2, 2]
    with pytest.raises(ValueError, match="token id 7 is outside"):
        tok.decode([7])

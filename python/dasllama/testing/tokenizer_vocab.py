"""Small built-in tokenizer vocabularies for random-weight test models.

Two kinds, both trained here by plain BPE on a short built-in text, so the merges are real and
every intermediate piece exists:

- ``bpe_vocab()``: a GPT-2 style byte-level BPE (``tokenizer.ggml.model = "gpt2"``). Ids
  0..255 are the 256 byte symbols of GPT-2's byte-to-unicode table, in that table's order;
  then one token per merge, in merge order; then the special tokens; then padding.
- ``spm_vocab()``: a llama-style SentencePiece vocabulary (``tokenizer.ggml.model = "llama"``):
  ``<unk>``, ``<s>``, ``</s>``, the byte tokens ``<0x00>``..``<0xFF>``, the characters of the
  text (words carry the ``▁`` space marker), one piece per merge with a score that falls with
  the merge's rank, then the ChatML control tokens and padding.

Each returns a ``Vocab``; ``Vocab.add_to(writer)`` writes the ``tokenizer.*`` metadata.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import gguf

from ..convert.bpe import byte_encoder as bytes_to_unicode  # GPT-2's byte spelling

NORMAL = int(gguf.TokenType.NORMAL)
UNKNOWN = int(gguf.TokenType.UNKNOWN)
CONTROL = int(gguf.TokenType.CONTROL)
UNUSED = int(gguf.TokenType.UNUSED)
BYTE = int(gguf.TokenType.BYTE)

DEFAULT_VOCAB_SIZE = 512

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# The training text: plain prose with digits and punctuation, written for this file.
TRAINING_TEXT = """\
The quick brown fox jumps over the lazy dog. A small model reads the text one token at a time,
and the tokens it reads are pieces of words: the, and, ing, tion, er, on, in, at, re.
In the morning the weather was cold and the river was quiet; by the evening it was warm again.
There are 365 days in a year, 24 hours in a day, 60 minutes in an hour and 60 seconds in a minute.
She said: "Hello, world!" and he answered, "Hello there, how are you today?"
Numbers like 3.14159, 2.71828 and 1.41421 appear in the notes of every student of mathematics.
Reading, writing and thinking are the three things a language model is trained to imitate.
The engine loads the weights, builds the cache, and then generates the next token again and again.
When the prompt is long, the prefill step processes many tokens together; decoding is one by one.
Rain, snow, wind and sunshine: the seasons turn, and the trees in the garden change their colours.
An interesting question is whether a tiny vocabulary can still encode any string of bytes. It can.
"""


def train_bpe(words: Counter, n_new: int) -> tuple[list[tuple[str, str]], list[str]]:
    """Greedy BPE on a {tuple-of-symbols: count} table; ties break on the smaller pair.

    Runs until ``n_new`` distinct new symbols exist (two merges can spell the same symbol) or
    nothing is left to merge. Returns (merges in order, new symbols in order of first creation).
    """
    seqs = {w: list(w) for w in words}
    merges: list[tuple[str, str]] = []
    seen = {s for w in words for s in w}
    new: list[str] = []
    while len(new) < n_new:
        pairs: Counter = Counter()
        for w, syms in seqs.items():
            for a, b in zip(syms, syms[1:]):
                pairs[(a, b)] += words[w]
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        joined = best[0] + best[1]
        if joined not in seen:
            seen.add(joined)
            new.append(joined)
        for w, syms in seqs.items():
            i, out = 0, []
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == best[0] and syms[i + 1] == best[1]:
                    out.append(joined)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            seqs[w] = out
    return merges, new


@dataclass
class Vocab:
    model: str                      # tokenizer.ggml.model
    tokens: list[str]
    token_types: list[int]
    scores: list[float] | None = None
    merges: list[str] = field(default_factory=list)
    special: dict[str, int] = field(default_factory=dict)   # bos/eos/unk/pad -> id
    add_bos: bool = False
    add_eos: bool = False
    add_space_prefix: bool | None = None
    pre: str | None = None

    def __len__(self) -> int:
        return len(self.tokens)

    def add_to(self, w: gguf.GGUFWriter, chat_template: str | None = None) -> None:
        w.add_tokenizer_model(self.model)
        if self.pre is not None:
            w.add_tokenizer_pre(self.pre)
        w.add_token_list(self.tokens)
        w.add_token_types(self.token_types)
        if self.scores is not None:
            w.add_token_scores(self.scores)
        if self.merges:
            w.add_token_merges(self.merges)
        adders = {"bos": w.add_bos_token_id, "eos": w.add_eos_token_id,
                  "unk": w.add_unk_token_id, "pad": w.add_pad_token_id}
        for kind, tid in self.special.items():
            adders[kind](tid)
        w.add_add_bos_token(self.add_bos)
        w.add_add_eos_token(self.add_eos)
        if self.add_space_prefix is not None:
            w.add_add_space_prefix(self.add_space_prefix)
        if chat_template:
            w.add_chat_template(chat_template)


def _pad(tokens: list[str], types: list[int], scores: list[float] | None, n_vocab: int,
         fmt: str) -> None:
    for i in range(len(tokens), n_vocab):
        tokens.append(fmt.format(i))
        types.append(UNUSED)
        if scores is not None:
            scores.append(-1e9)


def bpe_vocab(n_vocab: int | None = None, pre: str = "default",
              text: str = TRAINING_TEXT) -> Vocab:
    """GPT-2 style byte-level BPE with <|endoftext|>, <|im_start|>, <|im_end|> as control tokens.

    With ``n_vocab`` smaller than the default the number of merges shrinks; larger pads with
    ``[PADn]`` tokens of type UNUSED (as llama.cpp's converter does).
    """
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    b2u = bytes_to_unicode()
    base = list(b2u.values())
    n_min = len(base) + len(specials)
    target = DEFAULT_VOCAB_SIZE if n_vocab is None else n_vocab
    if target < n_min:
        raise ValueError(f"bpe vocabulary needs n_vocab >= {n_min} (256 bytes + {len(specials)} "
                         f"special tokens), got {n_vocab}")
    # GPT-2 pre-tokenization, ASCII approximation of its regex.
    pieces = re.findall(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+",
                        text)
    words = Counter(tuple(b2u[b] for b in p.encode("utf-8")) for p in pieces)
    merges, new = train_bpe(words, min(target, DEFAULT_VOCAB_SIZE) - n_min)
    tokens = base + new
    types = [NORMAL] * len(tokens)
    eot = len(tokens)
    tokens += specials
    types += [CONTROL] * len(specials)
    _pad(tokens, types, None, target, "[PAD{}]")
    return Vocab(model="gpt2", pre=pre, tokens=tokens, token_types=types,
                 merges=[f"{a} {b}" for a, b in merges],
                 special={"bos": eot, "eos": eot, "pad": eot}, add_bos=False)


def spm_vocab(n_vocab: int | None = None, text: str = TRAINING_TEXT,
              add_space_prefix: bool = True) -> Vocab:
    """llama-style SentencePiece vocabulary: <unk> <s> </s>, byte fallback tokens, scored pieces.

    ``n_vocab`` below the default trains fewer pieces; above it pads with ``<unusedN>`` (UNUSED).
    """
    head = ["<unk>", "<s>", "</s>"]
    head_types = [UNKNOWN, CONTROL, CONTROL]
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    tail = ["<|im_start|>", "<|im_end|>"]
    words = Counter(tuple("▁" + w) for w in text.split())
    chars = sorted({c for w in words for c in w})
    n_min = len(head) + len(byte_tokens) + len(chars) + len(tail)
    target = DEFAULT_VOCAB_SIZE if n_vocab is None else n_vocab
    if target < n_min:
        raise ValueError(f"spm vocabulary needs n_vocab >= {n_min} (3 specials, 256 byte tokens, "
                         f"{len(chars)} characters, {len(tail)} chat tokens), got {n_vocab}")
    _, pieces = train_bpe(words, min(target, DEFAULT_VOCAB_SIZE) - n_min)
    tokens = head + byte_tokens + pieces + chars + tail
    types = head_types + [BYTE] * 256 + [NORMAL] * (len(pieces) + len(chars)) + [CONTROL] * len(tail)
    # Merged pieces score by rank (earlier merge = higher score), below them the single characters.
    scores = ([0.0] * (len(head) + 256) + [float(-i) for i in range(len(pieces))]
              + [float(-(len(pieces) + i)) for i in range(len(chars))] + [0.0] * len(tail))
    _pad(tokens, types, scores, target, "<unused{}>")
    return Vocab(model="llama", tokens=tokens, token_types=types, scores=scores,
                 special={"bos": 1, "eos": 2, "unk": 0}, add_bos=True,
                 add_space_prefix=add_space_prefix)


def make_vocab(kind: str, n_vocab: int | None = None, pre: str | None = None) -> Vocab:
    if kind == "bpe":
        return bpe_vocab(n_vocab, pre=pre or "default")
    if kind == "spm":
        if pre is not None:
            raise ValueError("tokenizer_pre applies to bpe vocabularies only")
        return spm_vocab(n_vocab)
    raise ValueError(f"tokenizer must be 'bpe' or 'spm', got {kind!r}")

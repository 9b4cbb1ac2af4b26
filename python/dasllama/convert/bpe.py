"""Byte-level BPE facts that converters and the test vocabularies share: GPT-2's byte
spelling of tokens, BPE by rank (tiktoken's rule) and the merges a rank table implies."""

from __future__ import annotations

from . import ConvertError

__all__ = ["byte_encoder", "bpe_by_rank", "merges_from_ranks"]


def byte_encoder() -> dict:
    """GPT-2's reversible byte -> printable character map (what byte-level BPE tokens are
    spelled in)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs = bs[:]
    extra = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + extra)
            extra += 1
    return dict(zip(bs, map(chr, cs)))


def bpe_by_rank(word: bytes, ranks: dict, limit: int) -> list:
    """Byte-level BPE of ``word`` by rank (tiktoken's rule: merge the adjacent pair whose join
    has the lowest rank), using only tokens ranked below ``limit``."""
    parts = [word[i:i + 1] for i in range(len(word))]
    while len(parts) > 1:
        best, at = None, -1
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < limit and (best is None or r < best):
                best, at = r, i
        if best is None:
            break
        parts[at:at + 2] = [parts[at] + parts[at + 1]]
    return parts


def merges_from_ranks(tokens: list) -> list:
    """The GPT-2 merges ("a b", byte-level spelling) that rebuild every multi-byte token from
    the tokens ranked below it: a token is its BPE's last merge."""
    ranks = {t: i for i, t in enumerate(tokens)}
    enc = byte_encoder()
    spell = lambda b: "".join(enc[x] for x in b)   # noqa: E731
    out = []
    for rank, token in enumerate(tokens):
        if len(token) < 2:
            continue
        parts = bpe_by_rank(token, ranks, rank)
        if len(parts) != 2:
            raise ConvertError(f"token {rank} ({token!r}) is not the merge of two lower-"
                                   f"ranked tokens: the vocabulary is not a BPE rank table")
        out.append(f"{spell(parts[0])} {spell(parts[1])}")
    return out

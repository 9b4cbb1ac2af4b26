"""Text generation with a GGUF language model: the LLM class.

::

    from dasllama import LLM
    with LLM("smollm2") as llm:
        print(llm.generate("The capital of France is", max_tokens=16, temperature=0))
        for piece in llm.chat([{"role": "user", "content": "Hi!"}], stream=True):
            print(piece, end="", flush=True)
        print(llm.stats)

Sampling is done by _core.Sampler, whose chain is, in order: repetition/presence/frequency
penalties over the last ``penalty_last_n`` tokens (the prompt's included), then greedy when
``temperature == 0``, else top_k -> top_p -> min_p -> temperature -> a draw seeded by
``seed`` (None: a fresh random seed per call). Text comes out as whole UTF-8 characters;
text that might be the start of a stop string is held back until it is resolved.
"""

from __future__ import annotations

import codecs
import os
import random
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Union

import numpy as np

from . import _core, gguf, models
from .chat import ChatFormat
from .errors import DasllamaError, DeviceError, ShapeError
from .gpu import resolve_device

__all__ = ["LLM", "DEVICES", "DEFAULT_MODEL"]

# Device kinds this release runs LLMs on ("vulkan:N" picks one; metal on Apple platforms).
DEVICES = ("cpu", "vulkan", "metal")
DEFAULT_MODEL = "smollm2"
# generate_many's default slots at most: past this a step's rows stop getting cheaper per row on
# a few cores, while every slot holds a KV region of n_ctx positions.
_MANY_SLOTS = 8
_POOLINGS = ("mean", "cls", "last", "none")


class _TextStream:
    """Token bytes in, text out: never half a UTF-8 character (invalid bytes become U+FFFD),
    never text that could still grow into a stop string, nothing from a stop string on."""

    def __init__(self, stop: Sequence[str]):
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stop = tuple(stop)
        self._pending = ""
        self.stopped = False

    def push(self, data: bytes, final: bool = False) -> str:
        if self.stopped:
            return ""
        self._pending += self._decoder.decode(data, final=final)
        hits = [i for i in (self._pending.find(s) for s in self._stop) if i >= 0]
        if hits:
            out, self._pending, self.stopped = self._pending[:min(hits)], "", True
            return out
        keep = 0 if final else self._longest_stop_prefix_suffix()
        cut = len(self._pending) - keep
        out, self._pending = self._pending[:cut], self._pending[cut:]
        return out

    def _longest_stop_prefix_suffix(self) -> int:
        best = 0
        for s in self._stop:
            for k in range(min(len(s) - 1, len(self._pending)), best, -1):
                if self._pending.endswith(s[:k]):
                    best = k
                    break
        return best


def _check_int(name: str, value, low: int, allow_none: bool = False) -> Optional[int]:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}"
                         f"{' or None' if allow_none else ''}, got {value!r}")
    return int(value)


class LLM:
    """A language model loaded from a GGUF file, ready to generate.

    path_or_name: a .gguf path or a model name (default "smollm2"; see dasllama.models.find).
    device: "cpu", "vulkan" (the best GPU), "vulkan:N" (device N of `dasllama devices`, CPU-type
    drivers such as lavapipe included) or "vulkan:NAME"; None reads $DASLLAMA_DEVICE, else "cpu".
    On a GPU, prefill and decode are seats that fall back to the CPU when they decline
    (stats["seats"] counts both). n_ctx: the context size in tokens.
    threads: worker threads (None: one per physical core). kv_type: "f16", "f32" or "q8_0".
    """

    def __init__(self, path_or_name: Union[str, os.PathLike, None] = None,
                 device: Optional[str] = None, n_ctx: int = 4096, threads: Optional[int] = None,
                 kv_type: str = "f16"):
        device = resolve_device(device)
        if device.split(":", 1)[0] not in DEVICES:
            raise DeviceError(f"device {device!r} is not available: this release runs language "
                              f"models on {', '.join(map(repr, DEVICES))} (or 'vulkan:N', 'metal:N')")
        n_ctx = _check_int("n_ctx", n_ctx, 1)
        threads = _check_int("threads", threads, 0, allow_none=True)
        path = models.find(DEFAULT_MODEL if path_or_name is None else path_or_name)
        model = _core.LLMModel(str(path), n_ctx=n_ctx, n_threads=threads or 0, kv_type=kv_type,
                               device=device)
        self._attach(model, path, template=None)

    @classmethod
    def from_model(cls, model, *, chat_template: Optional[str] = None, path=None) -> "LLM":
        """An LLM over an already-built model object (a _core.LLMModel or anything with its
        methods); chat_template replaces the one read from the file at path."""
        self = cls.__new__(cls)
        self._attach(model, Path(path) if path else None, template=chat_template)
        return self

    def _attach(self, model, path: Optional[Path], template: Optional[str]):
        self._model = model
        self.path = path
        self._template = template
        self._chat_format: Optional[ChatFormat] = None
        self._cache: list = []        # token ids whose K/V rows the model holds, in order
        self._epoch = 0               # bumped by every call; an older stream then refuses to run
        self._stats: dict = {}

    # ----------------------------------------------------------------------------------------
    # Properties and lifetime
    # ----------------------------------------------------------------------------------------
    @property
    def model(self):
        if self._model is None:
            raise DasllamaError("this LLM is closed")
        return self._model

    @property
    def tokenizer(self):
        return self.model.tokenizer

    @property
    def n_ctx(self) -> int:
        return self.model.n_ctx

    @property
    def n_vocab(self) -> int:
        return self.model.n_vocab

    @property
    def stats(self) -> dict:
        """Figures of the last call: prompt_tokens, cached_tokens (reused from the previous
        call), prompt_tokens_per_s, gen_tokens, gen_tokens_per_s, prompt_seconds, gen_seconds,
        finish_reason ("eog", "stop", "length", "context", or "interrupted"); on a GPU device
        also seats: {"prefill"|"decode": {"served", "declined": {reason: n}, "dispatches",
        "uploads", "replays"}}, counted since the model was opened (replays: calls that
        submitted the previous call's command buffer again)."""
        out = dict(self._stats)
        seats = getattr(self._model, "seat_stats", None) if self._model is not None else None
        if out and seats is not None and seats():
            out["seats"] = seats()
        return out

    @property
    def device(self) -> str:
        """"cpu" or the name of the GPU the model runs on."""
        return getattr(self.model, "device_name", "cpu")

    def close(self):
        """Free the model. Calls after this raise."""
        if self._model is not None:
            self._model.close()
            self._model = None
            self._cache = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        state = "closed" if self._model is None else f"n_ctx={self.n_ctx}, n_vocab={self.n_vocab}"
        return f"LLM({str(self.path) if self.path else '<model>'!r}, {state})"

    # ----------------------------------------------------------------------------------------
    # Tokens
    # ----------------------------------------------------------------------------------------
    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list:
        """Token ids of text. add_special: add BOS/EOS as the model's file asks; parse_special:
        read special-token texts such as "<|im_start|>" as those tokens."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return list(self.tokenizer.encode(text, add_special=add_special, parse_special=parse_special))

    def detokenize(self, ids: Sequence[int]) -> str:
        """The text of token ids (bytes that are not valid UTF-8 become U+FFFD)."""
        return bytes(self.tokenizer.decode(self._check_ids(ids, allow_empty=True))).decode(
            "utf-8", errors="replace")

    def _check_ids(self, ids, allow_empty: bool = False) -> list:
        if isinstance(ids, (str, bytes)):
            raise TypeError("expected a list of token ids, got a string")
        ids = [int(t) for t in ids]
        if not ids and not allow_empty:
            raise ValueError("the token list is empty")
        n_vocab = self.n_vocab
        for i, t in enumerate(ids):
            if not 0 <= t < n_vocab:
                raise ValueError(f"token id {t} at index {i} is outside the vocabulary "
                                 f"[0, {n_vocab})")
        return ids

    def _check_fits(self, n_tokens: int):
        # Checked before any eval, so the cache is untouched by a prompt that cannot fit.
        if n_tokens > self.n_ctx:
            raise ShapeError(f"the prompt has {n_tokens} tokens but the context holds "
                             f"n_ctx={self.n_ctx}; shorten it or load the model with a larger "
                             f"n_ctx")

    # ----------------------------------------------------------------------------------------
    # The cache: self._cache mirrors the model's first n_past positions
    # ----------------------------------------------------------------------------------------
    def _sync(self):
        n_past = self.model.n_past
        if len(self._cache) >= n_past:
            del self._cache[n_past:]
        else:   # rows we cannot name (someone used .model directly): start over
            self.model.reset()
            self._cache = []

    def _eval(self, ids: list, all_logits: bool = False) -> np.ndarray:
        self._cache.extend(ids)   # trimmed back to n_past by _sync if eval fails
        try:
            return self.model.eval(ids, all_logits=all_logits)
        finally:
            self._sync()

    def _reuse_prefix(self, ids: list) -> int:
        """Keep the longest cached prefix of ids (leaving at least one token to evaluate, which
        gives the logits) and return its length."""
        n = 0
        for a, b in zip(self._cache, ids[:-1]):
            if a != b:
                break
            n += 1
        if n < len(self._cache):
            self.model.truncate(n)
            del self._cache[n:]
        return n

    # ----------------------------------------------------------------------------------------
    # Logits and generation
    # ----------------------------------------------------------------------------------------
    def logits(self, ids: Sequence[int]) -> np.ndarray:
        """Logits of every position of ids, evaluated from position 0 in a fresh context:
        float32 [len(ids), n_vocab]."""
        ids = self._check_ids(ids)
        self._check_fits(len(ids))
        self._epoch += 1
        self.model.reset()
        self._cache = []
        t0 = time.perf_counter()
        out = np.asarray(self._eval(ids, all_logits=True))
        seconds = time.perf_counter() - t0
        self._stats = dict(prompt_tokens=len(ids), cached_tokens=0, prompt_seconds=seconds,
                           prompt_tokens_per_s=len(ids) / seconds if seconds > 0 else 0.0,
                           gen_tokens=0, gen_seconds=0.0, gen_tokens_per_s=0.0,
                           finish_reason="length")
        return out

    def generate(self, prompt: Union[str, Sequence[int]], max_tokens: Optional[int] = 128,
                 temperature: float = 0.8, top_k: int = 40, top_p: float = 0.95,
                 min_p: float = 0.05, repeat_penalty: float = 1.0, presence_penalty: float = 0.0,
                 frequency_penalty: float = 0.0, seed: Optional[int] = None,
                 stop: Union[str, Sequence[str], None] = None, stream: bool = False,
                 penalty_last_n: int = 64) -> Union[str, Iterator[str]]:
        """Continue prompt (text, or token ids) and return the new text, or with stream=True an
        iterator of text pieces. Ends at an end-of-generation token, at a stop string (not
        included), after max_tokens tokens (None: no limit) or when the context is full.
        temperature 0 is greedy. Each call starts from an empty context."""
        ids = self._prompt_ids(prompt)
        run = self._start(ids, reuse_cache=False, extra_eog=(), stop=stop, max_tokens=max_tokens,
                          sampler=self._sampler(temperature, top_k, top_p, min_p, repeat_penalty,
                                                presence_penalty, frequency_penalty,
                                                penalty_last_n, seed))
        return run if stream else "".join(run)

    def chat(self, messages, **generate_kwargs) -> Union[str, Iterator[str]]:
        """Reply to a conversation (a list of {"role", "content"} dicts) rendered through the
        model's chat template; takes generate's keyword arguments. The context is reused: when
        the new prompt starts with tokens already evaluated (the previous turns), only the rest
        is evaluated."""
        ids, extra_eog, text_stops = self.chat_prompt(messages)
        user_stop = generate_kwargs.pop("stop", None)
        user_stop = [user_stop] if isinstance(user_stop, str) else list(user_stop or [])
        stream = generate_kwargs.pop("stream", False)
        max_tokens = generate_kwargs.pop("max_tokens", 128)
        sampler = self._sampler(**generate_kwargs)
        run = self._start(ids, reuse_cache=True, extra_eog=extra_eog, stop=user_stop + text_stops,
                          max_tokens=max_tokens, sampler=sampler)
        return run if stream else "".join(run)

    def chat_prompt(self, messages, tool_plan=None, **template_variables) -> tuple:
        """The conversation as chat() evaluates it: (token ids, end-of-turn token ids that end a
        reply like an end-of-generation token, stop strings). tool_plan (dasllama.tools.plan_tools)
        renders it with tool definitions, also for templates that have no tool support;
        template_variables go to the template."""
        fmt = self.chat_format
        text = (tool_plan.render(messages) if tool_plan is not None
                else fmt.render(messages, **template_variables))
        ids = self.tokenize(text, add_special=True, parse_special=True)
        tok = self.tokenizer
        # A template that writes bos_token itself plus a tokenizer that adds one: keep one.
        if len(ids) >= 2 and ids[0] == ids[1] == tok.bos_id:
            ids = ids[1:]
        # Stop strings that are single special tokens never appear as text (control tokens
        # are not rendered): stop on the token instead.
        extra_eog, text_stops = [], []
        for s in fmt.stop:
            token = self._special_token_id(s)
            if token is None:
                text_stops.append(s)
            else:
                extra_eog.append(token)
        return ids, extra_eog, text_stops

    def generate_many(self, prompts: Sequence[Union[str, Sequence[int]]], *,
                      slots: Optional[int] = None, max_tokens: Optional[int] = 128,
                      stop: Union[str, Sequence[str], None] = None, **sampling) -> List[str]:
        """generate() for several prompts at once, decoded together by a BatchEngine
        (dasllama.batch) of `slots` sequences (default: one per prompt, at most 8). Takes
        generate's sampling arguments; a seed gives each prompt the text generate() gives it
        at that seed. Returns the texts in the order of prompts."""
        from .batch import BatchEngine, Request, SamplingParams
        if isinstance(prompts, (str, bytes)):
            raise TypeError("prompts must be a list of prompts; for one prompt use generate()")
        ids = [self._prompt_ids(p) for p in prompts]
        if not ids:
            return []
        engine = BatchEngine(self, slots=slots or min(len(ids), _MANY_SLOTS))
        texts: Dict[int, List[str]] = {}
        errors: List[BaseException] = []

        def collect(ev):
            texts.setdefault(ev.request_id, []).append(ev.text)
            if ev.kind == "error":
                errors.append(ev.error)

        order = [engine.submit(Request(prompt=p, max_tokens=max_tokens, stop=stop or (),
                                       sampling=SamplingParams(**sampling), on_event=collect))
                 for p in ids]
        engine.run()
        if errors:
            raise errors[0]
        return ["".join(texts.get(i, [])) for i in order]

    def embed(self, text_or_ids: Union[str, Sequence[int]], pooling: Optional[str] = None,
              normalize: bool = True) -> np.ndarray:
        """The embedding of a text (or token ids): the final hidden states (after the output
        norm) pooled by `pooling` - "mean" (the default when the file names none), "cls" (the
        first token), "last", or "none" (every token's row, [n, n_embd]) - and scaled to unit
        length when normalize. The file's {arch}.pooling_type, when present, sets the default.
        The model's cache is untouched."""
        ids = self._prompt_ids(text_or_ids)
        self._check_fits(len(ids))
        pooling = pooling or self.pooling
        if pooling not in _POOLINGS:
            raise ValueError(f"pooling must be one of {', '.join(_POOLINGS)}, got {pooling!r}")
        hidden = np.asarray(self.model.hidden_states(ids))
        out = {"mean": lambda h: h.mean(axis=0), "cls": lambda h: h[0], "last": lambda h: h[-1],
               "none": lambda h: h}[pooling](hidden)
        if normalize:
            norm = np.linalg.norm(out, axis=-1, keepdims=True)
            out = out / np.maximum(norm, 1e-12)
        return out.astype(np.float32, copy=False)

    @property
    def pooling(self) -> str:
        """How embed() pools by default: the file's {arch}.pooling_type, else "mean"."""
        return self._file_pooling() or "mean"

    def _file_pooling(self) -> Optional[str]:
        if self.path is None:
            return None
        with gguf.open(self.path) as f:
            arch = f.metadata.get("general.architecture", "")
            value = f.metadata.get(f"{arch}.pooling_type")
        # llama.cpp's enum: 0 none, 1 mean, 2 cls, 3 last (4, rank, is not an embedding).
        return {0: "none", 1: "mean", 2: "cls", 3: "last"}.get(value)

    def _prompt_ids(self, prompt) -> list:
        if isinstance(prompt, str):
            if not prompt:
                raise ValueError("the prompt is empty")
            ids = self.tokenize(prompt, add_special=True, parse_special=False)
            if not ids:
                raise ValueError(f"the prompt {prompt!r} has no tokens")
            return ids
        return self._check_ids(prompt)

    @property
    def chat_format(self) -> ChatFormat:
        """How chat() renders messages (the file's template, or a fallback; see dasllama.chat)."""
        if self._chat_format is None:
            template = self._template
            if template is None and self.path is not None:
                template = self._file_template()
            tok = self.tokenizer
            self._chat_format = ChatFormat.from_model(
                template, bos_token=self._token_text(tok.bos_id),
                eos_token=self._token_text(tok.eos_id),
                has_token=lambda s: self._special_token_id(s) is not None)
        return self._chat_format

    def _file_template(self) -> Optional[str]:
        """The file's chat template, read alone: the whole metadata would build the vocabulary
        as Python objects (92 MB of transient memory for Gemma-3's 262,144 tokens)."""
        from .chat import read_chat_template

        try:
            return read_chat_template(self.path)
        except (OSError, ValueError):     # a file that reader cannot walk: the full read
            with gguf.open(self.path) as f:
                return f.metadata.get("tokenizer.chat_template")

    def _token_text(self, token: int) -> str:
        return bytes(self.tokenizer.piece(token)).decode("utf-8", "replace") if token >= 0 else ""

    def _special_token_id(self, text: str) -> Optional[int]:
        ids = self.tokenizer.encode(text, add_special=False, parse_special=True)
        return ids[0] if len(ids) == 1 and self.tokenizer.is_control(ids[0]) else None

    @staticmethod
    def _sampler(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.0,
                 presence_penalty=0.0, frequency_penalty=0.0, penalty_last_n=64, seed=None):
        if seed is None:
            seed = random.SystemRandom().getrandbits(32)
        return _core.Sampler(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                             repeat_penalty=repeat_penalty, presence_penalty=presence_penalty,
                             frequency_penalty=frequency_penalty, penalty_last_n=penalty_last_n,
                             seed=seed)

    def _start(self, ids: list, *, reuse_cache: bool, extra_eog, stop, max_tokens,
               sampler) -> Iterator[str]:
        """Checks everything a run needs, then returns the (lazy) run."""
        max_tokens = _check_int("max_tokens", max_tokens, 0, allow_none=True)
        stop = [stop] if isinstance(stop, str) else list(stop or [])
        for s in stop:
            if not isinstance(s, str) or not s:
                raise ValueError(f"stop strings must be non-empty strings, got {s!r}")
        self._check_fits(len(ids))
        self._epoch += 1
        return self._run(ids, reuse_cache, set(extra_eog), stop, max_tokens, sampler, self._epoch)

    def _check_epoch(self, epoch: int):
        if self._epoch != epoch:
            raise RuntimeError("this stream was abandoned: a later call on the same LLM has "
                               "used its context")

    def _run(self, ids, reuse_cache, extra_eog, stop, max_tokens, sampler, epoch):
        model, tok = self.model, self.tokenizer
        text = _TextStream(stop)
        stats = dict(prompt_tokens=len(ids), cached_tokens=0, prompt_seconds=0.0,
                     prompt_tokens_per_s=0.0, gen_tokens=0, gen_seconds=0.0,
                     gen_tokens_per_s=0.0, finish_reason="interrupted")
        self._stats = stats
        t_gen = None
        try:
            self._check_epoch(epoch)
            self._sync()
            t0 = time.perf_counter()
            if reuse_cache:
                cached = self._reuse_prefix(ids)
            else:
                cached = 0
                model.reset()
                self._cache = []
            logits = self._eval(ids[cached:])
            t_gen = time.perf_counter()
            stats.update(cached_tokens=cached, prompt_seconds=t_gen - t0,
                         prompt_tokens_per_s=(len(ids) - cached) / max(t_gen - t0, 1e-9))
            for t in ids:   # the prompt is part of the penalty history, as in llama.cpp
                sampler.accept(t)
            finish = None
            while finish is None:
                if max_tokens is not None and stats["gen_tokens"] >= max_tokens:
                    finish = "length"
                    break
                token = sampler.sample(logits)
                if tok.is_eog(token) or token in extra_eog:
                    finish = "eog"
                    break
                sampler.accept(token)
                stats["gen_tokens"] += 1
                piece = text.push(b"" if tok.is_control(token) else bytes(tok.piece(token)))
                if piece:
                    yield piece
                    self._check_epoch(epoch)
                if text.stopped:
                    finish = "stop"
                elif max_tokens is not None and stats["gen_tokens"] >= max_tokens:
                    finish = "length"
                elif model.n_past >= model.n_ctx:
                    finish = "context"
                else:
                    logits = self._eval([token])
            stats["finish_reason"] = finish
            tail = text.push(b"", final=True)
            if tail:
                yield tail
        finally:
            if t_gen is not None:
                stats["gen_seconds"] = time.perf_counter() - t_gen
                if stats["gen_tokens"]:
                    stats["gen_tokens_per_s"] = stats["gen_tokens"] / max(stats["gen_seconds"], 1e-9)
            if self._model is not None:
                self._sync()

"""Request and response bodies of the OpenAI-compatible routes, as pydantic models.

Requests are validated strictly (no "1" for 1, no true for 1, no 2.0 for an integer field),
so a body that reaches a route handler has the types and ranges written here; the handlers
check what depends on the model (context length, vocabulary). Unknown fields are ignored, as
OpenAI-compatible servers commonly do, except fields that would change the output and that
this server does not implement: those are listed explicitly and rejected when set.
"""

from __future__ import annotations

from typing import Annotated, Any, Callable, Dict, List, Literal, Optional, Union

from pydantic import (AliasChoices, BaseModel, ConfigDict, Discriminator, Field, Tag,
                      ValidationInfo, field_validator, model_validator)

__all__ = [
    "ChatMessage", "ContentPart", "ChatCompletionRequest", "CompletionRequest",
    "TokenizeRequest", "DetokenizeRequest", "StreamOptions", "ResponseFormat", "ToolDefinition",
    "Usage", "PromptTokensDetails", "ChatCompletion", "Completion", "ModelCard", "ModelList",
    "TokenizeResponse", "DetokenizeResponse",
    "MAX_N", "MAX_STOP", "MAX_TOP_LOGPROBS", "SEED_MAX", "one_of", "prompt_union",
    "as_prompt_list",
]

# Choices per request: each is a sequence of its own in the engine, so n is capped like slots.
MAX_N = 16
# Stop strings per request: each one is checked against the text after every token.
MAX_STOP = 16
# Alternatives per token in logprobs (OpenAI's own limit is 20).
MAX_TOP_LOGPROBS = 20
# Seeds are 64-bit signed in the sampler; n choices use seed, seed+1, ..., so leave room.
SEED_MAX = 2 ** 63 - 1 - MAX_N
SEED_MIN = -(2 ** 63)


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", populate_by_name=True)


# Union branches are tagged "~name"; errors.field_path leaves such tags out of field names.
UNION_TAG_PREFIX = "~"


def one_of(what: str, pick: Callable[[Any], Optional[str]], **branches):
    """A union whose branch is chosen by the value's shape (pick(value) -> a branch name, or
    None for a value no branch takes), so a bad value gets one error: the chosen branch's, or
    "<what>" when none fits, instead of one error per branch."""
    tagged = tuple(Annotated[t, Tag(UNION_TAG_PREFIX + name)] for name, t in branches.items())

    def discriminate(value):
        name = pick(value)
        return None if name is None else UNION_TAG_PREFIX + name

    return Annotated[Union[tagged], Discriminator(discriminate, custom_error_type="invalid_type",
                                                  custom_error_message=what)]


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _pick_list_or_str(v) -> Optional[str]:
    return "one" if isinstance(v, str) else "many" if isinstance(v, list) else None


def _pick_prompt(v) -> Optional[str]:
    if isinstance(v, str):
        return "text"
    if not isinstance(v, list):
        return None
    if v and all(isinstance(x, list) for x in v):
        return "id_lists"
    if v and all(_is_int(x) for x in v):
        return "ids"
    return "texts"


# --------------------------------------------------------------------------------------------
# Messages
# --------------------------------------------------------------------------------------------
class ContentPart(_Strict):
    """One part of a message's content. Only text parts are served; another type is rejected
    naming it (this server has no image or audio input)."""
    model_config = ConfigDict(strict=True, extra="allow")
    type: str
    text: Optional[str] = None

    @model_validator(mode="after")
    def _text_only(self):
        if self.type != "text":
            raise ValueError(f"content part type {self.type!r} is not supported: this server "
                             f"takes text parts ({{'type': 'text', 'text': ...}})")
        if self.text is None:
            raise ValueError("a text content part needs 'text' (a string)")
        return self


Role = Literal["system", "developer", "user", "assistant", "tool"]


class ChatMessage(_Strict):
    """A message: role and content (a string or a list of text parts). An assistant message
    that carries tool_calls may have no content; a tool message answers tool_call_id."""
    role: Role
    content: Optional[one_of("content must be a string or a list of text parts",
                             _pick_list_or_str, one=str, many=List[ContentPart])] = None
    name: Optional[str] = None
    tool_calls: Optional[List[Dict[str, Any]]] = None
    tool_call_id: Optional[str] = None

    @model_validator(mode="after")
    def _content_present(self):
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError("content is required (a string or a list of text parts); only an "
                             "assistant message with tool_calls may omit it")
        return self

    def text(self) -> str:
        """The content as one string: text parts joined by newlines."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(part.text or "" for part in self.content)

    def for_template(self) -> Dict[str, Any]:
        """The message as a chat template expects it (role names templates know)."""
        out: Dict[str, Any] = {"role": "system" if self.role == "developer" else self.role,
                               "content": self.text()}
        if self.name is not None:
            out["name"] = self.name
        if self.tool_calls:
            out["tool_calls"] = self.tool_calls
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out


class StreamOptions(_Strict):
    include_usage: bool = False


class JsonSchemaFormat(_Strict):
    name: str = "response"
    description: Optional[str] = None
    schema_: Optional[Dict[str, Any]] = Field(None, alias="schema")
    strict: Optional[bool] = None


class ResponseFormat(_Strict):
    """response_format: "text" (no constraint), "json_object" or "json_schema"."""
    type: Literal["text", "json_object", "json_schema"]
    json_schema: Optional[JsonSchemaFormat] = None

    @model_validator(mode="after")
    def _schema_given(self):
        if self.type == "json_schema" and (self.json_schema is None
                                           or self.json_schema.schema_ is None):
            raise ValueError("type 'json_schema' needs json_schema.schema (a JSON Schema object)")
        return self


class FunctionDefinition(_Strict):
    name: str = Field(min_length=1, max_length=64)
    description: Optional[str] = None
    parameters: Optional[Dict[str, Any]] = None
    strict: Optional[bool] = None


class ToolDefinition(_Strict):
    type: Literal["function"]
    function: FunctionDefinition


class NamedToolChoice(_Strict):
    type: Literal["function"]
    function: Dict[str, Any]


# --------------------------------------------------------------------------------------------
# Sampling fields shared by chat and completions
# --------------------------------------------------------------------------------------------
class _SamplingFields(_Strict):
    """Unset fields take the engine's defaults (dasllama.batch.SamplingParams)."""
    model: Optional[str] = None
    temperature: Optional[float] = Field(None, ge=0.0, le=2.0)
    top_p: Optional[float] = Field(None, ge=0.0, le=1.0)
    top_k: Optional[int] = Field(None, ge=0)
    min_p: Optional[float] = Field(None, ge=0.0, le=1.0)
    seed: Optional[int] = Field(None, ge=SEED_MIN, le=SEED_MAX)
    stop: Optional[one_of("stop must be a string or a list of strings", _pick_list_or_str,
                          one=str, many=List[str])] = None
    presence_penalty: Optional[float] = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: Optional[float] = Field(None, ge=-2.0, le=2.0)
    repetition_penalty: Optional[float] = Field(
        None, gt=0.0, le=10.0, validation_alias=AliasChoices("repetition_penalty",
                                                             "repeat_penalty"))
    n: int = Field(1, ge=1, le=MAX_N)
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    ignore_eos: bool = False   # not OpenAI: generate through end-of-generation tokens (benchmarks)
    user: Optional[str] = None
    logit_bias: Optional[Dict[str, float]] = None   # accepted only empty: not implemented

    @field_validator("stop")
    @classmethod
    def _check_stop(cls, v):
        stops = [v] if isinstance(v, str) else list(v or [])
        if len(stops) > MAX_STOP:
            raise ValueError(f"at most {MAX_STOP} stop strings, got {len(stops)}")
        for i, s in enumerate(stops):
            if not s:
                raise ValueError(f"stop strings must be non-empty (entry {i} is empty)")
        return v

    def stop_list(self) -> List[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])


# --------------------------------------------------------------------------------------------
# Requests
# --------------------------------------------------------------------------------------------
class ChatCompletionRequest(_SamplingFields):
    """POST /v1/chat/completions."""
    messages: List[ChatMessage] = Field(min_length=1)
    max_tokens: Optional[int] = Field(None, ge=0)
    max_completion_tokens: Optional[int] = Field(None, ge=0)
    logprobs: bool = False
    top_logprobs: Optional[int] = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    response_format: Optional[ResponseFormat] = None
    tools: Optional[List[ToolDefinition]] = None
    tool_choice: Optional[one_of(
        "tool_choice must be 'none', 'auto', 'required' or {'type': 'function', 'function': "
        "{'name': ...}}", lambda v: "mode" if isinstance(v, str) else
        "named" if isinstance(v, dict) else None,
        mode=Literal["none", "auto", "required"], named=NamedToolChoice)] = None
    parallel_tool_calls: Optional[bool] = None

    @field_validator("top_logprobs")
    @classmethod
    def _top_logprobs_needs_logprobs(cls, v, info: ValidationInfo):
        if v and not info.data.get("logprobs"):
            raise ValueError("top_logprobs needs logprobs: true")
        return v

    def token_limit(self) -> Optional[int]:
        return self.max_completion_tokens if self.max_completion_tokens is not None \
            else self.max_tokens


def prompt_union(field: str):
    """The type of a field holding one or several prompts (completions' prompt, embeddings'
    input): a string, a list of strings, a list of token ids or a list of token-id lists."""
    return one_of(f"{field} must be a string, a list of strings, a list of token ids or a list "
                  f"of token-id lists", _pick_prompt, text=str, texts=List[str], ids=List[int],
                  id_lists=List[List[int]])


def as_prompt_list(value) -> list:
    """A prompt_union field's value as a list of prompts, each a string or a list of token ids
    (a bare list of ids is one prompt)."""
    if isinstance(value, str):
        return [value]
    if all(isinstance(p, int) for p in value):
        return [list(value)]
    return list(value)


Prompt = prompt_union("prompt")


class CompletionRequest(_SamplingFields):
    """POST /v1/completions. prompt: a string, a list of strings, token ids, or a list of
    token-id lists; each prompt gets n choices."""
    prompt: Prompt
    max_tokens: Optional[int] = Field(16, ge=0)
    logprobs: Optional[int] = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    echo: bool = False
    suffix: Optional[str] = None     # accepted only empty: no fill-in-the-middle
    best_of: Optional[int] = Field(None, ge=1, le=MAX_N)

    @field_validator("prompt")
    @classmethod
    def _non_empty(cls, v):
        if isinstance(v, list):
            if not v:
                raise ValueError("prompt is an empty list")
            for i, p in enumerate(v):
                if isinstance(p, list) and not p:
                    raise ValueError(f"prompt[{i}] is an empty token list")
        return v

    def prompts(self) -> list:
        """The prompts as a list, each a string or a list of token ids."""
        return as_prompt_list(self.prompt)


class TokenizeRequest(_Strict):
    """POST /tokenize: the token ids of content (add_special: BOS/EOS as the model's file asks;
    parse_special: read special-token texts such as "<|im_start|>" as those tokens)."""
    model: Optional[str] = None
    content: str
    add_special: bool = True
    parse_special: bool = False
    with_pieces: bool = False


class DetokenizeRequest(_Strict):
    """POST /detokenize: the text of token ids."""
    model: Optional[str] = None
    tokens: List[int]


# --------------------------------------------------------------------------------------------
# Responses
# --------------------------------------------------------------------------------------------
class PromptTokensDetails(BaseModel):
    cached_tokens: int = 0


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails = Field(default_factory=PromptTokensDetails)


class TopLogprob(BaseModel):
    """One alternative for a chat token: its text, logprob and UTF-8 bytes."""
    token: str
    logprob: float
    bytes: Optional[List[int]] = None


class TokenLogprob(TopLogprob):
    """A chat token's logprob entry: the token as a TopLogprob is, with its alternatives."""
    top_logprobs: List[TopLogprob] = Field(default_factory=list)


class ChoiceLogprobs(BaseModel):
    content: Optional[List[TokenLogprob]] = None


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: Optional[str] = None
    tool_calls: Optional[List[Dict[str, Any]]] = None


class _Choice(BaseModel):
    """What a chat choice and a completion choice share; each adds its output and logprobs."""
    index: int
    finish_reason: Optional[str] = None


class _Response(BaseModel):
    """What a chat completion and a completion response share; each adds its object name,
    choices and usage."""
    id: str
    created: int
    model: str
    system_fingerprint: Optional[str] = None


class ChatChoice(_Choice):
    message: AssistantMessage
    logprobs: Optional[ChoiceLogprobs] = None


class ChatCompletion(_Response):
    object: Literal["chat.completion"] = "chat.completion"
    choices: List[ChatChoice]
    usage: Usage


class CompletionLogprobs(BaseModel):
    tokens: List[str] = Field(default_factory=list)
    token_logprobs: List[Optional[float]] = Field(default_factory=list)
    top_logprobs: List[Optional[Dict[str, float]]] = Field(default_factory=list)
    text_offset: List[int] = Field(default_factory=list)


class CompletionChoice(_Choice):
    text: str
    logprobs: Optional[CompletionLogprobs] = None


class Completion(_Response):
    object: Literal["text_completion"] = "text_completion"
    choices: List[CompletionChoice]
    usage: Optional[Usage] = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "dasllama"
    kind: str = "llm"
    status: str = "unloaded"            # unloaded | loading | ready | error
    n_ctx: Optional[int] = None
    slots: Optional[int] = None


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: List[ModelCard]


class TokenPiece(BaseModel):
    id: int
    piece: str


class TokenizeResponse(BaseModel):
    tokens: Union[List[int], List[TokenPiece]]
    count: int
    max_model_len: Optional[int] = None


class DetokenizeResponse(BaseModel):
    content: str

"""What the routers share: the registry, the config and the metrics from the app; response ids
and times; the check of client-given token ids."""

from __future__ import annotations

import time
import uuid
from typing import Sequence

from fastapi import Request

from ..config import ServerConfig
from ..errors import APIError
from ..metrics import ServerMetrics
from ..registry import ModelRegistry

__all__ = ["registry_of", "config_of", "metrics_of", "new_id", "now", "check_token_ids"]


def registry_of(request: Request) -> ModelRegistry:
    return request.app.state.registry


def config_of(request: Request) -> ServerConfig:
    return request.app.state.config


def metrics_of(request: Request) -> ServerMetrics:
    return request.app.state.metrics


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


def check_token_ids(ids: Sequence[int], n_vocab: int, where: str,
                    param_names_item: bool = False) -> None:
    """A 400 for the first id outside the vocabulary, named "{where}[j]"; the error's param is
    where, or that item with param_names_item."""
    for j, t in enumerate(ids):
        if not 0 <= t < n_vocab:
            raise APIError(400, f"{where}[{j}]: token id {t} is outside the vocabulary "
                                f"[0, {n_vocab})",
                           param=f"{where}[{j}]" if param_names_item else where,
                           code="invalid_value")

"""What every router reads from the app: the registry, the config, the metrics."""

from __future__ import annotations

import time
import uuid

from fastapi import Request

from ..config import ServerConfig
from ..metrics import ServerMetrics
from ..registry import ModelRegistry

__all__ = ["registry_of", "config_of", "metrics_of", "new_id", "now"]


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

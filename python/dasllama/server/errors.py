"""Errors in the OpenAI shape: ``{"error": {"message", "type", "param", "code"}}``.

Every failure the server answers, from a bad field to an unknown route, goes through
:class:`APIError` or one of the handlers that :func:`install_error_handlers` puts on the app, so
clients (the ``openai`` SDK among them) always get the same body.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Optional, Sequence

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

__all__ = ["APIError", "error_body", "error_response", "install_error_handlers",
           "validation_message", "field_path"]

log = logging.getLogger("dasllama.server")

# The OpenAI `type` of each status this server answers with.
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 405: "invalid_request_error", 413: "invalid_request_error",
          415: "invalid_request_error", 429: "rate_limit_error", 500: "server_error",
          503: "unavailable_error", 504: "timeout_error"}

# At most this many validation problems are spelled out in one message: enough to fix a body,
# short enough to read.
MAX_LISTED_PROBLEMS = 3


class APIError(Exception):
    """An HTTP error answered in the OpenAI shape. param names the request field at fault
    (dotted, with [i] for list items); code is a short machine-readable reason."""

    def __init__(self, status: int, message: str, *, param: Optional[str] = None,
                 code: Optional[str] = None, type: Optional[str] = None,
                 headers: Optional[Dict[str, str]] = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type or _TYPES.get(status, "server_error" if status >= 500
                                       else "invalid_request_error")
        self.headers = headers or {}

    def body(self) -> dict:
        return error_body(self.message, self.type, self.param, self.code)

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def error_body(message: str, type: str, param: Optional[str] = None,
               code: Optional[str] = None) -> dict:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def error_response(status: int, message: str, **kwargs) -> JSONResponse:
    return APIError(status, message, **kwargs).response()


def field_path(loc: Sequence[Any]) -> str:
    """("body", "messages", 0, "role") -> "messages[0].role"."""
    parts = list(loc)
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    out = ""
    for p in parts:
        if isinstance(p, str) and p.startswith("~"):
            continue    # a union branch's tag (schemas.one_of), not a field
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += ("." if out else "") + str(p)
    return out or "body"


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def validation_message(errors: Sequence[dict]) -> tuple:
    """(message, param) for pydantic's error list: each problem as "field: what (got value)"."""
    problems = []
    for e in errors[:MAX_LISTED_PROBLEMS]:
        where = field_path(e.get("loc", ()))
        msg = str(e.get("msg", "invalid value"))
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        if e.get("type") == "json_invalid":
            problems.append(f"the body is not valid JSON ({e.get('ctx', {}).get('error', msg)})")
            continue
        # A whole object as "got" is noise: the field path already says where.
        got = ("" if e.get("type") == "missing" or "input" not in e
               or isinstance(e["input"], dict) else f" (got {_short(e['input'])})")
        problems.append(f"{where}: {msg}{got}")
    more = len(errors) - MAX_LISTED_PROBLEMS
    if more > 0:
        problems.append(f"and {more} more")
    param = field_path(errors[0].get("loc", ())) if errors else None
    return "; ".join(problems) or "the request body is invalid", param


async def _on_api_error(request: Request, exc: APIError):
    return exc.response()


async def _on_validation_error(request: Request, exc: RequestValidationError):
    message, param = validation_message(exc.errors())
    return error_response(400, message, param=param, code="invalid_value")


async def _on_http_error(request: Request, exc: StarletteHTTPException):
    status = exc.status_code
    if status == 404:
        message = f"no route {request.method} {request.url.path}"
        code = "unknown_route"
    elif status == 405:
        message = f"{request.method} is not allowed on {request.url.path}"
        code = "method_not_allowed"
    else:
        message, code = str(exc.detail), None
    return error_response(status, message, code=code, headers=dict(exc.headers or {}))


async def _on_unexpected(request: Request, exc: Exception):
    # A bug, not the client's fault: logged with its traceback, answered without internals.
    log.exception("unexpected error on %s %s", request.method, request.url.path)
    return error_response(500, f"internal error ({type(exc).__name__}); see the server log",
                          code="internal_error")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(APIError, _on_api_error)
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(StarletteHTTPException, _on_http_error)
    app.add_exception_handler(Exception, _on_unexpected)

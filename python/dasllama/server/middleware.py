"""ASGI middleware of the server: request counting, API-key auth and the body limit.

Plain ASGI (not Starlette's BaseHTTPMiddleware), so streamed responses pass through untouched
and a handler still sees the client's disconnect on its receive channel.
"""

from __future__ import annotations

import hmac
import json

from .errors import error_body

__all__ = ["MetricsMiddleware", "AuthMiddleware", "BodyLimitMiddleware", "PUBLIC_PATHS",
           "CLIENT_GONE_STATUS"]

# Routes answered without an API key: load balancers and orchestrators probe /health bare.
PUBLIC_PATHS = frozenset({"/health"})
# The status counted for a request whose client went away before any answer was sent (the
# code proxies log for it), so that it is not mistaken for a server error.
CLIENT_GONE_STATUS = 499


async def _send_error(send, status: int, message: str, *, type: str, code: str,
                      headers=()) -> None:
    body = json.dumps(error_body(message, type, None, code)).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})


class MetricsMiddleware:
    """Counts HTTP requests by route template and status, and those in flight. A request the
    app failed on counts as 500 (the answer the outer error handler sends); one that ended
    without an answer, because its client left, as CLIENT_GONE_STATUS."""

    def __init__(self, app, metrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        status = {"code": CLIENT_GONE_STATUS}

        async def counting_send(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, counting_send)
        except Exception:     # not CancelledError: a host cancels a request its client left
            if status["code"] == CLIENT_GONE_STATUS:
                status["code"] = 500
            raise
        finally:
            self.metrics.in_flight.dec()
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            self.metrics.http_requests.labels(route=route, status=str(status["code"])).inc()


class AuthMiddleware:
    """With an API key set, every route but PUBLIC_PATHS needs ``Authorization: Bearer KEY``;
    anything else is a 401 in the OpenAI shape."""

    def __init__(self, app, api_key: str):
        self.app = app
        self._key = api_key.encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] in PUBLIC_PATHS:
            return await self.app(scope, receive, send)
        header = b""
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                header = value
                break
        scheme, _, token = header.partition(b" ")
        if scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self._key):
            return await self.app(scope, receive, send)
        message = ("missing API key: send the header 'Authorization: Bearer KEY'" if not header
                   else "invalid API key")
        await _send_error(send, 401, message, type="authentication_error",
                          code="invalid_api_key", headers=[(b"www-authenticate", b"Bearer")])


class BodyLimitMiddleware:
    """Reads a request's body (at most max_bytes, or the limit path_limits gives its path;
    more is a 413) before the app runs, then hands it to the app in one piece. Afterwards the
    app's receive channel delivers only the client's disconnect, which is how handlers notice
    a client that went away."""

    def __init__(self, app, max_bytes: int, path_limits=None):
        self.app = app
        self.max_bytes = max_bytes
        self.path_limits = dict(path_limits or {})

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.path_limits.get(scope.get("path"), self.max_bytes)
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared < 0 or declared > limit:
                    return await self._too_large(send, declared, limit)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return    # gone before the body arrived: nothing to answer
            body = message.get("body", b"")
            size += len(body)
            if size > limit:
                return await self._too_large(send, size, limit)
            chunks.append(body)
            if not message.get("more_body", False):
                break
        replayed = {"done": False}

        async def replay():
            if not replayed["done"]:
                replayed["done"] = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, send, size: int, limit: int):
        what = "an invalid Content-Length" if size < 0 else f"{size} bytes or more"
        await _send_error(send, 413, f"the request body ({what}) is larger than this server's "
                                     f"limit of {limit} bytes",
                          type="invalid_request_error", code="request_too_large")

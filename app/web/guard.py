"""ASGI guards in front of the app: a request body limit, and which paths each listener serves.

- `BodyLimit`: a body above `max_bytes` is answered 413 (JSON) before the app sees any of it, so a
  huge request cannot grow the process (docs/metacontroller.md#trust). The body is read here and
  handed on in one piece: every endpoint reads its whole body anyway. Bytes alone do not bound what
  decoding costs: a body of the cheapest values (`{},{},…`) decodes to many times its size. So a
  large body (above `DENSE_CHECK_BYTES`) whose JSON values (`,` `{` `[` counted, a bound from above)
  exceed `max_values` is answered 413 too; the default leaves room above what a sync at the Pod bound
  holds (bench/bound.py measures both; bench/results.md#figures-quoted-from-the-code).
- `Listener`: the webhook listener (TLS, the API server) serves only `/webhooks/`, the hooks
  listener (Metacontroller) only `/hooks/`; both serve health, metrics and the API description. With the ports apart, a
  NetworkPolicy can admit each port from its one caller (docs/operations.md#security).
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

import orjson

from app import vocab

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

DENSE_CHECK_BYTES = 8 * 1024 * 1024

HOOK_PATHS = ("/hooks/",)
WEBHOOK_PATHS = ("/webhooks/",)
# Health, metrics and the API description (read-only, no side effect): on both listeners, so the
# README's /openapi.json and /docs answer on either port.
SHARED_PATHS = ("/healthz", "/readyz", "/metrics", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc")


async def _json_answer(send: Send, status: int, body: dict[str, Any]) -> None:
    payload = orjson.dumps(body)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": payload})


def _too_large(max_bytes: int) -> dict[str, str]:
    return {"error": f"the request body exceeds {max_bytes} bytes ({vocab.SETTING_MAX_BODY_BYTES}); a ModelDeployment "
                     f"within the Pod bound ({vocab.SETTING_MAX_PODS_PER_DEPLOYMENT}) never needs that much"}


def json_values(body: bytes) -> int:
    """An upper bound on the number of values a JSON text decodes to (separators and openers,
    including any inside strings)."""
    return body.count(b",") + body.count(b"{") + body.count(b"[")


def _too_dense(values: int, max_values: int) -> dict[str, str]:
    return {"error": f"the request body holds up to {values} JSON values, more than {max_values} "
                     f"({vocab.SETTING_MAX_BODY_VALUES}): decoding it could exceed the service's memory; a ModelDeployment "
                     f"within the Pod bound ({vocab.SETTING_MAX_PODS_PER_DEPLOYMENT}) never needs that many"}


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int, max_values: int) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.max_values = max_values

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await _json_answer(send, 413, _too_large(self.max_bytes))
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await _json_answer(send, 413, _too_large(self.max_bytes))
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        del chunks
        if len(body) > DENSE_CHECK_BYTES:
            values = json_values(body)
            if values > self.max_values:
                await _json_answer(send, 413, _too_dense(values, self.max_values))
                return
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


class Listener:
    """The app as one listener serves it: only `prefixes` (and the shared paths); 404 otherwise."""

    def __init__(self, app: ASGIApp, prefixes: tuple[str, ...]) -> None:
        self.app = app
        self.prefixes = prefixes

    def serves(self, path: str) -> bool:
        return path in SHARED_PATHS or path.startswith(self.prefixes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self.serves(scope.get("path", "")):
            await _json_answer(send, 404, {"error": f"{scope.get('path')} is not served on this port; this listener "
                                                    f"serves {', '.join(self.prefixes)}"})
            return
        await self.app(scope, receive, send)

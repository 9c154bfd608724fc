"""The service's FastAPI app driven in-process: the real handlers, minus the socket.

`server_app()` is the production app (app.main.create_app) with its state built the way the
lifespan builds it, without an API server (side effects are logged and skipped, which a steady
sync has none of). `call()` runs one HTTP request through the ASGI stack and returns the status
and body, so the time it takes is the server-side time of that request.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from app.main import build_state, create_app
from app.settings import Settings


def server_app(world_dir: str | None = None, max_pods: int | None = None) -> FastAPI:
    """`max_pods`: the Pod bound (rule 21); the scaling benchmarks pass one above their sizes."""
    from bench.fixtures import BENCH_MAX_PODS

    # The scaling benchmarks (no `max_pods`) lift the body limits with the Pod bound: a 5,000-Pod
    # request is ~90 MB, past the 64 MiB default. bench/bound.py passes the production bound and keeps them.
    lifted = {"max_body_bytes": 1 << 30, "max_body_values": 1 << 30} if max_pods is None else {}
    settings = Settings(kube="off", world_dir=world_dir, max_pods_per_deployment=max_pods or BENCH_MAX_PODS, **lifted)
    app = create_app(settings)
    app.state.service = build_state(settings)
    return app


async def call(app: Any, path: str, body: bytes, method: str = "POST") -> tuple[int, bytes]:
    scope = {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
        "method": method, "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
        "query_string": b"", "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"),
                                         (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8080), "state": {},
    }
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    status = 0
    chunks: list[bytes] = []

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return status, b"".join(chunks)

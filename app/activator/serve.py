"""`modeldeployment activator`: the proxy on one port, its metrics and probes on another."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app.activator.metrics import REGISTRY
from app.activator.proxy import Activator, answer
from app.activator.settings import ActivatorSettings

log = logging.getLogger(__name__)


async def metrics_app(scope: dict[str, Any], receive: Callable[[], Awaitable[dict[str, Any]]],
                      send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
    """/metrics, /healthz and /readyz of the activator (the proxy's own port answers every path)."""
    if scope["type"] != "http":
        return
    if scope["path"] == "/metrics":
        body = generate_latest(REGISTRY)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", CONTENT_TYPE_LATEST.encode())]})
        await send({"type": "http.response.body", "body": body})
    elif scope["path"] in ("/healthz", "/readyz"):
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"ok"})
    else:
        await answer(send, 404, "the activator's metrics port serves /metrics, /healthz and /readyz", None)


def run(settings: ActivatorSettings) -> None:
    """Both listeners until SIGTERM; a shutdown waits for held requests up to the longest hold (the
    Pod's termination grace period is longer), then closes what is left, which clients see as a
    closed connection, never a hang."""
    from app.activator.cluster import KubeCluster

    activator = Activator(KubeCluster(), settings)
    proxy = uvicorn.Server(uvicorn.Config(activator, host=settings.host, port=settings.port, lifespan="on",
                                          timeout_graceful_shutdown=int(settings.max_hold_seconds) + 5,
                                          log_config=None))
    side = uvicorn.Server(uvicorn.Config(metrics_app, host=settings.host, port=settings.metrics_port,
                                         lifespan="off", log_config=None))
    log.info("activator on %s:%d, metrics on %s:%d", settings.host, settings.port, settings.host,
             settings.metrics_port)

    async def both() -> None:
        await asyncio.gather(proxy.serve(), side.serve())

    asyncio.run(both())

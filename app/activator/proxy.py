"""The activator's ASGI app: hold, wake, forward (docs/scale-to-zero.md#the-activator).

One `Hold` per deployment keeps the count of held requests, one reader of the deployment's state
(never one per request), the last wake request and, once the deployment serves, the Ready
upstreams. A held request waits on it up to its wake deadline, then is forwarded unchanged
(method, path, query, headers, body) to a Ready upstream, and the answer is streamed back as it
arrives (server-sent events included) with `X-ModelDeployment-Woken: <seconds held>` added.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable, Protocol

# httpx2: lightkube's HTTP stack (pyproject), the same API as httpx; one HTTP client in the image.
import httpx2 as httpx

from app import timestamps, vocab
from app.activator import metrics
from app.activator.settings import ActivatorSettings
from app.activator.targets import Target, service_of

log = logging.getLogger(__name__)

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

# Hop-by-hop headers (RFC 9110 §7.6.1) are the connection's, not the message's: never forwarded.
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                        "transfer-encoding", "upgrade", "proxy-connection"})


class Cluster(Protocol):
    """What the activator reads and writes in the cluster (app/activator/cluster.py; a fake in tests)."""

    async def target(self, service: str, namespace: str | None) -> Target | None: ...

    async def request_wake(self, target: Target, when: str) -> None: ...

    async def state(self, target: Target) -> "DeploymentState": ...

    async def wait_reason(self, target: Target) -> str: ...


@dataclass(frozen=True)
class DeploymentState:
    """One read of a deployment being woken."""

    serving: bool
    upstreams: tuple[str, ...] = ()
    failed: str | None = None  # a wake that cannot succeed, in Kueue's or the kubelet's words
    parked_since: str | None = None


@dataclass
class Hold:
    """The requests held for one deployment and what they wait for."""

    target: Target
    held: int = 0
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    upstreams: tuple[str, ...] = ()
    failed: str | None = None
    last_wake: float = float("-inf")
    reader: asyncio.Task[None] | None = None
    release: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(8))
    turn: itertools.count[int] = field(default_factory=itertools.count)
    woke: bool = False
    waited: bool = False  # a read found the deployment not serving: these requests were held for a wake

    def upstream(self) -> str:
        return self.upstreams[next(self.turn) % len(self.upstreams)]


def utc_now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


class Activator:
    """The ASGI app. `cluster` reads and writes the cluster; `client` forwards (a test passes one on
    an ASGI transport)."""

    def __init__(self, cluster: Cluster, settings: ActivatorSettings | None = None,
                 client: httpx.AsyncClient | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.cluster = cluster
        self.settings = settings or ActivatorSettings()
        self.client = client or httpx.AsyncClient(timeout=httpx.Timeout(self.settings.upstream_timeout_seconds,
                                                                        connect=10.0))
        # httpx adds Accept, Accept-Encoding, Connection and User-Agent to every request it builds; a
        # forwarded request carries the client's own headers only.
        for name in list(self.client.headers):
            del self.client.headers[name]
        self.clock = clock
        self.holds: dict[str, Hold] = {}
        # The last wake request per deployment, across holds (one held request at a time would
        # otherwise ask on every request).
        self.wakes_asked: dict[str, float] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        await self.handle(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.client.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    # --- one request ------------------------------------------------------------------------------

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope.get("headers") or []]
        host = next((v for k, v in headers if k.lower() == "host"), "")
        service, namespace = service_of(host)
        try:
            target = await self.cluster.target(service, namespace) if service else None
        except Exception as exc:  # noqa: BLE001 - a clean 503, never a crash or a hang
            log.warning("the deployment behind Host %r was not read: %s", host, exc)
            await answer(send, 503, f"the activator could not read the deployment behind Host {host!r}: {exc}",
                         self.settings.retry_after_seconds)
            return
        if target is None:
            await answer(send, 404, f"no ModelDeployment endpoint is named by Host {host!r}; the activator answers "
                         "only for a parked or waking deployment's endpoint Service", None)
            return
        body = await read_body(receive, self.settings.max_body_bytes)
        if body is None:
            await answer(send, 413, f"a held request's body is at most {self.settings.max_body_bytes} bytes", None)
            return
        hold = self.holds.get(target.key)
        if hold is None:
            hold = self.holds[target.key] = Hold(target, release=asyncio.Semaphore(self.settings.release_batch))
        hold.target = target
        labels = (target.namespace, target.deployment)
        if hold.held >= self.settings.max_held:
            metrics.HELD_FAILED.labels(*labels, "overflow").inc()
            await answer(send, 503, f"ModelDeployment {target.key} is waking and {hold.held} requests are held "
                         f"already (the bound is {self.settings.max_held}); retry later",
                         self.settings.retry_after_seconds)
            return
        started = self.clock()
        hold.held += 1
        metrics.HELD.labels(*labels).inc()
        try:
            await self._wait(hold, target, send, started, scope, headers, body)
        finally:
            hold.held -= 1
            metrics.HELD.labels(*labels).dec()
            if hold.held == 0:
                # Nothing waits on it: the next request reads the deployment afresh (it may have
                # parked again since, and its upstreams gone).
                self._drop(hold)

    async def _wait(self, hold: Hold, target: Target, send: Send, started: float, scope: Scope,
                    headers: list[tuple[str, str]], body: bytes) -> None:
        labels = (target.namespace, target.deployment)
        if target.scaler is None and not hold.ready.is_set():
            self._ensure_reader(hold)
        else:
            await self._ask_wake(hold)
            self._ensure_reader(hold)
        deadline = min(target.wake_timeout, self.settings.max_hold_seconds)
        try:
            await asyncio.wait_for(hold.ready.wait(), timeout=deadline)
        except asyncio.TimeoutError:
            if target.scaler is None:
                reason = (f"no ModelDeploymentScaler with spec.scaleToZero governs ModelDeployment {target.key}, so "
                          "nothing wakes it; set its replicas, or create a scaler with scaleToZero")
                metrics.HELD_FAILED.labels(*labels, "noscaler").inc()
            else:
                reason = await self._reason(target)
                metrics.HELD_FAILED.labels(*labels, "timeout").inc()
            await answer(send, 503, f"ModelDeployment {target.key} did not wake within {deadline:.0f}s: {reason}",
                         self.settings.retry_after_seconds)
            return
        if hold.failed is not None:
            metrics.HELD_FAILED.labels(*labels, "failed").inc()
            await answer(send, 503, f"ModelDeployment {target.key} cannot wake: {hold.failed}",
                         self.settings.retry_after_seconds)
            return
        await self.forward(hold, scope, headers, body, send, self.clock() - started)

    async def _reason(self, target: Target) -> str:
        try:
            return await self.cluster.wait_reason(target)
        except Exception as exc:  # noqa: BLE001 - the 503 is owed whatever the read did
            log.warning("the wait reason of %s could not be read: %s", target.key, exc)
            return "the reason could not be read from Kueue"

    async def _ask_wake(self, hold: Hold) -> None:
        """One wake request per deployment per wake_interval (the scaler's pass deduplicates the rest)."""
        now = self.clock()
        last = max(hold.last_wake, self.wakes_asked.get(hold.target.key, float("-inf")))
        if now - last < self.settings.wake_interval_seconds:
            if hold.last_wake == float("-inf"):
                hold.last_wake = last  # this hold's wake was asked by an earlier one
            return
        hold.last_wake = now
        self.wakes_asked[hold.target.key] = now
        try:
            await self.cluster.request_wake(hold.target, utc_now())
            log.info("wake requested for %s (%d held)", hold.target.key, hold.held)
        except Exception as exc:  # noqa: BLE001 - the reader retries at the next interval
            log.warning("wake request for %s not written: %s", hold.target.key, exc)
            hold.last_wake = float("-inf")

    # --- one reader per deployment -------------------------------------------------------------------

    def _ensure_reader(self, hold: Hold) -> None:
        if hold.reader is None or hold.reader.done():
            hold.reader = asyncio.create_task(self._read(hold))

    async def _read(self, hold: Hold) -> None:
        """Read the deployment until it serves (or its wake fails) while anything is held."""
        while hold.held > 0 and not hold.ready.is_set():
            try:
                state = await self.cluster.state(hold.target)
            except Exception as exc:  # noqa: BLE001 - read again at the next poll
                log.warning("state of %s not read: %s", hold.target.key, exc)
                state = DeploymentState(serving=False)
            if state.failed is not None:
                hold.failed = state.failed
                hold.ready.set()
            elif state.serving and state.upstreams:
                hold.upstreams = state.upstreams
                if hold.waited:
                    self._count_wake(hold, state)
                hold.ready.set()
            else:
                hold.waited = True
                if hold.target.scaler is not None:
                    await self._ask_wake(hold)
                await asyncio.sleep(self.settings.poll_seconds)

    def _count_wake(self, hold: Hold, state: DeploymentState) -> None:
        labels = (hold.target.namespace, hold.target.deployment)
        metrics.WAKES.labels(*labels).inc()
        parked = timestamps.parse(state.parked_since)
        if parked is not None:
            metrics.PARKED_SECONDS.labels(*labels).inc(max(0.0, time.time() - parked.timestamp()))
        hold.woke = True

    def _drop(self, hold: Hold) -> None:
        if self.holds.get(hold.target.key) is hold:
            del self.holds[hold.target.key]

    # --- forwarding ------------------------------------------------------------------------------------

    async def forward(self, hold: Hold, scope: Scope, headers: list[tuple[str, str]], body: bytes, send: Send,
                      held_for: float) -> None:
        upstream = hold.upstream()
        path = scope.get("raw_path") or scope["path"].encode()
        url = f"http://{upstream}{path.decode('latin-1')}"
        if scope.get("query_string"):
            url += "?" + scope["query_string"].decode("latin-1")
        request = self.client.build_request(scope["method"], url, content=body,
                                            headers=[(k, v) for k, v in headers if k.lower() not in HOP_BY_HOP])
        # A gradual release: at most release_batch held requests wait on the upstream's answer at
        # once; each lets the next go as soon as its response starts (a long stream holds no slot).
        async with hold.release:
            try:
                response = await self.client.send(request, stream=True)
            except httpx.HTTPError as exc:
                await answer(send, 502, f"the woken upstream {upstream} of {hold.target.key} did not answer: {exc}",
                             self.settings.retry_after_seconds)
                return
        try:
            # The raw (still encoded) body is streamed, so Content-Length and Content-Encoding stay true.
            # The engine's header names as it spelled them (raw), not httpx's lower-cased view.
            out = [(k, v) for k, v in response.headers.raw if k.decode("latin-1").lower() not in HOP_BY_HOP]
            if hold.woke:
                out.append((vocab.HEADER_WOKEN.encode(), f"{held_for:.3f}".encode()))
            await send({"type": "http.response.start", "status": response.status_code, "headers": out})
            first = True
            async for chunk in response.aiter_raw():
                if first and hold.woke:
                    metrics.WAKE_SECONDS.labels(hold.target.namespace, hold.target.deployment).observe(
                        held_for)
                first = False
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await response.aclose()


async def read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole request body, or None past `limit` bytes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b"".join(chunks)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def answer(send: Send, status: int, message: str, retry_after: int | None) -> None:
    """The activator's own answer: JSON {"error": {"message", "code"}} like an OpenAI-compatible server."""
    body = json.dumps({"error": {"message": message, "type": "model_deployment_activator", "code": status}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})

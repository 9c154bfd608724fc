"""bench/activator: what the activator costs while it holds (docs/scale-to-zero.md#the-activator).

    .venv/bin/python -m bench.activator --out bench    # in-process, about a minute; writes bench/activator.{md,json}

In process, through the activator's own ASGI app, against a fake engine on an in-memory transport
(no network, so the numbers are the proxy's own work, not a wire's):

- **added latency**: one streamed chat completion (8 server-sent events) through the activator of
  a deployment that already serves, against the same request straight to the fake engine; medians
  and p99 over the rounds, interleaved.
- **held**: N concurrent requests held for a parked deployment that serves after a delay: the memory
  each held request takes (tracemalloc, Python heap, a 1 KiB JSON body), the seconds from "serving"
  to the last answer (the release), and the answers' statuses. One wake is asked, whatever N.

The wake itself (Kueue admission, Pods created, Ready, first byte) is measured on the real node,
not here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator

import httpx2 as httpx

from app.activator.proxy import Activator, DeploymentState
from app.activator.settings import ActivatorSettings
from app.activator.targets import Target

TARGET = Target(namespace="bench", deployment="pd", scaler="pd", wake_timeout=600.0, port=8000)
HOST = b"pd-router.bench.svc:8000"
BODY = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "x" * 960}]}).encode()
EVENTS = [f'data: {{"choices":[{{"delta":{{"content":"t{i}"}}}}]}}\n\n'.encode() for i in range(8)] + [b"data: [DONE]\n\n"]


@dataclass
class Cluster:
    serve_at: float = 0.0
    wakes: list[str] = field(default_factory=list)

    async def target(self, service: str, namespace: str | None) -> Target | None:
        return TARGET

    async def request_wake(self, target: Target, when: str) -> None:
        self.wakes.append(when)

    async def state(self, target: Target) -> DeploymentState:
        if time.monotonic() >= self.serve_at:
            return DeploymentState(True, ("10.0.0.1:8000",))
        return DeploymentState(False)

    async def wait_reason(self, target: Target) -> str:
        return "waiting"


async def _events() -> AsyncIterator[bytes]:
    for event in EVENTS:
        yield event


def engine(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=_events())


async def through_activator(app: Activator) -> int:
    status = 0
    sent: list[dict[str, Any]] = []
    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
             "query_string": b"", "headers": [(b"host", HOST), (b"content-type", b"application/json")]}
    chunks = [{"type": "http.request", "body": BODY, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return chunks.pop(0) if chunks else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    status = int(sent[0]["status"])
    return status


async def direct(client: httpx.AsyncClient) -> int:
    async with client.stream("POST", "http://10.0.0.1:8000/v1/chat/completions", content=BODY) as response:
        async for _ in response.aiter_raw():
            pass
        return response.status_code


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def added_latency(rounds: int) -> dict[str, Any]:
    app = Activator(Cluster(), ActivatorSettings(poll_seconds=0.001),
                    client=httpx.AsyncClient(transport=httpx.MockTransport(engine)))
    client = httpx.AsyncClient(transport=httpx.MockTransport(engine))
    via, straight = [], []
    for _ in range(rounds):
        t = time.perf_counter()
        await through_activator(app)
        via.append((time.perf_counter() - t) * 1e6)
        t = time.perf_counter()
        await direct(client)
        straight.append((time.perf_counter() - t) * 1e6)
    return {"rounds": rounds, "activator_p50_us": statistics.median(via), "activator_p99_us": _pct(via, 0.99),
            "direct_p50_us": statistics.median(straight), "direct_p99_us": _pct(straight, 0.99)}


async def held(count: int, delay: float) -> dict[str, Any]:
    cluster = Cluster(serve_at=time.monotonic() + delay)
    app = Activator(cluster, ActivatorSettings(poll_seconds=0.05, max_held=count + 1, release_batch=8),
                    client=httpx.AsyncClient(transport=httpx.MockTransport(engine)))
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    tasks = [asyncio.create_task(through_activator(app)) for _ in range(count)]
    await asyncio.sleep(delay * 0.8)
    holding = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    statuses = await asyncio.gather(*tasks)
    released = time.monotonic() - cluster.serve_at
    return {"held": count, "bytes_per_held_request": holding / count, "release_seconds": released,
            "answered_200": sum(1 for s in statuses if s == 200), "wakes_asked": len(cluster.wakes)}


def report(latency: dict[str, Any], holds: list[dict[str, Any]]) -> str:
    lines = ["# The activator: measured", "",
             "Written by `.venv/bin/python -m bench.activator --out bench` (bench/activator.py says what each number "
             "means). In process; machine: 2 cores, shared.", "",
             "## Added latency of a streamed completion (8 events) through the activator", "",
             "| path | p50 µs | p99 µs |", "|---|---|---|",
             f"| through the activator (deployment serving) | {latency['activator_p50_us']:.0f} | "
             f"{latency['activator_p99_us']:.0f} |",
             f"| straight to the engine | {latency['direct_p50_us']:.0f} | {latency['direct_p99_us']:.0f} |", "",
             f"{latency['rounds']} rounds, interleaved. While a deployment serves, its traffic does not pass through "
             "the activator at all (docs/scale-to-zero.md#the-endpoint-switch); this is the cost a held request pays "
             "once forwarded.", "",
             "## Many held requests (1 KiB body each), released when the deployment serves", "",
             "| held | memory per held request (KiB) | last answer after serving (s) | answered 200 | wakes asked |",
             "|---|---|---|---|---|"]
    for h in holds:
        lines.append(f"| {h['held']} | {h['bytes_per_held_request'] / 1024:.1f} | {h['release_seconds']:.2f} | "
                     f"{h['answered_200']} | {h['wakes_asked']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench.activator")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()

    async def run() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        latency = await added_latency(args.rounds)
        holds = [await held(n, 2.0) for n in (100, 1000)]
        return latency, holds

    latency, holds = asyncio.run(run())
    text = report(latency, holds)
    print(text)
    if args.out is not None:
        (args.out / "activator.md").write_text(text)
        (args.out / "activator.json").write_text(json.dumps({"latency": latency, "held": holds}, indent=2) + "\n")


if __name__ == "__main__":
    main()

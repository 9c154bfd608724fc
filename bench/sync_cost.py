"""Server-side cost of one sync vs. the JSON floor, for deployments of growing size.

For each size the same request bytes go through two things, interleaved (floor, sync, sync,
floor, ...) so that both see the same machine:

- **sync**: the production app's `POST /hooks/sync`, in-process through the ASGI stack
  (bench.asgi): reading the body, parsing, reconcile, the executor (no API server; an idle sync
  has nothing to do but record one already-recorded Event), serializing, answering. The cyclic
  garbage collector is left as the server has it.
- **JSON floor**: `orjson.loads(request)` and `orjson.dumps(response)` — the least any sync hook
  must do to read this request and write this answer — with the cyclic garbage collector paused
  (the cheapest this process can do it), the parsed document freed inside the timing.

The reported ratio is the median over the pairs of sync time / floor time of the same pair.
Before timing, the answer is checked byte for byte against reconcile() on a full parse.
"""

from __future__ import annotations

import asyncio
import gc
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import orjson

from app.api.hooks import hook_request, sync_response
from app.control.sync import reconcile
from bench import asgi, fixtures

SIZES = (10, 100, 1000, 5000)
# One shape at every size: the two roles of pd-pair, replicas of 5 Pods (multi-node instances
# behind a headless Service each). A role declares at most 1,024 replicas, so 5,000 Pods in two
# roles need multi-Pod replicas; 5 is the smallest size that also divides 10 Pods.
SHAPE = {"roles": 2, "size": 5}
# Pairs per size: enough for a stable median, bounded for a 2-core machine.
REPEATS = {10: 40, 100: 20, 1000: 7, 5000: 3}


@dataclass
class SizeResult:
    pods: int
    request_bytes: int
    response_bytes: int
    children: int
    sync_seconds: list[float] = field(default_factory=list)
    floor_seconds: list[float] = field(default_factory=list)
    floor_gc_seconds: list[float] = field(default_factory=list)

    @property
    def sync(self) -> float:
        return statistics.median(self.sync_seconds)

    @property
    def floor(self) -> float:
        return statistics.median(self.floor_seconds)

    @property
    def ratio(self) -> float:
        return statistics.median(s / f for s, f in zip(self.sync_seconds, self.floor_seconds))

    def as_dict(self) -> dict[str, Any]:
        return {"pods": self.pods, "request_bytes": self.request_bytes, "response_bytes": self.response_bytes,
                "children": self.children, "sync_median_s": self.sync, "sync_min_s": min(self.sync_seconds),
                "floor_median_s": self.floor, "floor_min_s": min(self.floor_seconds),
                "floor_gc_on_median_s": statistics.median(self.floor_gc_seconds) if self.floor_gc_seconds else None,
                "ratio_median": self.ratio, "sync_seconds": self.sync_seconds, "floor_seconds": self.floor_seconds}


def reference_answer(body: bytes) -> bytes:
    """What the sync must answer: reconcile() on a full orjson parse (the dict path the tests use)."""
    result = reconcile(hook_request(orjson.loads(body)), fixtures.BENCH_SYNC_SETTINGS, now=fixtures.NOW)
    return orjson.dumps(sync_response(result.status, result.children, result.resync_after, result.finalized))


def _floor(body: bytes, response: Any, *, collect: bool) -> float:
    enabled = gc.isenabled()
    if not collect:
        gc.disable()
    try:
        started = time.perf_counter()
        parsed = orjson.loads(body)
        orjson.dumps(response)
        del parsed
        return time.perf_counter() - started
    finally:
        if enabled:
            gc.enable()


def _timed(fn: Callable[[], Any]) -> float:
    gc.collect()
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def measure_size(app: Any, pods: int, repeats: int, log: Callable[[str], None]) -> SizeResult:
    body = fixtures.request_bytes(pods, **SHAPE)
    loop = asyncio.new_event_loop()
    try:
        status, answer = loop.run_until_complete(asgi.call(app, "/hooks/sync", body))
        if status != 200:
            raise RuntimeError(f"sync of {pods} Pods answered {status}: {answer[:300]!r}")
        expected = reference_answer(body)
        if answer != expected:
            raise RuntimeError(f"sync of {pods} Pods: the served answer differs from reconcile() on a full parse")
        response = orjson.loads(answer)
        result = SizeResult(pods, len(body), len(answer), len(response["children"]))
        for index in range(repeats):
            sync = lambda: loop.run_until_complete(asgi.call(app, "/hooks/sync", body))  # noqa: E731
            floor = lambda: _floor(body, response, collect=False)  # noqa: E731
            if index % 2 == 0:
                f, s = _timed(floor), _timed(sync)
            else:
                s, f = _timed(sync), _timed(floor)
            result.sync_seconds.append(s)
            result.floor_seconds.append(f)
        gc.collect()
        result.floor_gc_seconds.append(_floor(body, response, collect=True))
        log(f"  {pods:>5} Pods: sync {result.sync * 1000:9.2f} ms   floor {result.floor * 1000:9.2f} ms   "
            f"ratio {result.ratio:5.2f}   ({len(body) / 1e6:.1f} MB in, {len(answer) / 1e6:.2f} MB out)")
        return result
    finally:
        loop.close()


def growth_exponent(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of log(time) against log(Pods)."""
    xs = [math.log(p) for p, _ in points]
    ys = [math.log(t) for _, t in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def run(sizes: tuple[int, ...], log: Callable[[str], None], repeats_scale: float = 1.0) -> dict[str, Any]:
    app = asgi.server_app()
    results = []
    for pods in sizes:
        repeats = max(2, int(REPEATS.get(pods, 5) * repeats_scale))
        results.append(measure_size(app, pods, repeats, log))
    out: dict[str, Any] = {"shape": SHAPE, "sizes": [r.as_dict() for r in results]}
    if len(results) >= 2:
        out["growth_exponent"] = growth_exponent([(r.pods, r.sync) for r in results])
        out["floor_growth_exponent"] = growth_exponent([(r.pods, r.floor) for r in results])
        big = [r for r in results if r.pods >= 100]
        if len(big) >= 2:
            out["growth_exponent_100_up"] = growth_exponent([(r.pods, r.sync) for r in big])
    return out

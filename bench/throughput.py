"""Sync throughput through uvicorn vs. a trivial endpoint answering the same number of bytes.

One server process (bench.server: the production app under uvicorn as `modeldeployment serve`
runs it, plus `POST /bench/trivial`), one load-generator process (this one, bench.load). Both
endpoints get the same request bytes (a typical deployment: 2 roles x 4 replicas x size 2, every
replica Ready), over the same number of keep-alive connections; the trivial endpoint reads the
body and answers prebuilt bytes of the sync answer's length; the floor endpoint does the JSON
floor and nothing else (orjson-parses the request, orjson-serializes the sync's answer): the
bound for any sync that reads its request. The rounds alternate trivial/floor/sync; each endpoint's best round is reported (the one least disturbed by whatever else
the machine runs), with its latency percentiles.
"""

from __future__ import annotations

import asyncio
import statistics
from pathlib import Path
from typing import Any, Callable

import orjson

from bench import asgi, fixtures, load

TYPICAL = {"pods": 16, "roles": 2, "size": 2}
CONNECTIONS = 4
ROUNDS = 3
MAX_REQUESTS = 4000
MAX_SECONDS = 6.0


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _summary(result: load.LoadResult) -> dict[str, Any]:
    return {"requests": result.requests, "seconds": result.seconds, "rps": result.rps,
            "p50_ms": _percentile(result.latencies, 0.5) * 1000, "p99_ms": _percentile(result.latencies, 0.99) * 1000,
            "mean_ms": statistics.fmean(result.latencies) * 1000, "statuses": result.statuses,
            "response_bytes": result.response_bytes}


def run(log: Callable[[str], None], work: Path, scale: float = 1.0) -> dict[str, Any]:
    body = orjson.dumps(fixtures.sync_request(TYPICAL["pods"], roles=TYPICAL["roles"], size=TYPICAL["size"]))
    status, answer = asyncio.run(asgi.call(asgi.server_app(), "/hooks/sync", body))
    if status != 200:
        raise RuntimeError(f"typical sync answered {status}")
    # "floor_h11": the JSON floor endpoint on the stack `serve` ran before uvloop and httptools
    # (asyncio's loop, h11), in the same rounds, from a second server process.
    rounds: dict[str, list[dict[str, Any]]] = {"trivial": [], "floor": [], "sync": [], "floor_h11": []}
    paths = {"trivial": "/bench/trivial", "floor": "/bench/floor", "sync": "/hooks/sync", "floor_h11": "/bench/floor"}
    answer_file = work / "typical-answer.json"
    answer_file.write_bytes(answer)
    with load.server(len(answer), work / "throughput-server.log",
                     extra_args=("--floor-response", str(answer_file))) as port, \
            load.server(len(answer), work / "throughput-server-h11.log",
                        extra_args=("--floor-response", str(answer_file), "--stack", "h11-asyncio")) as port_h11:
        for _ in range(ROUNDS):
            for name in ("trivial", "floor", "sync", "floor_h11"):
                raw = load.http_request(paths[name], body)
                result = asyncio.run(load.drive(port_h11 if name == "floor_h11" else port, raw, connections=CONNECTIONS,
                                                requests=int(MAX_REQUESTS * scale), seconds=MAX_SECONDS * scale,
                                                warmup=10))
                if set(result.statuses) != {200} or result.response_bytes != len(answer):
                    raise RuntimeError(f"{name}: statuses {result.statuses}, {result.response_bytes} bytes")
                rounds[name].append(_summary(result))
                log(f"  {name:8s} {result.rps:8.1f} req/s  p50 {rounds[name][-1]['p50_ms']:.2f} ms  "
                    f"p99 {rounds[name][-1]['p99_ms']:.2f} ms  ({result.requests} requests)")
    best = {name: max(rs, key=lambda r: r["rps"]) for name, rs in rounds.items()}
    return {"deployment": TYPICAL, "request_bytes": len(body), "response_bytes": len(answer),
            "connections": CONNECTIONS, "rounds": rounds, "trivial": best["trivial"], "floor": best["floor"],
            "sync": best["sync"], "ratio": best["sync"]["rps"] / best["trivial"]["rps"],
            "floor_ratio": best["floor"]["rps"] / best["trivial"]["rps"], "floor_h11": best["floor_h11"],
            "sync_floor_ratio": best["sync"]["rps"] / best["floor"]["rps"],
            "floor_gain": best["floor"]["rps"] / best["floor_h11"]["rps"]}

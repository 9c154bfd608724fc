"""A sync at the Pod bound (rule 21): its time and the process's peak memory, and the cost of the
largest request the body limit lets in (docs/metacontroller.md#trust).

    .venv/bin/python -m bench.bound            # prints a Markdown table; --json for the raw numbers

Each case runs in a fresh process, so its peak RSS (VmHWM) is that of a service that answered
exactly that request: the app is built (production settings: the default Pod bound 2,048 and body
limit 64 MiB, no API server), the request body is read into memory (as the server holds it), then
the sync hook is called `REPEATS` times in-process. The goal (docs/operations.md#security): the
peak stays within half the operator Pod's memory limit (manifests/operator/deployment.yaml).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import yaml

REPO = Path(__file__).resolve().parent.parent
REPEATS = 3
# (label, Pods, roles, size): the bound as one shape of many small replicas and one of a few wide ones.
CASES = (
    ("2 roles × 1,024 replicas × size 1", 2048, 2, 1),
    ("2 roles × 16 replicas × size 64", 2048, 2, 64),
)


def memory_limit_mib() -> int:
    deployment = yaml.safe_load((REPO / "manifests" / "operator" / "deployment.yaml").read_text())
    limit = deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"]
    assert limit.endswith("Gi") or limit.endswith("Mi"), limit
    return int(limit[:-2]) * (1024 if limit.endswith("Gi") else 1)


def _rss_mib() -> float:
    """This process's peak RSS so far (VmHWM: reset by exec, unlike ru_maxrss, which a child
    inherits from the process that started it)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(body_file: str) -> dict[str, Any]:
    """Runs in a fresh process: the production app, one request, REPEATS syncs."""
    from bench import asgi
    from app.settings import Settings

    app = asgi.server_app(max_pods=Settings().max_pods_per_deployment)
    loop = asyncio.new_event_loop()
    loop.run_until_complete(asgi.call(app, "/healthz", b"", method="GET"))
    baseline = _rss_mib()
    body = Path(body_file).read_bytes()
    seconds, status, answer_bytes = [], 0, 0
    for _ in range(REPEATS):
        started = time.perf_counter()
        status, answer = loop.run_until_complete(asgi.call(app, "/hooks/sync", body))
        seconds.append(time.perf_counter() - started)
        answer_bytes = len(answer)
        del answer
    return {"status": status, "request_bytes": len(body), "answer_bytes": answer_bytes, "seconds": seconds,
            "baseline_rss_mib": baseline, "peak_rss_mib": _rss_mib()}


def oversized_children(target_bytes: int) -> bytes:
    """A forged sync request just under the body limit: a small parent and observed Pods enough to
    fill it (far more than any parent within the bound owns)."""
    from bench import fixtures

    request = fixtures.sync_request(10, roles=2, size=1)
    pods = [c for c in request["children"]["Pod.v1"].values()]
    template = pods[0]
    one = len(orjson.dumps(template))
    copies = max(1, (target_bytes - len(orjson.dumps(request))) // (one + 40))
    for index in range(copies):
        pod = json.loads(orjson.dumps(template))
        pod["metadata"]["name"] = f"filler-{index}"
        request["children"]["Pod.v1"][f"team-a/filler-{index}"] = pod
    return orjson.dumps(request)


def dense(target_bytes: int) -> bytes:
    """A forged sync request just under the body limit made of the cheapest JSON values: `{}`."""
    head = b'{"parent": {"metadata": {"name": "x", "uid": "u"}, "spec": {}}, "related": {"X.v1": {"a": ['
    count = (target_bytes - len(head) - 8) // 3
    return head + b",".join([b"{}"] * count) + b"]}}}"


def run_case(body: bytes) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
        handle.write(body)
    try:
        out = subprocess.run([sys.executable, "-m", "bench.bound", "--child", handle.name], cwd=REPO, check=True,
                             capture_output=True, text=True, env={**os.environ, "MODELDEPLOYMENT_KUBE": "off"})
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        os.unlink(handle.name)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return 0
    from bench import fixtures
    from app import vocab

    limit = memory_limit_mib()
    rows = []
    for label, pods, roles, size in CASES:
        result = run_case(fixtures.request_bytes(pods, roles=roles, size=size))
        rows.append({"case": f"sync at the bound: {label}", **result})
    result = run_case(oversized_children(vocab.DEFAULT_MAX_BODY_BYTES - 1024 * 1024))
    rows.append({"case": "forged request just under the 64 MiB body limit (observed Pods beyond any parent)", **result})
    result = run_case(dense(vocab.DEFAULT_MAX_BODY_BYTES - 1024 * 1024))
    rows.append({"case": "forged request just under the body limit, all `{}` (21 million values)", **result})
    if args.json:
        print(json.dumps({"memory_limit_mib": limit, "rows": rows}, indent=2))
        return 0
    print(f"Operator Pod memory limit: {limit} MiB; goal: peak RSS <= {limit // 2} MiB (2x headroom).\n")
    print("| case | answer | request | answer size | sync (median of 3) | RSS before | peak RSS | goal |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for row in rows:
        median = sorted(row["seconds"])[len(row["seconds"]) // 2]
        ok = "met" if row["peak_rss_mib"] <= limit / 2 else "**not met**"
        print(f"| {row['case']} | {row['status']} | {row['request_bytes'] / 2**20:.1f} MiB | "
              f"{row['answer_bytes'] / 2**20:.2f} MiB | {median * 1000:.0f} ms | {row['baseline_rss_mib']:.0f} MiB | "
              f"{row['peak_rss_mib']:.0f} MiB | {ok} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The five endpoints fuzzed for longer than the suite does: requests, answers by class,
p50/p99 latency and the process's peak RSS, for docs/operations.md#security.

    .venv/bin/python -m bench.fuzz --requests 20000      # about a minute per 10,000 on 2 cores

The generators are the suite's (tests/api/test_fuzz.py): valid requests with one random mutation
each (a field deleted or replaced by any JSON value, huge integers, lone surrogates, deep nesting)
or junk bodies, against the production app in-process (kube off, the executor recording writes
to a stand-in API server where only the real parent exists). Every answer must be JSON and below
500, every write about the real parent; the script exits 1 otherwise, printing the first failures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from app.kube.executor import Executor  # noqa: E402
from app.main import create_app  # noqa: E402
from app.settings import Settings  # noqa: E402
from tests.api import test_fuzz as gen  # noqa: E402


def peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=20000, help="total, spread evenly over the five endpoints")
    parser.add_argument("--seed", type=int, default=12)
    args = parser.parse_args()
    app = create_app(Settings(world_dir=REPO / "examples" / "world", kube="off"))
    statuses: Counter[tuple[str, int]] = Counter()
    latencies: list[float] = []
    failures: list[str] = []
    review_errors: list[str] = []  # an internal error (code 500) inside a 200 AdmissionReview
    with TestClient(app, raise_server_exceptions=False) as client:
        kube = gen.RecordingKube()
        app.state.service.executor = Executor(kube)  # type: ignore[arg-type]
        bases = gen.base_bodies(client)
        per_endpoint = max(1, args.requests // len(bases))
        started = time.perf_counter()
        for path in bases:

            @settings(max_examples=per_endpoint, deadline=None, database=None, phases=[Phase.generate],
                      suppress_health_check=list(HealthCheck))
            @given(data=st.data())
            def one(data: st.DataObject) -> None:
                content = gen.mutated(bases[path], data)
                kube.writes.clear()
                t = time.perf_counter()
                response = client.post(path, content=content, headers={"content-type": "application/json"})
                latencies.append(time.perf_counter() - t)
                statuses[(path, response.status_code)] += 1
                try:
                    response.json()
                except ValueError:
                    failures.append(f"{path}: not JSON ({response.status_code}): {response.text[:200]!r}")
                if response.status_code >= 500:
                    failures.append(f"{path}: {response.status_code}: {response.text[:300]}")
                elif path in gen.WEBHOOKS and response.status_code == 200 and \
                        ((response.json().get("response") or {}).get("status") or {}).get("code") == 500:
                    review_errors.append(path)
                    failures.append(f"{path}: an internal error inside the AdmissionReview: {response.text[:300]}")
                foreign = [w for w in kube.writes if not gen.allowed_write(w)]
                if foreign:
                    failures.append(f"{path}: a write the real parent could not cause: {foreign[:2]}")

            one()
        elapsed = time.perf_counter() - started
    latencies.sort()
    total = len(latencies)
    by_class = Counter(f"{status // 100}xx" for (_, status), n in statuses.items() for _ in range(n))
    report = {
        "requests": total, "seconds": round(elapsed, 1), "by_class": dict(sorted(by_class.items())),
        "by_endpoint": {path: {str(s): n for (p, s), n in sorted(statuses.items()) if p == path} for path in bases},
        "p50_ms": round(latencies[total // 2] * 1000, 2), "p99_ms": round(latencies[int(total * 0.99)] * 1000, 2),
        "max_ms": round(latencies[-1] * 1000, 1), "peak_rss_mib": round(peak_rss_mib()), "review_internal_errors": len(review_errors),
        "failures": len(failures),
    }
    print(json.dumps(report, indent=2))
    for failure in failures[:10]:
        print(failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

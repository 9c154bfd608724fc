"""Runs every benchmark and writes bench/results.md, bench/results.json and bench/results.png.

    .venv/bin/python -m bench            # everything (about 5-10 minutes on 2 cores)
    .venv/bin/python -m bench --quick    # smaller sizes and fewer rounds, for a smoke run
    .venv/bin/python -m bench --only sync,throughput,webhooks,apiserver,profile

See bench/README.md for what each number means.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import BENCH, ROOT

SECTIONS = ("sync", "throughput", "webhooks", "apiserver", "profile")


def _log(line: str) -> None:
    print(line, flush=True)


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for name in ("orjson", "msgspec", "pydantic", "fastapi", "starlette", "uvicorn", "h11", "httptools", "uvloop",
                 "lightkube", "pyyaml"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            pass
    return out


def _machine() -> dict[str, Any]:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                check=False).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--", "app"], cwd=ROOT, capture_output=True,
                                    text=True, check=False).stdout.strip())
    except OSError:
        commit, dirty = "", False
    return {"cpus": os.cpu_count(), "platform": platform.platform(), "commit": commit + ("+dirty app/" if dirty else ""),
            "loadavg_start": os.getloadavg(), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="sizes 10/100/1000, fewer rounds (not for results)")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated subset of {','.join(SECTIONS)}")
    parser.add_argument("--out", type=Path, default=BENCH, help="where results.{md,json,png} go")
    args = parser.parse_args(argv)
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    unknown = only - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections: {', '.join(sorted(unknown))}")
    scale = 0.4 if args.quick else 1.0
    sizes = (10, 100, 1000) if args.quick else (10, 100, 1000, 5000)

    from bench import profile, report, sync_cost, throughput, webhooks

    results: dict[str, Any] = {"machine": _machine(), "versions": _versions(), "quick": args.quick}
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        work = Path(tmp)
        if "sync" in only:
            _log(f"sync cost vs. JSON floor ({', '.join(map(str, sizes))} Pods)")
            results["sync"] = sync_cost.run(sizes, _log, scale)
        if "throughput" in only:
            _log("sync throughput through uvicorn vs. a trivial same-size endpoint")
            results["throughput"] = throughput.run(_log, work, scale)
        if "webhooks" in only:
            _log("webhook latency, world from files")
            results["webhooks_files"] = webhooks.run_files(_log, work, scale)
        if "apiserver" in only:
            _log("webhook latency, world from a real kube-apiserver")
            results["webhooks_apiserver"] = webhooks.run_apiserver(_log, work, scale)
            if not results["webhooks_apiserver"].get("available"):
                _log(f"  not available: {results['webhooks_apiserver']['reason']}")
        if "profile" in only:
            pods = 1000
            _log(f"profile of one {pods}-Pod sync (pyinstrument)")
            results["profile"] = profile.run(pods, args.out / "profile-1000.txt", _log)
    results["machine"]["loadavg_end"] = os.getloadavg()
    results["machine"]["seconds"] = time.monotonic() - started
    (args.out / "results.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    report.write(results, args.out)
    _log(f"wrote {args.out / 'results.md'}, {args.out / 'results.png'} in {results['machine']['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    sys.exit(main())

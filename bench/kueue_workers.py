"""How busy Kueue's controllers are during a phase, read off its goroutines.

Kueue runs each controller with a fixed number of workers (as it ships: 5 for Pods, 10 for
Workloads). When every worker of a controller is busy, a change waits in that controller's queue
behind the others, and a turnover that needs several trips through it waits that many times
(docs/kueue.md#what-a-turnover-waits-for). So the scale run can sample Kueue's goroutine profile
(its `pprofBindAddress`, plain HTTP on 127.0.0.1) every couple of seconds and count, per reconciler,
the goroutines inside a reconcile: the mean is how many of its workers were busy, and the innermost
Kueue function of each says on what.

`bench/e2e-scale.sh --kueue-workers` turns it on; the report's phases then carry `kueue_workers`.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from typing import Any

import httpx

SAMPLE_EVERY_S = 2.0
# A goroutine inside a reconcile has controller-runtime's handler on its stack; the frame just above
# controller-runtime's Controller.Reconcile is the reconciler's own entry point.
_IN_RECONCILE = "(*Controller[...]).reconcileHandler"
_CONTROLLER_RECONCILE = "controller-runtime/pkg/internal/controller.(*Controller[...]).Reconcile"
_KUEUE = "sigs.k8s.io/kueue/"
_KUEUE_UTIL = "sigs.k8s.io/kueue/pkg/util/"
_FUNC = re.compile(r"^(?P<path>[\w./-]+)\.(?:\(\*?(?P<type>[\w\[\].]+)\)\.)?(?P<name>[\w.]+?)(?:\+0x[0-9a-f]+)?$")


def _short(function: str) -> str:
    """`sigs.k8s.io/kueue/pkg/controller/jobs/pod.(*Pod).Finalize+0x3a4` -> `pod.Pod.Finalize`."""
    m = _FUNC.match(function)
    if not m:
        return function
    package = m.group("path").rsplit("/", 1)[-1]
    return ".".join(p for p in (package, (m.group("type") or "").replace("[...]", ""), m.group("name")) if p)


def _frames(block: list[str]) -> list[str]:
    """The function of each `#\t<pc>\t<function>\t<file:line>` line, innermost first."""
    return [line.split("\t")[2].strip() for line in block if line.startswith("#") and line.count("\t") >= 2]


def _package(function: str) -> str:
    if ".(" in function:
        return function.split(".(", 1)[0]
    directory, _, last = function.rpartition("/")
    return f"{directory}/{last.split('.', 1)[0]}"


def _activity(frames: list[str]) -> str:
    """Kueue's own frames from the innermost out to the first of a reconciler's own, one per
    package: `patching.patchStatus < workload.SetConditionAndUpdate <
    jobframework.JobReconciler.ReconcileGenericJob` (a condition written by the job reconciler)."""
    chain: list[str] = []
    last_package = ""
    for function in frames:
        if _KUEUE not in function or _KUEUE_UTIL in function:
            continue
        package = _package(function)
        if package != last_package:
            chain.append(_short(function))
            last_package = package
        if "Reconciler)." in function:
            break
    return " < ".join(chain) or "?"


def busy_workers(dump: str) -> Counter[tuple[str, str]]:
    """(reconciler, activity) -> goroutines, from one `goroutine?debug=1` dump.

    The reconciler is the entry point below controller-runtime (e.g. `pod.Reconciler.Reconcile`);
    the activity is the chain of Kueue functions that leads there (`_activity`), with ` (API call)` when the
    goroutine waits on a request to the API server and ` (parallel API calls)` when it waits for
    requests it fanned out (Kueue's parallelize)."""
    busy: Counter[tuple[str, str]] = Counter()
    for group in dump.split("\n\n"):
        lines = group.strip().splitlines()
        head = re.match(r"(\d+) @", lines[0]) if lines else None
        if head is None:
            continue
        frames = _frames(lines[1:])
        if not any(_IN_RECONCILE in f for f in frames):
            continue
        entry = next((i for i, f in enumerate(frames) if _CONTROLLER_RECONCILE in f), len(frames))
        reconciler = _short(frames[entry - 1]) if 0 < entry and _KUEUE in frames[entry - 1] else "?"
        activity = _activity(frames[:entry - 1])
        if any("k8s.io/client-go/rest.(*Request)" in f for f in frames):
            activity += " (API call)"
        elif any(_KUEUE_UTIL + "parallelize" in f for f in frames):
            activity += " (parallel API calls)"
        busy[(reconciler, activity)] += int(head.group(1))
    return busy


def summary(samples: list[Counter[tuple[str, str]]], top: int = 6) -> dict[str, Any]:
    """Mean busy workers per reconciler over the samples, and its `top` activities."""
    n = len(samples)
    if not n:
        return {"samples": 0, "busy": {}, "activities": {}}
    total: Counter[tuple[str, str]] = Counter()
    for sample in samples:
        total.update(sample)
    per_reconciler: Counter[str] = Counter()
    for (reconciler, _), count in total.items():
        per_reconciler[reconciler] += count
    activities: dict[str, list[list[Any]]] = {}
    for reconciler, _ in per_reconciler.most_common():
        ranked = sorted(((a, c) for (r, a), c in total.items() if r == reconciler), key=lambda ac: -ac[1])
        activities[reconciler] = [[a, round(c / n, 2)] for a, c in ranked[:top]]
    return {"samples": n, "every_s": SAMPLE_EVERY_S,
            "busy": {r: round(c / n, 2) for r, c in per_reconciler.most_common()},
            "activities": activities}


class Sampler:
    """Samples Kueue's goroutines every SAMPLE_EVERY_S from its own thread until stop().

    The thread owns its HTTP client and closes it itself (a client closed from another thread while
    it reads can hand its socket to the next connection: bench/watch.py)."""

    def __init__(self, pprof_address: str, every_s: float = SAMPLE_EVERY_S) -> None:
        self.url = f"http://{pprof_address}/debug/pprof/goroutine?debug=1"
        self.every_s = every_s
        self.samples: list[Counter[tuple[str, str]]] = []
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kueue-workers", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        with httpx.Client(timeout=self.every_s * 2) as client:
            while not self._stop.is_set():
                try:
                    self.samples.append(busy_workers(client.get(self.url).text))
                except httpx.HTTPError:
                    self.errors += 1
                self._stop.wait(self.every_s)

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join(timeout=self.every_s * 4)
        return {**summary(self.samples), "errors": self.errors}

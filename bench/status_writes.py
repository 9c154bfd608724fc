"""bench/status_writes: how often a deployment's status is rewritten, and which fields move.

    .venv/bin/python -m bench.status_writes [--out bench]

Metacontroller writes a parent's status whenever a pass answers one that differs from the stored
one (a GET and a PUT of the whole object each time), so every field that moves without a reader
needing it costs the API server. Played in the simulator (tests/sim/world.py: Metacontroller,
Kueue and the kubelet around the real `reconcile`), deterministic, so the counts are exact and need
no quiet machine. Scenarios, each on a fresh simulator:

- **bring-up**: a 4-replica deployment created on a pool with room for all of it, until Ready;
- **steady**: the same deployment Ready, 100 periodic resyncs two minutes apart;
- **half queued**: 4 replicas on a pool with room for 2, settled, then 100 resyncs (two replicas
  stay `Queued` for quota: docs/status.md#replica-stages);
- **env edit**: an env entry added to the Ready deployment's role, until every replica has turned
  over (one at a time);
- **bring-up x5, 1 s**, **image edit x5, 1 s** and **delete x5, 1 s**: a 5-replica deployment on a
  pool with room for it, brought up, then a new image rolled out one replica at a time, then
  deleted, the system stepping one second at a time (the real stack's passes come within a second
  of each other, as in bench/e2e-scale) and its kubelet reporting each Pod's steps one round apart
  (placed, running, Ready: `StagedSim`);
- **bring-up 2x5, 1 s** and **image edit 2x5, 1 s**: the same with two roles of 5 replicas (the
  first shape of bench/e2e-scale), whose rollouts run in parallel.

For each: the passes, the status writes (a pass whose status differs from the last one written),
writes per pass, and how many writes changed each field (a path, list positions as `[]`).
Writes status-writes.md and status-writes.json into --out.
"""

from __future__ import annotations

import argparse
import copy
import json
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from tests.sim.world import Sim, cond_true, deleting, example, pod_phase

ROOT = Path(__file__).resolve().parent.parent
A10G = "gpustack-nvidia-a10g-linux-amd64"
NAME = "qwen-chat"  # examples/qwen-chat.yaml: one Server role of two A10G cards per replica
RESYNC_STEP_SECONDS = 120.0
FAST_STEP_SECONDS = 1.0
EDITED_IMAGE = "vllm/vllm-openai:v0.29.0-edited"


def changed_paths(old: Any, new: Any, path: str = "") -> set[str]:
    """The paths whose value differs between two statuses: list entries compared by position, a
    condition (an entry with a `type`) by its type, named in the path."""
    if isinstance(old, dict) and isinstance(new, dict):
        return {p for key in set(old) | set(new) for p in changed_paths(old.get(key), new.get(key), f"{path}.{key}")}
    if isinstance(old, list) and isinstance(new, list) and old and new:
        if all(isinstance(e, dict) and "type" in e for e in old + new):
            by_type_old, by_type_new = {e["type"]: e for e in old}, {e["type"]: e for e in new}
            return {p for kind in set(by_type_old) | set(by_type_new)
                    for p in changed_paths(by_type_old.get(kind), by_type_new.get(kind), f"{path}[{kind}]")}
        out: set[str] = set()
        for i in range(max(len(old), len(new))):
            a, b = (old[i] if i < len(old) else None), (new[i] if i < len(new) else None)
            out |= changed_paths(a, b, f"{path}[]") if a is not None and b is not None else {f"{path}[]"}
        return out
    return set() if old == new else {path or "."}


def count_writes(sim: Sim, first_pass: int, before: dict[str, Any] | None) -> dict[str, Any]:
    """Passes of NAME since `first_pass`, the status writes among them and the fields they moved."""
    stored = before
    passes = writes = 0
    fields: Counter[str] = Counter()
    for record in sim.passes[first_pass:]:
        if record.deployment != NAME or record.result is None:
            continue
        passes += 1
        status = record.result.status
        if stored is None or json.dumps(status, sort_keys=True) != json.dumps(stored, sort_keys=True):
            writes += 1
            fields.update(changed_paths(stored or {}, status))
        stored = status
    return {"passes": passes, "writes": writes, "writes_per_pass": round(writes / passes, 3) if passes else 0.0,
            "fields": dict(sorted(fields.items(), key=lambda item: (-item[1], item[0])))}


class StagedSim(Sim):
    """The simulator with a kubelet that moves each Pod one step per round, as a real node reports
    them one write at a time: placed on a node (its containers being created), running and not Ready
    yet, Ready. A pass between the steps sees each (Pulling, Starting, then Ready)."""

    def kubelet(self) -> None:
        starting = {name: pod for name, pod in self.pods.items()
                    if not deleting(pod) and not pod["spec"].get("schedulingGates")
                    and pod_phase(pod) not in ("Failed", "Succeeded") and not cond_true(pod, "Ready")}
        for name in sorted(starting):
            self._one_step(starting[name])
        # The simulator's own kubelet for the rest (Pods being deleted), not for those just moved.
        for name in starting:
            del self.pods[name]
        try:
            super().kubelet()
        finally:
            self.pods.update(starting)

    def _one_step(self, pod: dict[str, Any]) -> None:
        if pod["spec"].get("nodeName") is None:
            ready = sorted(n for n, s in self.nodes.items() if s["ready"])
            load = {n: sum(1 for p in self.pods.values() if p["spec"].get("nodeName") == n) for n in ready}
            pod["spec"]["nodeName"] = min(ready, key=lambda n: (load[n], n))
            pod["status"] = {**(pod.get("status") or {}), "phase": "Pending"}
            pod["metadata"]["resourceVersion"] = self._next_rv()
            return
        running = pod_phase(pod) == "Running"
        self._set_pod_status(pod, "Running", running)
        pod["status"]["containerStatuses"] = [{"name": pod["spec"]["containers"][0]["name"], "ready": running,
                                               "started": True, "restartCount": 0,
                                               "state": {"running": {"startedAt": self.now()}}}]


def _chat(replicas: int) -> dict[str, Any]:
    md = example(NAME)
    md["spec"]["roles"][0]["replicas"] = replicas
    return md


def _two_roles(replicas: int) -> dict[str, Any]:
    """Two Server roles of `replicas` each (the first shape of bench/e2e-scale), rolled in parallel."""
    md = _chat(replicas)
    md["spec"]["roles"].append({**copy.deepcopy(md["spec"]["roles"][0]), "name": "server-b"})
    return md


def _written(sim: Sim) -> dict[str, Any]:
    return {k: v for k, v in sim.status(NAME).items() if k != "observedGeneration"}


def _measure(sim: Sim, play: Callable[[Sim], None], before: dict[str, Any] | None) -> dict[str, Any]:
    first = len(sim.passes)
    play(sim)
    return count_writes(sim, first, before)


def _resyncs(sim: Sim) -> None:
    for _ in range(100):
        sim.step(RESYNC_STEP_SECONDS)


def scenarios() -> dict[str, dict[str, Any]]:
    out = {}
    sim = Sim(capacity={A10G: 8})
    sim.apply(_chat(4))
    out["bring-up"] = _measure(sim, lambda s: s.settle(rounds=80), None)
    out["steady"] = _measure(sim, _resyncs, _written(sim))
    before = _written(sim)
    sim.edit(NAME, lambda spec: spec["roles"][0].setdefault("env", []).append({"name": "EDITED", "value": "1"}))
    out["env edit"] = _measure(sim, lambda s: s.settle(rounds=200), before)

    fast = StagedSim(capacity={A10G: 12})
    fast.apply(_chat(5))
    out["bring-up x5, 1 s"] = _measure(fast, lambda s: s.settle(rounds=400, seconds=FAST_STEP_SECONDS), None)
    before = _written(fast)
    fast.edit(NAME, lambda spec: spec["roles"][0].update(image=EDITED_IMAGE))
    out["image edit x5, 1 s"] = _measure(fast, lambda s: s.settle(rounds=800, seconds=FAST_STEP_SECONDS), before)
    before = _written(fast)
    fast.delete_deployment(NAME)
    out["delete x5, 1 s"] = _measure(fast, lambda s: s.settle(rounds=200, seconds=FAST_STEP_SECONDS), before)

    wide = StagedSim(capacity={A10G: 24})
    wide.apply(_two_roles(5))
    out["bring-up 2x5, 1 s"] = _measure(wide, lambda s: s.settle(rounds=400, seconds=FAST_STEP_SECONDS), None)
    before = _written(wide)
    wide.edit(NAME, lambda spec: [role.update(image=EDITED_IMAGE) for role in spec["roles"]])
    out["image edit 2x5, 1 s"] = _measure(wide, lambda s: s.settle(rounds=800, seconds=FAST_STEP_SECONDS), before)

    queued = Sim(capacity={A10G: 4})
    queued.apply(_chat(4))
    queued.settle()
    out["half queued"] = _measure(queued, _resyncs, _written(queued))
    return out


def report(results: dict[str, dict[str, Any]]) -> str:
    lines = ["# Status writes per pass", "",
             "Generated by `python -m bench.status_writes` (the simulator: exact counts, no timing). A write is",
             "a pass whose status differs from the last one written; Metacontroller then GETs and PUTs the whole",
             "object. docs/status.md#replica-stages says what a steady deployment must not write.", "",
             "| scenario | passes | status writes | writes per pass |", "| --- | ---: | ---: | ---: |"]
    lines += [f"| {name} | {r['passes']} | {r['writes']} | {r['writes_per_pass']} |" for name, r in results.items()]
    for name, r in results.items():
        if not r["fields"]:
            continue
        lines += ["", f"## {name}: writes that moved each field", "", "| field | writes |", "| --- | ---: |"]
        lines += [f"| `{path}` | {n} |" for path, n in r["fields"].items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "bench")
    args = parser.parse_args(argv)
    results = scenarios()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "status-writes.json").write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    (args.out / "status-writes.md").write_text(report(results))
    print(report(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Joint sets colliding at their deadlock-release bound on the real Kueue (docs/kueue.md#deadlock-release).

Two P/D deployments (2 + 2 groups of 4 cards) on the 16-card H20 pool, which fits one of them. Each
round forces the collision a cold CI run once hit: the pool is held (ClusterQueue `stopPolicy: Hold`) while
both deployments' 8 Workloads are composed; the test parks the groups each set must not get (as a
user may: `spec.active: false`, without the operator's mark), lets the pool go, so Kueue reserves the
chosen split for both sets in one scheduling burst (the same second, hence the same bound), and
activates the parked groups again (Kueue parks them: no room). From there on only the operator and
Kueue act. Each round checks:

- exactly one set yields at the bound (its Workloads carry the operator's `released-at` mark), the
  one the documented order names: the smaller share of its own want, then the newer, then the UID;
- no check is ever Retry (Kueue would park the Workload for good);
- the other set is admitted within two bounds of the pool freeing (the yield), and once it is
  deleted the one that yielded is admitted within two bounds of that.

The bound is the suite's `MODELDEPLOYMENT_GANG_RELEASE_AFTER_SECONDS` (20 s, tests/e2e/md_operator.py);
`MODELDEPLOYMENT_E2E_COLLISIONS` rounds (default 3, one per split in `SPLITS`, about 50 s each; 10 ran
in 8 min 45 s). The simulator (tests/sim/test_contention.py) covers the interleavings; these rounds
prove the same order on the real Kueue.
"""

from __future__ import annotations

import json
import os
import time
from fractions import Fraction
from typing import Any, Iterator

import pytest
import yaml

import cluster as e2e_cluster
from app import timestamps
from md_operator import NAMESPACE, Operator, start_operator

POOL = "gpustack-nvidia-h20-linux-amd64"
BOUND = 20.0  # MODELDEPLOYMENT_GANG_RELEASE_AFTER_SECONDS in start_operator
RELEASED_AT = "modeldeployment.gpustack.ai/released-at"
GROUPS = [("prefill", 0), ("prefill", 1), ("decode", 0), ("decode", 1)]
# How many of its 4 groups the first deployment holds at the collision (the second holds the rest).
SPLITS = [2, 3, 1]


@pytest.fixture(scope="module")
def op(control_plane: e2e_cluster.ControlPlane) -> Iterator[Operator]:
    operator = start_operator(control_plane)
    yield operator
    operator.stop()


def pd(name: str) -> dict[str, Any]:
    roles = [{"name": role, "kind": role.capitalize(), "replicas": 2, "instanceType": POOL,
              "resources": {"accelerator": 4}} for role in ("prefill", "decode")]
    return {"apiVersion": "worker.gpustack.ai/v1", "kind": "ModelDeployment",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"model": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}, "engine": {"name": "vLLM", "version": "0.29.0"},
                     "roles": roles}}


def workloads(op: Operator) -> dict[str, dict[str, Any]]:
    return {w["metadata"]["name"]: w for w in op.get("workloads.kueue.x-k8s.io", "-n", NAMESPACE)["items"]}


def cond(w: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in w.get("status", {}).get("conditions", []) if c["type"] == type_), None)


def holds(w: dict[str, Any] | None, type_: str) -> bool:
    c = cond(w or {}, type_)
    return c is not None and c["status"] == "True"


def groups_of(op: Operator, name: str) -> dict[tuple[str, int], str]:
    """(role, ordinal) -> pod-group (Workload) name, read off the deployment's Pods."""
    out = {}
    for pod in op.pods(name):
        labels = pod["metadata"]["labels"]
        out[(labels["app.kubernetes.io/component"], int(labels["modeldeployment.gpustack.ai/pod-ordinal"]))] = \
            labels["kueue.x-k8s.io/pod-group-name"]
    return out


def set_active(op: Operator, workload: str, active: bool) -> None:
    op.kubectl("patch", "workloads.kueue.x-k8s.io", workload, "-n", NAMESPACE, "--type", "merge",
               "-p", json.dumps({"spec": {"active": active}}))


def stop_policy(op: Operator, policy: str) -> None:
    op.kubectl("patch", "clusterqueue", POOL, "--type", "merge", "-p", json.dumps({"spec": {"stopPolicy": policy}}))


def delete(op: Operator, names: tuple[str, ...], groups: dict[str, dict[tuple[str, int], str]]) -> None:
    """Deletes the deployments and waits until they and their Workloads are gone (their quota free)."""
    for name in names:
        op.kubectl("delete", "md", name, "-n", NAMESPACE, "--wait=false", check=False)
    theirs = {g for n in names for g in groups.get(n, {}).values()}
    op.wait(f"{names} gone with their Workloads", lambda: not any(
        op.kubectl("get", "md", n, "-n", NAMESPACE, check=False).returncode == 0 for n in names)
        and not theirs & set(workloads(op)), 180)


def yield_key(md: dict[str, Any], have: int) -> tuple[Fraction, float, str]:
    """docs/kueue.md#deadlock-release: the smaller share first, then the newer, then the UID."""
    return (Fraction(have, 4), -timestamps.epoch_seconds(md["metadata"]["creationTimestamp"]), md["metadata"]["uid"])


def all_admitted(op: Operator, groups: dict[tuple[str, int], str]) -> bool:
    current = workloads(op)
    return all(holds(current.get(g), "Admitted") for g in groups.values())


def collide(op: Operator, a: str, b: str, a_holds: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both deployments hold their part of the pool since the same moment; returns their groups and
    their holding records (status.jointAdmission) as the operator wrote them."""
    stop_policy(op, "Hold")
    try:
        op.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([pd(a), pd(b)]))
        groups = {n: op.wait(f"{n}: 4 pod groups", lambda n=n: (lambda g: g if len(g) == 4 else None)(
            groups_of(op, n)), 120) for n in (a, b)}
        op.wait("8 Workloads composed", lambda: {g for n in (a, b) for g in groups[n].values()} <= set(workloads(op)),
                120)
        parked = [groups[a][k] for k in GROUPS[a_holds:]] + [groups[b][k] for k in GROUPS[:a_holds]]
        for workload in parked:
            set_active(op, workload, False)
    finally:
        stop_policy(op, "None")
    held = [groups[a][k] for k in GROUPS[:a_holds]] + [groups[b][k] for k in GROUPS[a_holds:]]
    op.wait("the split reserved", lambda: all(holds(workloads(op).get(g), "QuotaReserved") for g in held), 60, 0.3)
    for workload in parked:
        set_active(op, workload, True)
    records = op.wait("both holding records", lambda: (lambda r: r if all(r.values()) else None)(
        {n: op.md(n).get("status", {}).get("jointAdmission") for n in (a, b)}), 30, 0.5)
    return groups, records


def test_contenders_colliding_at_their_bound_are_admitted_in_turn(op: Operator):
    rounds = int(os.environ.get("MODELDEPLOYMENT_E2E_COLLISIONS", str(len(SPLITS))))
    same_second = 0
    for round_ in range(rounds):
        a, b = f"collide-{round_}-a", f"collide-{round_}-b"
        a_holds = SPLITS[round_ % len(SPLITS)]
        groups: dict[str, dict[tuple[str, int], str]] = {}
        try:
            groups, records = collide(op, a, b, a_holds)
            since = {n: records[n]["holdingSince"] for n in (a, b)}
            same_second += since[a] == since[b]
            mds = {n: op.md(n) for n in (a, b)}
            loser = min((a, b), key=lambda n: yield_key(mds[n], records[n]["have"]))
            winner = b if loser == a else a
            # The yield: the loser's Workloads carry the operator's mark; the winner's never do.
            bound_at = timestamps.epoch_seconds(since[loser]) + BOUND
            op.wait(f"round {round_}: {loser} yields at its bound", lambda: all(
                (workloads(op)[g]["metadata"].get("annotations") or {}).get(RELEASED_AT)
                for g in groups[loser].values()), 3 * BOUND, 0.5)
            yielded = time.time()
            assert yielded <= bound_at + 2 * BOUND, (round_, yielded - bound_at)
            op.wait(f"round {round_}: {winner} admitted", lambda: all_admitted(op, groups[winner]), 2 * BOUND, 0.5)
            current = workloads(op)
            assert not any((current[g]["metadata"].get("annotations") or {}).get(RELEASED_AT)
                           for g in groups[winner].values()), f"round {round_}: {winner} yielded too"
            assert not any(e.get("state") == "Retry" for w in current.values()
                           for e in w.get("status", {}).get("admissionChecks", [])), f"round {round_}: Retry written"
            # The pool frees when the winner goes: the loser is admitted in turn within two bounds.
            delete(op, (winner,), groups)
            op.wait(f"round {round_}: {loser} admitted after {winner} went", lambda: all_admitted(op, groups[loser]),
                    2 * BOUND, 0.5)
        finally:
            delete(op, (a, b), groups)
    print(f"{rounds} collisions, {same_second} with both sets holding since the same second")
    assert same_second >= rounds // 2, (same_second, rounds)

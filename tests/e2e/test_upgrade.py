"""An operator upgrade with both versions answering (docs/operations.md#upgrading-the-operator).

Version A is the operator with its defaults; version B is the same build with the upgrade-rehearsal
setting (`MODELDEPLOYMENT_RENDER_REHEARSAL=1`): every Pod renders differently and under a newer render
revision (docs/operations.md#rehearsing-an-upgrade). The operator runs as two replicas behind one
hooks address (tests/e2e/front.py); the upgrade replaces them one at a time, surge first, as the
operator's Deployment does, and holds the half-way point (one A, one B, Metacontroller's passes
landing on both) until the model rollout it starts has finished.

The story shows each replica of the deployment turned over exactly once, to B's render, and no Pod
created twice for one (ordinal, incarnation), from a watch that lists the deployment's Pods from
the API server several times a second for the whole upgrade.
"""

from __future__ import annotations

import contextlib
import threading
from collections import defaultdict
from typing import Any, Iterator

import pytest
import yaml

import cluster as e2e_cluster
from md_operator import NAMESPACE, Operator, start_operator

REVISION = "modeldeployment.gpustack.ai/render-revision"
ORDINAL = "modeldeployment.gpustack.ai/pod-ordinal"
INCARNATION = "modeldeployment.gpustack.ai/incarnation"
B_ENV = {"MODELDEPLOYMENT_RENDER_REHEARSAL": "1"}
REPLICAS = 3


@pytest.fixture(scope="module")
def op(control_plane: e2e_cluster.ControlPlane) -> Iterator[Operator]:
    operator = start_operator(control_plane, replicas=2)
    yield operator
    operator.stop()


def deployment(name: str) -> dict[str, Any]:
    return {"apiVersion": "worker.gpustack.ai/v1", "kind": "ModelDeployment",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"model": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}, "engine": {"name": "vLLM", "version": "0.29.0"},
                     "roles": [{"name": "server", "replicas": REPLICAS, "instanceType": "gpustack-nvidia-a10g-linux-amd64",
                                "resources": {"accelerator": 1}}]}}


def ready(pod: dict[str, Any]) -> bool:
    conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
    return (pod.get("status", {}).get("phase") == "Running" and conditions.get("Ready") == "True"
            and not pod["metadata"].get("deletionTimestamp"))


def rolled(op: Operator, name: str, revision: str) -> bool:
    """One read of the Pods: exactly REPLICAS, every one Ready and made by `revision`."""
    pods = op.pods(name)
    return len(pods) == REPLICAS and all(ready(p) and p["metadata"]["labels"].get(REVISION) == revision for p in pods)


class PodLedger:
    """Every Pod of the deployment ever listed, by uid: its name, ordinal, incarnation, revision."""

    def __init__(self, op: Operator, name: str) -> None:
        self.http = op.cp.http_client(timeout=5)
        self.selector = f"app.kubernetes.io/instance={name}"
        self.pods: dict[str, tuple[str, str, str, str]] = {}
        self.lists = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                items = self.http.get(f"/api/v1/namespaces/{NAMESPACE}/pods",
                                      params={"labelSelector": self.selector}).json()["items"]
                for pod in items:
                    meta = pod["metadata"]
                    self.pods[meta["uid"]] = (meta["name"], meta["labels"][ORDINAL],
                                              (meta.get("annotations") or {}).get(INCARNATION, "0"),
                                              meta["labels"].get(REVISION, ""))
                self.lists += 1
            self._stop.wait(0.3)

    def __enter__(self) -> "PodLedger":
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join(10)
        self.http.close()


def test_an_upgrade_with_both_versions_answering_turns_each_replica_over_once(op: Operator) -> None:
    name = "upgrade"
    op.kubectl("apply", "-f", "-", input=yaml.safe_dump(deployment(name)))
    try:
        op.wait("every replica Ready on version A's render", lambda: rolled(op, name, "1"), 240)
        hooks = op.fronts[0]
        with PodLedger(op, name) as ledger:
            old_a, last_a = op.replicas
            first_b = op.add_replica(B_ENV)  # surge: B is Ready before an A stops
            op.remove_replica(old_a)
            before = hooks.served
            # Half-way: one A and one B answer the passes of the whole model rollout.
            op.wait("every replica turned over to version B's render", lambda: rolled(op, name, "2"), 300)
            after = hooks.served
            op.add_replica(B_ENV)
            op.remove_replica(last_a)
            op.wait("the deployment Ready", lambda: op.md(name).get("status", {}).get("phase") == "Ready", 120)
            final = rolled(op, name, "2")
        assert final, op.pods(name)
        # Both versions answered passes while the model rollout ran.
        for replica in (last_a, first_b):
            assert after.get(replica.hooks_port, 0) > before.get(replica.hooks_port, 0), (replica, before, after)
        by_ordinal: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
        for name_, ordinal, incarnation, revision in ledger.pods.values():
            by_ordinal[ordinal].append((incarnation, revision, name_))
        assert ledger.lists > 20
        # Each ordinal: its A Pod and exactly one B Pod, never a second Pod for one incarnation.
        assert sorted(by_ordinal) == [str(o) for o in range(REPLICAS)], ledger.pods
        for ordinal, lives in by_ordinal.items():
            assert sorted(revision for _, revision, _ in lives) == ["1", "2"], (ordinal, lives)
            assert len({incarnation for incarnation, _, _ in lives}) == len(lives), (ordinal, lives)
            assert len({n for _, _, n in lives}) == len(lives), (ordinal, lives)
        restarted = [e for e in op.get("events", "-n", NAMESPACE)["items"]
                     if e.get("reason") == "ReplicaRestarted" and e["involvedObject"].get("name") == name]
        assert len(restarted) == REPLICAS, [e.get("message") for e in restarted]
    finally:
        op.kubectl("delete", "md", name, "-n", NAMESPACE, "--wait=false", check=False)
        op.wait(f"md {name} to be gone",
                lambda: op.kubectl("get", "md", name, "-n", NAMESPACE, check=False).returncode != 0, 120)

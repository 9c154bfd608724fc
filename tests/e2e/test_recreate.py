"""A deployment deleted and created again at once never reaches its previous incarnation.

The router's Pods belong to the router Deployment's ReplicaSet, not to the deployment, and a
recreated deployment renders the same router Deployment, Service and selector (even the same
ReplicaSet name). The finalize hook keeps the router Deployment at zero replicas until its Pods
are gone and only then lets the deployment's object go (docs/metacontroller.md#finalize), so the
new incarnation's Services can never list an old Pod. This test creates the new object the moment
the API server accepts it and watches every EndpointSlice of the namespace throughout.

A quiet cluster's garbage collector removes the router Pods within a second, which hides the race
a loaded one shows (a CI soak found a router Pod 45 s after its deployment went). So each round
stops the real kube-controller-manager (the garbage collector, and the ReplicaSet and EndpointSlice
controllers) for PAUSE_SECONDS right after the delete: before the finalize waited for the router
Pods, the new object was accepted while the old router Pod stood, and its router Service listed it
once the controller manager came back.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Iterator

import pytest
import yaml

import cluster as e2e_cluster
from md_operator import NAMESPACE, Operator, start_operator

A10G = "gpustack-nvidia-a10g-linux-amd64"
NAME = "reborn"
ROUNDS = 3
PAUSE_SECONDS = 8.0


@pytest.fixture(scope="module")
def op(control_plane: e2e_cluster.ControlPlane) -> Iterator[Operator]:
    operator = start_operator(control_plane)
    yield operator
    operator.stop()


def routed_pair(name: str) -> dict[str, Any]:
    roles = [{"name": role, "kind": kind, "replicas": 1, "instanceType": A10G, "resources": {"accelerator": 1}}
             for role, kind in (("prefill", "Prefill"), ("decode", "Decode"))]
    return {"apiVersion": "worker.gpustack.ai/v1", "kind": "ModelDeployment",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"model": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}, "engine": {"name": "vLLM", "version": "0.29.0"},
                     "router": {"name": "llm-d-router"}, "roles": roles}}


def ready(pod: dict[str, Any]) -> bool:
    conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
    return conditions.get("Ready") == "True" and not pod["metadata"].get("deletionTimestamp")


class EndpointWatch:
    """Every (Service, Pod UID) pair any EndpointSlice of the namespace listed, polled continuously,
    each stamped with the moment its read began (so a read older than an event never counts after it)."""

    def __init__(self, cp: e2e_cluster.ControlPlane) -> None:
        self.client = cp.http_client()
        # (read began, Service name, the owning Service's UID, Pod UID)
        self.seen: list[tuple[float, str, str, str]] = []
        self.reads = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            r = self.client.get(f"/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices", timeout=10)
            if r.status_code == 200:
                self.reads += 1
                for eps in r.json()["items"]:
                    service = eps["metadata"].get("labels", {}).get("kubernetes.io/service-name", "")
                    owner = next((o["uid"] for o in eps["metadata"].get("ownerReferences") or []
                                  if o.get("kind") == "Service"), "")
                    for endpoint in eps.get("endpoints") or []:
                        uid = (endpoint.get("targetRef") or {}).get("uid")
                        if uid:
                            self.seen.append((began, service, owner, uid))
            self._stop.wait(0.2)

    def listed_since(self, since: float, *, not_by: set[str] = frozenset()) -> set[tuple[str, str]]:
        """(Service name, Pod UID) listed by reads begun at `since` or later, by Services whose UID is
        not in `not_by` (an earlier incarnation's Service may linger, same name, until the garbage
        collector removes it: it is not the new deployment's)."""
        return {(service, uid) for began, service, owner, uid in list(self.seen)
                if began >= since and owner not in not_by}

    def __enter__(self) -> "EndpointWatch":
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=15)
        self.client.close()


def test_a_deployment_recreated_at_once_never_selects_a_pod_of_its_previous_incarnation(op: Operator) -> None:
    manifest = yaml.safe_dump(routed_pair(NAME))
    op.kubectl("apply", "-f", "-", input=manifest)
    earlier: set[str] = set()  # Pod UIDs of every incarnation before the current one
    earlier_services: set[str] = set()  # and their Services' UIDs
    created_at = time.monotonic()
    with EndpointWatch(op.cp) as watch:
        for round_ in range(ROUNDS + 1):
            pods = op.wait(f"round {round_}: {NAME}'s engine and router Pods Ready",
                           lambda: (lambda ps: ps if len([p for p in ps if ready(p)]) == 3 else None)(op.pods(NAME)),
                           timeout=180)
            router = [p for p in pods if p["metadata"]["labels"].get("app.kubernetes.io/component") == "router"]
            assert len(router) == 1, [p["metadata"]["name"] for p in pods]
            op.wait(f"round {round_}: the router Service lists the new router Pod",
                    lambda: (f"{NAME}-router", router[0]["metadata"]["uid"]) in watch.listed_since(created_at),
                    timeout=60)
            stale = {(service, uid) for service, uid in watch.listed_since(created_at, not_by=earlier_services)
                     if uid in earlier}
            assert not stale, f"round {round_}: Services of the new {NAME} listed Pods of an earlier incarnation: {stale}"
            if round_ == ROUNDS:
                break
            earlier |= {p["metadata"]["uid"] for p in pods}
            earlier_services |= {s["metadata"]["uid"] for s in op.get(
                "services", "-n", NAMESPACE, "-l", f"app.kubernetes.io/instance={NAME}")["items"]}
            op.kubectl("delete", "md", NAME, "-n", NAMESPACE, "--wait=false")
            op.cp.stop_component("kube-controller-manager")
            paused_until = time.monotonic() + PAUSE_SECONDS
            deadline = time.monotonic() + 180
            try:
                while op.kubectl("create", "-f", "-", input=manifest, check=False).returncode != 0:
                    assert time.monotonic() < deadline, f"round {round_}: {NAME} could not be created again in 180s"
                    if time.monotonic() >= paused_until:
                        op.cp.start_component("kube-controller-manager")
                    time.sleep(0.2)
            finally:
                op.cp.start_component("kube-controller-manager")
            created_at = time.monotonic()
            # The moment the new object exists, no Pod of the old one is left to select.
            new_uid = op.md(NAME)["metadata"]["uid"]
            left = [(p["metadata"]["name"], p["metadata"]["uid"],
                     [(o["kind"], o["name"], o["uid"]) for o in p["metadata"].get("ownerReferences") or []])
                    for p in op.pods(NAME) if p["metadata"]["uid"] in earlier]
            assert left == [], (f"round {round_}: the new {NAME} (uid {new_uid}) exists while Pods of the old one "
                                f"are left (name, uid, owners): {left}")
    assert watch.reads > 0
    op.kubectl("delete", "md", NAME, "-n", NAMESPACE, "--wait=false")
    op.wait(f"{NAME} to be gone", lambda: op.kubectl("get", "md", NAME, "-n", NAMESPACE, check=False).returncode != 0,
            120)


def test_a_deployment_deleted_the_moment_it_is_created_goes_through_finalize(op: Operator) -> None:
    """A delete racing Metacontroller's first pass: born with Metacontroller's finalizer (the mutating
    webhook adds it at CREATE), the deployment is never removed outright, so the finalize hook waits
    for every Pod and Workload the first pass made (docs/metacontroller.md#finalize). With the garbage
    collector stopped, a skipped finalize would leave them standing once the object is gone."""
    name = "blink"
    obj = routed_pair(name)
    del obj["spec"]["router"]
    manifest = yaml.safe_dump(obj)
    op.cp.stop_component("kube-controller-manager")
    try:
        for round_ in range(ROUNDS):
            created = yaml.safe_load(op.kubectl("create", "-f", "-", "-o", "yaml", input=manifest).stdout)
            assert "metacontroller.io/compositecontroller-modeldeployment" in created["metadata"]["finalizers"], \
                created["metadata"]
            time.sleep(0.2 * round_)  # at once, then as the first pass creates the Pods
            op.kubectl("delete", "md", name, "-n", NAMESPACE, "--wait=false")
            op.wait(f"round {round_}: {name} to be gone",
                    lambda: op.kubectl("get", "md", name, "-n", NAMESPACE, check=False).returncode != 0, 120)
            left = [p["metadata"]["name"] for p in op.pods(name)]
            assert left == [], f"round {round_}: {name} is gone while its Pods are left: {left}"
    finally:
        op.cp.start_component("kube-controller-manager")

"""ModelDeploymentScaler end to end: `kubectl scale`, a real HPA, Kueue's joint admission of a step.

Every component is real: kube-apiserver and etcd, kube-controller-manager (whose HPA controller
drives the scaler's scale subresource), Kueue, Metacontroller calling both CompositeControllers'
hooks, our webhooks over TLS. The metric server behind the aggregator is test scaffolding
(tests/e2e/metrics_server.py). Each test reads a fact once per observation.
"""

from __future__ import annotations

import json
import time
from typing import Any, Iterator

import pytest
import yaml

import cluster as e2e_cluster
import metrics_server
from md_operator import NAMESPACE, Operator, apply, condition, delete, pair, ready, start_operator

SCALER_MANAGER = "worker.gpustack.ai/model-deployment-scaler"
H20 = "gpustack-nvidia-h20-linux-amd64"


@pytest.fixture(scope="module")
def op(control_plane: e2e_cluster.ControlPlane) -> Iterator[Operator]:
    operator = start_operator(control_plane)
    yield operator
    operator.stop()


def scaler(name: str, deployment: str, replicas: int, roles: tuple[tuple[str, int], ...]) -> dict[str, Any]:
    return {"apiVersion": "worker.gpustack.ai/v1", "kind": "ModelDeploymentScaler",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"deploymentRef": {"name": deployment}, "roles": [{"name": n, "ratio": r} for n, r in roles],
                     "replicas": replicas}}


def ready_by_role(pods: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for pod in pods:
        if ready(pod):
            role = pod["metadata"]["labels"]["app.kubernetes.io/component"]
            counts[role] = counts.get(role, 0) + 1
    return counts


def engine_pods(op: Operator, name: str) -> list[dict[str, Any]]:
    return [p for p in op.pods(name) if p["metadata"]["labels"].get("app.kubernetes.io/component") in ("prefill", "decode")]


def uids(pods: list[dict[str, Any]]) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods if ready(p)}


def declared(md: dict[str, Any]) -> dict[str, int]:
    return {r["name"]: r["replicas"] for r in md["spec"]["roles"]}


def wait_serving(op: Operator, name: str, want: dict[str, int], timeout: float = 180) -> list[dict[str, Any]]:
    """Waits until exactly `want` Ready Pods per role serve (one read of the Pods per observation)."""
    def check() -> list[dict[str, Any]] | None:
        pods = engine_pods(op, name)
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        counts = ready_by_role(live)
        return live if counts == want and len(live) == sum(want.values()) else None

    return op.wait(f"{name} serving {want}", check, timeout, 1)


def owned_replicas(md: dict[str, Any], manager: str) -> dict[str, set[str]]:
    """Per role, the fields of its list entry the manager owns (from managedFields)."""
    out: dict[str, set[str]] = {}
    for entry in md["metadata"].get("managedFields", []):
        if entry.get("manager") != manager:
            continue
        spec = entry.get("fieldsV1", {}).get("f:spec", {})
        extra = set(spec) - {"f:roles"}
        assert not extra, f"{manager} owns more than roles: {sorted(extra)}"
        for key, fields in spec.get("f:roles", {}).items():
            role = json.loads(key[2:])["name"]
            out[role] = {k for k in fields if k != "."}
        assert set(entry.get("fieldsV1", {})) <= {"f:spec"}, f"{manager} owns fields outside spec"
    return out


def test_kubectl_scale_grows_and_shrinks_a_routed_pair_at_its_ratio(op: Operator):
    apply(op, pair("scaled", prefill=1, decode=2))
    apply(op, scaler("scaled", "scaled", 1, (("prefill", 1), ("decode", 2))))
    try:
        first = wait_serving(op, "scaled", {"prefill": 1, "decode": 2})
        survivors = uids(first)
        op.kubectl("scale", "mds/scaled", "-n", NAMESPACE, "--replicas=3")
        grown = wait_serving(op, "scaled", {"prefill": 3, "decode": 6}, 240)
        assert survivors.items() <= uids(grown).items(), "a survivor was replaced by the step"
        md = op.get("md", "scaled", "-n", NAMESPACE, "--show-managed-fields")
        assert declared(md) == {"prefill": 3, "decode": 6}
        # The scaler's server-side apply owns exactly the governed roles' replicas (and their keys).
        assert owned_replicas(md, SCALER_MANAGER) == {"prefill": {"f:name", "f:replicas"},
                                                     "decode": {"f:name", "f:replicas"}}

        def settled() -> dict[str, Any] | None:
            obj = op.get("mds", "scaled", "-n", NAMESPACE)
            status = obj.get("status", {})
            return obj if status.get("readyReplicas") == 3 and status.get("replicas") == 3 else None

        obj = op.wait("the scaler to report 3 ready units", settled, 60)
        assert obj["status"]["roleRatios"] == "prefill×1,decode×2"
        assert condition(obj, "Active")["reason"] == "Synced"
        table = op.kubectl("get", "mds", "scaled", "-n", NAMESPACE).stdout
        header, row = table.splitlines()[:2]
        assert header.split() == ["NAME", "DEPLOYMENT", "ROLES", "REPLICAS", "READY", "PHASE", "AGE"]
        assert row.split()[:5] == ["scaled", "scaled", "prefill×1,decode×2", "3", "3"]
        scale = json.loads(op.kubectl("get", "--raw", f"/apis/worker.gpustack.ai/v1/namespaces/{NAMESPACE}/"
                                      "modeldeploymentscalers/scaled/scale").stdout)
        assert scale["spec"]["replicas"] == 3 and scale["status"]["replicas"] == 3
        assert "app.kubernetes.io/component in (decode,prefill)" in scale["status"]["selector"]

        # Shrink: the highest ordinals of each role go in the same pass, their Workloads with them.
        before = uids(grown)
        op.kubectl("scale", "mds/scaled", "-n", NAMESPACE, "--replicas=1")
        shrunk = wait_serving(op, "scaled", {"prefill": 1, "decode": 2}, 180)
        kept = uids(shrunk)
        assert kept.items() <= before.items(), "a survivor was replaced by the scale-down"
        ordinals = sorted((p["metadata"]["labels"]["app.kubernetes.io/component"],
                           p["metadata"]["labels"]["modeldeployment.gpustack.ai/pod-ordinal"]) for p in shrunk)
        assert ordinals == [("decode", "0"), ("decode", "1"), ("prefill", "0")]

        def workloads_shed() -> bool:
            names = {w["metadata"]["name"] for w in op.get("workloads.kueue.x-k8s.io", "-n", NAMESPACE)["items"]
                     if w["metadata"].get("ownerReferences") and
                     w["metadata"]["ownerReferences"][0]["name"].startswith("scaled-")}
            return len(names) == 3

        op.wait("the shed replicas' Workloads to be deleted", workloads_shed, 120)
    finally:
        delete(op, "mds", "scaled")
        delete(op, "md", "scaled")


def test_a_hand_edit_is_set_back_reported_and_a_server_side_apply_conflicts(op: Operator):
    apply(op, pair("edited", prefill=1, decode=1, router=False))
    apply(op, scaler("edited", "edited", 2, (("prefill", 1), ("decode", 1))))
    try:
        op.wait("the scaler's write", lambda: declared(op.md("edited")) == {"prefill": 2, "decode": 2}, 60)
        op.kubectl("patch", "md", "edited", "-n", NAMESPACE, "--type=json", "-p",
                   json.dumps([{"op": "replace", "path": "/spec/roles/1/replicas", "value": 5}]))

        def set_back() -> dict[str, Any] | None:
            md = op.md("edited")
            return md if declared(md) == {"prefill": 2, "decode": 2} else None

        op.wait("the hand edit to be set back", set_back, 60)

        def conflict_event() -> dict[str, Any] | None:
            items = op.get("events", "-n", NAMESPACE, "--field-selector",
                           "involvedObject.kind=ModelDeploymentScaler,involvedObject.name=edited")["items"]
            return next((e for e in items if e["reason"] == "ReplicasConflict"), None)

        event = op.wait("a ReplicasConflict event", conflict_event, 60)
        assert "roles[decode].replicas is 5" in event["message"] and "kubectl-patch" in event["message"]
        # A server-side apply of the deployment that sets a governed role's replicas conflicts, naming us.
        manifest = pair("edited", prefill=4, decode=2, router=False)
        refused = op.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(manifest), check=False)
        assert refused.returncode != 0
        assert SCALER_MANAGER in refused.stderr and "conflict" in refused.stderr.lower()
    finally:
        delete(op, "mds", "edited")
        delete(op, "md", "edited")


def test_admission_refuses_a_second_scaler_on_a_governed_role_and_a_step_past_a_bound(op: Operator):
    apply(op, pair("governed", prefill=1, decode=1, router=False, decode_size=2))
    apply(op, scaler("first", "governed", 1, (("prefill", 1), ("decode", 1))))
    try:
        second = apply(op, scaler("second", "governed", 1, (("decode", 1),)), check=False)
        assert second.returncode != 0
        assert "spec.roles[0].name" in second.stderr and "ModelDeploymentScaler team-a/first" in second.stderr
        too_far = op.kubectl("scale", "mds/first", "-n", NAMESPACE, "--replicas=1025", check=False)
        assert too_far.returncode != 0 and "spec.replicas" in too_far.stderr
        # 700 units: 700 prefillers + 700 decoders of 2 Pods = 2,100 Pods, past the 2,048 bound.
        bound = op.kubectl("scale", "mds/first", "-n", NAMESPACE, "--replicas=700", check=False)
        assert bound.returncode != 0 and "2100 Pods" in bound.stderr
        assert "2048 (MODELDEPLOYMENT_MAX_PODS_PER_DEPLOYMENT)" in bound.stderr and "at most 682 units fit" in bound.stderr
        assert op.get("mds", "first", "-n", NAMESPACE)["spec"]["replicas"] == 1
        frozen = op.kubectl("patch", "mds", "first", "-n", NAMESPACE, "--type=merge", "-p",
                            json.dumps({"spec": {"roles": [{"name": "prefill", "ratio": 2}]}}), check=False)
        assert frozen.returncode != 0 and "frozen" in frozen.stderr
        missing = apply(op, scaler("typo", "governed", 1, (("decoder", 1),)), check=False)
        assert missing.returncode != 0 and "declares no role 'decoder'" in missing.stderr
    finally:
        delete(op, "mds", "first")
        delete(op, "md", "governed")


def test_a_step_the_pool_cannot_fit_strands_no_half_pair(op: Operator):
    # The H20 pool holds 16 cards; 1 prefill + 1 decode of 4 cards run. A step to 3 units needs 16
    # more: the pool has 8, so the joint check holds every new replica of both roles.
    apply(op, pair("tight", prefill=1, decode=1, instance_type=H20, cards=4, router=False))
    apply(op, scaler("tight", "tight", 1, (("prefill", 1), ("decode", 1))))
    try:
        survivors = uids(wait_serving(op, "tight", {"prefill": 1, "decode": 1}))
        op.kubectl("scale", "mds/tight", "-n", NAMESPACE, "--replicas=3")

        def pending() -> dict[str, Any] | None:
            obj = op.get("mds", "tight", "-n", NAMESPACE)
            quota = condition(obj, "QuotaReserved")
            return obj if quota.get("reason") == "QuotaPending" else None

        obj = op.wait("the scaler to report QuotaPending", pending, 120)
        assert condition(obj, "QuotaReserved")["message"].startswith("4 of 4 new replicas wait for quota")
        for _ in range(15):  # the release bound is 20 s in this harness: through it and past it
            pods = engine_pods(op, "tight")
            assert ready_by_role(pods) == {"prefill": 1, "decode": 1}, "a new replica of the step ran"
            assert uids(pods) == survivors, "a survivor was restarted or replaced"
            op.cp.check_alive()
            time.sleep(2)
        # Back to 1 unit: the queued replicas go, the survivors stay.
        op.kubectl("scale", "mds/tight", "-n", NAMESPACE, "--replicas=1")
        assert uids(wait_serving(op, "tight", {"prefill": 1, "decode": 1})) == survivors
    finally:
        delete(op, "mds", "tight")
        delete(op, "md", "tight")


def test_a_real_hpa_drives_the_pair_from_a_metric_and_reports_the_webhooks_refusal(
        op: Operator, external_metrics: metrics_server.ExternalMetrics):
    apply(op, pair("autoscaled", prefill=1, decode=2, router=False))
    apply(op, scaler("autoscaled", "autoscaled", 1, (("prefill", 1), ("decode", 2))))
    labels = {"deployment": "autoscaled"}
    external_metrics.set(NAMESPACE, "vllm_num_requests_waiting", 10, labels=labels)
    target = {"apiVersion": "worker.gpustack.ai/v1", "kind": "ModelDeploymentScaler", "name": "autoscaled"}
    hpa = metrics_server.external_metric_hpa("autoscaled", NAMESPACE, target, "vllm_num_requests_waiting",
                                             average_value=10, metric_labels=labels, max_replicas=1000)
    op.cp.apply(hpa)
    try:
        def able() -> dict[str, Any] | None:
            got = op.get("hpa", "autoscaled", "-n", NAMESPACE)
            ok = (metrics_server.hpa_condition(got, "ScalingActive").get("status") == "True"
                  and metrics_server.hpa_external_current(got, "vllm_num_requests_waiting") is not None)
            return got if ok else None

        op.wait("the HPA to read the metric", able, 120, 1)
        external_metrics.set(NAMESPACE, "vllm_num_requests_waiting", 20, labels=labels)  # 2 units
        wait_serving(op, "autoscaled", {"prefill": 2, "decode": 4}, 240)
        assert op.get("mds", "autoscaled", "-n", NAMESPACE)["spec"]["replicas"] == 2
        external_metrics.set(NAMESPACE, "vllm_num_requests_waiting", 10, labels=labels)  # back to 1
        wait_serving(op, "autoscaled", {"prefill": 1, "decode": 2}, 240)

        # 600 units × ratio 2 = 1,200 decoders: the webhook refuses the HPA's write, which says so.
        external_metrics.set(NAMESPACE, "vllm_num_requests_waiting", 6000, labels=labels)

        def refused() -> str | None:
            text = op.kubectl("describe", "hpa", "autoscaled", "-n", NAMESPACE).stdout
            return text if "1200 replicas on role decode" in text else None

        text = op.wait("the HPA to report the webhook's refusal", refused, 90, 2)
        assert "FailedUpdateScale" in text or "FailedRescale" in text
        assert op.get("mds", "autoscaled", "-n", NAMESPACE)["spec"]["replicas"] == 1
    finally:
        op.kubectl("delete", "hpa", "autoscaled", "-n", NAMESPACE, "--wait=false", check=False)
        external_metrics.delete(NAMESPACE, "vllm_num_requests_waiting")
        delete(op, "mds", "autoscaled")
        delete(op, "md", "autoscaled")


def test_deleting_the_scaler_leaves_the_replicas_as_they_are(op: Operator):
    apply(op, pair("kept", prefill=1, decode=1, router=False))
    apply(op, scaler("kept", "kept", 2, (("prefill", 1), ("decode", 1))))
    try:
        pods = wait_serving(op, "kept", {"prefill": 2, "decode": 2})
        delete(op, "mds", "kept")
        for _ in range(5):
            md = op.md("kept")
            assert declared(md) == {"prefill": 2, "decode": 2}
            time.sleep(1)
        assert uids(wait_serving(op, "kept", {"prefill": 2, "decode": 2})) == uids(pods)
    finally:
        delete(op, "md", "kept")

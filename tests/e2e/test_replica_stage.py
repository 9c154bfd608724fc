"""Why is my replica not serving? (docs/status.md#replica-stages, docs/operations.md#why-is-it-not-serving)

Each story makes a replica stop in one stage on real components and reads it twice: in
`status.roles[].notReady` and in `modeldeployment status` run against the cluster's kubeconfig.
On the real node (kubelet + containerd, the stub engine): an image that is not present (Pulling,
ErrImageNeverPull), an engine that exits at start (Failing, its exit code and restart count), a
slow start (Starting, the startup probe's budget), a replica no node has room for (Scheduling, the
scheduler's message: the kwok pools place through Kueue's topology-aware scheduling, which keeps a
replica that fits no node Queued rather than handing it to the scheduler). On the kwok pool: a quota
shortfall (Queued, Kueue's message); a preemption (two ClusterQueues of one Cohort: the lender
reclaims its cards from a borrower's replica, which is Leaving, then rebuilt and Queued / Evicted,
with Kueue's preemption message). Then `modeldeployment plan` is checked against what the operator then does: a scale-up, an image edit and
an env edit (the order the replicas roll in), a scale-down and a refused edit.

Every wait is bound by progress (a stage reached, a Pod created), with room for a loaded machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml

import cluster as e2e_cluster
import realnode as e2e_realnode
from md_operator import NAMESPACE, REPO, Operator

from app import vocab
from app.render import names

IT = e2e_realnode.REAL_NODE_INSTANCE_TYPE
H20 = "gpustack-nvidia-h20-linux-amd64"
A10G = "gpustack-nvidia-a10g-linux-amd64"
ABSENT_IMAGE = "localhost/modeldeployment-e2e/engine:absent"
#: The operator's ReplicaStuck threshold here (docs/status.md#events): short, so a story sees it.
STUCK_AFTER = 20


def _real_node_stories() -> Any:
    """Imported lazily (as test_scale_to_zero does): the stories' operator on the real pool."""
    import test_real_node_stories as stories
    return stories


@pytest.fixture(scope="module")
def op(control_plane: e2e_cluster.ControlPlane, real_node: e2e_realnode.RealNode,
       real_pool: e2e_realnode.RealPool) -> Iterator[Operator]:
    settings = {"MODELDEPLOYMENT_REPLICA_STUCK_AFTER_SECONDS": str(STUCK_AFTER)}
    with _real_node_stories().operator_on_the_real_pool(control_plane, real_node, real_pool, settings) as operator:
        yield operator


# --- helpers -----------------------------------------------------------------------------------


def md_spec(name: str, roles: list[dict[str, Any]], version: str = "0.33.0") -> dict[str, Any]:
    return {"apiVersion": "worker.gpustack.ai/v1", "kind": "ModelDeployment",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"model": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}, "engine": {"name": "vLLM", "version": version},
                     "roles": roles}}


def role(replicas: int = 1, instance_type: str = IT, cards: int = 1, **extra: Any) -> dict[str, Any]:
    return {"name": "server", "replicas": replicas, "instanceType": instance_type,
            "resources": {"accelerator": cards}, **extra}


def kwok_md(name: str, replicas: int, instance_type: str = A10G, cards: int = 1, **extra: Any) -> dict[str, Any]:
    return md_spec(name, [role(replicas, instance_type, cards, **extra)], version="0.29.0")


def apply(op: Operator, obj: dict[str, Any], check: bool = True) -> subprocess.CompletedProcess[str]:
    return op.kubectl("apply", "-f", "-", input=yaml.safe_dump(obj), check=check)


def delete_md(op: Operator, *names: str) -> None:
    for name in names:
        op.kubectl("delete", "md", name, "-n", NAMESPACE, "--wait=false", check=False)
    for name in names:
        op.wait(f"md {name} and its Pods to be gone",
                lambda: op.kubectl("get", "md", name, "-n", NAMESPACE, check=False).returncode != 0
                and not op.pods(name), 240)


def entry(md: dict[str, Any], ordinal: int = 0, role_name: str = "server") -> dict[str, Any] | None:
    for r in (md.get("status") or {}).get("roles") or []:
        if r.get("name") == role_name:
            return next((e for e in r.get("notReady") or [] if e.get("ordinal") == ordinal), None)
    return None


def stage_reached(op: Operator, name: str, what: str, predicate: Callable[[dict[str, Any]], bool],
                  timeout: float = 240.0) -> tuple[dict[str, Any], dict[str, Any]]:
    """One read of the deployment whose replica 0 satisfies `predicate`: (the deployment, its entry)."""
    def read() -> tuple[dict[str, Any], dict[str, Any]] | None:
        md = op.md(name)
        found = entry(md)
        return (md, found) if found is not None and predicate(found) else None

    return op.wait(what, read, timeout, 1.0)


def cli(op: Operator, *args: str) -> subprocess.CompletedProcess[str]:
    """`modeldeployment …` as a user runs it, with the cluster's kubeconfig."""
    return subprocess.run([sys.executable, "-m", "app.cli", *args, "--kubeconfig", str(op.cp.kubeconfig)],
                          capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={k: v for k, v in os.environ.items() if not k.startswith("MODELDEPLOYMENT_")})


def status_row(op: Operator, name: str, replica: str = "r0") -> list[str]:
    out = cli(op, "status", name, "-n", NAMESPACE)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[1].split()[:3] == ["ROLE", "REPLICA", "STAGE"], out.stdout
    row = next((line.split() for line in lines[2:] if line.split()[:2] == ["server", replica]), None)
    assert row is not None, out.stdout
    return row


# --- the real node -------------------------------------------------------------------------------


def test_pulling_failing_and_starting_show_in_the_status_and_the_cli(op: Operator) -> None:
    apply(op, md_spec("pull", [role(image=ABSENT_IMAGE, imagePullPolicy="Never")]))
    apply(op, md_spec("crash", [role(env=[{"name": "STUB_EXIT_CODE", "value": "3"}])]))
    apply(op, md_spec("slow", [role(env=[{"name": "STUB_LOAD_SECONDS", "value": "3000"}])]))
    try:
        _, pulling = stage_reached(op, "pull", "pull's replica Pulling (ErrImageNeverPull)",
                                   lambda e: (e["stage"], e["reason"]) == (vocab.STAGE_PULLING, "ErrImageNeverPull"))
        assert ABSENT_IMAGE in pulling["message"], pulling
        _, failing = stage_reached(op, "crash", "crash's replica Failing after a restart",
                                   lambda e: e["stage"] == vocab.STAGE_FAILING and "restarted 0 " not in e["message"])
        assert failing["reason"] == "Error" and "exited with code 3" in failing["message"], failing
        pod = op.pods("crash")[0]
        restarts = pod["status"]["containerStatuses"][0]["restartCount"]
        assert restarts >= 1 and pod["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] == 3
        md, starting = stage_reached(op, "slow", "slow's replica Starting on its startup probe",
                                     lambda e: e["reason"] == vocab.STAGE_REASON_STARTUP_PROBE)
        assert starting["stage"] == vocab.STAGE_STARTING
        assert starting["startupBudgetSeconds"] == vocab.STARTUP_PERIOD_SECONDS * vocab.STARTUP_FAILURE_THRESHOLD
        engine = op.pods("slow")[0]["status"]["containerStatuses"][0]
        assert starting["startedAt"] == engine["state"]["running"]["startedAt"]

        # The same, through `modeldeployment status`.
        row = status_row(op, "pull")
        assert row[2:4] == [vocab.STAGE_PULLING, "ErrImageNeverPull"] and row[6] == e2e_realnode.REAL_NODE_NAME, row
        # As a kubectl plugin: kubectl finds `kubectl-md` (installed with the package) on PATH.
        plugin = subprocess.run([str(op.cp.kubectl_path), "md", "status", "pull", "-n", NAMESPACE,
                                 "--kubeconfig", str(op.cp.kubeconfig)], capture_output=True, text=True, timeout=120,
                                env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"})
        assert plugin.returncode == 0 and "ErrImageNeverPull" in plugin.stdout, plugin.stdout + plugin.stderr
        row = status_row(op, "crash")
        assert row[2:4] == [vocab.STAGE_FAILING, "Error"], row
        row = status_row(op, "slow")
        assert row[2:4] == [vocab.STAGE_STARTING, vocab.STAGE_REASON_STARTUP_PROBE], row
        assert row[4].endswith("s/3600s"), row  # the elapsed time against the budget

        # No churn: while slow stays Starting, a periodic resync (60 s) passes and its status is not
        # rewritten (the same resourceVersion: Metacontroller writes only a changed status).
        version = md["metadata"]["resourceVersion"]
        time.sleep(75)
        again = op.md("slow")
        assert entry(again) == starting and again["metadata"]["resourceVersion"] == version

        # ReplicaStuck: once per stage, past the threshold.
        def stuck() -> list[dict[str, Any]]:
            events = op.get("events", "-n", NAMESPACE, "--field-selector", "involvedObject.name=pull")["items"]
            return [e for e in events if e["reason"] == vocab.EVENT_REPLICA_STUCK]

        [event] = op.wait("a ReplicaStuck Event for pull", stuck, 180, 2)
        assert event["type"] == "Warning" and vocab.STAGE_PULLING in event["message"], event
        assert "ErrImageNeverPull" in event["message"] and "pull-server-r0" in event["message"]
        assert (event.get("count") or 1) == 1 and len(stuck()) == 1
    finally:
        delete_md(op, "pull", "crash", "slow")


def test_a_replica_no_node_has_room_for_is_scheduling_with_the_schedulers_message(
        op: Operator, real_node: e2e_realnode.RealNode) -> None:
    """The real node's CPU taken by a Pod outside Kueue (placed on it by name): the replica is
    within the pool's quota, so Kueue admits it, and the scheduler finds no node with room."""
    blocker = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "cpu-blocker", "namespace": NAMESPACE},
               "spec": {"nodeName": e2e_realnode.REAL_NODE_NAME, "terminationGracePeriodSeconds": 1,
                        "tolerations": [{"key": e2e_realnode.REAL_NODE_TAINT_KEY, "operator": "Exists"}],
                        "containers": [{"name": "pause", "image": real_node._pause_image()[0],
                                        "imagePullPolicy": "Never",
                                        "resources": {"requests": {"cpu": "1900m", "memory": "16Mi"},
                                                      "limits": {"cpu": "1900m", "memory": "16Mi"}}}]}}
    apply(op, blocker)
    try:
        apply(op, md_spec("big", [role()]))
        _, scheduling = stage_reached(op, "big", "big's replica Scheduling",
                                      lambda e: e["stage"] == vocab.STAGE_SCHEDULING
                                      and e["reason"] == vocab.STAGE_REASON_UNSCHEDULABLE)
        pod = op.pods("big")[0]
        cond = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
        assert cond["reason"] == vocab.STAGE_REASON_UNSCHEDULABLE and cond["message"] in scheduling["message"]
        assert "Insufficient cpu" in scheduling["message"], scheduling
        row = status_row(op, "big")
        assert row[2:4] == [vocab.STAGE_SCHEDULING, vocab.STAGE_REASON_UNSCHEDULABLE] and row[6] == "-", row
    finally:
        op.kubectl("delete", "pod", "cpu-blocker", "-n", NAMESPACE, "--wait=false", check=False)
        delete_md(op, "big")


# --- the kwok pool -----------------------------------------------------------------------------


def test_a_quota_shortfall_is_queued_with_kueues_message(op: Operator) -> None:
    """The H20 pool's 16 cards held by one deployment: another's replica waits for quota."""
    apply(op, kwok_md("hog", 2, H20, 8))
    try:
        op.wait("hog Ready", lambda: (op.md("hog").get("status") or {}).get("phase") == "Ready", 240, 2)
        apply(op, kwok_md("starved", 1, H20, 8))
        _, queued = stage_reached(op, "starved", "starved's replica Queued for quota",
                                  lambda e: e["reason"] == vocab.STAGE_REASON_QUOTA_PENDING
                                  and "insufficient" in e["message"])
        assert queued["stage"] == vocab.STAGE_QUEUED and "nvidia.com/gpu" in queued["message"], queued
        row = status_row(op, "starved")
        assert row[2:4] == [vocab.STAGE_QUEUED, vocab.STAGE_REASON_QUOTA_PENDING], row
    finally:
        delete_md(op, "hog", "starved")


PREEMPT = "e2e-preempt"
HOLD = "e2e.modeldeployment/hold"


def release(op: Operator, pod: str) -> None:
    """Take our finalizer off the Pod (a merge patch writes the list whole: the others kept)."""
    finalizers = op.get("pod", pod, "-n", NAMESPACE)["metadata"].get("finalizers") or []
    op.kubectl("patch", "pod", pod, "-n", NAMESPACE, "--type=merge", "-p",
               json.dumps({"metadata": {"finalizers": [f for f in finalizers if f != HOLD]}}), check=False)


def preemption_pool() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Two pools over one flavor (the H20 nodes, placed through the same topology as the H20 pool),
    their ClusterQueues in one Cohort: the lender owns 2 cards and reclaims them (reclaimWithinCohort),
    the borrower owns none. Each ClusterQueue lists our joint AdmissionCheck, as the pools do
    (manifests/kueue); each InstanceType names its LocalQueue in status.entrance."""
    world = [o for o in yaml.safe_load_all((REPO / "examples" / "world" / "instancetypes.yaml").read_text()) if o]
    h20 = next(o for o in world if o["kind"] == "InstanceType" and o["metadata"]["name"] == H20)
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": PREEMPT},
              "spec": {"nodeLabels": {"gpustack.ai/instance-type": H20}, "topologyName": "gpustack-rack-host"}}
    kueue, types = [flavor], []
    for side, cards in (("lender", 2), ("borrower", 0)):
        name = f"{PREEMPT}-{side}"
        spec: dict[str, Any] = {
            "cohortName": PREEMPT, "namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO",
            "admissionChecksStrategy": {"admissionChecks": [{"name": "gpustack-model-deployment-joint"}]},
            "resourceGroups": [{"coveredResources": ["cpu", "memory", "ephemeral-storage", "nvidia.com/gpu"],
                                "flavors": [{"name": PREEMPT, "resources": [
                                    {"name": "cpu", "nominalQuota": "64"}, {"name": "memory", "nominalQuota": "256Gi"},
                                    {"name": "ephemeral-storage", "nominalQuota": "200Gi"},
                                    {"name": "nvidia.com/gpu", "nominalQuota": str(cards)}]}]}]}
        if side == "lender":
            spec["preemption"] = {"reclaimWithinCohort": "Any"}
        kueue += [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name},
                   "spec": spec},
                  {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                   "metadata": {"name": name, "namespace": NAMESPACE}, "spec": {"clusterQueue": name}}]
        it = json.loads(json.dumps(h20))
        it["metadata"] = {"name": name}
        it["spec"]["unitResources"] = {"cpu": "2", "ram": "8Gi"}
        it["status"].update(entrance=name, accelerator={"capacity": 2, "remaining": 2, "onceMaxRequest": 2})
        types.append(it)
    return kueue, types


def test_a_preempted_replica_is_queued_with_kueues_preemption_message(op: Operator) -> None:
    """A deployment borrowing the lender's cards serves; one in the lender's queue needs them back:
    Kueue preempts the borrower (reclamation within the cohort). The preempted replica is rebuilt
    and waits for quota, Queued / Evicted with Kueue's words naming its preemptor."""
    kueue, types = preemption_pool()
    op.cp.apply(kueue)
    for it in types:
        status = it.pop("status")
        op.cp.apply(it)
        op.kubectl("patch", "instancetypes.worker.gpustack.ai", it["metadata"]["name"], "--subresource=status",
                   "--type=merge", "-p", json.dumps({"status": status}))
    try:
        apply(op, kwok_md("borrower", 1, f"{PREEMPT}-borrower", 2))
        op.wait("borrower Ready", lambda: (op.md("borrower").get("status") or {}).get("phase") == "Ready", 240, 2)
        # A kwok Pod is gone the moment it is deleted; a kubelet takes its grace period. Our
        # finalizer stands for that while the story reads the replica Leaving.
        [held] = op.pods("borrower")
        op.kubectl("patch", "pod", held["metadata"]["name"], "-n", NAMESPACE, "--type=json", "-p",
                   json.dumps([{"op": "add", "path": "/metadata/finalizers/-", "value": HOLD}]))
        apply(op, kwok_md("lender", 1, f"{PREEMPT}-lender", 2))
        _, leaving = stage_reached(op, "borrower", "borrower's replica Leaving, preempted",
                                   lambda e: e["reason"] == vocab.STAGE_REASON_DEPARTED
                                   and "Preempted to accommodate" in e["message"])
        assert leaving["stage"] == vocab.STAGE_LEAVING, leaving
        row = status_row(op, "borrower")
        assert row[2:4] == [vocab.STAGE_LEAVING, vocab.STAGE_REASON_DEPARTED], row
        assert "reclamation within the cohort" in " ".join(row[7:]), row
        release(op, held["metadata"]["name"])

        op.wait("lender Ready on the reclaimed cards",
                lambda: (op.md("lender").get("status") or {}).get("phase") == "Ready", 240, 2)
        _, queued = stage_reached(op, "borrower", "borrower's replica rebuilt and Queued for quota, preempted",
                                  lambda e: e["reason"] == vocab.STAGE_REASON_EVICTED
                                  and "insufficient unused quota" in e["message"]
                                  and "Preempted to accommodate" in e["message"])
        assert queued["stage"] == vocab.STAGE_QUEUED, queued
        # Kueue's own words (its Preempted condition, pkg/scheduler/preemption): the preemptor's
        # Workload, the reason, both ClusterQueues; first what the rebuilt replica waits for.
        lender_group = names.pod_group(NAMESPACE, "lender", "server", 0)
        lender_uid = op.get("workloads.kueue.x-k8s.io", lender_group, "-n", NAMESPACE)["metadata"]["uid"]
        assert f"Preempted to accommodate a workload (UID: {lender_uid}," in queued["message"], queued
        assert "due to reclamation within the cohort" in queued["message"], queued
        assert f"preemptor path: /{PREEMPT}/{PREEMPT}-lender; preemptee path: /{PREEMPT}/{PREEMPT}-borrower" \
            in queued["message"], queued
        assert f"insufficient unused quota for nvidia.com/gpu in flavor {PREEMPT}" in queued["message"], queued
        row = status_row(op, "borrower")
        assert row[2:4] == [vocab.STAGE_QUEUED, vocab.STAGE_REASON_EVICTED], row
        assert "reclamation within the cohort" in " ".join(row[7:]), row
    finally:
        for pod in op.pods("borrower"):
            if HOLD in (pod["metadata"].get("finalizers") or []):
                release(op, pod["metadata"]["name"])
        delete_md(op, "borrower", "lender")
        for it in types:
            op.kubectl("delete", "instancetypes.worker.gpustack.ai", it["metadata"]["name"], "--wait=false", check=False)
        for obj in reversed(kueue):
            ns = ["-n", NAMESPACE] if obj["kind"] == "LocalQueue" else []
            op.kubectl("delete", f"{obj['kind'].lower()}s.kueue.x-k8s.io", obj["metadata"]["name"], *ns,
                       "--wait=false", check=False)


def plan(op: Operator, obj: dict[str, Any], tmp: Any) -> subprocess.CompletedProcess[str]:
    path = tmp / f"{obj['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(obj))
    return cli(op, "plan", "-f", str(path))


def ordinals(op: Operator, name: str) -> dict[int, dict[str, Any]]:
    """One read: ordinal -> its live Pod (not being deleted)."""
    return {int(p["metadata"]["labels"][vocab.LABEL_POD_ORDINAL]): p for p in op.pods(name)
            if not p["metadata"].get("deletionTimestamp")}


def all_ready(op: Operator, name: str, replicas: int) -> bool:
    md = op.md(name)
    return (md.get("status") or {}).get("phase") == "Ready" and md["status"]["roles"][0]["desired"] == replicas \
        and md["metadata"].get("generation") == md["status"].get("observedGeneration")


def roll_as_planned(op: Operator, obj: dict[str, Any], tmp: Any) -> None:
    """`plan` names r0 now and r1, r2 after it; applied, the operator replaces them in that order."""
    out = plan(op, obj, tmp)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "replaced now: planned-server-r0" in out.stdout, out.stdout
    assert "Ready: planned-server-r1, planned-server-r2" in out.stdout, out.stdout
    before = {o: p["metadata"]["uid"] for o, p in ordinals(op, "planned").items()}
    apply(op, obj)
    order: list[int] = []

    def rolled() -> bool:
        for ordinal, pod in sorted(ordinals(op, "planned").items()):
            if pod["metadata"]["uid"] != before.get(ordinal) and ordinal not in order:
                order.append(ordinal)
        return len(order) == 3

    op.wait("every replica replaced", rolled, 300, 0.5)
    assert order == [0, 1, 2], order
    op.wait("planned Ready after the roll", lambda: all_ready(op, "planned", 3), 240, 2)


def test_plan_agrees_with_what_the_operator_then_does(op: Operator, tmp_path: Any) -> None:
    obj = kwok_md("planned", 2)
    apply(op, obj)
    try:
        op.wait("planned Ready", lambda: all_ready(op, "planned", 2), 240, 2)

        # A scale-up: the plan adds r2, and the operator creates r2.
        obj["spec"]["roles"][0]["replicas"] = 3
        out = plan(op, obj, tmp_path)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "role server: 2 -> 3 replicas" in out.stdout and "added: planned-server-r2" in out.stdout, out.stdout
        assert ordinals(op, "planned").keys() == {0, 1}  # plan wrote nothing
        apply(op, obj)
        op.wait("planned scaled to 3 and Ready", lambda: all_ready(op, "planned", 3), 240, 2)
        assert ordinals(op, "planned").keys() == {0, 1, 2}

        # An image edit, then an env edit: r0 now, then r1, r2 one at a time; the operator replaces
        # them in that order.
        obj["spec"]["roles"][0]["image"] = "example.com/engine:v2"
        roll_as_planned(op, obj, tmp_path)
        obj["spec"]["roles"][0]["env"] = [{"name": "EXTRA_FLAG", "value": "1"}]
        roll_as_planned(op, obj, tmp_path)

        # A scale-down: the plan sheds r1 and r2, and the operator removes exactly those.
        obj["spec"]["roles"][0]["replicas"] = 1
        out = plan(op, obj, tmp_path)
        assert "shed (scale-down): planned-server-r1, planned-server-r2" in out.stdout, out.stdout
        apply(op, obj)
        op.wait("planned down to r0", lambda: ordinals(op, "planned").keys() == {0} and all_ready(op, "planned", 1),
                240, 2)

        # A refused edit: the plan gives the webhook's refusal, and so does the API server.
        refused = json.loads(json.dumps(obj))
        refused["spec"]["roles"][0]["instanceType"] = H20
        out = plan(op, refused, tmp_path)
        assert out.returncode == 1 and "refused" in out.stdout, out.stdout + out.stderr
        applied = apply(op, refused, check=False)
        assert applied.returncode != 0
        assert "instanceType" in out.stdout and "instanceType" in applied.stderr, \
            (out.stdout, applied.stderr)
    finally:
        delete_md(op, "planned")

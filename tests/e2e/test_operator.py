"""The product end to end, the way a user drives it: kubectl against a real control plane.

Real kube-apiserver and etcd, our webhooks over TLS, real Kueue (plain Pod groups, our joint
AdmissionCheck on the ClusterQueues) and real Metacontroller calling our hooks; kwok plays the
GPU nodes and the kubelet.
"""

from __future__ import annotations

import contextlib
import copy
import json
import subprocess
import threading
import time
from typing import Any, Callable, Iterator

import pytest
import yaml

import cluster as e2e_cluster
from md_operator import NAMESPACE, REPO, Operator, start_operator

EXAMPLES = REPO / "examples" / "deployments"


@pytest.fixture(scope="module")
def op(control_plane: e2e_cluster.ControlPlane) -> Iterator[Operator]:
    operator = start_operator(control_plane)
    yield operator
    operator.stop()


def example(name: str) -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())


def small(name: str, *, replicas: int = 2, instance_type: str = "gpustack-nvidia-a10g-linux-amd64",
          cards: int | None = 1, roles: list[dict] | None = None) -> dict[str, Any]:
    role: dict[str, Any] = {"name": "server", "replicas": replicas, "instanceType": instance_type}
    if cards is not None:
        role["resources"] = {"accelerator": cards}
    return {"apiVersion": "worker.gpustack.ai/v1", "kind": "ModelDeployment",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"model": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}, "engine": {"name": "vLLM", "version": "0.29.0"},
                     "roles": roles or [role]}}


def apply(op: Operator, obj: dict[str, Any], *, check: bool = True):
    return op.kubectl("apply", "-f", "-", input=yaml.safe_dump(obj), check=check)


def delete(op: Operator, name: str) -> None:
    op.kubectl("delete", "md", name, "-n", NAMESPACE, "--wait=false", check=False)
    op.wait(f"md {name} to be gone",
            lambda: op.kubectl("get", "md", name, "-n", NAMESPACE, check=False).returncode != 0, 120)


def serving(op: Operator, name: str) -> list[dict[str, Any]]:
    """Pods of the deployment that are Running and Ready on a node."""
    out = []
    for pod in op.pods(name):
        conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
        if pod["status"].get("phase") == "Running" and conditions.get("Ready") == "True" \
                and not pod["metadata"].get("deletionTimestamp"):
            out.append(pod)
    return out


def workloads(op: Operator) -> dict[str, dict[str, Any]]:
    return {w["metadata"]["name"]: w for w in op.get("workloads.kueue.x-k8s.io", "-n", NAMESPACE)["items"]}


def admitted(workload: dict[str, Any]) -> bool:
    return any(c["type"] == "Admitted" and c["status"] == "True"
               for c in workload.get("status", {}).get("conditions", []))


def phase(op: Operator, name: str) -> str | None:
    return op.md(name).get("status", {}).get("phase")


def pod_ready(pod: dict[str, Any]) -> bool:
    conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
    return (pod.get("status", {}).get("phase") == "Running" and conditions.get("Ready") == "True"
            and not pod["metadata"].get("deletionTimestamp"))


class ReadyWatch:
    """Polls a deployment's Pods straight from the API server (several times a second, in a thread)
    and keeps the fewest Ready replicas seen at any observation."""

    def __init__(self, op: Operator, name: str) -> None:
        self.http = op.cp.http_client(timeout=5)
        self.url = f"/api/v1/namespaces/{NAMESPACE}/pods"
        self.selector = f"app.kubernetes.io/instance={name}"
        self.fewest: int | None = None
        self.observations = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def ready(self) -> int:
        pods = self.http.get(self.url, params={"labelSelector": self.selector}).json()["items"]
        return sum(1 for p in pods if pod_ready(p))

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                count = self.ready()
                self.fewest = count if self.fewest is None else min(self.fewest, count)
                self.observations += 1
            self._stop.wait(0.2)

    def __enter__(self) -> "ReadyWatch":
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join(10)
        self.http.close()


def rolled_to(op: Operator, name: str, image: str, replicas: int) -> bool:
    """One read of the Pods: exactly `replicas` of them, each serving `image`."""
    pods = op.pods(name)
    return len(pods) == replicas and all(pod_ready(p) and p["spec"]["containers"][0]["image"] == image for p in pods)


def md_when(op: Operator, name: str, what: str, predicate: Callable[[dict[str, Any]], bool],
            timeout: float = 120.0, interval: float = 1.0) -> dict[str, Any]:
    """Waits until one read of the deployment satisfies `predicate` and returns that read, so what a
    test asserts next comes from the same object the wait saw (its status moves between reads)."""
    return op.wait(what, lambda: (lambda md: md if predicate(md) else None)(op.md(name)), timeout, interval)


def ready(md: dict[str, Any]) -> bool:
    return md.get("status", {}).get("phase") == "Ready"


# --- admission ---------------------------------------------------------------------------------


def test_every_example_is_accepted_and_listed(op: Operator):
    for path in sorted(EXAMPLES.glob("*.yaml")):
        result = op.kubectl("apply", "--dry-run=server", "-f", str(path), check=False)
        assert result.returncode == 0, (path.name, result.stderr)
    apply(op, small("listed", replicas=1))
    try:
        op.wait("status written", lambda: op.md("listed").get("status", {}).get("phase"), 60)
        # The columns `kubectl get md` prints are the server's Table for the CRD's printer columns;
        # one read returns them with the object they were computed from (the status moves while the
        # replica starts, so a second read could disagree with the first).
        with op.cp.http_client(timeout=10) as http:
            table = http.get(f"/apis/worker.gpustack.ai/v1/namespaces/{NAMESPACE}/modeldeployments/listed",
                             params={"includeObject": "Object"},
                             headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}).json()
        columns = [c["name"].upper() for c in table["columnDefinitions"] if c["priority"] == 0]
        assert columns == ["NAME", "ENGINE", "ROLES", "PHASE", "ENDPOINT", "AGE"]
        row = dict(zip([c["name"].upper() for c in table["columnDefinitions"]], table["rows"][0]["cells"]))
        status = table["rows"][0]["object"]["status"]
        assert (row["NAME"], row["ENGINE"], row["ROLES"], row["PHASE"]) == \
            ("listed", "vLLM", status["roleSummary"], status["phase"])
        assert row["ENDPOINT"] == status["endpoint"] == "http://listed-server.team-a.svc:8000"
        # kubectl prints that Table (its header and the columns that do not move).
        header, line = op.kubectl("get", "md", "listed", "-n", NAMESPACE).stdout.splitlines()[:2]
        assert header.split() == columns and line.split()[:2] == ["listed", "vLLM"]
    finally:
        delete(op, "listed")


def test_mutating_webhook_defaults_the_accelerator(op: Operator):
    md = small("defaulted", cards=None, replicas=1)
    out = op.kubectl("apply", "--dry-run=server", "-o", "json", "-f", "-", input=yaml.safe_dump(md)).stdout
    assert json.loads(out)["spec"]["roles"][0]["resources"]["accelerator"] == 1


def test_explain_is_useful(op: Operator):
    text = op.kubectl("explain", "modeldeployment.spec.roles").stdout
    assert "replicas" in text and "instanceType" in text and "Pods per instance" in text


def test_refusals_name_the_field_path_and_the_way_out(op: Operator):
    md = small("refused")
    md["spec"]["roles"][0]["extraArgs"] = ["--kv_transfer_config", "{}"]
    md["spec"]["roles"][0]["env"] = [{"name": "GPUSTACK_REPLICA_SIZE", "value": "2"}]
    result = apply(op, md, check=False)
    assert result.returncode != 0
    assert "spec.roles[0].extraArgs[0]" in result.stderr and "roles[].command" in result.stderr
    assert "spec.roles[0].env[0]" in result.stderr


def test_frozen_field_edit_is_refused(op: Operator):
    md = small("frozen", replicas=1)
    apply(op, md)
    try:
        edited = copy.deepcopy(md)
        edited["spec"]["roles"][0]["instanceType"] = "gpustack-nvidia-h20-linux-amd64"
        result = apply(op, edited, check=False)
        assert result.returncode != 0 and "spec.roles[0].instanceType" in result.stderr
    finally:
        delete(op, "frozen")


# --- lifecycle ---------------------------------------------------------------------------------


def test_lifecycle_scale_roll_replace_and_delete(op: Operator):
    md = small("life", replicas=2)
    apply(op, md)
    pods = op.wait("2 Pods created", lambda: (lambda p: p if len(p) == 2 else None)(op.pods("life")))
    labels = pods[0]["metadata"]["labels"]
    assert labels["app.kubernetes.io/component"] == "server"
    assert labels["kueue.x-k8s.io/queue-name"] == "gpustack-nvidia-a10g-linux-amd64"
    assert labels["kueue.x-k8s.io/pod-group-name"].startswith("gpustack-fnv64-")
    first = op.wait("both replicas serving", lambda: (lambda s: s if len(s) == 2 else None)(serving(op, "life")), 180)
    status = md_when(op, "life", "phase Ready", ready, 60)["status"]
    assert status["roleSummary"] == "2S" and status["endpoint"] == "http://life-server.team-a.svc:8000"
    uids = {p["metadata"]["uid"] for p in first}

    # Scale up: the survivors keep their UIDs.
    md["spec"]["roles"][0]["replicas"] = 3
    apply(op, md)
    three = op.wait("3 replicas serving", lambda: (lambda s: s if len(s) == 3 else None)(serving(op, "life")), 180)
    assert uids <= {p["metadata"]["uid"] for p in three}

    # Scale down: the highest ordinal leaves with its Workload.
    groups = {p["metadata"]["labels"]["modeldeployment.gpustack.ai/pod-ordinal"]:
              p["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] for p in op.pods("life")}
    md["spec"]["roles"][0]["replicas"] = 2
    apply(op, md)
    op.wait("ordinal 2 gone", lambda: sorted(
        p["metadata"]["labels"]["modeldeployment.gpustack.ai/pod-ordinal"] for p in op.pods("life")) == ["0", "1"], 120)
    op.wait("its Workload deleted", lambda: groups["2"] not in workloads(op), 60)

    # An image edit rolls one replica at a time.
    with ReadyWatch(op, "life") as watch:
        md["spec"]["roles"][0]["image"] = "registry.local/vllm:edited"
        apply(op, md)
        op.wait("rollout finished", lambda: rolled_to(op, "life", "registry.local/vllm:edited", 2), 240)
    assert watch.observations > 10 and watch.fewest is not None and watch.fewest >= 1, vars(watch)

    # A deleted Pod is replaced under a new name once the old one is gone.
    victim = serving(op, "life")[0]
    op.kubectl("delete", "pod", victim["metadata"]["name"], "-n", NAMESPACE, "--wait=false")
    op.wait("replacement serving", lambda: (lambda s: len(s) == 2 and victim["metadata"]["uid"] not in
                                            {p["metadata"]["uid"] for p in s})(serving(op, "life")), 180)

    # Delete: finalize removes every Pod and Workload, then the object goes.
    names = {p["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] for p in op.pods("life")}
    delete(op, "life")
    assert not op.pods("life")
    assert not names & set(workloads(op))


def pd(name: str, cards: int) -> dict[str, Any]:
    roles = [{"name": "prefill", "kind": "Prefill", "replicas": 2, "instanceType": "gpustack-nvidia-h20-linux-amd64",
              "resources": {"accelerator": cards}},
             {"name": "decode", "kind": "Decode", "replicas": 2, "instanceType": "gpustack-nvidia-h20-linux-amd64",
              "resources": {"accelerator": cards}}]
    return small(name, roles=roles)


def test_joint_admission_admits_the_whole_set_or_nothing(op: Operator):
    # 4 groups x 8 cards on a 16-card pool: never all of them, so none may be admitted.
    apply(op, pd("too-big", 8))
    try:
        groups = op.wait("4 pod groups", lambda: (lambda g: g if len(g) == 4 else None)(_groups(op, "too-big")), 120)
        op.wait("4 Workloads composed", lambda: len(groups & set(workloads(op))) == 4, 120)
        for _ in range(10):
            ours = [w for n, w in workloads(op).items() if n in groups]
            assert not any(admitted(w) for w in ours), "a partial set was admitted"
            op.cp.check_alive()
            time.sleep(1)
        assert op.md("too-big")["status"]["phase"] == "Starting"
    finally:
        delete(op, "too-big")


def _groups(op: Operator, name: str) -> set[str]:
    return {p["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] for p in op.pods(name)}


def test_two_deployments_contending_for_one_pool_do_not_deadlock(op: Operator):
    # Each needs 4 x 4 = 16 cards of the 16-card pool: only one can run; one of them must.
    apply(op, pd("contend-a", 4))
    apply(op, pd("contend-b", 4))
    try:
        def one_running() -> bool:
            return any(len(serving(op, n)) == 4 for n in ("contend-a", "contend-b"))

        op.wait("one deployment fully admitted and serving", one_running, 240, 2)
    finally:
        delete(op, "contend-a")
        delete(op, "contend-b")


def test_a_new_binding_on_a_mixed_backend_is_refused_from_live_objects(op: Operator):
    # The webhook reads Binding -> pool -> backend live from the API server.
    backend = {"apiVersion": "worker.gpustack.ai/v1", "kind": "KVCacheBackend", "metadata": {"name": "mixed"},
               "spec": {"transport": {"protocol": "TCP"},
                        "members": [{"name": "a"}, {"name": "b", "transport": {"protocol": "RDMA"}}]}}
    pool = {"apiVersion": "worker.gpustack.ai/v1", "kind": "KVCachePool", "metadata": {"name": "mixed-pool"},
            "spec": {"backends": [{"name": "mixed"}]}}
    binding = {"apiVersion": "worker.gpustack.ai/v1", "kind": "KVCachePoolBinding",
               "metadata": {"name": "mixed-binding", "namespace": NAMESPACE},
               "spec": {"poolRef": {"name": "mixed-pool"}, "domain": {"name": "mixed", "blockSize": 64,
                                                                       "dtype": "bfloat16"}}}
    for obj in (backend, pool, binding):
        apply(op, obj)
    md = small("mixed-cache", replicas=1)
    md["spec"]["kvCache"] = {"poolRef": {"name": "mixed-binding"}}
    result = op.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(md), check=False)
    assert result.returncode != 0
    assert "spec.kvCache.poolRef.name" in result.stderr and "rdma, tcp" in result.stderr


# --- what only the real Metacontroller shows -------------------------------------------------


def roll_three_replicas(op: Operator, name: str, after_first_turnover: Callable[[], None] | None = None) -> ReadyWatch:
    """Three serving replicas, an image edit rolled to completion while Ready replicas are counted
    at every observation; `after_first_turnover` runs once the first new Pod exists."""
    md = small(name, replicas=3)
    apply(op, md)
    op.wait("3 replicas serving", lambda: len(serving(op, name)) == 3, 180)
    with ReadyWatch(op, name) as watch:
        md["spec"]["roles"][0]["image"] = "registry.local/vllm:v2"
        apply(op, md)
        if after_first_turnover is not None:
            op.wait("the first replica turned over", lambda: any(
                p["spec"]["containers"][0]["image"] == "registry.local/vllm:v2" for p in op.pods(name)), 120, 0.3)
            after_first_turnover()
        op.wait("rollout finished", lambda: rolled_to(op, name, "registry.local/vllm:v2", 3), 300)
    return watch


def test_a_three_replica_image_edit_keeps_two_replicas_ready_at_every_observation(op: Operator):
    try:
        watch = roll_three_replicas(op, "avail")
        assert watch.observations > 10 and watch.fewest is not None and watch.fewest >= 2, vars(watch)
        op.wait("phase Ready", lambda: phase(op, "avail") == "Ready", 60)
    finally:
        delete(op, "avail")


def test_metacontroller_restarted_mid_rollout_completes_it_with_the_invariant_held(op: Operator):
    try:
        watch = roll_three_replicas(op, "mcrestart", after_first_turnover=op.restart_metacontroller)
        assert watch.fewest is not None and watch.fewest >= 2, vars(watch)
    finally:
        delete(op, "mcrestart")


def test_a_replacement_is_admitted_on_composition_with_metacontroller_down(op: Operator):
    """docs/kueue.md#ready-on-composition: once the turnover's pass has created the replacement's
    Pod, no other pass is needed to admit it. The old Pods linger (a finalizer of ours), so no pass
    may write Ready first; with Metacontroller stopped they go, and the follow-up's Ready is what
    Kueue admits the replacement on."""
    name, lingering = "composed", "e2e.gpustack.ai/linger"
    md = small(name, replicas=2)
    apply(op, md)
    op.wait("2 replicas serving", lambda: len(serving(op, name)) == 2, 180)
    old = [p["metadata"]["name"] for p in op.pods(name)]
    for pod in old:
        op.kubectl("patch", "pod", pod, "-n", NAMESPACE, "--type=json",
                   "-p", json.dumps([{"op": "add", "path": "/metadata/finalizers/-", "value": lingering}]))
    try:
        md["spec"]["roles"][0]["image"] = "registry.local/vllm:v2"
        apply(op, md)
        new = op.wait("the replacement's Pod", lambda: [p for p in op.pods(name)
                                                         if p["spec"]["containers"][0]["image"] == "registry.local/vllm:v2"],
                      120, 0.3)
        group = new[0]["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"]
        op.wait("Kueue composed the replacement's group", lambda: group in workloads(op), 60, 0.3)
        assert not admitted(workloads(op)[group])  # its predecessor's Pod is still there
        op.cp.stop_component("metacontroller")
        try:
            for pod in old:
                op.kubectl("patch", "pod", pod, "-n", NAMESPACE, "--type=merge", "-p",
                           json.dumps({"metadata": {"finalizers": None}}), check=False)
            op.wait("the replacement admitted, with no pass", lambda: admitted(workloads(op).get(group, {})), 60, 0.3)
        finally:
            op.cp.start_component("metacontroller")
        op.wait("rollout finished", lambda: rolled_to(op, name, "registry.local/vllm:v2", 2), 240)
    finally:
        for pod in op.pods(name):
            if lingering in pod["metadata"].get("finalizers", []):
                op.kubectl("patch", "pod", pod["metadata"]["name"], "-n", NAMESPACE, "--type=merge", "-p",
                           json.dumps({"metadata": {"finalizers": None}}), check=False)
        delete(op, name)


def test_the_hooks_service_down_for_30s_deletes_nothing_and_the_same_pods_serve(op: Operator):
    apply(op, small("outage", replicas=2))
    try:
        op.wait("both replicas serving", lambda: len(serving(op, "outage")) == 2, 180)
        op.wait("phase Ready", lambda: phase(op, "outage") == "Ready", 60)
        standing = op.pods("outage")
        pods = {p["metadata"]["uid"] for p in standing}
        services = {s["metadata"]["uid"] for s in op.get("services", "-n", NAMESPACE,
                                                         "-l", "app.kubernetes.io/instance=outage")["items"]}
        groups = {p["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] for p in standing}
        workload_uids = {w["metadata"]["uid"] for n, w in workloads(op).items() if n in groups}
        assert len(workload_uids) == 2

        def poke() -> None:
            # A child changes while the hooks are down: Metacontroller calls sync, gets no answer, retries.
            for pod in op.pods("outage"):
                op.kubectl("annotate", "pod", pod["metadata"]["name"], "-n", NAMESPACE, "--overwrite",
                           f"e2e.gpustack.ai/poke={time.monotonic_ns()}")

        logs = [op.cp.log_paths()[r.name] for r in op.replicas]
        op.stop_replicas()  # every replica down: the hooks address refuses connections
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                poke()
                assert {p["metadata"]["uid"] for p in op.pods("outage")} == pods
                time.sleep(3)
        finally:
            restarted_at = [log.stat().st_size for log in logs]
            op.start_replicas()
        # Metacontroller backs off exponentially after failed calls (up to 1000 s); the next event
        # on a child or the parent brings the deployment back at once.
        poke()
        mc_log = op.cp.log_paths()["metacontroller"].read_text(errors="replace")
        assert f"127.0.0.1:{op.hooks_port}" in mc_log and "connection refused" in mc_log
        op.wait("a sync answered after the outage",
                lambda: any("sync team-a/outage" in _read_from(log, at) for log, at in zip(logs, restarted_at)), 60)
        assert {p["metadata"]["uid"] for p in serving(op, "outage")} == pods
        assert {s["metadata"]["uid"] for s in op.get("services", "-n", NAMESPACE,
                                                     "-l", "app.kubernetes.io/instance=outage")["items"]} == services
        assert {w["metadata"]["uid"] for n, w in workloads(op).items() if n in groups} == workload_uids
        assert phase(op, "outage") == "Ready"
    finally:
        delete(op, "outage")


def _read_from(path, offset: int) -> str:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def test_deletion_goes_through_the_finalizer_pods_and_workloads_first(op: Operator):
    apply(op, small("final", replicas=2))
    standing = op.wait("both replicas serving",
                       lambda: (lambda s: s if len(s) == 2 else None)(serving(op, "final")), 180)
    finalizer = "metacontroller.io/compositecontroller-modeldeployment"
    assert finalizer in op.md("final")["metadata"].get("finalizers", [])
    groups = {p["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] for p in standing}
    # A watch sees every state the parent passes through, however fast finalize is (polling could miss
    # the terminating state between two reads).
    watch = subprocess.Popen([op.cp.kubectl_path, f"--kubeconfig={op.cp.kubeconfig}", "get", "md", "final", "-n",
                              NAMESPACE, "--watch", "--output-watch-events", "-o", "json"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        time.sleep(1)  # the watch is established before the delete
        op.kubectl("delete", "md", "final", "-n", NAMESPACE, "--wait=false")
        op.wait("the deployment to be finalized",
                lambda: op.kubectl("get", "md", "final", "-n", NAMESPACE, check=False).returncode != 0, 120, 0.5)
    finally:
        time.sleep(1)
        watch.terminate()
        out, _ = watch.communicate(timeout=10)
    events = [json.loads(doc) for doc in _json_documents(out)]
    kinds = [e["type"] for e in events]
    terminating = [e for e in events if e["object"]["metadata"].get("deletionTimestamp")]
    # The parent went through its finalizer and went last: by then nothing of it is left.
    assert "DELETED" in kinds and terminating, kinds
    assert finalizer in terminating[0]["object"]["metadata"].get("finalizers", [])
    assert not op.pods("final")
    assert not groups & set(workloads(op))


def _json_documents(text: str) -> list[str]:
    """The JSON documents of kubectl's watch output, one after another (not one per line)."""
    decoder = json.JSONDecoder()
    docs, index = [], 0
    while index < len(text):
        while index < len(text) and text[index].isspace():
            index += 1
        if index >= len(text):
            break
        obj, end = decoder.raw_decode(text, index)
        docs.append(json.dumps(obj))
        index = end
    return docs


def _patch_status(op: Operator, kind: str, name: str, status: dict[str, Any], namespace: str | None = None) -> None:
    ns = ["-n", namespace] if namespace else []
    op.kubectl("patch", f"{kind}.worker.gpustack.ai", name, *ns, "--subresource=status", "--type=merge",
               "-p", json.dumps({"status": status}))


def _images(op: Operator, name: str) -> set[str]:
    return {p["spec"]["containers"][0]["image"] for p in op.pods(name)}


def test_related_objects_changing_resync_and_roll_deployments_without_an_edit(op: Operator):
    a10g = "gpustack-nvidia-a10g-linux-amd64"
    plain = small("related", replicas=2)  # no image: synthesized from the InstanceType's runtime
    cached = small("related-cached", replicas=2)
    cached["spec"]["kvCache"] = {"poolRef": {"name": "team-a-dram"}}
    apply(op, plain)
    apply(op, cached)
    try:
        settled = {n: md_when(op, n, f"{n} Ready", ready, 240) for n in ("related", "related-cached")}
        assert _images(op, "related") == {"gpustack/runner:cuda12.9-vllm0.29.0"}
        generations = {n: md["metadata"]["generation"] for n, md in settled.items()}

        # The InstanceType's runtime version moves (a driver rollout finished): every deployment on
        # the type rolls to the new image, one replica at a time.
        with ReadyWatch(op, "related") as watch:
            _patch_status(op, "instancetypes", a10g, {"detail": {"runtimeVersion": "13.0", "runtimeVersions": ["13.0"]}})
            op.wait("rolled to the new runtime", lambda: rolled_to(
                op, "related", "gpustack/runner:cuda13.0-vllm0.29.0", 2), 300)
        assert watch.fewest is not None and watch.fewest >= 1

        # The pool publishes a new master endpoint: the cached deployment's client config changes.
        endpoint = "moved-master.gpustack-system.svc:50051"
        _patch_status(op, "kvcachepools", "shared-dram", {"clientEndpoint": endpoint})
        op.wait("the cached replicas rolled to the new endpoint", lambda: (lambda pods: len(pods) == 2
                and all(pod_ready(p) and endpoint in json.dumps(p["metadata"].get("annotations", {}))
                        for p in pods))(op.pods("related-cached")), 300)

        # The Binding stops being Ready: status says so, nothing running is deleted.
        uids = {p["metadata"]["uid"] for p in op.pods("related-cached")}
        _patch_status(op, "kvcachepoolbindings", "team-a-dram", {"phase": "Provisioning"}, NAMESPACE)

        def domain_condition() -> dict[str, Any] | None:
            for cond in op.md("related-cached").get("status", {}).get("conditions", []):
                if cond["type"] == "DomainRegistered":
                    return cond
            return None

        op.wait("DomainRegistered False/BindingNotReady", lambda: (domain_condition() or {}).get("reason")
                == "BindingNotReady", 60)
        assert {p["metadata"]["uid"] for p in op.pods("related-cached")} == uids
        _patch_status(op, "kvcachepoolbindings", "team-a-dram", {"phase": "Ready"}, NAMESPACE)
        op.wait("DomainRegistered True again", lambda: (domain_condition() or {}).get("status") == "True", 60)
        # No edit was made to either deployment.
        assert {n: op.md(n)["metadata"]["generation"] for n in ("related", "related-cached")} == generations
    finally:
        _patch_status(op, "instancetypes", a10g, {"detail": {"runtimeVersion": "12.9", "runtimeVersions": ["12.9"]}})
        _patch_status(op, "kvcachepools", "shared-dram",
                      {"clientEndpoint": "shared-dram-master.gpustack-system.svc:50051"})
        _patch_status(op, "kvcachepoolbindings", "team-a-dram", {"phase": "Ready"}, NAMESPACE)
        delete(op, "related")
        delete(op, "related-cached")


# Examples that share the H20 pool's 16 cards run in separate waves.
EXAMPLE_WAVES = [["ascend-sglang", "pd-pair", "qwen-cached", "qwen-chat"], ["deepseek-multinode"]]


def test_every_example_applied_with_kubectl_reaches_ready(op: Operator):
    assert sorted(n for wave in EXAMPLE_WAVES for n in wave) == sorted(p.stem for p in EXAMPLES.glob("*.yaml"))
    for wave in EXAMPLE_WAVES:
        deployed = []
        try:
            for stem in wave:
                op.kubectl("apply", "-f", str(EXAMPLES / f"{stem}.yaml"))
                deployed.append(example(stem)["metadata"]["name"])
            for name in deployed:
                md = md_when(op, name, f"example {name} Ready", ready, 300, 2)
                for role in md["spec"]["roles"]:
                    status = next(r for r in md["status"]["roles"] if r["name"] == role["name"])
                    assert status["ready"] == role["replicas"], (name, status)
        finally:
            for name in deployed:
                delete(op, name)

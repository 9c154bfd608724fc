"""The operator under test, installed on the loopback control plane in the documented order
(docs/operations.md#install): Metacontroller (started with the control plane, its CRDs
included), our CRDs, the webhook configurations, the operator, then the CompositeController.

- our service runs as a process: TLS for the admission webhooks (a serving cert from the control
  plane's CA), plain HTTP for Metacontroller's hooks;
- the CRDs come from manifests/crds; the webhook configurations and the CompositeController
  come from manifests/ through a kustomize overlay that swaps in-cluster Service references for
  the loopback URLs and our CA bundle;
- the example world (InstanceTypes with their status, the pool, backend and binding) and the
  example Kueue queues are applied like an administrator would;
- the real Metacontroller v4.17.2 calls the hooks; nothing stands in for it;
- the operator runs as REPLICAS processes (2 by default, as the chart and the manifests run it;
  `MODELDEPLOYMENT_E2E_OPERATOR_REPLICAS` chooses another count) behind one hooks address and one
  webhook address (tests/e2e/front.py, standing in for the operator's Service): consecutive passes
  for one deployment land on different replicas.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

import cluster as e2e_cluster
import front as e2e_front

from app import timestamps

REPO = e2e_cluster.REPO_ROOT
NAMESPACE = "team-a"
REPLICAS = int(os.environ.get("MODELDEPLOYMENT_E2E_OPERATOR_REPLICAS", "2"))
# What every operator process of the suite runs with (short bounds so stories end quickly).
BASE_ENV = {"MODELDEPLOYMENT_GANG_RELEASE_AFTER_SECONDS": "20", "MODELDEPLOYMENT_ADMISSION_CHECK_KEEPER_SECONDS": "5",
            "PYTHONUNBUFFERED": "1"}


@dataclass
class Replica:
    """One operator process: its component name in the control plane and its own ports."""

    name: str
    webhook_port: int
    hooks_port: int
    env: dict[str, str]


@dataclass
class Operator:
    cp: e2e_cluster.ControlPlane
    webhook_port: int  # the address the API server calls (the front, when there are replicas)
    hooks_port: int  # the address Metacontroller calls
    replicas: list[Replica] = field(default_factory=list)
    fronts: list[e2e_front.HttpFront | e2e_front.TcpFront] = field(default_factory=list)
    started: int = 0  # replicas ever started (their names' numbers)

    def stop(self) -> None:
        """Uninstall in the documented order (docs/operations.md#uninstall-the-reverse-order-leaving-nothing-stuck):
        the deployments and scalers first, their finalize passes answered, then the CompositeControllers, then
        the operator. Deleting a CompositeController while one of its parents finalizes crashed Metacontroller
        v4.17.2 (a nil parent after its finalizer removal, composite/controller.go makeSelector)."""
        self.cp.kubectl("delete", "mds,md", "--all", "-n", NAMESPACE, "--wait=false", check=False)
        try:
            self.wait("every deployment of the module to be gone",
                      lambda: not self.get("md", "-n", NAMESPACE)["items"], 180, 1)
        finally:
            self.cp.kubectl("delete", "compositecontroller", "modeldeployment", "modeldeploymentscaler",
                            "--wait=false", check=False)
            self.stop_replicas()
            for replica in list(self.replicas):
                self.cp.stop_process(replica.name)
            self.replicas.clear()
            # Then its webhooks: left behind, they would refuse every later write (fail closed) and
            # keep another module's `helm install` from owning their names.
            self.cp.kubectl("delete", "mutatingwebhookconfiguration/modeldeployment-operator",
                            "validatingwebhookconfiguration/modeldeployment-operator", "--ignore-not-found",
                            "--wait=false", check=False)

    def wait_listening(self) -> None:
        client = self.cp.http_client()
        for replica in self.replicas:
            self.wait(f"operator replica {replica.name} to listen",
                      lambda: _healthy(client, f"https://127.0.0.1:{replica.webhook_port}/readyz"), 60, 0.5)
        self.wait("the operator to listen",
                  lambda: _healthy(client, f"https://127.0.0.1:{self.webhook_port}/readyz"), 60, 0.5)

    # --- replicas ---------------------------------------------------------------------------------

    def add_replica(self, env: dict[str, str] | None = None) -> Replica:
        """Start one more operator process and put it behind the fronts once it is Ready (/readyz),
        as a Deployment's rollout adds a surge Pod to its Service."""
        webhook_port, hooks_port = e2e_cluster.free_ports(2)
        cert, key = self.cp.issue_serving_cert(("127.0.0.1", "localhost"))
        replica = Replica(f"operator-{self.started}", webhook_port, hooks_port, {**BASE_ENV, **(env or {})})
        self.started += 1
        self.cp.start_process(replica.name, [str(Path(sys.executable).parent / "modeldeployment"), "serve",
                                             "--host", "127.0.0.1", "--port", str(webhook_port),
                                             "--tls-cert", str(cert), "--tls-key", str(key),
                                             "--hooks-port", str(hooks_port)],
                              env={**self.cp.env, **replica.env}, cwd=REPO)
        client = self.cp.http_client()
        self.wait(f"operator replica {replica.name} to listen",
                  lambda: _healthy(client, f"https://127.0.0.1:{webhook_port}/readyz"), 60, 0.5)
        self.replicas.append(replica)
        self._route()
        return replica

    def remove_replica(self, replica: Replica) -> None:
        """Take a replica out of the fronts, then stop it (a Deployment's rollout ending an old Pod)."""
        self.replicas.remove(replica)
        self._route()
        self.cp.stop_process(replica.name)

    def _route(self) -> None:
        hooks, webhooks = self.fronts
        hooks.set_backends([r.hooks_port for r in self.replicas])
        webhooks.set_backends([r.webhook_port for r in self.replicas])

    def stop_replicas(self) -> None:
        """Every replica and the fronts down: callers get "connection refused", as from a Service
        whose every Pod is gone."""
        for front in self.fronts:
            front.stop()
        for replica in self.replicas:
            self.cp.stop_component(replica.name)

    def start_replicas(self) -> None:
        for replica in self.replicas:
            self.cp.start_component(replica.name)
        for front in self.fronts:
            front.start()
        self.wait_listening()

    def log_texts(self) -> dict[str, str]:
        """Each replica's log so far."""
        paths = self.cp.log_paths()
        return {r.name: paths[r.name].read_text(errors="replace") for r in self.replicas if r.name in paths}

    def restart_metacontroller(self) -> None:
        self.cp.stop_component("metacontroller")
        self.cp.start_component("metacontroller")

    def kubectl(self, *args: str, check: bool = True, input: str | None = None, timeout: float = 60.0):
        return self.cp.kubectl(*args, check=check, input=input, timeout=timeout)

    def get(self, *args: str) -> Any:
        return self.cp.kubectl_json("get", *args, "-o", "json")

    def pods(self, deployment: str, *selectors: str) -> list[dict[str, Any]]:
        selector = ",".join([f"app.kubernetes.io/instance={deployment}", *selectors])
        return self.get("pods", "-n", NAMESPACE, "-l", selector)["items"]

    def md(self, name: str) -> dict[str, Any]:
        return self.get("md", name, "-n", NAMESPACE)

    def wait(self, what: str, predicate, timeout: float = 120.0, interval: float = 1.0) -> Any:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            self.cp.check_alive()
            try:
                last = predicate()
            except e2e_cluster.KubectlError as exc:
                # Kept for the timeout's message only: a failed read is not the awaited state.
                last = exc
            else:
                if last:
                    return last
            time.sleep(interval)
        logs = {name: str(path) for name, path in self.cp.log_paths().items()}
        raise AssertionError(f"timed out after {timeout}s waiting for {what}; last={last!r}\n"
                             f"{cluster_digest(self.cp)}\nlogs={logs}")


def cluster_digest(cp: e2e_cluster.ControlPlane, namespace: str = NAMESPACE) -> str:
    """What a timed-out wait needs to be explained from its message alone: each deployment's phase,
    the namespace's Pods and Workloads, the queues' usage, and whether every fake kubelet still
    renews its node's Lease (a lapsed one makes its node NotReady and its Pods unschedulable)."""
    lines: list[str] = []

    def section(title: str, read: Callable[[], list[str]]) -> None:
        try:
            lines.extend([f"{title}:", *(f"  {row}" for row in read())])
        except Exception as exc:  # noqa: BLE001 - a digest never hides the timeout behind its own error
            lines.append(f"{title}: unreadable ({exc})")

    def deployments() -> list[str]:
        rows = []
        for md in cp.kubectl_json("get", "md", "-n", namespace)["items"]:
            status = md.get("status") or {}
            rows.append(f"{md['metadata']['name']} gen={md['metadata'].get('generation')} "
                        f"observed={status.get('observedGeneration')} phase={status.get('phase')}: "
                        f"{status.get('phaseMessage', '')}")
        return rows

    def pods() -> list[str]:
        rows = []
        for pod in cp.kubectl_json("get", "pods", "-n", namespace)["items"]:
            meta, status = pod["metadata"], pod.get("status") or {}
            ready = next((c["status"] for c in status.get("conditions") or [] if c["type"] == "Ready"), "-")
            gated = "gated " if pod["spec"].get("schedulingGates") else ""
            going = "deleting " if meta.get("deletionTimestamp") else ""
            rows.append(f"{meta['name']} {status.get('phase')} ready={ready} {gated}{going}"
                        f"node={pod['spec'].get('nodeName', '-')} finalizers={meta.get('finalizers', [])}")
        return rows

    def workloads() -> list[str]:
        rows = []
        for wl in cp.kubectl_json("get", "workloads.kueue.x-k8s.io", "-n", namespace)["items"]:
            conditions = {c["type"]: c["status"] for c in (wl.get("status") or {}).get("conditions") or []}
            checks = {c["name"]: c["state"] for c in (wl.get("status") or {}).get("admissionChecks") or []}
            going = " deleting" if wl["metadata"].get("deletionTimestamp") else ""
            rows.append(f"{wl['metadata']['name']} {conditions} checks={checks} "
                        f"owners={len(wl['metadata'].get('ownerReferences') or [])}{going}")
        return rows

    def queues() -> list[str]:
        return [f"{cq['metadata']['name']} pending={(cq.get('status') or {}).get('pendingWorkloads')} "
                f"reserving={(cq.get('status') or {}).get('reservingWorkloads')} "
                f"admitted={(cq.get('status') or {}).get('admittedWorkloads')}"
                for cq in cp.kubectl_json("get", "clusterqueues.kueue.x-k8s.io")["items"]]

    def kubelets() -> list[str]:
        now = time.time()
        rows = []
        for lease in cp.kubectl_json("get", "leases", "-n", "kube-node-lease")["items"]:
            renewed = (lease.get("spec") or {}).get("renewTime")
            age = f"{now - timestamps.epoch_seconds(renewed):.0f} s ago" if renewed else "never"
            rows.append(f"{lease['metadata']['name']} renewed {age}")
        return rows

    for title, read in (("deployments", deployments), ("pods", pods), ("workloads", workloads),
                        ("cluster queues", queues), ("node leases", kubelets)):
        section(title, read)
    return "\n".join(lines)


def _overlay(work: Path, cp: e2e_cluster.ControlPlane, webhook_port: int, hooks_port: int) -> list[dict[str, Any]]:
    """kustomize overlay: webhooks by URL with our CA, the CompositeController's hooks by URL."""
    overlay = work / "overlay"
    overlay.mkdir(parents=True, exist_ok=True)
    (overlay / "base-webhook").mkdir(exist_ok=True)
    (overlay / "base-metacontroller").mkdir(exist_ok=True)
    for name in ("mutating.yaml", "validating.yaml"):
        (overlay / "base-webhook" / name).write_text((REPO / "manifests" / "webhook" / name).read_text())
    for name in ("compositecontroller.yaml", "scaler-compositecontroller.yaml"):
        (overlay / "base-metacontroller" / name).write_text((REPO / "manifests" / "metacontroller" / name).read_text())
    ca = cp.ca_bundle_b64
    patches = []
    # Each configuration's webhooks, in manifest order, and the path each serves.
    for kind, name, paths in (("MutatingWebhookConfiguration", "modeldeployment-operator", ["/webhooks/mutate"]),
                              ("ValidatingWebhookConfiguration", "modeldeployment-operator",
                               ["/webhooks/validate", "/webhooks/scaler/validate"])):
        ops: list[dict[str, Any]] = [
            {"op": "replace", "path": f"/webhooks/{i}/clientConfig",
             "value": {"url": f"https://127.0.0.1:{webhook_port}{path}", "caBundle": ca}}
            for i, path in enumerate(paths)]
        ops.append({"op": "remove", "path": "/metadata/annotations/cert-manager.io~1inject-ca-from"})
        patches.append({"target": {"kind": kind, "name": name}, "patch": yaml.safe_dump(ops)})
    hooks = []
    for hook in ("customize", "sync", "finalize"):
        hooks.append({"op": "replace", "path": f"/spec/hooks/{hook}/webhook",
                      "value": {"url": f"http://127.0.0.1:{hooks_port}/hooks/{hook}", "timeout": "10s"}})
    patches.append({"target": {"kind": "CompositeController", "name": "modeldeployment"},
                    "patch": yaml.safe_dump(hooks)})
    scaler_hooks = [{"op": "replace", "path": f"/spec/hooks/{hook}/webhook",
                     "value": {"url": f"http://127.0.0.1:{hooks_port}/hooks/scaler/{hook}", "timeout": "10s"}}
                    for hook in ("customize", "sync")]
    patches.append({"target": {"kind": "CompositeController", "name": "modeldeploymentscaler"},
                    "patch": yaml.safe_dump(scaler_hooks)})
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["base-webhook/mutating.yaml", "base-webhook/validating.yaml",
                      "base-metacontroller/compositecontroller.yaml",
                      "base-metacontroller/scaler-compositecontroller.yaml"],
        "patches": patches,
    }))
    return [d for d in yaml.safe_load_all(cp.kubectl("kustomize", str(overlay)).stdout) if d]


def apply_world(op: Operator) -> None:
    """The example InstanceTypes, pool, backend and binding, status included (status subresource)."""
    objects = [o for o in yaml.safe_load_all((REPO / "examples" / "world" / "instancetypes.yaml").read_text()) if o]
    objects += [o for o in yaml.safe_load_all((REPO / "examples" / "world" / "kvcache.yaml").read_text()) if o]
    for obj in objects:
        status = obj.pop("status", None)
        op.cp.apply(obj)
        if status:
            kind = obj["kind"].lower() + "s"
            ns = ["-n", obj["metadata"]["namespace"]] if obj["metadata"].get("namespace") else []
            op.kubectl("patch", f"{kind}.worker.gpustack.ai", obj["metadata"]["name"], *ns, "--subresource=status",
                       "--type=merge", "-p", json.dumps({"status": status}))


def start_operator(cp: e2e_cluster.ControlPlane, replicas: int = REPLICAS,
                   env: dict[str, str] | None = None) -> Operator:
    """Install in the documented order; Metacontroller is already running with its CRDs. The
    operator runs as `replicas` processes behind the fronts (`env`: extra settings of each)."""
    assert cp.metacontroller_running, "the e2e suite runs the real Metacontroller"
    cp.create_namespace(NAMESPACE)
    webhook_port, hooks_port = e2e_cluster.free_ports(2)
    # 1. our CRDs
    cp.kubectl("apply", "--server-side", "-f", str(REPO / "manifests" / "crds"))
    cp.wait_established()
    # 2. the webhook configurations (ModelDeployment writes fail closed until the operator answers)
    objects = _overlay(cp.work_dir, cp, webhook_port, hooks_port)
    webhooks = [o for o in objects if o["kind"] != "CompositeController"]
    composite = [o for o in objects if o["kind"] == "CompositeController"]
    cp.apply(webhooks)
    # 3. the operator: its replicas behind one hooks and one webhook address
    op = Operator(cp, webhook_port, hooks_port,
                  fronts=[e2e_front.HttpFront(hooks_port, []), e2e_front.TcpFront(webhook_port, [])])
    for front in op.fronts:
        front.start()
    for _ in range(replicas):
        op.add_replica(env)
    op.wait_listening()
    # The administrator's world: InstanceTypes (status as an inventory controller fills it), the
    # KV cache pool, backend and binding, the Kueue queues and our AdmissionCheck.
    apply_world(op)
    op.kubectl("apply", "-k", str(REPO / "manifests" / "kueue"))
    # 4. the CompositeController: Metacontroller starts calling the hooks
    cp.apply(composite)
    return op


def _healthy(client, url: str) -> bool:
    try:
        return client.get(url, timeout=2).status_code == 200
    except Exception:  # noqa: BLE001 - not up yet
        return False


def e2e_env_ready() -> bool:
    return os.environ.get("MODELDEPLOYMENT_E2E", "1") not in ("0", "false", "no", "off")


# --- objects and reads the scaler stories share (tests/e2e/test_scaler.py, test_scale_to_zero.py) ---

A10G = "gpustack-nvidia-a10g-linux-amd64"


def pair(name: str, *, prefill: int = 1, decode: int = 2, instance_type: str = A10G, cards: int = 1,
         router: bool = True, decode_size: int = 1) -> dict[str, Any]:
    """A prefill/decode pair of vLLM on a kwok pool (behind llm-d-router when `router`)."""
    roles = [{"name": "prefill", "kind": "Prefill", "replicas": prefill, "instanceType": instance_type,
              "resources": {"accelerator": cards}},
             {"name": "decode", "kind": "Decode", "replicas": decode, "instanceType": instance_type,
              "size": decode_size, "resources": {"accelerator": cards}}]
    spec: dict[str, Any] = {"model": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}, "engine": {"name": "vLLM", "version": "0.29.0"},
                            "roles": roles}
    if router:
        spec["router"] = {"name": "llm-d-router"}
    return {"apiVersion": "worker.gpustack.ai/v1", "kind": "ModelDeployment",
            "metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec}


def apply(op: Operator, obj: dict[str, Any], *, check: bool = True):
    return op.kubectl("apply", "-f", "-", input=yaml.safe_dump(obj), check=check)


def delete(op: Operator, kind: str, name: str) -> None:
    op.kubectl("delete", kind, name, "-n", NAMESPACE, "--wait=false", check=False)
    op.wait(f"{kind} {name} to be gone",
            lambda: op.kubectl("get", kind, name, "-n", NAMESPACE, check=False).returncode != 0, 120)


def ready(pod: dict[str, Any]) -> bool:
    conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
    return (pod.get("status", {}).get("phase") == "Running" and conditions.get("Ready") == "True"
            and not pod["metadata"].get("deletionTimestamp"))


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == type_), {})

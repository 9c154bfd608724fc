"""LeaderWorkerSet as a peer in bench/e2e-scale (bench/README.md, e2e-scale).

The loopback control plane of tests/e2e with three changes, for this benchmark only (the default
e2e run does not start LeaderWorkerSet):

- LeaderWorkerSet's CRDs are installed before Kueue starts and Kueue's LWS integration
  (`leaderworkerset.x-k8s.io/leaderworkerset`) is on beside `pod`, so an LWS group is one Kueue
  Workload, gang-admitted like one of our replicas;
- its manager (tests/e2e/components/build.sh lws: commit 060ab4d from the shared tarball) runs
  against the loopback API server, its webhooks (the Pod webhook included) registered by URL with a
  serving certificate the harness's CA issues, as Kueue's are;
- kube-controller-manager runs at Metacontroller's client limits (100 requests/s, burst 200): LWS's
  Pods go through StatefulSets, so at kcm's default 20 requests/s the comparison would measure kcm.
  The LWS manager runs at the same limits.

`TurnoverWatch` follows the namespace's Pods through one watch and accounts, per replica (one of
our pod groups, one LWS group), the time it is not Ready: the downtime of each turnover of a
rolling update, and the fewest Ready replicas of any one deployment (LWS) at any moment.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import orjson

from bench import watch as bench_watch
from bench.turnover_anatomy import TurnoverAnatomy

import cluster as e2e_cluster

LWS_COMMIT = "060ab4d"
LWS_FRAMEWORK = "leaderworkerset.x-k8s.io/leaderworkerset"
LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
CLIENT_QPS = 100  # Metacontroller's limits in tests/e2e/cluster.py
CLIENT_BURST = 200


def lws_dir(cp: e2e_cluster.ControlPlane) -> Path:
    d = cp.components_dir / f"lws-{LWS_COMMIT}"
    if not (d / "lws").is_file():
        raise e2e_cluster.ControlPlaneError(
            f"LeaderWorkerSet is not built ({d / 'lws'} is missing): run tests/e2e/components/build.sh lws")
    return d


class LwsControlPlane(e2e_cluster.ControlPlane):
    """tests/e2e's control plane with LeaderWorkerSet beside Kueue and Metacontroller."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(kueue_frameworks=(*e2e_cluster.DEFAULT_KUEUE_FRAMEWORKS, LWS_FRAMEWORK), **kwargs)

    def _add(self, name: str, argv: Sequence[str], env: Any = None) -> e2e_cluster.Component:
        if name == "kube-controller-manager":
            argv = [*argv, f"--kube-api-qps={CLIENT_QPS}", f"--kube-api-burst={CLIENT_BURST}"]
        return super()._add(name, argv, env)

    def _start_kueue(self) -> None:
        # Kueue enables an integration only when its CRDs are served at its start.
        crds = sorted((lws_dir(self) / "crds").glob("*.yaml"))
        for path in crds:
            self.kubectl("create", "-f", str(path))
        self.wait_established(*[doc["metadata"]["name"] for path in crds for doc in e2e_cluster.load_yaml_docs(path)])
        super()._start_kueue()

    def start_lws(self) -> None:
        ldir = lws_dir(self)
        webhook_port, probe_port = e2e_cluster.free_ports(2)
        self.ports.update(lws_webhook=webhook_port, lws_probe=probe_port)
        cert_dir = self.work_dir / "lws-certs"
        cert_dir.mkdir(exist_ok=True)
        crt, key = self.issue_serving_cert(("127.0.0.1", "localhost"))
        (cert_dir / "tls.crt").write_bytes(crt.read_bytes())
        (cert_dir / "tls.key").write_bytes(key.read_bytes())
        config = {
            "apiVersion": "config.lws.x-k8s.io/v1alpha1", "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{probe_port}"},
            "clientConnection": {"qps": CLIENT_QPS, "burst": CLIENT_BURST},
        }
        config_path = self.work_dir / "lws-config.json"
        config_path.write_text(json.dumps(config))
        import os

        import httpx

        comp = self._add("lws", [str(ldir / "lws"), f"--config={config_path}", "--zap-log-level=2"],
                         env=dict(os.environ, KUBECONFIG=str(self.kubeconfig), NAMESPACE="default"))
        self._wait(comp, lambda: httpx.get(f"http://127.0.0.1:{probe_port}/readyz", timeout=2).status_code == 200,
                   "lws /readyz")
        self.apply(self._lws_webhook_configs(ldir / "webhook" / "manifests.yaml", webhook_port))

    def _lws_webhook_configs(self, manifests: Path, port: int) -> list[dict[str, Any]]:
        """Its config/webhook manifests by URL; the Pod webhooks only for LWS Pods, as its kustomize
        patches (config/webhook/*-patch.yaml) select them."""
        out = []
        for doc in e2e_cluster.load_yaml_docs(manifests):
            if doc.get("kind") not in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
                continue
            doc["metadata"] = {"name": "lws-" + doc["metadata"]["name"]}
            for wh in doc.get("webhooks", []):
                path = (wh["clientConfig"].get("service") or {}).get("path", "/")
                wh["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": self.ca_bundle_b64}
                if wh["name"] in ("mpod.kb.io", "vpod.kb.io"):
                    wh["objectSelector"] = {"matchExpressions": [{"key": LWS_NAME_LABEL, "operator": "Exists"}]}
            out.append(doc)
        return out


# --- the objects ------------------------------------------------------------------------------------


def pod_template(rendered_pod: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    """One of our rendered Pods as an LWS Pod template: the same containers, resources, node
    selection and tolerations; none of our names (hostname, subdomain, gates, our labels)."""
    spec = copy.deepcopy(rendered_pod["spec"])
    for key in ("hostname", "subdomain", "schedulingGates", "nodeName", "affinity", "topologySpreadConstraints"):
        spec.pop(key, None)
    return {"metadata": {"labels": dict(labels)}, "spec": spec}


def leader_worker_set(name: str, namespace: str, queue: str, template: dict[str, Any], replicas: int,
                      size: int) -> dict[str, Any]:
    return {"apiVersion": LWS_API_VERSION, "kind": "LeaderWorkerSet",
            "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_NAME_LABEL: queue}},
            "spec": {"replicas": replicas, "startupPolicy": "LeaderCreated",
                     "rolloutStrategy": {"type": "RollingUpdate",
                                         "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0}},
                     "leaderWorkerTemplate": {"size": size, "restartPolicy": "RecreateGroupOnPodRestart",
                                              "workerTemplate": template}}}


def with_image(lws: dict[str, Any], image: str) -> dict[str, Any]:
    out = copy.deepcopy(lws)
    for container in out["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"]:
        container["image"] = image
    return out


# --- turnover downtime ------------------------------------------------------------------------------


def _pod_ready(pod: dict[str, Any]) -> bool:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


class TurnoverWatch:
    """Per replica, the seconds it is not Ready while the watch runs, from one Pod watch.

    `replica_of(labels)` names a Pod's (deployment, replica) or None for Pods that are no replica's
    (a router's); a replica is Ready when `size` of its Pods are Ready and none is deleting."""

    def __init__(self, client_factory: Callable[[], Any], namespace: str,
                 replica_of: Callable[[dict[str, str]], tuple[str, str] | None], size: int) -> None:
        self.client_factory = client_factory
        self.namespace = namespace
        self.replica_of = replica_of
        self.size = size
        self.pods: dict[str, tuple[tuple[str, str], bool]] = {}
        self.down_since: dict[tuple[str, str], float] = {}
        self.down_total = 0.0
        self.turnovers = 0
        self.ready_by_deployment: dict[str, int] = {}
        self.replicas_by_deployment: dict[str, set[str]] = {}
        self.fewest_ready: int | None = None
        self.events = 0
        self._watches: list[bench_watch.Watch] = []
        self._lock = threading.Lock()  # the Pod and the Workload watch both feed the anatomy
        self.anatomy = TurnoverAnatomy()

    def _ready(self, replica: tuple[str, str]) -> bool:
        members = [ready for key, ready in self.pods.values() if key == replica]
        return len(members) == self.size and all(members)

    def _update(self, replica: tuple[str, str], was_ready: bool, now: float) -> None:
        ready = self._ready(replica)
        if ready == was_ready:
            return
        deployment = replica[0]
        if ready:
            since = self.down_since.pop(replica, None)
            if since is not None:
                self.down_total += now - since
                self.turnovers += 1
                self.anatomy.up(replica, now)
            self.ready_by_deployment[deployment] = self.ready_by_deployment.get(deployment, 0) + 1
        else:
            self.down_since[replica] = now
            self.anatomy.down(replica, now)
            self.ready_by_deployment[deployment] = self.ready_by_deployment.get(deployment, 0) - 1
            fewest = self.ready_by_deployment[deployment]
            self.fewest_ready = fewest if self.fewest_ready is None else min(self.fewest_ready, fewest)

    def _apply(self, kind: str, pod: dict[str, Any], now: float) -> None:
        meta = pod.get("metadata") or {}
        name = meta.get("name", "")
        replica = self.replica_of(meta.get("labels") or {})
        if replica is None:
            return
        before = self._ready(replica)
        self.anatomy.seen(replica, kind, pod, now)
        if kind == "DELETED":
            self.pods.pop(name, None)
        else:
            self.pods[name] = (replica, _pod_ready(pod))
        self._update(replica, before, now)

    def start(self) -> None:
        client = self.client_factory()
        listed = orjson.loads(client.get(f"/api/v1/namespaces/{self.namespace}/pods").content)
        for pod in listed.get("items") or []:
            meta = pod.get("metadata") or {}
            replica = self.replica_of(meta.get("labels") or {})
            if replica is not None:
                self.pods[meta["name"]] = (replica, _pod_ready(pod))
                self.anatomy.seen(replica, "ADDED", pod, 0.0)
                self.replicas_by_deployment.setdefault(replica[0], set()).add(replica[1])
        for deployment, replicas in self.replicas_by_deployment.items():
            self.ready_by_deployment[deployment] = sum(1 for r in replicas if self._ready((deployment, r)))
        now = time.monotonic()
        for deployment, replicas in self.replicas_by_deployment.items():
            for r in replicas:
                if not self._ready((deployment, r)):
                    self.down_since[(deployment, r)] = now
        self.fewest_ready = min(self.ready_by_deployment.values()) if self.ready_by_deployment else None
        pods = bench_watch.Watch(self.client_factory, f"/api/v1/namespaces/{self.namespace}/pods",
                                 self._pod_event, self._lock)
        # The replacement's Workload, for where an admission's time goes (TurnoverAnatomy).
        workloads = f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{self.namespace}/workloads"
        wl_client = self.client_factory()
        wl_version = orjson.loads(wl_client.get(workloads, params={"limit": "1"}).content)["metadata"]["resourceVersion"]
        workload_watch = bench_watch.Watch(self.client_factory, workloads, self._workload_event, self._lock)
        pods.start(listed["metadata"]["resourceVersion"], client)
        workload_watch.start(wl_version, wl_client)
        self._watches = [pods, workload_watch]

    def _pod_event(self, kind: str, obj: dict[str, Any], now: float) -> None:
        self.events += 1
        self._apply(kind, obj, now)

    def _workload_event(self, kind: str, obj: dict[str, Any], now: float) -> None:
        self.anatomy.workload(kind, obj, now)

    def stop(self) -> dict[str, Any]:
        for watch in self._watches:
            watch.stop()
        still_down = len(self.down_since)
        return {"turnovers": self.turnovers,
                "mean_downtime_s": round(self.down_total / self.turnovers, 2) if self.turnovers else None,
                "fewest_ready": self.fewest_ready,
                "replicas_per_deployment": max((len(r) for r in self.replicas_by_deployment.values()), default=0),
                "still_down": still_down, "watch_events": self.events,
                "watch_error": "; ".join(w.error for w in self._watches if w.error),
                "watch_reconnects": sum(w.reconnects for w in self._watches),
                "anatomy_mean_s": self.anatomy.means()}

"""Hook requests shaped like what Metacontroller really sends, for deployments of any size.

A request is built the way a steady deployment produces it:

1. the operator's own first sync renders the children (nothing observed yet);
2. each desired child is turned into the object the API server would hand back: uid,
   resourceVersion, creationTimestamp, ownerReferences, finalizers, managedFields (one entry per
   writer, with a fieldsV1 tree of the fields it owns), the defaults the API server fills in,
   Metacontroller's last-applied annotation, and a status (Pods Running and Ready, the router
   Deployment available);
3. every replica's Kueue Workload (pod group) is in `related`, admitted, with its pod sets
   (Pod template included, as Kueue stores it), its admission and our check already Ready;
4. the parent carries the status of the previous sync, so the measured pass is the common case:
   an idle resync that changes nothing.

Sizes are exact Pod counts: `deployment(pods)` splits them over the example's two roles (Prefill
and Decode of `examples/deployments/pd-pair.yaml`: KV cache pool, llm-d router, Mooncake).
"""

from __future__ import annotations

import copy
import gc
import hashlib
import uuid
from typing import Any

import orjson

from app import vocab
from app.api.hooks import hook_request
from app.control.sync import SyncSettings, reconcile
from app.render import names
from app.world import load_yaml_objects, related_map
from bench import ROOT

EXAMPLES = ROOT / "examples"
NOW = "2026-11-29T12:00:00Z"
CREATED = "2026-11-29T11:00:00Z"
NAMESPACE = "team-a"


def _uid(*parts: Any) -> str:
    return str(uuid.UUID(bytes=hashlib.sha256("/".join(map(str, parts)).encode()).digest()[:16], version=4))


def example(name: str) -> dict[str, Any]:
    return load_yaml_objects(EXAMPLES / "deployments" / f"{name}.yaml")[0]


def world_objects() -> list[dict[str, Any]]:
    return load_yaml_objects(EXAMPLES / "world")


def children_map(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every declared child map, as Metacontroller sends them (empty when there are none)."""
    out: dict[str, dict[str, Any]] = {key: {} for key in vocab.DECLARED_CHILD_MAPS}
    for obj in objects:
        meta = obj["metadata"]
        out.setdefault(f"{obj['kind']}.{obj['apiVersion']}", {})[f"{meta.get('namespace', NAMESPACE)}/{meta['name']}"] = obj
    return out


# --- managedFields -----------------------------------------------------------------------------

_LIST_KEYS = ("name", "containerPort", "port", "type", "mountPath", "key", "ip")


def fields_v1(value: Any) -> dict[str, Any]:
    """The structured-merge-diff field set of `value` (what `managedFields[].fieldsV1` holds)."""
    if isinstance(value, dict):
        out: dict[str, Any] = {".": {}} if value else {}
        for key, sub in value.items():
            out[f"f:{key}"] = fields_v1(sub)
        return out
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        out = {}
        for index, item in enumerate(value):
            key = next((k for k in _LIST_KEYS if k in item), None)
            ident = orjson.dumps({key: item[key]}).decode() if key else orjson.dumps({"i": index}).decode()
            out[f"k:{ident}"] = {".": {}, **fields_v1(item)}
        return out
    return {}


def _managed(manager: str, operation: str, fields: Any, *, subresource: str | None = None,
             api_version: str = "v1") -> dict[str, Any]:
    entry = {"manager": manager, "operation": operation, "apiVersion": api_version, "time": CREATED,
             "fieldsType": "FieldsV1", "fieldsV1": fields_v1(fields)}
    if subresource:
        entry["subresource"] = subresource
    return entry


def _owner(parent: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": vocab.API_VERSION, "kind": vocab.KIND_MODEL_DEPLOYMENT, "name": parent["metadata"]["name"],
            "uid": parent["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


# --- observed children -------------------------------------------------------------------------

def _pod_spec_defaults(spec: dict[str, Any], node: str) -> dict[str, Any]:
    out = copy.deepcopy(spec)
    for container in out.get("containers", []) + out.get("initContainers", []):
        container.setdefault("imagePullPolicy", "IfNotPresent")
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        container.setdefault("volumeMounts", []).append(
            {"name": "kube-api-access-x7k2p", "readOnly": True, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"})
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            if probe in container:
                container[probe].setdefault("timeoutSeconds", 1)
                container[probe].setdefault("successThreshold", 1)
                container[probe]["httpGet"].setdefault("scheme", "HTTP")
    out["volumes"] = out.get("volumes", []) + [{"name": "kube-api-access-x7k2p", "projected": {
        "defaultMode": 420,
        "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace",
                                        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
        ]}}]
    out.update({
        "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler", "serviceAccountName": "default",
        "serviceAccount": "default", "securityContext": {}, "nodeName": node, "priority": 0,
        "preemptionPolicy": "PreemptLowerPriority",
        "nodeSelector": {"gpustack.ai/instance-type": "gpustack-nvidia-h20-linux-amd64"},
        "tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 300},
        ],
    })
    return out


def _pod_status(pod: dict[str, Any], index: int) -> dict[str, Any]:
    ip = f"10.244.{index // 250}.{index % 250 + 2}"
    host = f"172.18.{index // 250}.{index % 250 + 2}"
    conditions = [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": CREATED}
                  for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")]
    statuses = [{
        "name": c["name"], "state": {"running": {"startedAt": CREATED}}, "lastState": {}, "ready": True,
        "restartCount": 0, "image": c["image"], "started": True,
        "imageID": f"docker.io/{c['image']}@sha256:{hashlib.sha256(c['image'].encode()).hexdigest()}",
        "containerID": "containerd://" + hashlib.sha256(f"{index}/{c['name']}".encode()).hexdigest(),
        "volumeMounts": [{"name": m["name"], "mountPath": m["mountPath"]} for m in c.get("volumeMounts", [])],
    } for c in pod["spec"]["containers"]]
    return {"phase": "Running", "conditions": conditions, "hostIP": host, "hostIPs": [{"ip": host}], "podIP": ip,
            "podIPs": [{"ip": ip}], "startTime": CREATED, "qosClass": "Guaranteed", "containerStatuses": statuses}


def observed_child(desired: dict[str, Any], parent: dict[str, Any], index: int) -> dict[str, Any]:
    """The object the API server returns for a child Metacontroller created from `desired`."""
    obj = copy.deepcopy(desired)
    meta = obj["metadata"]
    kind = obj["kind"]
    meta.setdefault("namespace", NAMESPACE)
    annotations = meta.setdefault("annotations", {})
    annotations[vocab.ANNOTATION_LAST_APPLIED] = orjson.dumps(desired).decode()
    managed = [_managed("metacontroller", "Update", {"metadata": {k: v for k, v in meta.items() if k != "namespace"},
                                                     **{k: v for k, v in desired.items() if k not in (
                                                         "apiVersion", "kind", "metadata")}},
                        api_version=desired["apiVersion"])]
    meta.update({"uid": _uid(kind, meta["name"]), "resourceVersion": str(100000 + index), "creationTimestamp": CREATED,
                 "ownerReferences": [_owner(parent)]})
    if kind == "Pod":
        node = f"kwok-h20-{index // 8:04d}"
        meta["labels"][vocab.LABEL_KUEUE_MANAGED] = "true"
        meta["finalizers"] = ["kueue.x-k8s.io/managed"]
        meta["generation"] = 1
        obj["spec"] = _pod_spec_defaults(obj["spec"], node)
        obj["status"] = _pod_status(obj, index)
        managed.append(_managed("kueue", "Update", {"metadata": {"labels": {vocab.LABEL_KUEUE_MANAGED: "true"},
                                                                 "finalizers": meta["finalizers"]}}))
        managed.append(_managed("kube-scheduler", "Update", {"status": {"conditions": obj["status"]["conditions"][-1:]}},
                                subresource="status"))
        managed.append(_managed("kubelet", "Update", {"status": obj["status"]}, subresource="status"))
    elif kind == "Service":
        spec = obj["spec"]
        if spec.get("clusterIP") != "None":
            spec["clusterIP"] = f"10.96.{index // 250}.{index % 250 + 10}"
        spec["clusterIPs"] = [spec["clusterIP"]]
        spec.update({"internalTrafficPolicy": "Cluster", "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
                     "sessionAffinity": "None"})
        spec.setdefault("type", "ClusterIP")
        obj["status"] = {"loadBalancer": {}}
    elif kind == "Deployment":
        meta["generation"] = 1
        replicas = obj["spec"].get("replicas", 1)
        obj["status"] = {"observedGeneration": 1, "replicas": replicas, "updatedReplicas": replicas,
                         "readyReplicas": replicas, "availableReplicas": replicas, "conditions": [
                             {"type": "Available", "status": "True", "lastUpdateTime": CREATED,
                              "lastTransitionTime": CREATED, "reason": "MinimumReplicasAvailable",
                              "message": "Deployment has minimum availability."}]}
        managed.append(_managed("kube-controller-manager", "Update", {"status": obj["status"]}, subresource="status",
                                api_version="apps/v1"))
    meta["managedFields"] = managed
    return obj


def workload(parent: dict[str, Any], role: dict[str, Any], ordinal: int, pods: list[dict[str, Any]],
             index: int) -> dict[str, Any]:
    """The Kueue Workload of one replica's pod group, admitted, with our check Ready."""
    name = names.pod_group(NAMESPACE, parent["metadata"]["name"], role["name"], ordinal)
    template = pods[0]
    requests = template["spec"]["containers"][0]["resources"]["requests"]
    conditions = [
        {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "observedGeneration": 1,
         "message": "Quota reserved in ClusterQueue gpustack-nvidia-h20-linux-amd64", "lastTransitionTime": CREATED},
        {"type": "Admitted", "status": "True", "reason": "Admitted", "observedGeneration": 1,
         "message": "The workload is admitted", "lastTransitionTime": CREATED},
        {"type": "PodsReady", "status": "True", "reason": "PodsReady", "observedGeneration": 1,
         "message": "All pods reached readiness and the workload is running", "lastTransitionTime": CREATED},
    ]
    status = {
        "admission": {"clusterQueue": "gpustack-nvidia-h20-linux-amd64", "podSetAssignments": [{
            "name": template["metadata"]["annotations"][vocab.ANNOTATION_KUEUE_ROLE_HASH], "count": len(pods),
            "flavors": {k: "gpustack-nvidia-h20-linux-amd64" for k in requests},
            "resourceUsage": dict(requests)}]},
        "conditions": conditions,
        "admissionChecks": [{"name": vocab.ADMISSION_CHECK_NAME, "state": "Ready", "message": "admitted",
                             "lastTransitionTime": CREATED}],
        "resourceRequests": [{"name": role["name"], "resources": dict(requests)}],
    }
    spec = {
        "active": True, "queueName": template["metadata"]["labels"][vocab.LABEL_KUEUE_QUEUE_NAME], "priority": 0,
        "podSets": [{"name": template["metadata"]["annotations"][vocab.ANNOTATION_KUEUE_ROLE_HASH],
                     "count": len(pods), "template": {
                         "metadata": {"labels": dict(template["metadata"]["labels"])},
                         "spec": template["spec"]}}],
    }
    return {
        "apiVersion": vocab.KUEUE_API_VERSION, "kind": vocab.KIND_WORKLOAD,
        "metadata": {
            "name": name, "namespace": NAMESPACE, "uid": _uid("Workload", name), "resourceVersion": str(200000 + index),
            "generation": 1, "creationTimestamp": CREATED, "finalizers": ["kueue.x-k8s.io/resource-in-use"],
            "labels": {"kueue.x-k8s.io/job-uid": _uid("group", name)},
            "annotations": {"kueue.x-k8s.io/is-group-workload": "true"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": p["metadata"]["name"],
                                 "uid": p["metadata"]["uid"]} for p in pods],
            "managedFields": [_managed("kueue", "Update", {"spec": spec}, api_version=vocab.KUEUE_API_VERSION),
                              _managed("kueue-admission", "Update", {"status": status}, subresource="status",
                                       api_version=vocab.KUEUE_API_VERSION)],
        },
        "spec": spec,
        "status": status,
    }


# --- whole requests ----------------------------------------------------------------------------

def deployment(pods: int, *, roles: int = 2, size: int = 1) -> dict[str, Any]:
    """The pd-pair example with `pods` Pods in all: `roles` roles of `size`-Pod replicas."""
    md = example("pd-pair")
    per_role, rest = divmod(pods, roles * size)
    if rest:
        raise ValueError(f"{pods} Pods do not split into {roles} roles of size-{size} replicas")
    md["spec"]["roles"] = md["spec"]["roles"][:roles]
    for role in md["spec"]["roles"]:
        role["replicas"] = per_role
        role["size"] = size
    md["metadata"].update({
        "uid": _uid("md", md["metadata"]["name"]), "generation": 1, "resourceVersion": "4242",
        "creationTimestamp": CREATED, "finalizers": ["metacontroller.k8s.io/modeldeployment"],
    })
    md["metadata"]["managedFields"] = [_managed("kubectl-client-side-apply", "Update", {"spec": md["spec"]},
                                                api_version=vocab.API_VERSION)]
    return md


def _request(md: dict[str, Any], children: list[dict[str, Any]], related: list[dict[str, Any]]) -> dict[str, Any]:
    return {"controller": {"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
                           "metadata": {"name": "modeldeployment"}},
            "parent": md, "children": children_map(children), "related": related_map(related), "finalizing": False}


# The benchmarks measure how a sync scales past the service's Pod bound (rule 21, 2,048 by
# default, which the served app keeps: bench/bound.py measures a sync at it), so their own
# passes allow more.
BENCH_MAX_PODS = 10_000
BENCH_SYNC_SETTINGS = SyncSettings(max_pods_per_deployment=BENCH_MAX_PODS)


def sync_request(pods: int, *, roles: int = 2, size: int = 1) -> dict[str, Any]:
    """A steady-state sync request for a deployment of `pods` Pods (every replica Ready and admitted)."""
    md = deployment(pods, roles=roles, size=size)
    world = world_objects()
    first = reconcile(hook_request(_request(md, [], world)), BENCH_SYNC_SETTINGS, now=CREATED)
    observed = [observed_child(child, md, i) for i, child in enumerate(first.children)]
    by_group: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for pod in observed:
        if pod["kind"] == "Pod":
            labels = pod["metadata"]["labels"]
            by_group.setdefault((labels[vocab.LABEL_COMPONENT], int(labels[vocab.LABEL_POD_ORDINAL])), []).append(pod)
    roles_by_name = {r["name"]: r for r in md["spec"]["roles"]}
    workloads = [workload(md, roles_by_name[role], ordinal, group, i)
                 for i, ((role, ordinal), group) in enumerate(sorted(by_group.items()))]
    # The previous sync's status, so this pass is the idle resync (conditions carried over).
    second = reconcile(hook_request(_request(md, observed, world + workloads)), BENCH_SYNC_SETTINGS,
                       now=NOW)
    md["status"] = second.status
    request = _request(md, observed, world + workloads)
    # Round-trip once so the benchmark starts from exactly what the wire carries.
    return orjson.loads(orjson.dumps(request))


def request_bytes(pods: int, **kwargs: Any) -> bytes:
    enabled = gc.isenabled()
    gc.disable()  # building thousands of objects: the collector would only slow it down
    try:
        return orjson.dumps(sync_request(pods, **kwargs))
    finally:
        if enabled:
            gc.enable()

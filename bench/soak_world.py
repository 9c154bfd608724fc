"""What the chaos soak runs (bench/soak.md): its deployments, its small-quota pool, its preemptor.

Deployments come in mixed shapes, drawn in a fixed order so any `--size` mixes them:

- ``chat``: vLLM, size 1, no image (synthesized from the InstanceType's runtime version, so an
  InstanceType change rolls it), on the A10G pool (spare quota);
- ``pd``: a routed prefill/decode pair (llm-d router) with the namespace's KV cache, on the H20
  pool (examples/deployments/pd-pair.yaml); once the ModelDeploymentScaler CRD is installed, a
  scaler governs both roles at ratio 1;
- ``wide``: SGLang, size 2 (one instance spans two hosts of one rack), on the A10G pool;
- ``tight``: vLLM, size 1, on the soak's own pool whose quota is exactly what the tight deployments
  declare (no spare quota; a higher-priority Pod in its queue preempts one of them);
- ``cached``: vLLM attached to the KV cache pool (examples/deployments/qwen-cached.yaml), A10G;
- ``ascend``: SGLang on Ascend 910B (examples/deployments/ascend-sglang.yaml).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

NAMESPACE = "team-a"
A10G = "gpustack-nvidia-a10g-linux-amd64"
H20 = "gpustack-nvidia-h20-linux-amd64"
ASCEND = "gpustack-ascend-910b-linux-arm64"
TIGHT = "soak-tight-a10g-linux-amd64"
TIGHT_NODES = 2
HIGH_PRIORITY = "soak-high"
PREEMPTOR_LABEL = "soak.gpustack.ai/preemptor"
POOL = "shared-dram"
BINDING = "team-a-dram"
SCALER_CRD = "modeldeploymentscalers.worker.gpustack.ai"
ADMISSION_CHECK = "gpustack-model-deployment-joint"


@dataclass
class Shape:
    """One deployment of the soak and what the schedule may do to it."""

    name: str
    kind: str  # chat, pd, wide, tight, cached, ascend
    manifest: dict[str, Any]
    max_replicas: int  # per role; tight deployments never grow past their share of the pool
    engine: str
    tight: bool = False
    cached: bool = False
    scaled: bool = False  # replicas go through its ModelDeploymentScaler (when the kind exists)
    instance_types: set[str] = field(default_factory=set)

    def roles(self) -> list[str]:
        return [r["name"] for r in self.manifest["spec"]["roles"]]


def _md(name: str, model: str, engine: str, version: str, roles: list[dict[str, Any]],
        **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "worker.gpustack.ai/v1", "kind": "ModelDeployment",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"model": {"name": model}, "engine": {"name": engine, "version": version}, "roles": roles,
                     **spec}}


def _server(instance_type: str, replicas: int, cards: int, **extra: Any) -> dict[str, Any]:
    return {"name": "server", "replicas": replicas, "instanceType": instance_type,
            "resources": {"accelerator": cards}, **extra}


def chat(name: str) -> Shape:
    md = _md(name, "Qwen/Qwen2.5-0.5B-Instruct", "vLLM", "0.33.0", [_server(A10G, 2, 1)])
    return Shape(name, "chat", md, 3, "vLLM", instance_types={A10G})


def pd(name: str) -> Shape:
    roles = [{"name": role, "kind": kind, "replicas": 2, "instanceType": H20, "resources": {"accelerator": 2},
              "extraArgs": ["-tp", "2"]} for role, kind in (("prefill", "Prefill"), ("decode", "Decode"))]
    md = _md(name, "Qwen/Qwen3-32B", "vLLM", "0.33.0", roles, kvCache={"poolRef": {"name": BINDING}},
             router={"name": "llm-d-router", "requestTimeoutSeconds": 300, "disaggregationThresholdTokens": 512})
    return Shape(name, "pd", md, 3, "vLLM", cached=True, scaled=True, instance_types={H20})


def wide(name: str) -> Shape:
    md = _md(name, "Qwen/Qwen2.5-72B-Instruct", "SGLang", "0.5.23", [_server(
        A10G, 1, 2, size=2, topology={"requiredLevel": "topology.gpustack.ai/rack"},
        extraArgs=["--tp-size", "4", "--nnodes", "2"])])
    return Shape(name, "wide", md, 2, "SGLang", instance_types={A10G})


def tight(name: str) -> Shape:
    md = _md(name, "Qwen/Qwen2.5-1.5B-Instruct", "vLLM", "0.33.0", [_server(TIGHT, 2, 1)])
    return Shape(name, "tight", md, 2, "vLLM", tight=True, instance_types={TIGHT})


def cached(name: str) -> Shape:
    md = _md(name, "Qwen/Qwen2.5-7B-Instruct", "vLLM", "0.33.0", [_server(A10G, 2, 1)],
             kvCache={"poolRef": {"name": BINDING}})
    return Shape(name, "cached", md, 3, "vLLM", cached=True, instance_types={A10G})


def ascend(name: str) -> Shape:
    md = _md(name, "Qwen/Qwen2.5-7B-Instruct", "SGLang", "0.5.23", [_server(ASCEND, 1, 1)])
    return Shape(name, "ascend", md, 3, "SGLang", instance_types={ASCEND})


# The order shapes are drawn in: the first four cover every kind the soak must mix (size 1 and 2,
# the routed P/D pair with the cache, SGLang and vLLM, a pool with and one without spare quota).
ORDER = (chat, pd, wide, tight, cached, ascend, tight, chat)
# Pools that fit one instance of a shape only (the H20 pool holds one P/D pair at 3+3 replicas).
ONCE = {"pd"}


def shapes(size: int) -> list[Shape]:
    if size < 1:
        raise SystemExit("--size must be at least 1 (the number of deployments)")
    out: list[Shape] = []
    counts: dict[str, int] = {}
    i = 0
    while len(out) < size:
        make = ORDER[i % len(ORDER)]
        i += 1
        kind = make.__name__
        if kind in ONCE and counts.get(kind):
            continue
        out.append(make(f"{kind}-{counts.get(kind, 0)}"))
        counts[kind] = counts.get(kind, 0) + 1
        if i > 10 * size + len(ORDER):
            break
    return out


def tight_cards(deployments: list[Shape]) -> int:
    """The small pool's quota: exactly what its deployments declare at the start (no spare)."""
    cards = sum(r["replicas"] * r.get("size", 1) * r["resources"]["accelerator"]
                for s in deployments if s.tight for r in s.manifest["spec"]["roles"])
    return max(cards, 1)


def tight_instance_type(cards: int) -> dict[str, Any]:
    return {"apiVersion": "worker.gpustack.ai/v1", "kind": "InstanceType", "metadata": {"name": TIGHT},
            "spec": {"displayName": "Soak A10G (no spare quota)", "acceleratable": True,
                     "acceleratorGroup": "nvidia-a10g", "os": "linux", "arch": "amd64",
                     "unitResources": {"cpu": "8", "ram": "32Gi"}, "localStorage": "200Gi",
                     "acceleratorResource": "nvidia.com/gpu"},
            "status": {"entrance": TIGHT, "phase": "Active",
                       "detail": {"manufacturer": "nvidia", "product": "A10G", "family": "Ampere", "memory": "24Gi",
                                  "runtimeVersion": "12.9", "runtimeVersions": ["12.9"]},
                       "accelerator": {"capacity": cards, "remaining": cards, "onceMaxRequest": 2}}}


def tight_kueue(cards: int) -> list[dict[str, Any]]:
    """Flavor, ClusterQueue (our joint check; preemption of lower priorities inside the queue),
    LocalQueue and the WorkloadPriorityClass the preemptor uses."""
    quota = [{"name": "cpu", "nominalQuota": str(8 * cards + 4)},
             {"name": "memory", "nominalQuota": f"{32 * cards + 8}Gi"},
             {"name": "ephemeral-storage", "nominalQuota": "500Gi"},
             {"name": "nvidia.com/gpu", "nominalQuota": str(cards)}]
    return [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": TIGHT},
         "spec": {"nodeLabels": {"gpustack.ai/instance-type": TIGHT}}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": TIGHT},
         "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}},
                  "queueingStrategy": "BestEffortFIFO",
                  "preemption": {"withinClusterQueue": "LowerPriority"},
                  "admissionChecksStrategy": {"admissionChecks": [{"name": ADMISSION_CHECK}]},
                  "resourceGroups": [{"coveredResources": [q["name"] for q in quota],
                                      "flavors": [{"name": TIGHT, "resources": quota}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": TIGHT, "namespace": NAMESPACE},
         "spec": {"clusterQueue": TIGHT}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": HIGH_PRIORITY},
         "value": 1000, "description": "the soak's preemptor"},
    ]


def preemptor(name: str, cards: int) -> dict[str, Any]:
    """A plain Pod in the small pool's queue at a higher priority: Kueue preempts one of our
    Workloads to reserve its quota. It waits on the joint check (nobody answers it for Pods that are
    not ours), so it holds the quota until the soak deletes it."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE,
                         "labels": {"kueue.x-k8s.io/queue-name": TIGHT,
                                    "kueue.x-k8s.io/priority-class": HIGH_PRIORITY, PREEMPTOR_LABEL: "true"}},
            "spec": {"nodeSelector": {"gpustack.ai/instance-type": TIGHT},
                     "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "hog", "image": "registry.local/hog:1",
                                     "resources": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(cards),
                                                                "ephemeral-storage": "1Gi"},
                                                   "limits": {"nvidia.com/gpu": str(cards)}}}]}}


def scaler(shape: Shape) -> dict[str, Any]:
    spec = shape.manifest["spec"]
    replicas = min(r["replicas"] for r in spec["roles"])
    return {"apiVersion": "worker.gpustack.ai/v1", "kind": "ModelDeploymentScaler",
            "metadata": {"name": shape.name, "namespace": NAMESPACE},
            "spec": {"deploymentRef": {"name": shape.name},
                     "roles": [{"name": r["name"], "ratio": 1} for r in spec["roles"]], "replicas": replicas}}


def fresh(shape: Shape) -> dict[str, Any]:
    return copy.deepcopy(shape.manifest)


def ready_again_stage() -> dict[str, Any]:
    """A kwok Stage playing the kubelet after a node comes back: a Running Pod that the node
    lifecycle controller marked not Ready (its node went NotReady) is Ready again once kwok manages
    its node again (kwok's own pod-ready stage only readies Pending Pods)."""
    return {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": "soak-pod-ready-again"},
            "spec": {"resourceRef": {"apiGroup": "v1", "kind": "Pod"},
                     "selector": {"matchExpressions": [
                         {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                         {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                         {"key": '.status.conditions.[] | select( .type == "Ready" ) | .status',
                          "operator": "NotIn", "values": ["True"]}]},
                     "next": {"statusTemplate": (
                         '{{ $now := Now }}\n'
                         'conditions:\n'
                         '- lastTransitionTime: {{ $now | Quote }}\n  status: "True"\n  type: Initialized\n'
                         '- lastTransitionTime: {{ $now | Quote }}\n  status: "True"\n  type: Ready\n'
                         '- lastTransitionTime: {{ $now | Quote }}\n  status: "True"\n  type: ContainersReady\n'
                         '- lastTransitionTime: {{ $now | Quote }}\n  status: "True"\n  type: PodScheduled\n')}}}

"""Pure facts the activator reads: which Service a request names, whether a deployment serves, and
why a wake waits (docs/scale-to-zero.md#what-a-client-sees)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app import vocab

KUEUE_REASON_INADMISSIBLE = "Inadmissible"
IMAGE_PULL_FAILURES = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName")


@dataclass(frozen=True)
class Target:
    """A deployment the activator holds requests for."""

    namespace: str
    deployment: str
    scaler: str | None  # the scaler that wakes it (None: nothing will)
    wake_timeout: float
    port: int | str  # the Service's target port on the serving Pods: a number, or a container port's name
    selector: dict[str, str] = field(default_factory=dict)  # the serving Pods

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.deployment}"


def is_ipv4(host: str) -> bool:
    parts = host.split(".")
    return len(parts) == 4 and all(p.isdigit() and int(p) < 256 for p in parts)


def service_of(host: str) -> tuple[str, str | None]:
    """The Service and namespace a Host header names (`svc`, `svc.ns`, `svc.ns.svc[.cluster.local]`,
    port ignored); the namespace is None for a bare name. A client that dialled the ClusterIP sends
    the address: (address, None), the Service found by its ClusterIP."""
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    if is_ipv4(name):
        return name, None
    parts = name.lower().split(".")
    return parts[0], (parts[1] if len(parts) > 1 and parts[1] else None)


def _condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == type_:
            return cond
    return {}


def wait_reason(workloads: list[dict[str, Any]], cluster_queues: dict[str, str]) -> str:
    """Why a wake has not completed, in Kueue's words: "waiting for quota in ClusterQueue X: <Kueue's
    message>" for a Workload without quota, else what is left (admitted, Pods starting)."""
    if not workloads:
        return "no Kueue Workload exists yet for the woken replicas (the scaler has not woken the deployment)"
    for workload in sorted(workloads, key=lambda w: str((w.get("metadata") or {}).get("name"))):
        reserved = _condition(workload, vocab.KUEUE_COND_QUOTA_RESERVED)
        if reserved.get("status") != "True":
            queue = str((workload.get("spec") or {}).get("queueName") or "")
            cq = cluster_queues.get(queue, f"of LocalQueue {queue}" if queue else "(no queue named)")
            detail = reserved.get("message") or "pending"
            return f"waiting for quota in ClusterQueue {cq}: {detail}"
    return "admitted by Kueue; the replicas' Pods are starting (image pull, model load)"


def fail_reason(workloads: list[dict[str, Any]], pods: list[dict[str, Any]]) -> str | None:
    """A wake that cannot succeed, so the held requests are answered now rather than at the deadline:
    the queue refuses it, the Workload was deactivated, or an image cannot be pulled."""
    for workload in workloads:
        reserved = _condition(workload, vocab.KUEUE_COND_QUOTA_RESERVED)
        if reserved.get("reason") == KUEUE_REASON_INADMISSIBLE:
            return f"Kueue cannot admit the wake: {reserved.get('message') or 'inadmissible'}"
        released = vocab.ANNOTATION_GANG_RELEASED_AT in ((workload.get("metadata") or {}).get("annotations") or {})
        if (workload.get("spec") or {}).get("active") is False and not released:
            # (one the joint deadlock release deactivated comes back one bound later: docs/kueue.md#deadlock-release)
            name = (workload.get("metadata") or {}).get("name")
            return f"Kueue Workload {name} is deactivated"
    for pod in pods:
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            waiting = ((status or {}).get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in IMAGE_PULL_FAILURES:
                return (f"Pod {(pod.get('metadata') or {}).get('name')} cannot pull its image: "
                        f"{waiting.get('reason')} {waiting.get('message') or ''}".rstrip())
    return None


def container_port(pod: dict[str, Any], port: int | str) -> int | None:
    """The Pod's port a Service's targetPort names: the number itself, or the container port of that name."""
    if isinstance(port, int):
        return port
    if port.isdigit():
        return int(port)
    for container in (pod.get("spec") or {}).get("containers") or []:
        for entry in container.get("ports") or []:
            if entry.get("name") == port and isinstance(entry.get("containerPort"), int):
                return int(entry["containerPort"])
    return None


def ready_addresses(pods: list[dict[str, Any]], port: int | str) -> list[str]:
    """host:port of each Ready, running, not deleting Pod (the serving upstreams)."""
    out = []
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        number = container_port(pod, port)
        if meta.get("deletionTimestamp") or not status.get("podIP") or number is None:
            continue
        if _condition(pod, vocab.POD_COND_READY).get("status") == "True":
            out.append(f"{status['podIP']}:{number}")
    return sorted(out)

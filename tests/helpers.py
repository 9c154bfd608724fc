"""Building Metacontroller hook requests from the examples, for unit and API tests."""

from __future__ import annotations

import copy
from typing import Any

from app import vocab
from app.api.hooks import hook_request
from app.control.sync import Refusal, SyncResult, SyncSettings, reconcile
from app.world import related_map
from tests.conftest import example, world_objects

NOW = "2026-11-29T12:00:00Z"


def parent(name: str = "qwen-chat", **spec_changes: Any) -> dict[str, Any]:
    md = copy.deepcopy(example(name))
    md["metadata"].setdefault("uid", f"uid-{md['metadata']['name']}")
    md["metadata"].setdefault("generation", 1)
    md["spec"].update(spec_changes)
    return md


def children_map(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Metacontroller's observed children, keyed `Kind.version` then `namespace/name`; every declared
    child map is present (empty when there are none), as Metacontroller sends them."""
    out: dict[str, dict[str, Any]] = {key: {} for key in vocab.DECLARED_CHILD_MAPS}
    for obj in objects:
        api = obj["apiVersion"]
        key = f"{obj['kind']}.{api}"
        meta = obj["metadata"]
        out.setdefault(key, {})[f"{meta.get('namespace', 'team-a')}/{meta['name']}"] = obj
    return out


def request(md: dict[str, Any], *, children: list[dict[str, Any]] | None = None,
            extra_related: list[dict[str, Any]] | None = None, world: list[dict[str, Any]] | None = None,
            finalizing: bool = False) -> dict[str, Any]:
    objects = (world_objects() if world is None else world) + list(extra_related or [])
    return {
        "controller": {"metadata": {"name": "modeldeployment"}},
        "parent": md,
        "children": children_map(children or []),
        "related": related_map(objects),
        "finalizing": finalizing,
    }


def sync(md: dict[str, Any], settings: SyncSettings | None = None, **kwargs: Any) -> SyncResult:
    """One pass that must answer (a test of a refusal calls `attempt`)."""
    result = attempt(md, settings, **kwargs)
    assert isinstance(result, SyncResult), f"the pass was refused: {result}"
    return result


def attempt(md: dict[str, Any], settings: SyncSettings | None = None, **kwargs: Any) -> SyncResult | Refusal:
    """One pass through the hook door: an answer or a refusal."""
    return reconcile(hook_request(request(md, **kwargs)), settings or SyncSettings(), now=NOW)


def pods(result: SyncResult) -> list[dict[str, Any]]:
    return [c for c in result.children if c["kind"] == "Pod"]


def services(result: SyncResult) -> list[dict[str, Any]]:
    return [c for c in result.children if c["kind"] == "Service"]


def by_kind(result: SyncResult, kind: str) -> list[dict[str, Any]]:
    return [c for c in result.children if c["kind"] == kind]


def engine(pod: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in pod["spec"]["containers"] if c["name"] == "engine")


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    """The effective environment: Kubernetes takes the last entry of a repeated name."""
    out: dict[str, Any] = {}
    for entry in container.get("env", []):
        out[entry["name"]] = entry.get("value", entry.get("valueFrom"))
    return out


def condition(result: SyncResult, type_: str) -> dict[str, Any]:
    return next(c for c in result.status["conditions"] if c["type"] == type_)


def running(pod: dict[str, Any], uid: str) -> dict[str, Any]:
    """An observed Pod as the API server would return it: Running and Ready."""
    observed = copy.deepcopy(pod)
    observed["metadata"]["uid"] = uid
    observed["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    return observed


def workload(namespace: str, name: str, *, reserved: bool = True, admitted: bool = True) -> dict[str, Any]:
    conditions = []
    if reserved:
        conditions.append({"type": "QuotaReserved", "status": "True", "lastTransitionTime": NOW})
    if admitted:
        conditions.append({"type": "Admitted", "status": "True", "lastTransitionTime": NOW})
    return {"apiVersion": vocab.KUEUE_API_VERSION, "kind": vocab.KIND_WORKLOAD,
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": "1"},
            "status": {"conditions": conditions}}

"""The cluster objects a render or an admission decision reads: one World, several sources.

- Metacontroller's `related` map (the sync hook),
- a directory of YAML (local runs, tests, `modeldeployment render`),
- the API server, read live (the webhooks; see app.kube.client).
"""

from __future__ import annotations

import fnmatch
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from pydantic import BaseModel, ValidationError

from app import vocab, yamlread
from app.api.cluster import InstanceType, KVCacheBackend, KVCachePool, KVCachePoolBinding, ModelArtifact
from app.api.objects import KubeObject, ObjectsByName, ObservedGroups

log = logging.getLogger(__name__)

_CLUSTER_KINDS: dict[str, type[BaseModel]] = {
    vocab.KIND_INSTANCE_TYPE: InstanceType,
    vocab.KIND_KV_CACHE_POOL: KVCachePool,
    vocab.KIND_KV_CACHE_BACKEND: KVCacheBackend,
}
_NAMESPACED_KINDS: dict[str, type[BaseModel]] = {
    vocab.KIND_KV_CACHE_POOL_BINDING: KVCachePoolBinding,
    vocab.KIND_MODEL_ARTIFACT: ModelArtifact,
}


@dataclass
class World:
    instance_types: dict[str, InstanceType] = field(default_factory=dict)
    pools: dict[str, KVCachePool] = field(default_factory=dict)
    backends: dict[str, KVCacheBackend] = field(default_factory=dict)
    bindings: dict[tuple[str, str], KVCachePoolBinding] = field(default_factory=dict)
    artifacts: dict[tuple[str, str], ModelArtifact] = field(default_factory=dict)
    # Kueue Workloads by (namespace, name), kept raw: we read a few status fields only.
    workloads: dict[tuple[str, str], KubeObject] = field(default_factory=dict)
    # Objects that were read but do not parse, by (kind, namespace, name): why, for the messages
    # that would otherwise say "does not exist".
    malformed: dict[tuple[str, str, str], str] = field(default_factory=dict)

    def binding(self, namespace: str, name: str) -> KVCachePoolBinding | None:
        return self.bindings.get((namespace, name))

    def artifact(self, namespace: str, name: str) -> ModelArtifact | None:
        return self.artifacts.get((namespace, name))

    def workload(self, namespace: str, name: str) -> KubeObject | None:
        return self.workloads.get((namespace, name))

    def absence(self, kind: str, name: str, namespace: str = "") -> str:
        """Why an object of `kind` is missing from this world: "does not exist", or malformed and why."""
        why = self.malformed.get((kind, namespace, name))
        if why is None:
            return "does not exist"
        return f"exists but is malformed ({why}), so it cannot be read"

    def add(self, obj: KubeObject) -> None:
        """Adds one object by its kind; objects of other kinds are ignored."""
        kind = obj.get("kind")
        meta = obj.get("metadata") or {}
        name, namespace = meta.get("name", ""), meta.get("namespace", "")
        if kind == vocab.KIND_WORKLOAD:
            self.workloads[(namespace, name)] = obj
            return
        model = _CLUSTER_KINDS.get(kind or "") or _NAMESPACED_KINDS.get(kind or "")
        if model is None:
            return
        try:
            parsed = model.model_validate(obj)
        except ValidationError as exc:
            # A malformed supporting object reads as absent; messages name it and why.
            log.warning("ignoring malformed %s %s/%s: %s", kind, namespace, name, exc.errors()[:3])
            self.malformed[(kind or "", namespace, name)] = parse_problems(exc)
            return
        # The kind chose the model, so each kind's object is an instance of its own model.
        if isinstance(parsed, InstanceType):
            self.instance_types[name] = parsed
        elif isinstance(parsed, KVCachePool):
            self.pools[name] = parsed
        elif isinstance(parsed, KVCacheBackend):
            self.backends[name] = parsed
        elif isinstance(parsed, KVCachePoolBinding):
            self.bindings[(namespace, name)] = parsed
        elif isinstance(parsed, ModelArtifact):
            self.artifacts[(namespace, name)] = parsed

    @classmethod
    def of(cls, objects: Iterable[KubeObject]) -> "World":
        world = cls()
        for obj in objects:
            if isinstance(obj, dict):
                world.add(obj)
        return world

    @classmethod
    def from_related(cls, related: ObservedGroups | None) -> "World":
        """Metacontroller v2 `related`: {"Kind.group/version": {"ns/name" or "name": object}}."""
        objects: list[KubeObject] = []
        for by_name in (related or {}).values():
            if isinstance(by_name, dict):
                objects.extend(o for o in by_name.values() if isinstance(o, dict))
        return cls.of(objects)


def parse_problems(exc: ValidationError, limit: int = 3) -> str:
    """The first few of pydantic's errors as `<field path>: <message>`, for a message to a person."""
    shown = []
    for error in exc.errors(include_url=False)[:limit]:
        path = ".".join(str(part) for part in error.get("loc", ())) or "object"
        shown.append(f"{path}: {error.get('msg', 'invalid')}")
    more = exc.error_count() - len(shown)
    return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")




def map_keys(obj: KubeObject) -> tuple[str, str]:
    """Where Metacontroller's v2 `children` and `related` maps hold an object: its group
    ("Kind.apiVersion") and its name in that group ("namespace/name", or the name alone)."""
    meta = obj.get("metadata") or {}
    name = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta.get("name", "")
    return f"{obj.get('kind')}.{obj.get('apiVersion', '')}", name


def related_map(objects: Iterable[KubeObject]) -> ObservedGroups:
    """Plain objects as Metacontroller's v2 `related` map (the inverse of World.from_related)."""
    out: dict[str, ObjectsByName] = {}
    for obj in objects:
        group, name = map_keys(obj)
        out.setdefault(group, {})[name] = obj
    return dict(out)  # as ObservedGroups (whose groups may be null): dict is invariant in its values


def load_yaml_objects(path: Path) -> list[KubeObject]:
    """Every object in a YAML file or a directory of them (Lists are flattened), read as the API
    server's decoder reads YAML (app/yamlread.py: aliases bounded, duplicate keys refused)."""
    return [doc.obj for doc in yamlread.load_documents(path)]


class DirectoryWorld:
    """A world read from a directory of YAML; re-read when a file changes, so edits apply live."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._signature: tuple[Any, ...] | None = None
        self._world = World()

    def _current_signature(self) -> tuple[Any, ...]:
        """(path, mtime, size) of every YAML file: one stat per file (each admission review asks)."""
        if not self.path.is_dir():
            files = [str(self.path)]
        else:
            files = sorted(os.path.join(root, name) for root, _dirs, names in os.walk(self.path)
                           for name in names if fnmatch.fnmatchcase(name, "*.y*ml"))
        out = []
        for file in files:
            try:
                st = os.stat(file)
            except OSError:
                continue  # gone since the listing: as before, a missing file does not count
            out.append((file, st.st_mtime_ns, st.st_size))
        return tuple(out)

    def snapshot(self) -> World:
        signature = self._current_signature()
        if signature != self._signature:
            self._world = World.of(load_yaml_objects(self.path))
            self._signature = signature
        return self._world

"""Which status fields move in each ModelDeployment status write, from one watch over a phase.

For each MODIFIED event of a ModelDeployment whose `.status` differs from the one before, count the
paths that changed (bench/status_writes.py's changed_paths: role entries folded, conditions by type), so a
run says which fields its writes carry (docs/status.md#settling). An update that leaves `.status`
as it was (a spec edit, Metacontroller's finalizer) is not counted."""
from __future__ import annotations

from collections import Counter
from typing import Any, Callable

import orjson

from app import vocab
from bench.status_writes import changed_paths
from bench.watch import Watch


class StatusFieldWatch:
    """Counts, over a watch, the status writes and the fields each moved."""

    def __init__(self, client_factory: Callable[[], Any], namespace: str) -> None:
        self.client_factory = client_factory
        self.namespace = namespace
        self.last: dict[str, Any] = {}
        self.fields: Counter[str] = Counter()
        self.writes = 0
        self._watch: Watch | None = None

    def _path(self) -> str:
        return f"/apis/{vocab.GROUP}/v1/namespaces/{self.namespace}/modeldeployments"

    def start(self) -> None:
        client = self.client_factory()
        listed = orjson.loads(client.get(self._path()).content)
        for md in listed.get("items") or []:
            self.last[md["metadata"]["name"]] = md.get("status") or {}
        self._watch = Watch(self.client_factory, self._path(), self._apply)
        self._watch.start(listed["metadata"]["resourceVersion"], client)

    def _apply(self, kind: str, md: dict[str, Any], now: float) -> None:
        name = (md.get("metadata") or {}).get("name", "")
        if kind == "DELETED":
            self.last.pop(name, None)
            return
        status = md.get("status") or {}
        paths = changed_paths(self.last.get(name, {}), status)
        self.last[name] = status
        if not paths:
            return
        self.writes += 1
        for p in paths:
            self.fields[p] += 1

    def stop(self) -> dict[str, Any]:
        if self._watch is not None:
            self._watch.stop()
        return {"writes": self.writes, "fields": dict(self.fields.most_common(30)),
                "watch_error": self._watch.error if self._watch is not None else "",
                "watch_reconnects": self._watch.reconnects if self._watch is not None else 0}

"""Which status fields move in each ModelDeployment status write, from one watch over a phase.

For each MODIFIED event of a ModelDeployment whose `.status` differs from the one before, count the
paths that changed (bench/status_writes.py's changed_paths: role entries folded, conditions by type), so a
run says which fields its writes carry (docs/status.md#settling). An update that leaves `.status`
as it was (a spec edit, Metacontroller's finalizer) is not counted."""
from __future__ import annotations

import threading
from collections import Counter
from typing import Any, Callable

import orjson

from app import vocab
from bench.status_writes import changed_paths


class StatusFieldWatch:
    """Counts, over a watch, the status writes and the fields each moved."""

    def __init__(self, client_factory: Callable[[], Any], namespace: str) -> None:
        self.client_factory = client_factory
        self.namespace = namespace
        self.last: dict[str, Any] = {}
        self.fields: Counter[str] = Counter()
        self.writes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._response: Any = None
        self.error = ""

    def _path(self) -> str:
        return f"/apis/{vocab.GROUP}/v1/namespaces/{self.namespace}/modeldeployments"

    def start(self) -> None:
        client = self.client_factory()
        listed = orjson.loads(client.get(self._path()).content)
        for md in listed.get("items") or []:
            self.last[md["metadata"]["name"]] = md.get("status") or {}
        version = listed["metadata"]["resourceVersion"]
        self._thread = threading.Thread(target=self._run, args=(client, version), daemon=True)
        self._thread.start()

    def _run(self, client: Any, version: str) -> None:
        params = {"watch": "1", "resourceVersion": version, "timeoutSeconds": "3600"}
        try:
            with client.stream("GET", self._path(), params=params, timeout=None) as response:
                self._response = response
                for line in response.iter_lines():
                    if self._stop.is_set():
                        return
                    if line:
                        self._apply(orjson.loads(line))
        except Exception as exc:  # noqa: BLE001 - closed by stop(), or the API server went away
            if not self._stop.is_set():
                self.error = f"{type(exc).__name__}: {exc}"

    def _apply(self, event: dict[str, Any]) -> None:
        md = event.get("object") or {}
        name = (md.get("metadata") or {}).get("name", "")
        if event.get("type") == "DELETED":
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
        self._stop.set()
        if self._response is not None:
            try:
                self._response.close()
            except Exception:  # noqa: BLE001
                pass
        if self._thread is not None:
            self._thread.join(timeout=10)
        return {"writes": self.writes, "fields": dict(self.fields.most_common(30)), "watch_error": self.error}

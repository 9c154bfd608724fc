"""When each Pod of the soak was Ready, from a watch: every change the API server made, not only
those a half-second observation happened to see.

The turnover invariant (bench/soak.md#invariants) holds a replica lost until it is Ready again. A
replica rebuilt, Ready and then taken by a departure can be Ready for a tenth of a second, between
two observations; read only from the observations, that looks like one loss spanning both, and the
departure's loss is blamed on the turnover before it (bench/soak.md#bugs-found-on-the-way). The
Pods' own timestamps cannot settle it either: they are whole seconds, and a Pod that kwok removes
at once leaves nothing to read. A watch sees every update of every Pod, Ready windows included.

Times are soak seconds (Ledger.now) when the watch delivered the change: a change is seen late by
the watch's latency, never early, so a window found after a loss did begin after it.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable

import httpx
import orjson

#: (deployment UID, role, ordinal): the replica a Pod belongs to.
ReplicaKey = tuple[str, str, int]


@dataclass
class PodReadiness:
    name: str
    member: str
    windows: list[list[float]] = field(default_factory=list)  # [ready from, until]; until = inf while Ready

    def open(self) -> bool:
        return bool(self.windows) and self.windows[-1][1] == float("inf")


class ReadyLog:
    """Ready windows per Pod UID, grouped by replica. `apply` takes one watch event; the key and
    readiness of a Pod are read by the functions the watcher judges with, so both agree."""

    def __init__(self, key_of: Callable[[dict[str, Any]], ReplicaKey | None],
                 member_of: Callable[[dict[str, Any]], str], ready: Callable[[dict[str, Any]], bool]) -> None:
        self.key_of = key_of
        self.member_of = member_of
        self.ready = ready
        self.lock = threading.Lock()
        self.pods: dict[ReplicaKey, dict[str, PodReadiness]] = defaultdict(dict)
        self.events = 0

    def apply(self, kind: str, pod: dict[str, Any], now: float) -> None:
        key = self.key_of(pod)
        if key is None:
            return
        meta = pod["metadata"]
        with self.lock:
            self.events += 1
            entry = self.pods[key].setdefault(meta["uid"], PodReadiness(meta["name"], self.member_of(pod)))
            ready = kind != "DELETED" and self.ready(pod)
            if ready and not entry.open():
                entry.windows.append([now, float("inf")])
            elif not ready and entry.open():
                entry.windows[-1][1] = now

    def relisted(self, pods: list[dict[str, Any]], now: float) -> None:
        """A fresh list after the watch broke: every Pod not in it is gone (deleted in the gap)."""
        present = {p["metadata"]["uid"] for p in pods}
        with self.lock:
            for entries in self.pods.values():
                for uid, entry in entries.items():
                    if uid not in present and entry.open():
                        entry.windows[-1][1] = now
        for pod in pods:
            self.apply("MODIFIED", pod, now)

    def ready_after(self, key: ReplicaKey, size: int, since: float) -> bool:
        """Whether the replica turned whole and Ready again after `since`: some Pod of it turned Ready
        after that moment, and then `size` members were Ready together. Only a window that began
        after `since` can end a loss seen then; one open across it (a member Ready throughout, or
        the lost Pod's own end, which the watch delivers a moment late) counts only beside it."""
        with self.lock:
            entries = list(self.pods.get(key, {}).values())
            windows = [(e.member, start, end) for e in entries for start, end in e.windows if end > since]
        return any(len({m for m, s, e in windows if s <= moment < e}) >= size
                   for _, moment, _ in windows if moment > since)

    def history(self, key: ReplicaKey, since: float) -> list[str]:
        """The replica's Pods' Ready windows ending after `since`, for a violation's report."""
        with self.lock:
            entries = list(self.pods.get(key, {}).values())
        lines = []
        for e in entries:
            shown = [f"{s:.2f}-{'…' if t == float('inf') else f'{t:.2f}'}" for s, t in e.windows if t > since]
            if shown or not e.windows:
                lines.append(f"{e.name}: Ready {', '.join(shown) or 'never'}")
        return lines


class PodWatch:
    """Feeds a ReadyLog from a watch of one namespace's Pods, in its own thread; a broken watch (an
    API server restart, an expired resourceVersion) is followed by a fresh list and a new watch."""

    def __init__(self, client: httpx.Client, namespace: str, log: ReadyLog, now: Callable[[], float]) -> None:
        self.client = client
        self.path = f"/api/v1/namespaces/{namespace}/pods"
        self.log = log
        self.now = now
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-pod-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    listed = self.client.get(self.path, timeout=10)
                    listed.raise_for_status()
                    body = orjson.loads(listed.content)
                    self.log.relisted(body["items"], self.now())
                    version = body["metadata"]["resourceVersion"]
                version = self._watch(version)
            except (httpx.HTTPError, OSError, KeyError, ValueError):
                self.failures += 1
                version = None
                self._stop.wait(0.5)

    def _watch(self, version: str) -> str | None:
        """Applies one watch's events; the version to watch on from, or None to list again."""
        params = {"watch": "1", "resourceVersion": version, "allowWatchBookmarks": "true", "timeoutSeconds": "60"}
        with self.client.stream("GET", self.path, params=params, timeout=httpx.Timeout(10, read=75)) as response:
            response.raise_for_status()
            for line in response.iter_lines():
                if self._stop.is_set():
                    return version
                if not line:
                    continue
                event = orjson.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    return None  # e.g. 410 Gone: the version expired
                version = obj["metadata"].get("resourceVersion", version)
                if kind != "BOOKMARK":
                    self.log.apply(kind, obj, self.now())
        return version  # the server ended the watch (timeoutSeconds): go on from where it was

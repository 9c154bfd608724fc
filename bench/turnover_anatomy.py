"""Where a replica turnover's downtime goes (bench/e2e_scale.py's turnover watch, bench/lws.py)."""
from __future__ import annotations

from typing import Any

from app import vocab


def _stopping(pod: dict[str, Any]) -> tuple[bool, bool]:
    """(deleting, released): a deletionTimestamp set, and no finalizer left to hold it."""
    meta = pod.get("metadata") or {}
    return bool(meta.get("deletionTimestamp")), bool(meta.get("deletionTimestamp")) and not meta.get("finalizers")


class TurnoverAnatomy:
    """Where a turnover's downtime goes, from the same Pod watch: per turnover, the seconds from the
    replica going down to its replacement's first Pod seen (`new_seen`), to the last Pod of the
    earlier incarnation deleted (`old_gone`), to every new Pod ungated (`ungated`: the group
    admitted), bound to a node (`bound`) and the replica Ready again (`ready`). The earlier
    incarnation is the replica's Pods bound to a node when it goes down, the replacement every
    other Pod of it; Pods are keyed by UID, since a StatefulSet's replacement reuses its
    predecessor's name."""

    MILESTONES = ("new_seen", "old_deleting", "old_released", "old_gone", "wl_created", "reserved", "check_ready",
                  "admitted", "ungated", "bound", "ready")
    GROUP_LABEL = vocab.LABEL_KUEUE_POD_GROUP_NAME

    def __init__(self) -> None:
        self.live: dict[str, tuple[tuple[str, str], dict[str, Any]]] = {}
        self.open: dict[tuple[str, str], dict[str, Any]] = {}
        self.done: list[dict[str, float]] = []
        # Per Workload name (a pod group): when it was first seen, reserved, its checks Ready, admitted.
        self.groups: dict[str, dict[str, float]] = {}

    def workload(self, kind: str, wl: dict[str, Any], now: float) -> None:
        if kind == "DELETED":
            # A slot's name is used again by a later incarnation: its times start afresh.
            self.groups.pop((wl.get("metadata") or {}).get("name", ""), None)
            return
        at = self.groups.setdefault((wl.get("metadata") or {}).get("name", ""), {})
        at.setdefault("wl_created", now)
        status = wl.get("status") or {}
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        if conditions.get("QuotaReserved") == "True":
            at.setdefault("reserved", now)
        if conditions.get("Admitted") == "True":
            at.setdefault("admitted", now)
        checks = status.get("admissionChecks") or []
        if checks and all(c.get("state") == "Ready" for c in checks):
            at.setdefault("check_ready", now)

    def down(self, replica: tuple[str, str], now: float) -> None:
        pods = [(uid, pod) for uid, (key, pod) in self.live.items() if key == replica]
        turnover: dict[str, Any] = {"t0": now, "at": {}, "new": {},
                                    "old": {uid for uid, pod in pods if (pod.get("spec") or {}).get("nodeName")}}
        turnover["old_state"] = {uid: _stopping(pod) for uid, pod in pods if uid in turnover["old"]}
        self._old_moved(turnover, now)
        self.open[replica] = turnover
        for uid, pod in pods:
            if uid not in turnover["old"]:
                self._new(turnover, uid, pod, now)

    @staticmethod
    def _old_moved(turnover: dict[str, Any], now: float) -> None:
        states = turnover["old_state"].values()
        if states and all(deleting for deleting, _ in states):
            turnover["at"].setdefault("old_deleting", now)
        if states and all(released for _, released in states):
            turnover["at"].setdefault("old_released", now)

    @staticmethod
    def _new(turnover: dict[str, Any], uid: str, pod: dict[str, Any], now: float) -> None:
        spec = pod.get("spec") or {}
        turnover["new"][uid] = (not spec.get("schedulingGates"), bool(spec.get("nodeName")))
        group = ((pod.get("metadata") or {}).get("labels") or {}).get(TurnoverAnatomy.GROUP_LABEL)
        if group:
            turnover["group"] = group
        at = turnover["at"]
        at.setdefault("new_seen", now)
        states = list(turnover["new"].values())
        if all(ungated for ungated, _ in states):
            at.setdefault("ungated", now)
        if all(bound for _, bound in states):
            at.setdefault("bound", now)

    def seen(self, replica: tuple[str, str], kind: str, pod: dict[str, Any], now: float) -> None:
        uid = (pod.get("metadata") or {}).get("uid", "")
        if kind == "DELETED":
            self.live.pop(uid, None)
        else:
            self.live[uid] = (replica, pod)
        turnover = self.open.get(replica)
        if turnover is None:
            return
        if uid in turnover["old"]:
            turnover["old_state"][uid] = (True, True) if kind == "DELETED" else _stopping(pod)
            self._old_moved(turnover, now)
            if kind == "DELETED":
                turnover["old"].discard(uid)
                if not turnover["old"]:
                    turnover["at"].setdefault("old_gone", now)
        elif kind == "DELETED":
            turnover["new"].pop(uid, None)
        else:
            self._new(turnover, uid, pod, now)

    def up(self, replica: tuple[str, str], now: float) -> None:
        turnover = self.open.pop(replica, None)
        if turnover is None:
            return
        at = turnover["at"]
        if not turnover["old"]:
            at.setdefault("old_gone", turnover["t0"])
        at["ready"] = now
        for milestone, when in self.groups.get(turnover.get("group", ""), {}).items():
            if when >= turnover["t0"] - 5:
                at[milestone] = when
        self.done.append({k: v - turnover["t0"] for k, v in at.items()})

    def means(self) -> dict[str, float]:
        out = {}
        for milestone in self.MILESTONES:
            values = [d[milestone] for d in self.done if milestone in d]
            if values:
                out[milestone] = round(sum(values) / len(values), 2)
        return out

"""The soak's history: every operation and fault with its times, what it touched, the outages,
and the invariant violations (each with the time, the objects and the last operations)."""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

#: A departure explains a Ready replica lost from its start until this long after it ended (the
#: node back, the preemptor gone): the replica needs that long to be rebuilt and Ready again.
EXPLAIN_GRACE_SECONDS = 30.0
#: Violations keep this many of the last operations before them.
HISTORY_IN_VIOLATION = 12


@dataclass
class Action:
    seq: int
    category: str  # op (user operation), departure, platform
    kind: str
    target: str
    start: float  # seconds since the soak started
    end: float | None = None
    result: str = ""  # ok, refused, failed: <why>
    detail: str = ""
    episode: int = 0
    touches: list[str] = field(default_factory=list)  # the deployments it may change

    def line(self) -> str:
        end = f"{self.end:.1f}" if self.end is not None else "…"
        return f"#{self.seq} [{self.start:.1f}-{end}s] {self.category}/{self.kind} {self.target}: {self.result} {self.detail}".rstrip()


@dataclass
class Explanation:
    """A departure fault that may take Ready replicas away: (deployment, role, ordinal), None = any."""

    deployment: str
    role: str | None
    ordinal: int | None
    action: Action

    def covers(self, deployment: str, role: str, ordinal: int, t: float) -> bool:
        if self.deployment != deployment or self.role not in (None, role) or self.ordinal not in (None, ordinal):
            return False
        until = float("inf") if self.action.end is None else self.action.end + EXPLAIN_GRACE_SECONDS
        return self.action.start - 1.0 <= t <= until


@dataclass
class Violation:
    time: float
    invariant: str
    message: str
    objects: list[str]
    last_operations: list[str] = field(default_factory=list)


class Ledger:
    """Thread-safe: the schedule writes actions, the watcher reads them and writes violations."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.lock = threading.RLock()
        self.actions: list[Action] = []
        self.violations: list[Violation] = []
        self.touched: dict[str, float] = {}
        self.explanations: list[Explanation] = []
        self.outages: dict[str, list[list[float | None]]] = {}
        self.episode = 0
        self._seen: set[tuple[str, str]] = set()

    def now(self) -> float:
        return time.monotonic() - self.t0

    # --- history ---------------------------------------------------------------------------------

    def begin(self, category: str, kind: str, target: str, touch: Iterable[str] = ()) -> Action:
        """Records an action before it is carried out; `touch` names the deployments it may change
        (their children lose the "nothing touched it" guarantee from now on)."""
        with self.lock:
            action = Action(len(self.actions) + 1, category, kind, target, self.now(), episode=self.episode,
                            touches=sorted(touch))
            self.actions.append(action)
            for name in touch:
                self.touched[name] = action.start
            return action

    def widen(self, action: Action, names: Iterable[str]) -> None:
        """The action, still under way, turns out to change these deployments too."""
        with self.lock:
            for name in names:
                if name not in action.touches:
                    action.touches.append(name)
                self.touched[name] = self.now()

    def touch(self, names: Iterable[str]) -> None:
        with self.lock:
            for name in names:
                self.touched[name] = self.now()

    def finish(self, action: Action, result: str = "ok", detail: str = "") -> Action:
        with self.lock:
            action.end = self.now()
            action.result = result
            if detail:
                action.detail = detail
            return action

    def explain(self, action: Action, deployment: str, role: str | None = None, ordinal: int | None = None) -> None:
        with self.lock:
            self.explanations.append(Explanation(deployment, role, ordinal, action))

    def explained(self, deployment: str, role: str, ordinal: int, t: float) -> bool:
        with self.lock:
            return any(e.covers(deployment, role, ordinal, t) for e in self.explanations)

    def in_flight(self, deployment: str) -> bool:
        """An action that may change the deployment has begun and not ended yet."""
        with self.lock:
            return any(a.end is None and deployment in a.touches for a in self.actions)

    def last_touch(self, deployment: str) -> float:
        with self.lock:
            return self.touched.get(deployment, float("-inf"))

    # --- outages ---------------------------------------------------------------------------------

    def down(self, component: str) -> None:
        with self.lock:
            self.outages.setdefault(component, []).append([self.now(), None])

    def up(self, component: str) -> None:
        with self.lock:
            spans = self.outages.get(component) or []
            if spans and spans[-1][1] is None:
                spans[-1][1] = self.now()

    def was_down(self, component: str, start: float, end: float, margin: float = 1.0) -> bool:
        """Whether the component was out (stopped, killed, frozen) at any time in [start, end]."""
        with self.lock:
            for began, ended in self.outages.get(component) or []:
                if began is None:
                    continue
                stop = float("inf") if ended is None else ended
                if began - margin <= end and start <= stop + margin:
                    return True
            return False

    # --- violations ------------------------------------------------------------------------------

    def violation(self, invariant: str, message: str, objects: Iterable[str], key: str | None = None) -> None:
        """Records one violation (once per `key`: a state that lasts is one violation)."""
        with self.lock:
            dedupe = (invariant, key if key is not None else message)
            if dedupe in self._seen:
                return
            self._seen.add(dedupe)
            t = self.now()
            recent = [a.line() for a in self.actions if a.start <= t][-HISTORY_IN_VIOLATION:]
            self.violations.append(Violation(round(t, 2), invariant, message, sorted(objects), recent))
            print(f"[soak] VIOLATION at {t:.1f}s {invariant}: {message}", flush=True)

    def as_json(self) -> dict[str, Any]:
        with self.lock:
            return {"actions": [asdict(a) for a in self.actions],
                    "violations": [asdict(v) for v in self.violations],
                    "outages": {k: [list(s) for s in v] for k, v in self.outages.items()}}

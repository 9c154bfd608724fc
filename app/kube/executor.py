"""Carries out the planner's intents, idempotently. The one place with side effects.

Without an API server (local runs, tests) every intent is logged and skipped, and the hooks
still answer. A Workload delete that fails raises, so a sync hook answers 5xx and Metacontroller
retries the whole pass; Events and admission-check writes are retried on the next sync.

Trust nothing in the request that asked for them (docs/metacontroller.md#trust): the hooks port answers anyone who can
reach it. Before the first write of a pass the executor confirms the parent: it exists on the API
server with the request's UID (`ParentMismatch` otherwise: nothing written). A confirmation is
remembered for `PARENT_CONFIRMED_SECONDS` by (namespace, name, UID): UIDs are never reused, so a
remembered UID cannot stand for another object, and a read that shows the name holding another UID
(or a parent being deleted, or a finalize pass) replaces or drops the memory.
Each intent must then be about that parent: Events on it, in its namespace; Workloads only among
its own pod groups (names hashed from its namespace, name, role and ordinal), owned by its Pods
when owned at all (checked on the request's copy when the intent carries one, else on a read),
deleted with the copy's UID as a precondition, so a stale copy deletes nothing. An intent that is
not is dropped and logged.

A teardown that has not finished (a finalize pass answering `finalized: false`) is carried out
after its answer (`run_after_answer`): that answer stands whatever the deletes do, the pass
that comes next (a child or Workload going, or `resyncAfterSeconds`) decides again, and
Metacontroller starts deleting the Pods meanwhile (docs/metacontroller.md#finalize). A stopping
service waits for that work within its grace period (`drain`). A finalize pass whose parent is gone
already (404: a finalize on this replica or the other finished the teardown) is done, not failed.

Writes the executor made and the next request cannot show yet (its copy lags the API server) are
not repeated: a Workload UID it deleted, a check state it wrote against the same resourceVersion,
an Event it created (bounded memories, `RECENT_WRITES`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from datetime import datetime, timezone
from typing import Callable, Generic, Hashable, Iterable, TypeVar

from dataclasses import dataclass
from functools import lru_cache

from lightkube.core.exceptions import ApiError

from app import vocab
from app.api.objects import KubeObject
from app.control import observed as obs
from app.control.intents import (ApplyRoleReplicas, DeleteWorkload, Intent, ReadyOnComposition, RecordEvent,
                                  SetAdmissionCheck, SetScalerUnits, SetWorkloadActive)
from app.kube.client import Kube
from app.kube.composition import CompositionFollower
from app.render import names

log = logging.getLogger(__name__)

# API calls of one pass's intents in flight at once.
INTENTS_IN_FLIGHT = 8
# How long a parent confirmed by UID stays confirmed, and how many confirmations are remembered.
PARENT_CONFIRMED_SECONDS = 30.0
PARENT_CONFIRMATIONS = 4096
# How many writes of each kind (Workload deletes, check states, Events) are remembered, and how long.
RECENT_WRITES = 16384
RECENT_WRITE_SECONDS = 600.0


def utc_now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def event_body(intent: RecordEvent, now: str) -> KubeObject:
    return {
        "apiVersion": vocab.CORE_API_VERSION,
        "kind": vocab.KIND_EVENT,
        "metadata": {"name": intent.name, "namespace": intent.namespace},
        "involvedObject": {"apiVersion": vocab.API_VERSION, "kind": intent.involved_kind,
                           "name": intent.deployment, "namespace": intent.namespace, "uid": intent.deployment_uid},
        "reason": intent.reason,
        "message": intent.message[:1024],
        "type": intent.type,
        "source": {"component": vocab.EVENT_SOURCE_COMPONENT},
        "reportingComponent": vocab.EVENT_SOURCE_COMPONENT,
        "reportingInstance": vocab.EVENT_SOURCE_COMPONENT,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


def workload_check_body(intent: SetAdmissionCheck) -> KubeObject:
    metadata = {"name": intent.workload, "namespace": intent.namespace}
    if intent.resource_version:
        metadata["resourceVersion"] = intent.resource_version
    return {
        "apiVersion": vocab.KUEUE_API_VERSION,
        "kind": vocab.KIND_WORKLOAD,
        "metadata": metadata,
        "status": {"admissionChecks": [{
            "name": vocab.ADMISSION_CHECK_NAME,
            "state": intent.state,
            "message": intent.message,
            "lastTransitionTime": intent.last_transition_time,
        }]},
    }


def admission_check_bodies(now: str) -> tuple[KubeObject, KubeObject]:
    spec = {"apiVersion": vocab.KUEUE_API_VERSION, "kind": vocab.KIND_ADMISSION_CHECK,
            "metadata": {"name": vocab.ADMISSION_CHECK_NAME},
            "spec": {"controllerName": vocab.ADMISSION_CHECK_CONTROLLER}}
    status = {"apiVersion": vocab.KUEUE_API_VERSION, "kind": vocab.KIND_ADMISSION_CHECK,
              "metadata": {"name": vocab.ADMISSION_CHECK_NAME},
              "status": {"conditions": [{"type": vocab.ADMISSION_CHECK_COND_ACTIVE, "status": vocab.CONDITION_TRUE,
                                         "reason": vocab.ADMISSION_CHECK_REASON_ACTIVE,
                                         "message": "the ModelDeployment joint admission controller is running",
                                         "lastTransitionTime": now}]}}
    return spec, status


@dataclass(frozen=True)
class ParentRef:
    """The parent a hook request claims: every side effect of the pass must be about it."""

    namespace: str
    name: str
    uid: str
    kind: str = vocab.KIND_MODEL_DEPLOYMENT
    # A finalize pass: the parent is being deleted, so its confirmation is read afresh, never remembered.
    finalizing: bool = False


class ParentMismatch(Exception):
    """The request's parent does not exist with the request's UID: nothing was written.

    `status_code` is the hook's answer: 404 when no such parent exists, 409 when another object
    (another UID) holds its name."""

    def __init__(self, message: str, status_code: int) -> None:
        super().__init__(message)
        self.status_code = status_code


def matching(live: KubeObject | None, parent: ParentRef) -> KubeObject:
    """The live object when it is the parent the request names (its kind, name and UID), else
    ParentMismatch: 404 when it does not exist, 409 when another object holds its name."""
    if live is None:
        raise ParentMismatch(f"{parent.kind} {parent.namespace}/{parent.name} does not exist on the API server: "
                             "no side effect was carried out; a hook request must come from Metacontroller "
                             "for a stored parent", 404)
    live_uid = (live.get("metadata") or {}).get("uid")
    if live_uid != parent.uid:
        raise ParentMismatch(f"{parent.kind} {parent.namespace}/{parent.name} has uid {live_uid!r}, not the request's "
                             f"{parent.uid!r}: no side effect was carried out; Metacontroller retries with the "
                             "stored parent", 409)
    return live


def gone_already(parent: ParentRef, exc: ParentMismatch) -> bool:
    """A finalize pass whose parent no longer exists (404): its teardown is done, not failed.

    Its finalizer went only once a finalize answered `finalized: true` (no Pod and no Workload
    left), on this replica or the other, and what the garbage collector removes after it serves
    nothing (docs/metacontroller.md#finalize). Nothing is written either way."""
    return parent.finalizing and exc.status_code == 404


async def confirm_parent(kube: Kube, parent: ParentRef) -> KubeObject:
    """The live ModelDeployment, or ParentMismatch when it is not the one the request names."""
    return matching(await kube.model_deployment(parent.namespace, parent.name), parent)


async def record_event(kube: Kube, intent: RecordEvent) -> bool:
    """Creates the Event; False (logged) when the API server did not take it: the next pass records it."""
    try:
        await kube.create_event(event_body(intent, utc_now()))
    except (ApiError, OSError) as exc:
        log.warning("could not record event %s: %s", intent.name, exc)
        return False
    return True


@lru_cache(maxsize=256)
def _pod_groups(namespace: str, deployment: str, roles: tuple[str, ...]) -> dict[str, tuple[str, int]]:
    """Every pod group (Workload) name the parent can have: (role, ordinal) by name, for every
    declared role and every ordinal the schema allows (status-read ordinals are bounded the same)."""
    return {group: (role, ordinal) for role in roles
            for group, ordinal in names.role_pod_groups(namespace, deployment, role,
                                                        range(vocab.MAX_ROLE_REPLICAS)).items()}


def live_roles(live: KubeObject) -> tuple[str, ...]:
    roles = (live.get("spec") or {}).get("roles") or []
    return tuple(sorted(r["name"] for r in roles if isinstance(r, dict) and isinstance(r.get("name"), str)))


def foreign(intent: Intent, parent: ParentRef, groups: dict[str, tuple[str, int]]) -> str | None:
    """Why an intent is not about the parent (None when it is)."""
    if intent.namespace != parent.namespace:
        return f"namespace {intent.namespace!r} is not the parent's {parent.namespace!r}"
    if isinstance(intent, (ApplyRoleReplicas, SetScalerUnits)):
        return "a replicas write belongs to a ModelDeploymentScaler's pass"
    if isinstance(intent, RecordEvent):
        if (intent.involved_kind, intent.deployment, intent.deployment_uid) != (parent.kind, parent.name, parent.uid):
            return f"the Event is about {intent.deployment!r} (uid {intent.deployment_uid!r}), not the parent"
        return None
    if isinstance(intent, ReadyOnComposition) and (intent.deployment, intent.deployment_uid) != (parent.name, parent.uid):
        return f"the follow-up is about {intent.deployment!r} (uid {intent.deployment_uid!r}), not the parent"
    workload = intent.name if isinstance(intent, DeleteWorkload) else intent.workload
    if workload not in groups:
        return f"Workload {workload!r} is not a pod group of the parent's roles"
    return None


def owners_tie(workload: KubeObject, parent: ParentRef, role: str, ordinal: int) -> str | None:
    """Why a Workload's owners do not tie it to the parent's replica (None when they do or it has none).

    Kueue owns a plain-pod-group Workload by the group's Pods, all named `<deployment>-<role>-r<k>-…`."""
    owners = []
    for owner in (workload.get("metadata") or {}).get("ownerReferences") or []:
        if not isinstance(owner, dict):
            return f"owner {owner!r} is not a Pod of replica {names.instance(parent.name, role, ordinal)}"
        owners.append((str(owner.get("kind", "")), str(owner.get("name", ""))))
    return owners_tie_of(tuple(owners), parent, role, ordinal)


def owners_tie_of(owners: tuple[tuple[str, str], ...], parent: ParentRef, role: str, ordinal: int) -> str | None:
    """owners_tie on (kind, name) pairs: the request's copy as a DeleteWorkload carries it."""
    prefix = f"{names.instance(parent.name, role, ordinal)}-"
    for kind, name in owners:
        if kind != vocab.KIND_POD or not name.startswith(prefix):
            return f"owner {kind} {name!r} is not a Pod of replica {names.instance(parent.name, role, ordinal)}"
    return None


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Recent(Generic[K, V]):
    """A bounded memory with an age limit: the oldest entries go first when it is full."""

    def __init__(self, size: int, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.size = size
        self.seconds = seconds
        self.clock = clock
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def get(self, key: K) -> V | None:
        found = self._entries.get(key)
        if found is None:
            return None
        at, value = found
        if self.clock() - at >= self.seconds:
            del self._entries[key]
            return None
        return value

    def put(self, key: K, value: V) -> None:
        self._entries.pop(key, None)
        self._entries[key] = (self.clock(), value)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def drop(self, key: K) -> None:
        self._entries.pop(key, None)


@dataclass(frozen=True)
class _Confirmed:
    uid: str
    roles: tuple[str, ...]


class Executor:
    def __init__(self, kube: Kube | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.kube = kube
        # (namespace, name) -> the UID confirmed for it and its roles.
        self.confirmed: Recent[tuple[str, str], _Confirmed] = Recent(PARENT_CONFIRMATIONS, PARENT_CONFIRMED_SECONDS,
                                                                     clock)
        # Writes the next request's copy may not show yet (see the module's docstring).
        self.deleted: Recent[str, bool] = Recent(RECENT_WRITES, RECENT_WRITE_SECONDS, clock)
        self.checks: Recent[tuple[str, str], tuple[str, str, str]] = Recent(RECENT_WRITES, RECENT_WRITE_SECONDS, clock)
        self.events: Recent[tuple[str, str], bool] = Recent(RECENT_WRITES, RECENT_WRITE_SECONDS, clock)
        # (namespace, name) -> the last pass's intents still being carried out after its answer.
        self.after_answer: dict[tuple[str, str], asyncio.Task[None]] = {}
        # Every such task still running (a later pass's waits on the earlier one's): what a shutdown drains.
        self.after_answer_running: set[asyncio.Task[None]] = set()
        # The ready-on-composition follow-ups (docs/kueue.md#ready-on-composition); their writes are ours.
        self.composition = CompositionFollower(kube, self.write_check, utc_now, clock)

    def run_after_answer(self, parent: ParentRef, intents: Iterable[Intent],
                         failed: Callable[[BaseException], None] = lambda exc: None) -> None:
        """Carries the intents out after the pass has answered, once any still running for the same
        parent are done (so two passes' deletes never race; the later one skips what the earlier
        did). A failure is logged and handed to `failed`, never raised: the answer was given, and
        the next pass plans the rest again."""
        intents = list(intents)
        if not intents:
            return
        key = (parent.namespace, parent.name)
        before = self.after_answer.get(key)

        async def carry_out() -> None:
            if before is not None:
                await asyncio.wait([before])
            try:
                await self.run(parent, intents)
            except Exception as exc:  # noqa: BLE001 - logged and counted: the next pass decides again
                failed(exc)
                log.warning("%s/%s: a teardown carried out after its answer stopped: %s: %s (the next pass "
                            "plans it again)", parent.namespace, parent.name, type(exc).__name__, exc)

        task = asyncio.get_running_loop().create_task(carry_out())
        self.after_answer[key] = task
        self.after_answer_running.add(task)

        def forget(done: asyncio.Task[None]) -> None:
            self.after_answer_running.discard(done)
            if self.after_answer.get(key) is done:
                del self.after_answer[key]

        task.add_done_callback(forget)

    async def drain(self, seconds: float) -> int:
        """The service is stopping: waits up to `seconds` for the work carried out after answers
        (docs/metacontroller.md#finalize), then cancels what is left. Returns how many tasks it cut
        short: their deletes are planned again by the next pass, on whichever replica gets it."""
        running = set(self.after_answer_running)
        if not running:
            return 0
        log.info("stopping: waiting up to %gs for %d teardown(s) carried out after their answers", seconds,
                 len(running))
        _done, left = await asyncio.wait(running, timeout=seconds)
        for task in left:
            task.cancel()
        if left:
            await asyncio.wait(left)
            log.warning("stopping: %d teardown(s) carried out after their answers did not finish within %gs and "
                        "were cut short (the next pass plans them again)", len(left), seconds)
        return len(left)

    async def run(self, parent: ParentRef, intents: Iterable[Intent]) -> None:
        intents = list(intents)
        if parent.finalizing:
            # The parent is going: a finalize pass never relies on (nor leaves) a remembered confirmation.
            self.confirmed.drop((parent.namespace, parent.name))
        intents = [i for i in intents if not self._already_done(i)]
        if not intents:
            return
        if self.kube is None:
            for intent in intents:
                log.info("no API server: skipped %s", intent)
            return
        try:
            groups = await self._groups(parent, intents)
        except ParentMismatch as exc:
            if not gone_already(parent, exc):
                raise
            log.info("%s/%s is gone already (another pass finished its teardown): nothing left to carry out",
                     parent.namespace, parent.name)
            return
        allowed = []
        for intent in intents:
            problem = foreign(intent, parent, groups)
            if problem is not None:
                log.warning("dropped an intent of %s/%s: %s (%s)", parent.namespace, parent.name, problem, intent)
                continue
            allowed.append(intent)
        # Each intent is about another object (a Workload, an Event): they run side by side, a few at
        # a time, so a pass waits about one round trip rather than one per intent: Metacontroller's
        # worker waits on the hook meanwhile (bench/results.md#figures-quoted-from-the-code).
        # The first failure is raised once all have run, as the sequential loop raised it.
        limit = asyncio.Semaphore(INTENTS_IN_FLIGHT)

        async def one(intent: Intent) -> None:
            async with limit:
                await self._run_one(parent, intent, groups)

        outcomes = await asyncio.gather(*(one(i) for i in allowed), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome

    async def _groups(self, parent: ParentRef, intents: list[Intent]) -> dict[str, tuple[str, int]]:
        """The parent's pod groups, from a remembered confirmation when every intent's Workload is
        among them, else from a fresh read (which raises ParentMismatch as confirm_parent does)."""
        assert self.kube is not None
        key = (parent.namespace, parent.name)
        known = self.confirmed.get(key)
        if known is not None and known.uid == parent.uid:
            groups = _pod_groups(parent.namespace, parent.name, known.roles)
            if all(_workload_of(i) in groups for i in intents if _workload_of(i) is not None):
                return groups
        try:
            live = await confirm_parent(self.kube, parent)
        except ParentMismatch:
            self.confirmed.drop(key)
            raise
        roles = live_roles(live)
        if parent.finalizing or (live.get("metadata") or {}).get("deletionTimestamp"):
            self.confirmed.drop(key)
        else:
            self.confirmed.put(key, _Confirmed(parent.uid, roles))
        return _pod_groups(parent.namespace, parent.name, roles)


    def _already_done(self, intent: Intent) -> bool:
        """A write this executor made that the request's copy does not show yet."""
        if isinstance(intent, DeleteWorkload):
            return bool(intent.uid) and self.deleted.get(intent.uid) is not None
        if isinstance(intent, SetAdmissionCheck):
            return bool(intent.resource_version) and self.checks.get((intent.namespace, intent.workload)) == (
                intent.resource_version, intent.state, intent.message)
        if isinstance(intent, RecordEvent):
            return self.events.get((intent.namespace, intent.name)) is not None
        return False

    async def _run_one(self, parent: ParentRef, intent: Intent, groups: dict[str, tuple[str, int]]) -> None:
        assert self.kube is not None
        if isinstance(intent, DeleteWorkload):
            await self._delete_workload(parent, intent, groups[intent.name])
        elif isinstance(intent, RecordEvent):
            if await record_event(self.kube, intent):
                self.events.put((intent.namespace, intent.name), True)
        elif isinstance(intent, (ApplyRoleReplicas, SetScalerUnits)):
            log.warning("dropped a replicas write outside a scaler pass: %s", intent)
        elif isinstance(intent, SetWorkloadActive):
            if await self.kube.set_workload_active(intent):
                log.info("Workload %s/%s %s (deadlock release)", intent.namespace, intent.workload,
                         "activated again" if intent.active else "deactivated")
        elif isinstance(intent, SetAdmissionCheck):
            await self.write_check(intent)
        elif isinstance(intent, ReadyOnComposition):
            self.composition.expect(intent)

    async def write_check(self, intent: SetAdmissionCheck) -> bool:
        """Our check's state on one Workload; False when not written (a stale resourceVersion: the
        Workload moved, and the next sync or follow-up decides again)."""
        assert self.kube is not None
        try:
            await self.kube.apply_workload_check(intent.namespace, intent.workload, workload_check_body(intent))
        except ApiError as exc:
            log.info("admission check on %s/%s not written: %s", intent.namespace, intent.workload, exc)
            return False
        if intent.resource_version:
            self.checks.put((intent.namespace, intent.workload), (intent.resource_version, intent.state, intent.message))
        return True

    async def _delete_workload(self, parent: ParentRef, intent: DeleteWorkload, replica: tuple[str, int]) -> None:
        assert self.kube is not None
        if intent.uid:
            # The request's copy: its owners are checked, its UID is the delete's precondition, so a
            # copy that no longer describes the stored Workload deletes nothing (409).
            uid, problem = intent.uid, owners_tie_of(intent.owners, parent, *replica)
        else:
            workload = await self.kube.workload(intent.namespace, intent.name)
            if workload is None:
                return
            problem = owners_tie(workload, parent, *replica)
            uid = (workload.get("metadata") or {}).get("uid") or ""
        if problem is not None or not uid:
            log.warning("left Workload %s/%s alone: %s", intent.namespace, intent.name, problem or "it has no uid")
            return
        if await self.kube.delete_workload(intent.namespace, intent.name, uid):
            self.deleted.put(uid, True)
            log.info("deleted Workload %s/%s (%s)", intent.namespace, intent.name, intent.why)
        else:
            log.info("left Workload %s/%s alone: it is no longer uid %s", intent.namespace, intent.name, uid)

    async def keep_admission_check_active(self) -> None:
        """Asserts the AdmissionCheck exists and is Active; the status is written only when it is not,
        so lastTransitionTime moves only on a transition."""
        if self.kube is None:
            return
        spec, status = admission_check_bodies(utc_now())
        current = await self.kube.admission_check()
        active = obs.condition_true(current, vocab.ADMISSION_CHECK_COND_ACTIVE)
        await self.kube.apply_admission_check(spec, None if active else status)


def _workload_of(intent: Intent) -> str | None:
    if isinstance(intent, DeleteWorkload):
        return intent.name
    if isinstance(intent, (SetAdmissionCheck, SetWorkloadActive, ReadyOnComposition)):
        return intent.workload
    return None

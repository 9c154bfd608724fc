"""Why a replica is not serving: its stage, a machine reason and the message of the source that
knows (docs/status.md#replica-stages).

Pure: the pass's plan of each ordinal, its observed Pods and Workload, and the last written status
in; `status.roles[].notReady[]` out. Nothing here reads a clock: `since` is carried over from the
last written status while a replica stays in one stage (the pass's `now` when it enters one), and a
starting container's progress is stated as its start time and its startup probe's budget, both
fixed while it runs, so a replica that stays where it is writes the same status on every pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app import timestamps, vocab
from app.api.objects import KubeObject
from app.control import observed as obs
from app.control.intents import RecordEvent, parent_event
from app.control.rollout import Action, OrdinalPlan, RolePlan
from app.model.context import DeploymentContext
from app.render import names

# Which of a group's Pods speaks for it: the one furthest from serving for a reason of its own.
_PRECEDENCE = (vocab.STAGE_FAILING, vocab.STAGE_SCHEDULING, vocab.STAGE_PULLING, vocab.STAGE_STARTING)

# A message and a reason are written as their source gave them, cut to these lengths (the schema
# allows more): a scheduler's message over many nodes must not make the status too big to store.
MESSAGE_LIMIT = 2048
REASON_LIMIT = 128

# How a message quotes Kueue's eviction (its Evicted or Preempted condition's words), so a later pass
# finds them again in the last written status (see carry_eviction).
EVICTED_BY = "evicted by Kueue: "
_EVICTION_TAILS = ("; rebuilt whole", "; requeued")
# The stages a rebuilt replica waits in before Kueue admits it again.
_QUEUED_AGAIN = (vocab.STAGE_REASON_CREATING, vocab.STAGE_REASON_POD_GROUP_INCOMPLETE, vocab.STAGE_REASON_NO_WORKLOAD,
                 vocab.STAGE_REASON_QUOTA_PENDING)

_LEAVING = {Action.SHED: vocab.STAGE_REASON_SCALE_DOWN, Action.REPLACE: vocab.STAGE_REASON_ROLLOUT,
            Action.SUPERSEDE: vocab.STAGE_REASON_SUPERSEDED, Action.REBUILD: vocab.STAGE_REASON_DEPARTED}


@dataclass(frozen=True)
class Stage:
    """Where one replica is, from one source: the stage, a machine reason, the source's message."""

    stage: str
    reason: str
    message: str
    started_at: str | None = None  # Starting under a startup probe: the container's start
    startup_budget_seconds: int | None = None  # ...and how long its startup probe allows


@dataclass(frozen=True)
class ReplicaStage:
    """One `status.roles[].notReady[]` entry."""

    role: str
    ordinal: int
    incarnation: int
    stage: Stage
    since: str

    def wire(self) -> KubeObject:
        out: KubeObject = {"ordinal": self.ordinal, "stage": self.stage.stage,
                           "reason": self.stage.reason[:REASON_LIMIT], "message": self.stage.message[:MESSAGE_LIMIT],
                           "since": self.since}
        if self.stage.started_at is not None:
            out["startedAt"] = self.stage.started_at
        if self.stage.startup_budget_seconds is not None:
            out["startupBudgetSeconds"] = self.stage.startup_budget_seconds
        return out


@dataclass(frozen=True)
class RoleStages:
    """A role's not-Ready replicas: the first MAX_LISTED_NOT_READY by ordinal, and how many more."""

    listed: list[ReplicaStage]
    unlisted: int = 0


# --- the sources ----------------------------------------------------------------------------------


def _dict(value: Any) -> KubeObject:
    """A field the kubelet writes, read as an object only when it is one (a request is read, never trusted)."""
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def startup_budget(probe: KubeObject | None) -> int | None:
    """How long a startup probe lets a container start: its initial delay plus period × failures
    (the kubelet's defaults, 10 s and 3, where unset)."""
    if not isinstance(probe, dict):
        return None
    values = [probe.get(k) for k in ("initialDelaySeconds", "periodSeconds", "failureThreshold")]
    delay, period, failures = (v if isinstance(v, int) and not isinstance(v, bool) else d
                               for v, d in zip(values, (0, 10, 3)))
    return delay + period * failures


def _container_spec(pod: KubeObject, container: str) -> KubeObject:
    for c in _list(_dict(pod.get("spec")).get("containers")):
        if isinstance(c, dict) and c.get("name") == container:
            return c
    return {}


def container_stage(pod: KubeObject, status: KubeObject) -> Stage | None:
    """One container's stage from the kubelet's report, None when it is Ready."""
    where = f"Pod {obs.pod_name(pod)} container {status.get('name')}"
    state = _dict(status.get("state"))
    waiting = state.get("waiting") if isinstance(state.get("waiting"), dict) else None
    waiting_reason = str((waiting or {}).get("reason") or "")
    waiting_message = str((waiting or {}).get("message") or "")
    restarts = status.get("restartCount") if isinstance(status.get("restartCount"), int) else 0
    # The run that ended: the current state while the kubelet has not restarted it yet, else the last.
    last = state.get("terminated") if isinstance(state.get("terminated"), dict) else \
        _dict(status.get("lastState")).get("terminated")
    if waiting_reason in vocab.KUBELET_PULL_REASONS:
        return Stage(vocab.STAGE_PULLING, waiting_reason, f"{where}: {waiting_message or waiting_reason}")
    if (restarts or state.get("terminated")) and isinstance(last, dict) and not status.get("ready"):
        # Stays Failing through the back-off and the next run alike, until the container is Ready:
        # only the count and the last exit move, on a restart.
        reason = str(last.get("reason") or "Error")
        return Stage(vocab.STAGE_FAILING, reason,
                     f"{where}: exited with code {last.get('exitCode')} ({reason}); restarted {restarts} time(s)")
    if waiting_reason in vocab.KUBELET_FAILING_REASONS:
        return Stage(vocab.STAGE_FAILING, waiting_reason, f"{where}: {waiting_message or waiting_reason}")
    if waiting_reason in vocab.KUBELET_CREATING_REASONS or waiting is not None:
        return Stage(vocab.STAGE_PULLING, vocab.STAGE_REASON_CONTAINER_CREATING,
                     f"{where}: {waiting_reason or 'waiting'}: the kubelet pulls its image and sets it up")
    running = state.get("running") if isinstance(state.get("running"), dict) else None
    if running is None or status.get("ready"):
        return None
    started_at = str(running.get("startedAt") or "")
    budget = startup_budget(_container_spec(pod, str(status.get("name"))).get("startupProbe"))
    if budget is not None and not status.get("started"):
        return Stage(vocab.STAGE_STARTING, vocab.STAGE_REASON_STARTUP_PROBE,
                     f"{where}: running since {started_at}; its startup probe allows {budget}s",
                     started_at=started_at or None, startup_budget_seconds=budget)
    return Stage(vocab.STAGE_STARTING, vocab.STAGE_REASON_READINESS_PROBE,
                 f"{where}: running since {started_at}, not Ready yet (readiness probe)")


def pod_stage(pod: KubeObject) -> Stage | None:
    """A live Pod's stage: scheduling, then its containers (init containers first); None when Ready."""
    if obs.pod_ready(pod):
        return None
    if not _dict(pod.get("spec")).get("nodeName"):
        scheduled = obs.condition(pod, vocab.POD_COND_SCHEDULED)
        if scheduled is not None and scheduled.get("status") == "False":
            reason = (vocab.STAGE_REASON_UNSCHEDULABLE if scheduled.get("reason") == vocab.STAGE_REASON_UNSCHEDULABLE
                      else vocab.STAGE_REASON_NOT_SCHEDULED)
            return Stage(vocab.STAGE_SCHEDULING, reason,
                         f"Pod {obs.pod_name(pod)}: {scheduled.get('message') or scheduled.get('reason') or 'not scheduled'}")
        return Stage(vocab.STAGE_SCHEDULING, vocab.STAGE_REASON_NOT_SCHEDULED,
                     f"Pod {obs.pod_name(pod)} waits for the scheduler")
    status = _dict(pod.get("status"))
    found = [container_stage(pod, c) for key in ("initContainerStatuses", "containerStatuses")
             for c in _list(status.get(key)) if isinstance(c, dict)]
    stage = first_by_precedence([s for s in found if s is not None])
    if stage is not None:
        return stage
    if not status.get("containerStatuses"):
        return Stage(vocab.STAGE_PULLING, vocab.STAGE_REASON_CONTAINER_CREATING,
                     f"Pod {obs.pod_name(pod)} is on node {_dict(pod.get('spec')).get('nodeName')}; its containers are being "
                     "created")
    return Stage(vocab.STAGE_STARTING, vocab.STAGE_REASON_POD_NOT_READY,
                 f"Pod {obs.pod_name(pod)}: every container is Ready, the Pod is not Ready yet")


def first_by_precedence(stages: list[Stage]) -> Stage | None:
    """The stage furthest from serving for a reason of its own (Failing, Scheduling, Pulling,
    Starting), the first of its rank on ties."""
    ranked = [s for s in stages if s.stage in _PRECEDENCE]
    return min(ranked, key=lambda s: _PRECEDENCE.index(s.stage)) if ranked else None


def _check_message(workload: KubeObject) -> str:
    """The admission checks that are not Ready yet, each with its state and message."""
    pending = [f"{c.get('name')} {c.get('state')}: {c.get('message') or 'no message'}"
               for c in _list(_dict(workload.get("status")).get("admissionChecks"))
               if isinstance(c, dict) and c.get("state") != "Ready"]
    return "; ".join(pending) or "Kueue reserved quota and has not admitted the Workload yet"


def workload_stage(workload: KubeObject | None, group: str) -> Stage | None:
    """The stage Kueue keeps a replica in (no Workload, queued, evicted, checks pending), None once
    admitted. The message is Kueue's own (its condition's: the flavor and what is missing)."""
    if workload is None:
        return Stage(vocab.STAGE_QUEUED, vocab.STAGE_REASON_NO_WORKLOAD,
                     f"Kueue has not made the replica's Workload {group} yet")
    if obs.workload_admitted(workload):
        return None
    if obs.workload_reserved(workload):
        return Stage(vocab.STAGE_ADMITTING, vocab.STAGE_REASON_ADMISSION_CHECK,
                     f"Workload {group}: {_check_message(workload)}")
    if obs.workload_evicted(workload):
        cond = obs.condition(workload, vocab.KUEUE_COND_EVICTED) or obs.condition(workload, vocab.KUEUE_COND_PREEMPTED)
        return Stage(vocab.STAGE_QUEUED, vocab.STAGE_REASON_EVICTED,
                     f"Workload {group}: {EVICTED_BY}{(cond or {}).get('message') or 'evicted'}; requeued")
    cond = obs.condition(workload, vocab.KUEUE_COND_QUOTA_RESERVED)
    return Stage(vocab.STAGE_QUEUED, vocab.STAGE_REASON_QUOTA_PENDING,
                 f"Workload {group}: {(cond or {}).get('message') or 'waiting in its queue for quota'}")


def _gate_stage(inst: obs.ObservedInstance) -> Stage | None:
    for pod in inst.pods:
        if obs.pod_gated(pod):
            return Stage(vocab.STAGE_ADMITTING, vocab.STAGE_REASON_ADMISSION_GATED,
                         f"Kueue admitted the Workload; Pod {obs.pod_name(pod)} still carries its "
                         f"{vocab.KUEUE_SCHEDULING_GATE} scheduling gate")
        if obs.pod_topology_gated(pod):
            return Stage(vocab.STAGE_ADMITTING, vocab.STAGE_REASON_TOPOLOGY_GATED,
                         f"Kueue admitted the Workload; Pod {obs.pod_name(pod)} waits for Kueue's topology placement "
                         f"({vocab.KUEUE_TOPOLOGY_GATE} gate)")
    return None


def _leaving(entry: OrdinalPlan, inst: obs.ObservedInstance | None, workload: KubeObject | None) -> Stage:
    reason = _LEAVING[entry.action]
    if entry.action == Action.SHED:
        what = "the role was scaled down: its Pods and Workload are deleted"
    elif entry.action == Action.REPLACE:
        what = "its render changed: it is replaced (the rollout turns one serving replica over at a time)"
    elif entry.action == Action.SUPERSEDE:
        what = "queued on a render that changed since: replaced by one on the new render"
    elif inst is None or not inst.pods:
        what = entry.note or "its Workload stands without Pods: deleted before the replica is made again"
    else:
        what = _departure(inst, workload)
    return Stage(vocab.STAGE_LEAVING, reason, what)


def _departure(inst: obs.ObservedInstance, workload: KubeObject | None) -> str:
    """Why a departed replica is rebuilt, from what shows it."""
    if obs.workload_evicted(workload):
        cond = obs.condition(workload, vocab.KUEUE_COND_EVICTED) or obs.condition(workload, vocab.KUEUE_COND_PREEMPTED)
        return f"{EVICTED_BY}{(cond or {}).get('message') or 'no message'}; rebuilt whole"
    for pod in inst.pods:
        status = _dict(pod.get("status"))
        if obs.pod_finished(pod):
            return (f"Pod {obs.pod_name(pod)} {str(status.get('phase')).lower()}"
                    f"{': ' + str(status.get('reason')) if status.get('reason') else ''}; rebuilt whole")
        if obs.pod_terminating(pod):
            return f"Pod {obs.pod_name(pod)} is being deleted; rebuilt whole once it is gone"
    return "a member of its Pod group is gone; rebuilt whole"


def predecessor_stage(inst: obs.ObservedInstance, workload: KubeObject | None) -> Stage:
    """A replica whose earlier incarnation is still stopping beside its replacement (docs/kueue.md#incarnation-slots):
    `Leaving`, for the reason the earlier one went, since the replacement is admitted only once it is
    gone. `workload`: the earlier incarnation's, when it still stands."""
    earlier = obs.ObservedInstance(inst.ordinal, inst.earlier)
    departed = earlier.evicted or earlier.finished or obs.workload_evicted(workload) \
        or earlier.fingerprints() == inst.fingerprints()
    if departed:
        entry = OrdinalPlan(inst.ordinal, Action.REBUILD)
    else:
        entry = OrdinalPlan(inst.ordinal, Action.REPLACE if earlier.ran else Action.SUPERSEDE)
    return _leaving(entry, earlier, workload)


def replica_stage(entry: OrdinalPlan, inst: obs.ObservedInstance | None, workload: KubeObject | None,
                  group: str) -> Stage | None:
    """Where one ordinal stands after the pass's plan, None when it serves (or nothing of it exists)."""
    if entry.action in _LEAVING:
        if entry.action == Action.SHED and (inst is None or not inst.pods):
            return None  # only its Workload may stand: deleted this pass, nothing runs
        return _leaving(entry, inst, workload)
    if entry.action == Action.WAIT:
        return Stage(vocab.STAGE_QUEUED, vocab.STAGE_REASON_HELD, entry.note or "new replicas are held")
    if inst is None or not inst.pods:
        return Stage(vocab.STAGE_QUEUED, vocab.STAGE_REASON_CREATING, "its Pods are created on this pass")
    if entry.ready:
        return None
    if entry.incomplete:
        return Stage(vocab.STAGE_QUEUED, vocab.STAGE_REASON_POD_GROUP_INCOMPLETE,
                     f"{len(inst.members())} of its Pods exist; Kueue admits the group once every member does")
    kueue = workload_stage(workload, group)
    if kueue is not None:
        return kueue
    gated = _gate_stage(inst)
    if gated is not None:
        return gated
    return first_by_precedence([s for s in (pod_stage(p) for p in inst.pods) if s is not None])


# --- a role -------------------------------------------------------------------------------------


def previous_stages(md_status: KubeObject | None, role: str) -> dict[int, tuple[str, str]]:
    """ordinal -> (stage, since) as the last written status lists them (read, never trusted: wrong
    types are skipped)."""
    out: dict[int, tuple[str, str]] = {}
    for entry in (md_status or {}).get("roles") or []:
        if not isinstance(entry, dict) or entry.get("name") != role:
            continue
        for item in entry.get("notReady") or []:
            if isinstance(item, dict) and isinstance(item.get("ordinal"), int) \
                    and isinstance(item.get("stage"), str) and isinstance(item.get("since"), str):
                out[item["ordinal"]] = (item["stage"], item["since"])
    return out


def previous_evictions(md_status: KubeObject | None, role: str) -> dict[int, str]:
    """ordinal -> Kueue's eviction words, for each replica the last written status shows evicted
    (Leaving, or Queued after it): Kueue deletes the evicted Workload with its Pods, so the status is
    the one place left that still says why the replica was rebuilt."""
    out: dict[int, str] = {}
    for entry in (md_status or {}).get("roles") or []:
        if not isinstance(entry, dict) or entry.get("name") != role:
            continue
        for item in entry.get("notReady") or []:
            words = eviction_words(item)
            if words is not None:
                out[item["ordinal"]] = words
    return out


def eviction_words(item: Any) -> str | None:
    """Kueue's eviction words a `notReady[]` entry carries (Leaving, or Queued after it), else None:
    what the next pass reads back from the last written status (previous_evictions)."""
    if not isinstance(item, dict) or not isinstance(item.get("ordinal"), int) \
            or not isinstance(item.get("message"), str) \
            or item.get("stage") not in (vocab.STAGE_LEAVING, vocab.STAGE_QUEUED):
        return None
    _, marker, words = item["message"].partition(EVICTED_BY)
    for tail in _EVICTION_TAILS:
        words = words.removesuffix(tail)
    return words if marker and words else None


def carry_eviction(stage: Stage, eviction: str | None) -> Stage:
    """Kueue's eviction words (who preempted the replica and why) stay on it until Kueue admits it
    again: while its Pods terminate (`Leaving` / `Departed`, the Pod's own message first) and while
    it is rebuilt and waits, `Queued` / `Evicted` with its new Workload's message first (what it
    waits for). docs/status.md#replica-stages"""
    if eviction is None or EVICTED_BY in stage.message:
        return stage
    if stage.stage == vocab.STAGE_LEAVING and stage.reason == vocab.STAGE_REASON_DEPARTED:
        return Stage(stage.stage, stage.reason, f"{stage.message}; {EVICTED_BY}{eviction}")
    if stage.stage != vocab.STAGE_QUEUED or stage.reason not in _QUEUED_AGAIN:
        return stage
    return Stage(vocab.STAGE_QUEUED, vocab.STAGE_REASON_EVICTED, f"{stage.message}; {EVICTED_BY}{eviction}")


def since(previous: tuple[str, str] | None, stage: str, now: str) -> str:
    """The stage's start: carried over while the replica stays in it, the pass's time when it enters."""
    if previous is not None and previous[0] == stage and timestamps.parse(previous[1]) is not None:
        return previous[1]
    return now


def role_stages(ctx: DeploymentContext, plan: RolePlan, observed: dict[int, obs.ObservedInstance], *,
                now: str) -> RoleStages:
    """Every not-Ready replica of the role, in ordinal order, the first MAX_LISTED_NOT_READY listed."""
    previous = previous_stages(ctx.md.status, plan.role)
    evictions = previous_evictions(ctx.md.status, plan.role)
    found: list[ReplicaStage] = []
    for entry in sorted(plan.ordinals, key=lambda e: e.ordinal):
        group = entry.group
        inst = observed.get(entry.ordinal)
        if inst is not None and inst.earlier and entry.action not in _LEAVING and not entry.admitted:
            stage: Stage | None = predecessor_stage(
                inst, ctx.world.workload(ctx.namespace, obs.pod_group_of(inst.earlier[0])))
        else:
            stage = replica_stage(entry, inst, ctx.world.workload(ctx.namespace, group), group)
        if stage is None:
            continue
        stage = carry_eviction(stage, evictions.get(entry.ordinal))
        found.append(ReplicaStage(plan.role, entry.ordinal, inst.incarnation() if inst and inst.pods else 0, stage,
                                  since(previous.get(entry.ordinal), stage.stage, now)))
    listed = found[:vocab.MAX_LISTED_NOT_READY]
    return RoleStages(listed, len(found) - len(listed))


def wire(stages: RoleStages) -> dict[str, Any]:
    """The role status's keys for its not-Ready replicas (none while every replica serves)."""
    out: dict[str, Any] = {}
    if stages.listed:
        out["notReady"] = [s.wire() for s in stages.listed]
    if stages.unlisted:
        out["notReadyUnlisted"] = stages.unlisted
    return out


# --- ReplicaStuck (docs/status.md#events) --------------------------------------------------------


def _in_stage_seconds(replica: ReplicaStage, now: str) -> float | None:
    start, clock = timestamps.parse(replica.since), timestamps.parse(now)
    return None if start is None or clock is None else (clock - start).total_seconds()


def stuck_event(ctx: DeploymentContext, replica: ReplicaStage) -> RecordEvent:
    """One Warning per stage a replica enters and stays in: named after the replica, its
    incarnation, the stage and the stage's start, so every later pass repeats the name."""
    instance = names.instance(ctx.name, replica.role, replica.ordinal)
    message = (f"replica {instance} (role {replica.role}, ordinal {replica.ordinal}) has been {replica.stage.stage} "
               f"since {replica.since} ({replica.stage.reason}): {replica.stage.message}")
    key = (f"{ctx.md.metadata.uid}/{replica.role}/{replica.ordinal}/{replica.incarnation}/{replica.stage.stage}/"
           f"{replica.since}")
    return parent_event(ctx.md.metadata, vocab.EVENT_REPLICA_STUCK, message,
                        occurrence=(vocab.EVENT_NAME_REPLICA_STUCK, key))


def stuck_events(ctx: DeploymentContext, stages: list[RoleStages], *, now: str,
                 after_seconds: float) -> list[RecordEvent]:
    """A ReplicaStuck Warning for every listed replica in its stage `after_seconds` or longer. No
    pass is asked for at the threshold: the CompositeController's periodic resync reaches it
    (docs/metacontroller.md#what-starts-a-pass), as it does a stalled ungate."""
    return [stuck_event(ctx, r) for role in stages for r in role.listed
            if (_in_stage_seconds(r, now) or 0.0) >= after_seconds]

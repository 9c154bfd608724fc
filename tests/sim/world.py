"""A pure simulation of Metacontroller, Kueue and the kubelet around `app.control.sync.reconcile`.

Nothing here talks to a cluster. The simulator keeps a store of Pods, Workloads, Events and
ModelDeployments and plays, step by step, the parts of the system the hooks service depends on:

- **Metacontroller** (`Sim.sync`): builds the v2 hook request from the store (children: the
  deployment's Pods, Services and router objects, terminating ones included; related: exactly
  what `customize` selects — Workloads only for the names it lists), calls `reconcile`, runs the
  intents as the executor would (before the hook answers), then applies the response: a returned
  child that does not exist is created, an observed child that was omitted is deleted, an
  existing Pod is never updated (`OnDelete`), and the status is written back on the parent.
- **The API server**: a deleted Pod with Kueue's finalizer only gets a deletionTimestamp; it is
  removed once no finalizer is left and the kubelet confirmed its end (or it never ran).
- **Kueue** (`Sim.kueue_*`): composes a Workload named after `kueue.x-k8s.io/pod-group-name` once
  `pod-group-total-count` runnable Pods of a group exist; lists our AdmissionCheck on it as
  Pending; reserves quota per ClusterQueue from a capacity in cards (BestEffortFIFO, evicted
  Workloads requeued at the back, Workloads with a Retry check inadmissible); admits a reserved
  Workload only when every check is Ready (in the same write as the reservation when they are
  already Ready, as the real scheduler does); evicts on a Retry check or on preemption
  (resetting the checks to Pending and stopping the ungated Pods); deleting a Workload stops
  its Pods and strips their finalizers.
- **Metacontroller's informer** (`Sim.lagging`, `Sim.catch_up`): with `lagging` on, a hook request
  lists the Pods as an informer cache has them, not as the store has them. The cache catches up
  object by object (`catch_up(names)`), so a view may lag the last answer (a Pod just omitted still
  listed, one just created not yet) and mix old and new versions of different Pods; each Pod's
  cached version only moves forward. Metacontroller deletes only what its view lists and omitted,
  and a create of a Pod that exists unseen fails with AlreadyExists (nothing changes).
- **The kubelet and the node lifecycle controller** (`Sim.kubelet`): Pods of an admitted group
  are ungated, bound and become Running+Ready; a NotReady node leaves its Pods Running but not
  Ready and never confirms their deletion; a deleted Node has its Pods force-deleted.

Every hook pass is checked against the invariants of docs/kueue.md#testing-the-simulator (see
`Sim._check_pass` and `Sim._check_intent`; among them: never more than one Ready replica of a role lost to a turnover,
judged on the store whatever the views said, and nothing deleted without a reason the request
shows); a violation raises `InvariantViolation` with the trace of recent steps.
"""

from __future__ import annotations

import copy
import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable

import orjson
import yaml

from app import vocab
from app.api.hooks import HookRequest, hook_request
from app.api.v1 import ModelDeployment
from app.control import observed as obs
from app.control import composition
from app.control import gang
from app.control.intents import DeleteWorkload, Intent, ReadyOnComposition, RecordEvent, SetAdmissionCheck, SetWorkloadActive
from app.control.sync import Refusal, SyncResult, SyncSettings, customize, reconcile
from app.model.context import build_context
from app.render import names
from app.render.errors import RenderError
from app.render.pod import render_role
from app.world import World, load_yaml_objects

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
BASE_TIME = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)

KUEUE_FINALIZER = "kueue.x-k8s.io/managed"
# Metacontroller queues every parent this often (the CompositeController we install).
RESYNC_PERIOD_SECONDS = float(yaml.safe_load(
    (ROOT / "manifests" / "metacontroller" / "compositecontroller.yaml").read_text())["spec"]["resyncPeriodSeconds"])
WORKLOAD_GROUP_ANNOTATION = "kueue.x-k8s.io/is-group-workload"
DEPARTURE_EVENTS = (vocab.EVENT_REPLICA_EVICTED, vocab.EVENT_REPLICA_LEAVING, vocab.EVENT_REPLICA_RESTARTED)
EVENT_REPLICA = re.compile(r"replica (\S+) \(role (\S+), ordinal (\d+)\)")
READY, PENDING, RETRY = "Ready", "Pending", "Retry"

_RESOURCE_KINDS = {
    vocab.PLURAL_INSTANCE_TYPES: vocab.KIND_INSTANCE_TYPE,
    vocab.PLURAL_KV_CACHE_POOLS: vocab.KIND_KV_CACHE_POOL,
    vocab.PLURAL_KV_CACHE_POOL_BINDINGS: vocab.KIND_KV_CACHE_POOL_BINDING,
    vocab.PLURAL_KV_CACHE_BACKENDS: vocab.KIND_KV_CACHE_BACKEND,
    vocab.PLURAL_MODEL_ARTIFACTS: vocab.KIND_MODEL_ARTIFACT,
}


class InvariantViolation(AssertionError):
    pass


def example(name: str) -> dict[str, Any]:
    return load_yaml_objects(EXAMPLES / "deployments" / f"{name}.yaml")[0]


def world_objects() -> list[dict[str, Any]]:
    return load_yaml_objects(EXAMPLES / "world")


def dumps(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)


# --- small readers ---------------------------------------------------------------------------


def meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.setdefault("metadata", {})


def labels(obj: dict[str, Any]) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def annotations(obj: dict[str, Any]) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def cond(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c
    return None


def cond_true(obj: dict[str, Any], type_: str) -> bool:
    c = cond(obj, type_)
    return c is not None and c.get("status") == "True"


def deleting(obj: dict[str, Any]) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def gated(pod: dict[str, Any]) -> bool:
    return any(g.get("name") == vocab.KUEUE_SCHEDULING_GATE for g in (pod.get("spec") or {}).get("schedulingGates") or [])


def pod_phase(pod: dict[str, Any]) -> str:
    return (pod.get("status") or {}).get("phase", "Pending")


def pod_ordinal(pod: dict[str, Any]) -> tuple[str, str, int]:
    lab = labels(pod)
    return lab[vocab.LABEL_INSTANCE], lab[vocab.LABEL_COMPONENT], int(lab[vocab.LABEL_POD_ORDINAL])


def fingerprint(pod: dict[str, Any]) -> str | None:
    return annotations(pod).get(vocab.ANNOTATION_FINGERPRINT)


def incarnation(pod: dict[str, Any]) -> int:
    return int(annotations(pod).get(vocab.ANNOTATION_INCARNATION, "0"))


def newest_incarnation(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Pods of the newest incarnation among an ordinal's Pods."""
    top = max((incarnation(p) for p in pods), default=0)
    return [p for p in pods if incarnation(p) == top]


def check_state(wl: dict[str, Any]) -> dict[str, Any] | None:
    for entry in (wl.get("status") or {}).get("admissionChecks") or []:
        if entry.get("name") == vocab.ADMISSION_CHECK_NAME:
            return entry
    return None


def reserved(wl: dict[str, Any] | None) -> bool:
    return wl is not None and cond_true(wl, "QuotaReserved")


def _label(intent: Intent) -> str:
    if isinstance(intent, SetWorkloadActive):
        return f"{'activate' if intent.active else 'deactivate'} {intent.workload}"
    return str(getattr(intent, "name", ""))


def active(wl: dict[str, Any] | None) -> bool:
    return wl is not None and (wl.get("spec") or {}).get("active") is not False


def admitted(wl: dict[str, Any] | None) -> bool:
    return wl is not None and cond_true(wl, "Admitted")


def placed_elsewhere(wl: dict[str, Any] | None, pods: list[dict[str, Any]]) -> bool:
    """Kueue's topology assignment names hosts, and a bound Pod of the group runs on another one."""
    hosts = {values[-1].get("universal")
             for psa in ((wl or {}).get("status") or {}).get("admission", {}).get("podSetAssignments") or []
             for piece in (psa.get("topologyAssignment") or {}).get("slices") or []
             for values in [piece.get("valuesPerLevel") or [{}]]}
    return bool(hosts) and None not in hosts and any(
        (p.get("spec") or {}).get("nodeName") not in (None, *hosts) for p in pods)


def cards_of(pod: dict[str, Any], accelerator_key: str | None) -> int:
    requests = ((pod.get("spec") or {}).get("containers") or [{}])[0].get("resources", {}).get("requests", {})
    if accelerator_key and accelerator_key in requests:
        return int(str(requests[accelerator_key]))
    return 1  # a CPU-only Pod counts one unit of its queue


@dataclass
class Incarnation:
    """One life of a replica: the Pods created into an empty ordinal, until they are all gone."""

    id: int
    deployment: str
    role: str
    ordinal: int
    fingerprint: str | None
    pod_uids: set[str] = field(default_factory=set)
    # The operator's incarnation number on its Pods: a Pod of another number starts another life
    # even while this one's last Pod terminates.
    number: int = 0
    ran: bool = False  # Kueue let a Pod of it run (ungated it): it served
    events: list[str] = field(default_factory=list)  # departure events recorded for it
    gone: bool = False
    gone_while_finalizing: bool = False
    # A Pod of it was force-removed (finalizers stripped by hand): the departure may leave no
    # trace the planner can read, so its event is best-effort (at most one, never required).
    forced: bool = False


@dataclass
class PassRecord:
    """What one hook pass saw and did (kept for stories to inspect)."""

    deployment: str
    time: float
    result: SyncResult | None
    failed: str | None
    created: list[str]
    deleted: list[str]
    intents: list[Intent]


class Sim:
    def __init__(
        self,
        *,
        capacity: dict[str, int] | None = None,
        release_after: float = 600.0,
        objects: Iterable[dict[str, Any]] | None = None,
        nodes_per_queue: int = 4,
        check_determinism: bool = True,
        namespace: str = "team-a",
        workload_finalizer_lag: bool = False,
        kueue_composes_for_terminating_pods: bool = True,
        event_driven: bool = True,
    ) -> None:
        self.t = 0.0
        self.namespace = namespace
        self.objects: list[dict[str, Any]] = copy.deepcopy(list(objects if objects is not None else world_objects()))
        self.settings = SyncSettings(gang_release_after_seconds=release_after)
        self.check_determinism = check_determinism
        self.workload_finalizer_lag = workload_finalizer_lag
        self.kueue_composes_for_terminating_pods = kueue_composes_for_terminating_pods
        # Metacontroller calls a parent only when something it watches moved, never for our own
        # status write (ignoreStatusChanges), when a pass asked to come back, or on the resync
        # (docs/metacontroller.md#what-starts-a-pass). False: every parent every step.
        self.event_driven = event_driven
        self.last_pass: dict[str, tuple[bytes, float, float | None]] = {}  # name -> (inputs, t, resync after)
        self.parents: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, dict[str, Any]] = {}
        self.other_children: dict[tuple[str, str], dict[str, Any]] = {}  # (child key, name) -> object
        self.workloads: dict[str, dict[str, Any]] = {}
        # The executor's ready-on-composition follow-ups: Workload name -> (deployment, follow-up, the
        # render facts of the pass that left it).
        self.follow_ups: dict[str, tuple[str, ReadyOnComposition, dict[str, tuple[str, str | None]]]] = {}
        self.follow_up_writes = 0
        self.wl_info: dict[str, dict[str, Any]] = {}  # sim bookkeeping: cq, cards, queue time
        self.events: dict[str, dict[str, Any]] = {}
        self.event_log: list[RecordEvent] = []
        self.created_from: dict[str, bytes] = {}  # pod name -> the desired object it was created from
        self.capacity: dict[str, int] = dict(capacity or {})
        self.nodes: dict[str, dict[str, Any]] = {}
        self.passes: list[PassRecord] = []
        self.trace: list[str] = []
        self.incarnations: dict[tuple[str, str, int], Incarnation] = {}
        self.all_incarnations: list[Incarnation] = []
        # (deployment, role) -> ordinals whose Ready instance an answer deleted (a turnover) and that
        # are not Ready again yet: the availability invariant allows at most one per role.
        self.lost_ready: dict[tuple[str, str], set[int]] = defaultdict(set)
        self.lagging = False
        # Workload names whose topology ungater is stalled (docs/kueue.md#an-admitted-replica-kueue-never-places):
        # their admitted Pods keep Kueue's topology gate until a story lifts the stall (a Kueue restart).
        self.ungate_stalled: set[str] = set()
        self.informer: dict[str, dict[str, Any]] = {}  # pod name -> the cached version
        self.listed_names: set[str] = set()  # every Pod name an answered hook request listed
        self.last_input: dict[str, bytes] = {}
        self.last_facts: dict[str, dict[str, tuple[str, str | None]]] = {}
        self.customize_cache: dict[tuple[str, int], list[dict[str, Any]]] = {}
        self.violations: list[str] = []
        self.check_writes: list[tuple[float, str, str, str]] = []  # (t, workload, old state, new state)
        self.conflicts = 0
        self.admitted_fingerprints: set[str | None] = set()
        # Kueue's queue: Workloads the scheduler found inadmissible (a check not Pending/Ready, or no
        # room) wait here until a requeue trigger moves them back (docs/kueue.md#deadlock-release).
        self.parked: set[str] = set()
        self.seen_capacity: dict[str, int] = {}
        self.activity: list[tuple[float, str, str, bool]] = []  # (t, deployment, workload, active) written
        self._rv = 0
        self._uid = 0
        for it in self.instance_types():
            cq = it["metadata"]["name"]
            self.capacity.setdefault(cq, int(((it.get("status") or {}).get("accelerator") or {}).get("capacity") or 8))
            for i in range(nodes_per_queue):
                self.nodes[f"{cq}-node-{i}"] = {"ready": True, "queue": cq}

    # --- clock, ids ----------------------------------------------------------------------------

    def now(self, offset: float = 0.0) -> str:
        return (BASE_TIME + timedelta(seconds=self.t + offset)).strftime("%Y-%m-%dT%H:%M:%SZ")

    def advance(self, seconds: float) -> None:
        self.t += seconds
        self.note(f"advance {seconds}s")

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _next_uid(self, prefix: str) -> str:
        self._uid += 1
        return f"{prefix}-{self._uid:05d}"

    def note(self, line: str) -> None:
        self.trace.append(f"[t={self.t:7.0f}] {line}")
        if len(self.trace) > 400:
            del self.trace[:100]

    def fail(self, message: str) -> None:
        recent = "\n".join(self.trace[-60:])
        self.violations.append(message)
        raise InvariantViolation(f"{message}\n--- recent steps ---\n{recent}")

    # --- the world (InstanceTypes, cache objects) ------------------------------------------------

    def instance_types(self) -> list[dict[str, Any]]:
        return [o for o in self.objects if o.get("kind") == vocab.KIND_INSTANCE_TYPE]

    def instance_type(self, name: str) -> dict[str, Any] | None:
        return next((o for o in self.instance_types() if o["metadata"]["name"] == name), None)

    def queue_to_cq(self, queue: str) -> str | None:
        for it in self.instance_types():
            if ((it.get("status") or {}).get("entrance")) == queue:
                return it["metadata"]["name"]
        return None

    def set_object_status(self, kind: str, name: str, **status: Any) -> None:
        for obj in self.objects:
            if obj.get("kind") == kind and obj["metadata"]["name"] == name:
                obj.setdefault("status", {}).update(status)
                self.note(f"{kind} {name} status {status}")
                return
        raise KeyError(name)

    def set_binding_phase(self, name: str, phase: str) -> None:
        self.set_object_status(vocab.KIND_KV_CACHE_POOL_BINDING, name, phase=phase)

    # --- users ---------------------------------------------------------------------------------

    def apply(self, md: dict[str, Any]) -> dict[str, Any]:
        """kubectl apply: creates or updates a ModelDeployment (generation moves with the spec)."""
        md = copy.deepcopy(md)
        name = md["metadata"]["name"]
        md["metadata"].setdefault("namespace", self.namespace)
        existing = self.parents.get(name)
        if existing is None:
            md["metadata"]["uid"] = self._next_uid("md")
            md["metadata"]["generation"] = 1
            md["metadata"]["creationTimestamp"] = self.now()
            md["status"] = {}
            self.parents[name] = md
            self.note(f"create ModelDeployment {name}")
            return md
        if dumps(existing["spec"]) != dumps(md["spec"]):
            existing["metadata"]["generation"] += 1
            existing["spec"] = md["spec"]
            self.note(f"edit ModelDeployment {name} -> generation {existing['metadata']['generation']}")
        return existing

    def edit(self, name: str, mutate) -> dict[str, Any]:  # type: ignore[no-untyped-def]
        md = copy.deepcopy(self.parents[name])
        mutate(md["spec"])
        return self.apply(md)

    def set_replicas(self, name: str, role: str, replicas: int) -> None:
        def mutate(spec: dict[str, Any]) -> None:
            next(r for r in spec["roles"] if r["name"] == role)["replicas"] = replicas

        self.edit(name, mutate)

    def delete_deployment(self, name: str) -> None:
        md = self.parents[name]
        if not md["metadata"].get("deletionTimestamp"):
            md["metadata"]["deletionTimestamp"] = self.now()
            self.note(f"delete ModelDeployment {name}")

    def kubectl_delete_pod(self, name: str) -> None:
        self.note(f"kubectl delete pod {name}")
        self._delete_pod(name)

    # --- Metacontroller --------------------------------------------------------------------------

    def _customize(self, parent: dict[str, Any]) -> list[dict[str, Any]]:
        key = (parent["metadata"]["uid"], parent["metadata"]["generation"])
        if key not in self.customize_cache:
            self.customize_cache[key] = customize(ModelDeployment.model_validate(copy.deepcopy(parent)))["relatedResources"]
        return self.customize_cache[key]

    def related_for(self, parent: dict[str, Any]) -> dict[str, dict[str, Any]]:
        related: dict[str, dict[str, Any]] = {}
        for rule in self._customize(parent):
            api, resource = rule["apiVersion"], rule["resource"]
            wanted = set(rule["names"]) if "names" in rule else None
            namespace = rule.get("namespace")
            if resource == vocab.PLURAL_WORKLOADS:
                bucket = related.setdefault(vocab.RELATED_WORKLOADS, {})
                for wl_name in sorted(wanted or ()):
                    wl = self.workloads.get(wl_name)
                    if wl is not None and wl["metadata"]["namespace"] == namespace:
                        bucket[f"{namespace}/{wl_name}"] = copy.deepcopy(wl)
                continue
            if resource == vocab.PLURAL_PODS:
                # The router's Pods: this world runs no Deployment controller, so there are none.
                related.setdefault(vocab.RELATED_PODS, {})
                continue
            kind = _RESOURCE_KINDS[resource]
            bucket = related.setdefault(f"{kind}.{api}", {})
            for obj in self.objects:
                if obj.get("kind") != kind:
                    continue
                m = obj["metadata"]
                if wanted is not None and m["name"] not in wanted:
                    continue
                if namespace and m.get("namespace") != namespace:
                    continue
                key = f"{m['namespace']}/{m['name']}" if m.get("namespace") else m["name"]
                bucket[key] = copy.deepcopy(obj)
        return related

    def pods_of(self, deployment: str) -> list[dict[str, Any]]:
        uid = self.parents[deployment]["metadata"]["uid"] if deployment in self.parents else None
        return [p for p in self.pods.values() if p["metadata"].get("ownerUid") == uid or
                (uid is None and labels(p).get(vocab.LABEL_INSTANCE) == deployment)]

    def catch_up(self, pod_names: Iterable[str] | None = None) -> None:
        """The informer cache takes in the store's current version of these Pods (default: all)."""
        for name in sorted(set(self.pods) | set(self.informer) if pod_names is None else pod_names):
            if name in self.pods:
                self.informer[name] = copy.deepcopy(self.pods[name])
            else:
                self.informer.pop(name, None)

    def lagging_pod_names(self) -> list[str]:
        """Pods whose cached version differs from the store's."""
        return sorted(n for n in set(self.pods) | set(self.informer)
                      if dumps(self.pods.get(n)) != dumps(self.informer.get(n)))

    def _view_pods(self, deployment: str) -> list[dict[str, Any]]:
        if not self.lagging:
            return self.pods_of(deployment)
        uid = self.parents[deployment]["metadata"]["uid"]
        return [p for p in self.informer.values() if p["metadata"].get("ownerUid") == uid]

    def children_of(self, parent: dict[str, Any]) -> dict[str, dict[str, Any]]:
        name = parent["metadata"]["name"]
        # Metacontroller sends every declared child map, empty when there are no such children.
        children: dict[str, dict[str, Any]] = {key: {} for key in vocab.DECLARED_CHILD_MAPS}
        for pod in sorted(self._view_pods(name), key=lambda p: p["metadata"]["name"]):
            view = copy.deepcopy(pod)
            view["metadata"].pop("ownerUid", None)
            children[vocab.CHILD_PODS][f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"] = view
        for (key, child_name), obj in sorted(self.other_children.items()):
            if obj["metadata"].get("ownerUid") == parent["metadata"]["uid"]:
                view = copy.deepcopy(obj)
                view["metadata"].pop("ownerUid", None)
                children.setdefault(key, {})[f"{obj['metadata']['namespace']}/{child_name}"] = view
        return children

    def request(self, name: str) -> HookRequest:
        parent = self.parents[name]
        return hook_request({"parent": copy.deepcopy(parent), "children": self.children_of(parent),
                             "related": self.related_for(parent)},
                            finalizing=bool(parent["metadata"].get("deletionTimestamp")))

    def render_facts(self, name: str, related: dict[str, Any] | None = None) -> dict[str, tuple[str, str | None]]:
        """role -> (current render fingerprint, hold) as the renderer sees the world now."""
        parent = self.parents[name]
        md = ModelDeployment.model_validate(copy.deepcopy(parent))
        world = World.from_related(related if related is not None else self.related_for(parent))
        ctx = build_context(md, world, self.settings.options)
        out: dict[str, tuple[str, str | None]] = {}
        for role in md.spec.roles:
            try:
                render = render_role(ctx, role)
            except RenderError:
                continue
            out[role.name] = (render.fingerprint, render.hold)
        return out

    def sync(self, name: str, *, answer_lost: bool = False) -> PassRecord | None:
        """One Metacontroller pass for one deployment (finalize when it is being deleted).

        `answer_lost`: the hook ran its side effects but Metacontroller never got the answer (a
        timeout): children and status stay as they were, and it will call again.
        """
        if name not in self.parents:
            return None
        parent = self.parents[name]
        request = self.request(name)
        now = self.now()
        result = reconcile(request, self.settings, now=now)
        peers = None
        if isinstance(result, SyncResult) and result.needs_peers:
            # The hook handler lists every deployment once and runs the pass again.
            peers = gang.holders(copy.deepcopy(list(self.parents.values())))
            result = reconcile(request, self.settings, now=now, peers=peers)
        if isinstance(result, Refusal):
            self.note(f"sync {name}: render failed: {result.message}")
            for intent in result.events:
                self._execute(name, intent)
            record = PassRecord(name, self.t, None, result.message, [], [], list(result.events))
            self.passes.append(record)
            return record
        input_key = b""
        if self.check_determinism:
            again = reconcile(copy.deepcopy(request), self.settings, now=now, peers=copy.deepcopy(peers))
            assert isinstance(again, SyncResult)
            if dumps(again.status) != dumps(result.status) or dumps(again.children) != dumps(result.children) \
                    or repr(again.intents) != repr(result.intents):
                self.fail(f"sync {name}: the same request gave a different answer")
            input_key = dumps([request.children, request.related, parent["spec"], parent["metadata"].get("generation"),
                               parent["metadata"].get("deletionTimestamp"),
                               # the other deployments' holding records, when the pass read them
                               None if peers is None else [(h.uid, h.record()) for h in peers]])
            # A pass that time brought (its resyncAfterSeconds or the periodic resync came due) may
            # find time changed its answer: a stall named after a minute (app/control/stalls.py).
            last = self.last_pass.get(name)
            came_due = last is not None and (self.t >= last[1] + RESYNC_PERIOD_SECONDS
                                             or (last[2] is not None and self.t >= last[1] + last[2]))
            if self.last_input.get(name) == input_key and not came_due:
                previous = {k: v for k, v in (parent.get("status") or {}).items() if k != "observedGeneration"}
                if dumps(previous) != dumps(result.status):
                    import difflib
                    diff = "\n".join(difflib.unified_diff(
                        orjson.dumps(previous, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode().splitlines(),
                        orjson.dumps(result.status, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode().splitlines(),
                        lineterm="", n=1))
                    self.fail(f"sync {name}: status changed although nothing it reads changed (hot loop):\n{diff}")
        facts = self.render_facts(name, request.related)
        self.last_facts[name] = facts
        self._check_pass(name, request, result, facts)
        wanted = {c["metadata"]["name"] for c in result.children if c["kind"] == "Pod"}
        deleted = sorted(p["metadata"]["name"] for p in (request.children.get(vocab.CHILD_PODS) or {}).values()
                         if not deleting(p) and p["metadata"]["name"] not in wanted)
        for intent in result.intents:
            self._execute(name, intent, facts=facts)
        if answer_lost:
            self.note(f"sync {name}: the answer was lost after {len(result.intents)} intents")
            self.last_input.pop(name, None)
            return PassRecord(name, self.t, result, "answer lost", [], [], list(result.intents))
        self.last_pass[name] = (self.pass_inputs(parent, request.children, request.related), self.t,
                                result.resync_after)
        created, _ = self._apply_children(parent, result.children, facts, request)
        parent["status"] = {**result.status, "observedGeneration": parent["metadata"]["generation"]}
        # Names a written status has seen (status.roles[].nextIncarnations moved past them). A pass
        # whose answer was lost records nothing: see docs/kueue.md on incarnations.
        self.listed_names.update(p["metadata"]["name"] for p in (request.children.get(vocab.CHILD_PODS) or {}).values())
        if self.check_determinism:
            # Remembered only once the status is written: what the next pass compares against.
            self.last_input[name] = input_key
        record = PassRecord(name, self.t, result, None, created, deleted, list(result.intents))
        self.passes.append(record)
        summary = ", ".join(f"{type(i).__name__}:{getattr(i, 'reason', '') or getattr(i, 'state', '') or _label(i)}"
                            for i in result.intents)
        self.note(f"sync {name}: +{created} -{deleted} intents[{summary}] phase={result.status.get('phase')}")
        if request.finalizing and result.finalized:
            self._finalized(name, request)
        return record

    def _finalized(self, name: str, request: HookRequest) -> None:
        uid = self.parents[name]["metadata"]["uid"]
        listed = {p["metadata"]["name"] for p in (request.children.get(vocab.CHILD_PODS) or {}).values()}
        if any(p["metadata"]["name"] in listed for p in self.pods_of(name)):
            self.fail(f"finalize {name}: answered finalized while Pods remain: {sorted(p['metadata']['name'] for p in self.pods_of(name))}")
        unseen = self.pods_of(name)
        collected = {labels(p).get(vocab.LABEL_KUEUE_POD_GROUP_NAME, "") for p in unseen}
        if unseen:
            # Created by an earlier answer and not in the view yet: the garbage collector deletes
            # them with their owner (ownerReferences), and Kueue's Workloads with their Pods.
            self.note(f"finalize {name}: the garbage collector deletes unseen Pods {sorted(p['metadata']['name'] for p in unseen)}")
            for pod in unseen:
                self.delete_workload(labels(pod).get(vocab.LABEL_KUEUE_POD_GROUP_NAME, ""), "owner gone")
                self.force_remove_pod(pod["metadata"]["name"])
        groups = self._groups_of(name)
        uids = {p["metadata"]["uid"] for p in self.pods.values()}
        # A Workload Kueue composed again for Pods that are gone since is the garbage collector's
        # (its owners are gone: see garbage_collect), whether or not any view listed it.
        orphaned = {g for g in groups if g in self.workloads and self._owners_gone(self.workloads[g], uids)}
        left = [g for g in groups if g in self.workloads and g not in collected and g not in orphaned]
        if left:
            self.fail(f"finalize {name}: answered finalized while Workloads remain: {left}")
        for key in [k for k, o in self.other_children.items() if o["metadata"].get("ownerUid") == uid]:
            del self.other_children[key]
        del self.parents[name]
        self.note(f"ModelDeployment {name} finalized and removed")

    def _groups_of(self, name: str, upto: int = 64) -> set[str]:
        md = self.parents[name]
        ns = md["metadata"]["namespace"]
        return {g for r in md["spec"]["roles"] for o in range(upto) for g in names.pod_groups(ns, name, r["name"], o)}

    def _apply_children(self, parent: dict[str, Any], children: list[dict[str, Any]],
                        facts: dict[str, tuple[str, str | None]], request: HookRequest) -> tuple[list[str], list[str]]:
        """Metacontroller's apply: against the children its request listed (its informer's view)."""
        name = parent["metadata"]["name"]
        uid = parent["metadata"]["uid"]
        desired_pods = {c["metadata"]["name"]: c for c in children if c["kind"] == "Pod"}
        if len(desired_pods) != sum(1 for c in children if c["kind"] == "Pod"):
            self.fail(f"sync {name}: two desired Pods share a name")
        observed = {p["metadata"]["name"]: p for p in (request.children.get(vocab.CHILD_PODS) or {}).values()}
        deleted = []
        for pod_name, pod in sorted(observed.items()):
            if pod_name not in desired_pods and not deleting(pod) and pod_name in self.pods:
                deleted.append(pod_name)
                self._note_lost_ready(parent, self.pods[pod_name], request.finalizing)
                self._delete_pod(pod_name)
        created = []
        existing = set(self.pods)  # before this apply's creates
        for pod_name, desired in sorted(desired_pods.items()):
            if pod_name in observed:
                if deleting(observed[pod_name]):
                    self.fail(f"sync {name}: returned Pod {pod_name}, which is terminating, as desired")
                continue
            if pod_name in self.pods:
                self.note(f"create Pod {pod_name}: AlreadyExists (the view had not listed it yet)")
                continue
            if self.lagging and self._unseen_in_ordinal(desired, observed, existing):
                # The ordinal holds Pods the view did not list yet (created by an earlier answer on
                # another render): Kueue counts the new Pod as excess of the group and deletes it.
                self.note(f"create Pod {pod_name}: excess beside unseen Pods of its ordinal; Kueue deletes it")
                continue
            created.append(pod_name)
            self._create_pod(parent, desired, observed if self.lagging else None)
        # Every other kind: created, updated in place, pruned.
        desired_other = {}
        for child in children:
            if child["kind"] == "Pod":
                continue
            key = f"{child['kind']}.{child['apiVersion']}"
            desired_other[(key, child["metadata"]["name"])] = child
        for key in [k for k, o in self.other_children.items() if o["metadata"].get("ownerUid") == uid]:
            if key not in desired_other:
                del self.other_children[key]
        for key, child in desired_other.items():
            obj = copy.deepcopy(child)
            obj["metadata"]["ownerUid"] = uid
            previous = self.other_children.get(key)
            if previous is not None and "status" in previous:
                obj["status"] = previous["status"]
            self.other_children[key] = obj
        return created, deleted

    @staticmethod
    def _view_ready(pods: list[dict[str, Any]], size: int) -> bool:
        return len(pods) == size and all(not deleting(p) and cond_true(p, "Ready") for p in pods)

    def _unseen_in_ordinal(self, desired: dict[str, Any], observed: dict[str, dict[str, Any]], existing: set[str]) -> bool:
        key = pod_ordinal(desired)
        return any(p["metadata"]["name"] not in observed and p["metadata"]["name"] in existing
                   for p in self._ordinal_pods(*key))

    def _instance_ready(self, deployment: str, role: str, ordinal: int) -> bool:
        """In the store: every member of the instance exists, is not deleted and is Ready."""
        spec_role = next((r for r in self.parents[deployment]["spec"]["roles"] if r["name"] == role), None)
        return spec_role is not None and self._view_ready(self._ordinal_pods(deployment, role, ordinal),
                                                          int(spec_role.get("size", 1)))

    def _note_lost_ready(self, parent: dict[str, Any], pod: dict[str, Any], finalizing: bool) -> None:
        """An answer deletes a Pod of a declared replica that is serving: a Ready replica lost."""
        deployment, role, ordinal = pod_ordinal(pod)
        spec_role = next((r for r in parent["spec"]["roles"] if r["name"] == role), None)
        if finalizing or spec_role is None or ordinal >= int(spec_role.get("replicas", 1)):
            return  # a deletion or a scale-down removes replicas by the user's word
        if self._instance_ready(deployment, role, ordinal):
            self.lost_ready[(deployment, role)].add(ordinal)

    # --- Pods on the API server ----------------------------------------------------------------

    def _create_pod(self, parent: dict[str, Any], desired: dict[str, Any],
                    view: dict[str, dict[str, Any]] | None = None) -> None:
        """Create a desired Pod. The planner's rules about the ordinal it lands in are judged on
        what it could see: the store, or the lagging view its request listed."""
        name = desired["metadata"]["name"]
        deployment, role, ordinal = pod_ordinal(desired)
        if name in self.pods:
            self.fail(f"create Pod {name}: AlreadyExists")
        size = annotations(desired).get(vocab.ANNOTATION_KUEUE_GROUP_TOTAL_COUNT)
        if size == "1" and name in self.listed_names:
            # A size-1 Pod's name is never reused once a request listed it (the user's text: a
            # replacement carries a fresh name the departed Pod never had).
            self.fail(f"create Pod {name}: a departed Pod of ordinal {ordinal} had this name")
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name) or len(name) > 253:
            self.fail(f"create Pod {name}: not a DNS-1123 subdomain")
        if vocab.ANNOTATION_KUEUE_FAST_ADMISSION in annotations(desired):
            self.fail(f"create Pod {name}: carries {vocab.ANNOTATION_KUEUE_FAST_ADMISSION}")
        same_ordinal = [p for p in (self.pods if view is None else view).values()
                        if labels(p).get(vocab.LABEL_INSTANCE) == deployment
                        and labels(p).get(vocab.LABEL_COMPONENT) == role
                        and labels(p).get(vocab.LABEL_POD_ORDINAL) == str(ordinal)]
        group = labels(desired).get(vocab.LABEL_KUEUE_POD_GROUP_NAME)
        # Another incarnation's Pods may stop beside it, in the other pod-group slot; never in its own.
        same_ordinal = [p for p in same_ordinal if labels(p).get(vocab.LABEL_KUEUE_POD_GROUP_NAME) == group]
        if any(deleting(p) for p in same_ordinal):
            self.fail(f"create Pod {name}: a Pod of group {group} ({role}/{ordinal}) is still terminating: "
                      f"{[p['metadata']['name'] for p in same_ordinal if deleting(p)]}")
        if same_ordinal:
            # Only completing a group that Kueue has not admitted, on the same render, is allowed.
            if any(fingerprint(p) != fingerprint(desired) for p in same_ordinal):
                self.fail(f"create Pod {name}: ordinal {role}/{ordinal} still has Pods of another render")
            if admitted(self.workloads.get(group or "")):
                self.fail(f"create Pod {name}: ordinal {role}/{ordinal} is admitted; a new member would be excess")
        self.created_from[name] = dumps(desired)
        pod = copy.deepcopy(desired)
        m = pod["metadata"]
        m["uid"] = self._next_uid("pod")
        m["ownerUid"] = parent["metadata"]["uid"]
        m["resourceVersion"] = self._next_rv()
        m["creationTimestamp"] = self.now()
        m.setdefault("labels", {})["controller-uid"] = parent["metadata"]["uid"]
        if vocab.LABEL_KUEUE_QUEUE_NAME in labels(pod):
            # Kueue's Pod webhook.
            m["labels"][vocab.LABEL_KUEUE_MANAGED] = "true"
            m["finalizers"] = [KUEUE_FINALIZER]
            pod["spec"]["schedulingGates"] = [{"name": vocab.KUEUE_SCHEDULING_GATE}]
        pod["status"] = {"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"}]}
        self.pods[name] = pod
        key = (deployment, role, ordinal)
        inc = self.incarnations.get(key)
        number = obs.pod_incarnation(pod)
        # A Pod created into a life whose departure was already told starts another life: a lagging
        # view that still lists a departed member lets the planner complete the group again (its
        # `incomplete` rule), and that group's own departure is told again.
        if inc is None or inc.gone or inc.number != number or inc.events:
            inc = Incarnation(len(self.all_incarnations), deployment, role, ordinal, fingerprint(desired),
                              number=number)
            self.incarnations[key] = inc
            self.all_incarnations.append(inc)
        inc.pod_uids.add(m["uid"])

    def _set_pod_status(self, pod: dict[str, Any], phase: str, ready: bool) -> None:
        """The kubelet's view of a Pod; other writers' conditions (Kueue's) are kept."""
        others = [c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") != "Ready"]
        pod["status"] = {**(pod.get("status") or {}), "phase": phase,
                         "conditions": [{"type": "Ready", "status": "True" if ready else "False"}, *others]}
        pod["metadata"]["resourceVersion"] = self._next_rv()

    def _mark_stopped(self, pod: dict[str, Any], reason: str) -> None:
        """Kueue's Stop: the TerminationTarget condition, then the delete."""
        conditions = [c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") != "TerminationTarget"]
        conditions.append({"type": "TerminationTarget", "status": "True", "reason": reason})
        pod.setdefault("status", {})["conditions"] = conditions
        self._delete_pod(pod["metadata"]["name"])

    def _delete_pod(self, name: str) -> None:
        pod = self.pods.get(name)
        if pod is None or deleting(pod):
            return
        pod["metadata"]["deletionTimestamp"] = self.now()
        pod["metadata"]["resourceVersion"] = self._next_rv()
        self._maybe_remove(name)

    def _maybe_remove(self, name: str) -> None:
        pod = self.pods.get(name)
        if pod is None or not deleting(pod) or pod["metadata"].get("finalizers"):
            return
        node = pod["spec"].get("nodeName")
        if node and pod_phase(pod) not in ("Failed", "Succeeded"):
            return  # the kubelet has to confirm the end first
        del self.pods[name]
        self.note(f"Pod {name} removed")
        key = pod_ordinal(pod)
        inc = self.incarnations.get(key)
        if inc is not None and not self._ordinal_pods(*key):
            inc.gone = True
            parent = self.parents.get(key[0])
            inc.gone_while_finalizing = parent is None or bool(parent["metadata"].get("deletionTimestamp"))

    def _ordinal_pods(self, deployment: str, role: str, ordinal: int) -> list[dict[str, Any]]:
        return [p for p in self.pods.values() if pod_ordinal(p) == (deployment, role, ordinal)]

    def _release_finalizer(self, pod: dict[str, Any]) -> None:
        finalizers = pod["metadata"].get("finalizers") or []
        if KUEUE_FINALIZER in finalizers:
            pod["metadata"]["finalizers"] = [f for f in finalizers if f != KUEUE_FINALIZER]
            self._maybe_remove(pod["metadata"]["name"])

    def force_remove_pod(self, name: str) -> None:
        """Someone strips the finalizers and force-deletes: the Pod is gone, its Workload stands."""
        pod = self.pods.get(name)
        if pod is None:
            return
        self.note(f"force-remove pod {name}")
        inc = self.incarnations.get(pod_ordinal(pod))
        if inc is not None:
            inc.forced = True
        pod["metadata"]["finalizers"] = []
        pod["metadata"].setdefault("deletionTimestamp", self.now())
        if pod_phase(pod) not in ("Failed", "Succeeded"):
            pod.setdefault("status", {})["phase"] = "Failed"
        self._maybe_remove(name)

    def fail_pod(self, name: str) -> None:
        """The kubelet evicts the Pod (node pressure): phase Failed, object left in place."""
        pod = self.pods[name]
        self._set_pod_status(pod, "Failed", False)
        self.note(f"Pod {name} Failed (kubelet eviction)")

    # --- executor ------------------------------------------------------------------------------

    def _execute(self, deployment: str, intent: Intent, facts: dict[str, tuple[str, str | None]] | None = None) -> None:
        if isinstance(intent, DeleteWorkload):
            self.delete_workload(intent.name, why=intent.why)
        elif isinstance(intent, RecordEvent):
            self._record_event(intent)
        elif isinstance(intent, SetWorkloadActive):
            self._set_active(deployment, intent)
        elif isinstance(intent, ReadyOnComposition):
            self.follow_ups[intent.workload] = (deployment, intent, dict(facts or {}))
        elif isinstance(intent, SetAdmissionCheck):
            self._check_intent(deployment, intent, facts or {})
            wl = self.workloads.get(intent.workload)
            if wl is None or (intent.resource_version and wl["metadata"]["resourceVersion"] != intent.resource_version):
                self.conflicts += 1
                return
            entry = check_state(wl)
            old = entry.get("state") if entry else None
            new_entry = {"name": vocab.ADMISSION_CHECK_NAME, "state": intent.state, "message": intent.message,
                         "lastTransitionTime": intent.last_transition_time}
            if entry is not None and "retryCount" in entry:
                new_entry["retryCount"] = entry["retryCount"]
            checks = [e for e in (wl.get("status") or {}).get("admissionChecks") or []
                      if e.get("name") != vocab.ADMISSION_CHECK_NAME]
            wl.setdefault("status", {})["admissionChecks"] = sorted([*checks, new_entry], key=lambda e: e["name"])
            wl["metadata"]["resourceVersion"] = self._next_rv()
            self.check_writes.append((self.t, intent.workload, str(old), intent.state))


    def _set_active(self, deployment: str, intent: SetWorkloadActive) -> None:
        """The deadlock release's merge patch, held to the copy's uid and resourceVersion; then what
        Kueue's workload controller does with spec.active (v0.19)."""
        wl = self.workloads.get(intent.workload)
        if wl is None or (intent.uid and wl["metadata"]["uid"] != intent.uid) or \
                (intent.resource_version and wl["metadata"]["resourceVersion"] != intent.resource_version):
            self.conflicts += 1
            return
        if intent.workload not in self._groups_of(deployment):
            self.fail(f"{deployment}: spec.active written on {intent.workload}, not one of its groups")
        if admitted(wl):
            self.fail(f"{deployment}: spec.active written on admitted {intent.workload}")
        notes = wl["metadata"].setdefault("annotations", {})
        if intent.active and vocab.ANNOTATION_GANG_RELEASED_AT not in notes:
            self.fail(f"{deployment}: activated {intent.workload}, which its release had not deactivated")
        if intent.active and (check_state(wl) or {}).get("state") != PENDING:
            self.fail(f"{deployment}: activated {intent.workload} while its check reads "
                      f"{(check_state(wl) or {}).get('state')} (Kueue would park it again)")
        if intent.released_at:
            notes[vocab.ANNOTATION_GANG_RELEASED_AT] = intent.released_at
        else:
            notes.pop(vocab.ANNOTATION_GANG_RELEASED_AT, None)
        was_active = active(wl)
        wl["spec"]["active"] = intent.active
        wl["metadata"]["resourceVersion"] = self._next_rv()
        self.activity.append((self.t, deployment, intent.workload, intent.active))
        cq = self.wl_info[intent.workload]["cq"]
        if was_active and not intent.active:
            self.note(f"Workload {intent.workload} deactivated")
            self.parked.discard(intent.workload)
            if reserved(wl):
                self.evict(intent.workload, vocab.KUEUE_EVICTED_DEACTIVATED, "The workload is deactivated")
                self._set_cond(wl, "Requeued", "False", vocab.KUEUE_EVICTED_DEACTIVATED, "The workload is deactivated")
            else:
                self._set_cond(wl, "Evicted", "True", vocab.KUEUE_EVICTED_DEACTIVATED, "The workload is deactivated")
                self.requeue_parked(cq, f"{intent.workload} deactivated")
        elif intent.active and not was_active:
            # A spec change (and Requeued=True Reactivated): back into the queue, at its back.
            self.note(f"Workload {intent.workload} activated again")
            self._set_cond(wl, "Requeued", "True", "Reactivated", "The workload was reactivated")
            self.parked.discard(intent.workload)
            self.wl_info[intent.workload]["queued_at"] = self.t

    def _record_event(self, intent: RecordEvent) -> None:
        self.event_log.append(intent)
        existing = self.events.get(intent.name)
        if existing is not None:
            # AlreadyExists: the executor's create is a no-op. Only a departure may be read under two
            # reasons by two passes (its name is the occurrence's); anything else is a naming bug.
            if existing["reason"] != intent.reason and not (
                    existing["reason"] in DEPARTURE_EVENTS and intent.reason in DEPARTURE_EVENTS):
                self.fail(f"event {intent.name}: one name for two reasons ({existing['reason']}, {intent.reason})")
            existing["attempts"] += 1
            return
        self.events[intent.name] = {"reason": intent.reason, "message": intent.message, "type": intent.type,
                                    "time": self.t, "attempts": 1, "deployment": intent.deployment}
        if intent.reason in DEPARTURE_EVENTS:
            match = EVENT_REPLICA.search(intent.message)
            if not match:
                self.fail(f"event {intent.reason}: the message does not name the replica: {intent.message}")
            if f"{vocab.KV_LEASE_WINDOW_SECONDS}s" not in intent.message:
                self.fail(f"event {intent.reason}: the message does not name the lease window: {intent.message}")
            inc = self.incarnations.get((intent.deployment, match.group(2), int(match.group(3))))
            if inc is None:
                self.fail(f"event {intent.reason} for {match.group(1)}: no replica ever existed there")
            inc.events.append(intent.reason)
            if len(inc.events) > 1:
                self.fail(f"replica {match.group(1)} (incarnation {inc.id}): more than one departure event "
                          f"for one occurrence: {inc.events}")
            if not inc.ran and not inc.forced:
                self.fail(f"replica {match.group(1)}: {intent.reason} recorded for a replica that never ran")
        self.note(f"Event {intent.reason}: {intent.message[:90]}")

    def events_by_reason(self, reason: str, deployment: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.events.values()
                if e["reason"] == reason and (deployment is None or e["deployment"] == deployment)]

    # --- Kueue ---------------------------------------------------------------------------------

    def delete_workload(self, name: str, why: str = "") -> None:
        wl = self.workloads.get(name)
        if wl is None:
            return
        if self.workload_finalizer_lag:
            # Kueue's resource-in-use finalizer: the Workload reads Terminating until Kueue's next
            # round; its quota is released at once.
            if not deleting(wl):
                wl["metadata"]["deletionTimestamp"] = self.now()
                wl["metadata"]["resourceVersion"] = self._next_rv()
        else:
            cq = self.wl_info.pop(name, {}).get("cq")
            del self.workloads[name]
            self.parked.discard(name)
            self.requeue_parked(cq, f"{name} deleted")
        self.note(f"Workload {name} deleted ({why})")
        # Kueue: the job is stopped (its Pods deleted) and its Pods' finalizers stripped.
        for pod in list(self.pods.values()):
            if labels(pod).get(vocab.LABEL_KUEUE_POD_GROUP_NAME) == name:
                if not deleting(pod):
                    self._mark_stopped(pod, "WorkloadDeleted")
                if pod["metadata"]["name"] in self.pods:
                    self._release_finalizer(pod)

    def _runnable(self, pod: dict[str, Any]) -> bool:
        """Kueue's isPodRunnableOrSucceeded: a deleted Pod counts while it is on a node."""
        if deleting(pod) and not pod["spec"].get("nodeName"):
            return False
        return pod_phase(pod) != "Failed"

    @staticmethod
    def _owners_gone(wl: dict[str, Any], uids: set[str]) -> bool:
        """Every owner Pod of the Workload is gone (it has owners at all)."""
        owners = [o["uid"] for o in wl["metadata"].get("ownerReferences") or [] if o.get("kind") == "Pod"]
        return bool(owners) and not any(uid in uids for uid in owners)

    def garbage_collect(self) -> None:
        """The garbage collector: a Workload whose owner Pods are all gone goes with them (Kueue's
        composed Workloads are owned by their Pods). Nothing else of the group is touched."""
        uids = {p["metadata"]["uid"] for p in self.pods.values()}
        for name, wl in sorted(self.workloads.items()):
            if not deleting(wl) and self._owners_gone(wl, uids):
                del self.workloads[name]
                self.parked.discard(name)
                self.requeue_parked(self.wl_info.pop(name, {}).get("cq"), f"{name} deleted")
                self.note(f"garbage collector: Workload {name} deleted (its Pods are gone)")

    def kueue_compose(self) -> None:
        self.garbage_collect()
        for name in [n for n, w in self.workloads.items() if deleting(w)]:
            del self.workloads[name]
            self.parked.discard(name)
            self.requeue_parked(self.wl_info.pop(name, {}).get("cq"), f"{name} deleted")
            self.note(f"Kueue: Workload {name} finalized")
        groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for pod in self.pods.values():
            group = labels(pod).get(vocab.LABEL_KUEUE_POD_GROUP_NAME)
            if group and labels(pod).get(vocab.LABEL_KUEUE_MANAGED) == "true":
                groups[group].append(pod)
        for group, members in sorted(groups.items()):
            total = int(annotations(members[0]).get(vocab.ANNOTATION_KUEUE_GROUP_TOTAL_COUNT, "1"))
            active = [p for p in members if self._runnable(p)]
            if len(active) > total:
                self.fail(f"Kueue: group {group} has {len(active)} runnable Pods for a total of {total}; Kueue "
                          f"would delete the newest as excess: {sorted(p['metadata']['name'] for p in active)}")
            if group in self.workloads:
                continue
            # No Workload: a deleted Pod that cannot run any more is released.
            for pod in members:
                if deleting(pod) or pod_phase(pod) == "Failed":
                    self._release_finalizer(pod)
            # A Pod being deleted counts while it is on a node (Kueue's isPodRunnableOrSucceeded), so
            # Kueue composes a Workload again for a group whose Pods all terminate on a node that does
            # not answer (docs/kueue.md#what-kueue-does-with-a-group; the soak found the loop).
            composed = active if self.kueue_composes_for_terminating_pods else [p for p in active if not deleting(p)]
            if len(composed) < total:
                continue
            self._create_workload(group, composed, total)

    def _create_workload(self, group: str, members: list[dict[str, Any]], total: int) -> None:
        first = members[0]
        queue = labels(first)[vocab.LABEL_KUEUE_QUEUE_NAME]
        cq = self.queue_to_cq(queue)
        it = self.instance_type(cq or "")
        key = ((it or {}).get("spec") or {}).get("acceleratorResource")
        cards = sum(cards_of(p, key) for p in members[:total])
        now = self.now()
        wl = {
            "apiVersion": vocab.KUEUE_API_VERSION,
            "kind": vocab.KIND_WORKLOAD,
            "metadata": {
                "name": group, "namespace": first["metadata"]["namespace"], "uid": self._next_uid("wl"),
                "resourceVersion": self._next_rv(), "creationTimestamp": now,
                "labels": {vocab.LABEL_KUEUE_QUEUE_NAME: queue},
                "annotations": {WORKLOAD_GROUP_ANNOTATION: "true"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": p["metadata"]["name"],
                                     "uid": p["metadata"]["uid"]} for p in members],
            },
            "spec": {"queueName": queue, "podSets": [{"name": annotations(first)[vocab.ANNOTATION_KUEUE_ROLE_HASH],
                                                      "count": total}]},
            "status": {"conditions": [], "admissionChecks": [
                {"name": vocab.ADMISSION_CHECK_NAME, "state": PENDING, "message": "", "lastTransitionTime": now}]},
        }
        self.workloads[group] = wl
        self.wl_info[group] = {"cq": cq, "cards": cards, "queued_at": self.t, "deployment": labels(first)[vocab.LABEL_INSTANCE],
                               "fingerprint": fingerprint(first)}
        self.note(f"Kueue: Workload {group} composed ({cards} cards in {cq})")

    def _set_cond(self, wl: dict[str, Any], type_: str, status: str, reason: str, message: str = "") -> None:
        conds = wl.setdefault("status", {}).setdefault("conditions", [])
        for c in conds:
            if c["type"] == type_:
                if c["status"] != status:
                    c.update(status=status, lastTransitionTime=self.now())
                c.update(reason=reason, message=message)
                return
        conds.append({"type": type_, "status": status, "reason": reason, "message": message,
                      "lastTransitionTime": self.now()})

    def used(self, cq: str) -> int:
        return sum(info["cards"] for n, info in self.wl_info.items()
                   if info["cq"] == cq and reserved(self.workloads[n]) and not deleting(self.workloads[n]))

    def queued(self, cq: str | None = None) -> list[str]:
        """Workloads in Kueue's queue (its heap: neither parked nor inactive), in the order Kueue
        would try them."""
        out = []
        for n, wl in self.workloads.items():
            info = self.wl_info[n]
            if cq is not None and info["cq"] != cq:
                continue
            if reserved(wl) or deleting(wl) or not active(wl) or n in self.parked:
                continue
            out.append(n)
        return sorted(out, key=lambda n: (self.wl_info[n]["queued_at"], self.workloads[n]["metadata"]["creationTimestamp"], n))

    def waiting(self, cq: str | None = None) -> list[str]:
        """Every Workload that wants quota and has none: queued or parked (not inactive)."""
        return sorted(n for n, wl in self.workloads.items()
                      if (cq is None or self.wl_info[n]["cq"] == cq) and not reserved(wl) and not deleting(wl)
                      and active(wl))

    def _park(self, name: str, why: str) -> None:
        if name not in self.parked:
            self.parked.add(name)
            self.note(f"Kueue: {name} parked as inadmissible ({why})")

    def requeue_parked(self, cq: str | None, why: str) -> None:
        """A requeue trigger (kueue v0.19 QueueAssociatedInadmissibleWorkloadsAfter, a ClusterQueue
        change): every Workload parked in the ClusterQueue goes back to the queue."""
        moved = sorted(n for n in self.parked if cq is None or self.wl_info.get(n, {}).get("cq") == cq)
        self.parked -= set(moved)
        if moved:
            self.note(f"Kueue: {len(moved)} parked Workloads of {cq or 'every queue'} requeued ({why})")

    def kueue_reserve(self, name: str) -> bool:
        """The scheduler reserves quota for one Workload if it fits (and admits it at once if every
        check is already Ready, in the same write)."""
        wl = self.workloads.get(name)
        if wl is None or name not in self.queued():
            return False
        info = self.wl_info[name]
        if any(e.get("state") in (RETRY, "Rejected") for e in (wl.get("status") or {}).get("admissionChecks") or []):
            self._park(name, "The workload has failed admission checks")
            return False
        if self.used(info["cq"]) + info["cards"] > self.capacity.get(info["cq"], 0):
            self._park(name, "insufficient quota")
            return False
        self._set_cond(wl, "QuotaReserved", "True", "QuotaReserved", f"Quota reserved in ClusterQueue {info['cq']}")
        for type_ in ("Evicted", "Preempted"):
            if cond_true(wl, type_):
                self._set_cond(wl, type_, "False", "QuotaReserved")
        wl["status"]["admission"] = {"clusterQueue": info["cq"]}
        checks = wl["status"].get("admissionChecks") or []
        if all(e.get("state") == READY for e in checks):
            self._admit(wl)
        wl["metadata"]["resourceVersion"] = self._next_rv()
        self.note(f"Kueue: quota reserved for {name} ({info['cards']} cards, {self.used(info['cq'])}/"
                  f"{self.capacity.get(info['cq'])} used in {info['cq']})")
        return True

    def kueue_reserve_all(self) -> None:
        """One scheduling cycle, BestEffortFIFO: every queued Workload that fits, in queue order; one
        that does not is parked."""
        for cq, cards in sorted(self.capacity.items()):
            if self.seen_capacity.get(cq) != cards:  # a ClusterQueue change requeues what it parked
                self.seen_capacity[cq] = cards
                self.requeue_parked(cq, "ClusterQueue changed")
        for name in self.queued():
            self.kueue_reserve(name)

    def _admit(self, wl: dict[str, Any]) -> None:
        self._set_cond(wl, "Admitted", "True", "Admitted", "The workload is admitted")
        name = wl["metadata"]["name"]
        info = self.wl_info[name]
        self.note(f"Kueue: Workload {name} admitted")
        self.admitted_fingerprints.add(info["fingerprint"])
        # An obsolete render must never be admitted: our check is listed on every ClusterQueue, so
        # this can only happen if Ready was written for it. Judged against the render the
        # deployment's last pass saw (an edit or a world change after it is a race no pass lost), or
        # for a follow-up's Ready, the render the pass that left it saw (during an upgrade the last
        # pass may be the other version's; the follow-up checked the spec and the versions itself).
        facts = info.get("ready_facts") or self.last_facts.get(info["deployment"], {})
        role = wl["spec"]["podSets"][0]["name"]
        if role in facts and facts[role][0] != info["fingerprint"]:
            self.fail(f"Kueue admitted {name} on an obsolete render of {info['deployment']}/{role}")

    def kueue_checks(self) -> None:
        """The workload controller: Retry evicts; all checks Ready on a reservation admits; the
        job reconciler ungates the Pods of admitted Workloads."""
        for name, wl in list(self.workloads.items()):
            if not reserved(wl) or deleting(wl):
                continue  # a Workload being deleted is only finalized
            checks = (wl.get("status") or {}).get("admissionChecks") or []
            if any(e.get("state") == RETRY for e in checks):
                self.evict(name, "AdmissionCheck", "Evicted due to AdmissionCheck in Retry state")
            elif not admitted(wl) and all(e.get("state") == READY for e in checks):
                self._admit(wl)
                wl["metadata"]["resourceVersion"] = self._next_rv()
        for pod in self.pods.values():
            group = labels(pod).get(vocab.LABEL_KUEUE_POD_GROUP_NAME)
            if group and admitted(self.workloads.get(group)) and not deleting(pod) and group not in self.ungate_stalled:
                # The topology ungater places what a stall held (the real one does within a second).
                self._remove_gate(pod, vocab.KUEUE_TOPOLOGY_GATE)
            if group and admitted(self.workloads.get(group)) and gated(pod) and not deleting(pod):
                self._remove_gate(pod, vocab.KUEUE_SCHEDULING_GATE)
                if group in self.ungate_stalled:
                    pod["spec"]["schedulingGates"] = [{"name": vocab.KUEUE_TOPOLOGY_GATE}]
                # Ungated: the replica runs (serves); its departure is worth an Event.
                inc = self.incarnations.get(pod_ordinal(pod))
                if inc is not None:
                    inc.ran = True

    def evict(self, name: str, reason: str = "Preempted", message: str = "Preempted to accommodate a workload") -> None:
        """Kueue evicts a Workload: preemption, a Retry check, a PodsReady timeout."""
        wl = self.workloads[name]
        self.note(f"Kueue: Workload {name} evicted ({reason})")
        self._set_cond(wl, "Evicted", "True", reason, message)
        if reason == "Preempted":
            self._set_cond(wl, "Preempted", "True", "InClusterQueue", message)
        self._set_cond(wl, "QuotaReserved", "False", "Pending", message)
        if cond(wl, "Admitted") is not None:
            self._set_cond(wl, "Admitted", "False", "NoReservation", message)
        wl["status"].pop("admission", None)
        for entry in wl["status"].get("admissionChecks") or []:
            if entry.get("state") != PENDING:
                if entry.get("state") == RETRY:
                    entry["retryCount"] = int(entry.get("retryCount") or 0) + 1
                entry.update(state=PENDING, message=f"Reset to Pending after eviction. Previously: {entry['state']}",
                             lastTransitionTime=self.now())
        wl["metadata"]["resourceVersion"] = self._next_rv()
        self.wl_info[name]["queued_at"] = self.t  # requeued at the back (eviction timestamp)
        self.requeue_parked(self.wl_info[name]["cq"], f"{name} evicted")
        # Stop: ungated Pods are deleted; gated ones are left for the next admission.
        for pod in list(self.pods.values()):
            if labels(pod).get(vocab.LABEL_KUEUE_POD_GROUP_NAME) == name and not gated(pod) \
                    and pod_phase(pod) not in ("Failed", "Succeeded") and not deleting(pod):
                self._mark_stopped(pod, f"WorkloadEvictedDueTo{reason}")

    def preempt(self, name: str) -> None:
        self.evict(name, "Preempted")

    def follow_up(self) -> None:
        """The executor's ready-on-composition watch (app/kube/composition.py), on every Workload it
        waits for: the same steps, on the simulator's objects; its write is held to every invariant a
        pass's check write is."""
        for name, (deployment, intent, facts) in sorted(self.follow_ups.items()):
            wl = self.workloads.get(name)
            if wl is None:
                continue
            step = composition.composed_step(wl)
            if step is composition.Composed.WAIT or (step is composition.Composed.WRITE and any(p in self.pods for p in intent.stopping_pods)):
                continue
            del self.follow_ups[name]
            if step is composition.Composed.DONE or not composition.members_on_render(
                    intent, [self.pods.get(member) for member in intent.members]) \
                    or not composition.deployment_unchanged(intent, self.parents.get(deployment), self.now()):
                continue
            self.note(f"follow-up: our check Ready on {name} (composed)")
            self.follow_up_writes += 1
            self.wl_info[name]["ready_facts"] = facts
            self._execute(deployment, SetAdmissionCheck(
                namespace=intent.namespace, workload=name, resource_version=wl["metadata"]["resourceVersion"],
                state=READY, message=intent.message, last_transition_time=self.now()), facts=facts)

    def kueue(self) -> None:
        """One round of every Kueue controller (and of the follow-ups' watch, which sees each composed
        Workload at once)."""
        self.kueue_compose()
        self.follow_up()
        self.kueue_checks()
        self.kueue_reserve_all()
        self.kueue_checks()

    # --- kubelet, nodes ------------------------------------------------------------------------

    @staticmethod
    def _remove_gate(pod: dict[str, Any], gate: str) -> None:
        gates = [g for g in pod["spec"].get("schedulingGates") or [] if g.get("name") != gate]
        if gates:
            pod["spec"]["schedulingGates"] = gates
        else:
            pod["spec"].pop("schedulingGates", None)

    def kubelet(self) -> None:
        for name in sorted(self.pods):
            pod = self.pods.get(name)
            if pod is None:
                continue
            node = pod["spec"].get("nodeName")
            node_ready = node is not None and self.nodes.get(node, {}).get("ready", False)
            if deleting(pod):
                if node is None:
                    self._maybe_remove(name)
                elif node_ready or node not in self.nodes:
                    if pod_phase(pod) not in ("Failed", "Succeeded"):
                        self._set_pod_status(pod, "Failed", False)
                    self._maybe_remove(name)
                continue
            if pod["spec"].get("schedulingGates") or pod_phase(pod) in ("Failed", "Succeeded"):
                continue  # any gate keeps a Pod off every node
            if node is None:
                info = self.wl_info.get(labels(pod).get(vocab.LABEL_KUEUE_POD_GROUP_NAME, ""))
                cq = info["cq"] if info else None
                candidates = sorted(n for n, s in self.nodes.items() if s["ready"] and (cq is None or s["queue"] == cq))
                if not candidates:
                    continue
                load = {n: sum(1 for p in self.pods.values() if p["spec"].get("nodeName") == n) for n in candidates}
                pod["spec"]["nodeName"] = min(candidates, key=lambda n: (load[n], n))
                node_ready = True
            if pod_phase(pod) != "Running" or cond_true(pod, "Ready") != node_ready:
                self._set_pod_status(pod, "Running", node_ready)

    def node_of(self, pod_name: str) -> str | None:
        return self.pods[pod_name]["spec"].get("nodeName")

    def set_node_ready(self, node: str, ready: bool) -> None:
        self.nodes[node]["ready"] = ready
        self.note(f"node {node} {'Ready' if ready else 'NotReady'}")
        if not ready:
            # The node lifecycle controller marks its Pods not Ready; they stay Running.
            for pod in self.pods.values():
                if pod["spec"].get("nodeName") == node and pod_phase(pod) == "Running":
                    self._set_pod_status(pod, "Running", False)

    def delete_node(self, node: str) -> None:
        """The Node object goes (a replaced machine): the pod GC force-deletes its Pods."""
        self.note(f"node {node} deleted")
        del self.nodes[node]
        for name in sorted(self.pods):
            pod = self.pods.get(name)
            if pod is not None and pod["spec"].get("nodeName") == node:
                self._set_pod_status(pod, "Failed", False)
                self._delete_pod(name)
                self._maybe_remove(name)

    # --- driving -------------------------------------------------------------------------------

    def pass_inputs(self, parent: dict[str, Any], children: Any, related: Any) -> bytes:
        """What a change of starts a pass: children, related objects, the parent but its status."""
        meta = parent["metadata"]
        return dumps([children, related, parent["spec"], meta.get("generation"), meta.get("deletionTimestamp"),
                      meta.get("labels"), meta.get("annotations")])

    def due(self, name: str) -> bool:
        """Whether Metacontroller would call the parent's hook now (docs/metacontroller.md#what-starts-a-pass)."""
        last = self.last_pass.get(name)
        if not self.event_driven or last is None:
            return True
        inputs, at, resync_after = last
        parent = self.parents[name]
        if self.pass_inputs(parent, self.children_of(parent), self.related_for(parent)) != inputs:
            return True
        if resync_after is not None and self.t >= at + resync_after:
            return True
        return self.t >= at + RESYNC_PERIOD_SECONDS

    def called_back(self) -> list[str]:
        """Deployments whose last pass asked Metacontroller to come back (`resyncAfterSeconds`: a
        status it held back, docs/status.md#settling): the system has not settled until that pass
        has run and asked for nothing."""
        return sorted(name for name, (_, _, resync_after) in self.last_pass.items()
                      if resync_after is not None and name in self.parents)

    def sync_all(self) -> None:
        for name in sorted(self.parents):
            if self.due(name):
                self.sync(name)

    def step(self, seconds: float = 5.0) -> None:
        """One round of the whole system: hooks, Kueue, kubelet, then time passes (the informer
        has caught up by then)."""
        self.catch_up()
        self.sync_all()
        self.kueue()
        self.kubelet()
        self.check_global()
        self.advance(seconds)

    def state_key(self) -> bytes:
        return dumps([self.pods, self.workloads, {n: p.get("status") for n, p in self.parents.items()}])

    def settle(self, rounds: int = 40, seconds: float = 5.0) -> int:
        """Steps until nothing changes and no pass waits to be called back (or `rounds` pass);
        returns the number of steps taken."""
        for i in range(rounds):
            before = self.state_key()
            self.step(seconds)
            if self.state_key() == before and not self.called_back():
                return i + 1
        return rounds

    # --- invariants ----------------------------------------------------------------------------

    def check_global(self) -> None:
        """What must hold in the store at every moment."""
        for (deployment, role), ordinals in list(self.lost_ready.items()):
            # An ordinal is whole again once its instance is Ready (or the user scaled it away).
            parent = self.parents.get(deployment)
            if parent is None or deleting(parent):
                del self.lost_ready[(deployment, role)]
                continue
            spec_role = next((r for r in parent["spec"]["roles"] if r["name"] == role), {})
            for ordinal in list(ordinals):
                if ordinal >= int(spec_role.get("replicas", 1)) or self._instance_ready(deployment, role, ordinal):
                    ordinals.discard(ordinal)
            if len(ordinals) > 1:
                self.fail(f"{deployment}/{role}: {len(ordinals)} Ready replicas lost to turnovers at once: "
                          f"{sorted(ordinals)} (the availability gate)")
        for name, pod in self.pods.items():
            if not deleting(pod) and name in self.created_from:
                stored = {k: v for k, v in pod["spec"].items() if k not in ("nodeName", "schedulingGates")}
                original = orjson.loads(self.created_from[name])["spec"]
                if dumps(stored) != dumps(original):
                    self.fail(f"Pod {name}: its spec changed after creation")

    def _check_pass(self, name: str, request: HookRequest, result: SyncResult,
                    facts: dict[str, tuple[str, str | None]]) -> None:
        """Invariants of one hook pass, judged against what the pass observed."""
        parent = self.parents[name]
        md = parent["spec"]
        ns = parent["metadata"]["namespace"]
        finalizing = request.finalizing
        desired = {c["metadata"]["name"]: c for c in result.children if c["kind"] == "Pod"}
        deletes = {i.name for i in result.intents if isinstance(i, DeleteWorkload)}
        observed = [p for p in (request.children.get(vocab.CHILD_PODS) or {}).values()]
        by_ordinal: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
        by_group: dict[tuple[str, int, str], list[dict[str, Any]]] = defaultdict(list)
        for pod in observed:
            _, role, ordinal = pod_ordinal(pod)
            by_ordinal[(role, ordinal)].append(pod)
            by_group[(role, ordinal, labels(pod).get(vocab.LABEL_KUEUE_POD_GROUP_NAME, ""))].append(pod)
        roles = {r["name"]: r for r in md["roles"]}
        replaced: dict[str, list[int]] = defaultdict(list)
        for (role, ordinal, group), pods in sorted(by_group.items()):
            wl = self.workloads.get(group)
            spec_role = roles.get(role)
            declared = spec_role is not None and ordinal < int(spec_role.get("replicas", 1)) and not finalizing
            size = int(spec_role.get("size", 1)) if spec_role else 1
            current_fp, hold = facts.get(role, (None, None))
            live = [p for p in pods if not deleting(p)]
            omitted = [p for p in live if p["metadata"]["name"] not in desired]
            kept = [p for p in live if p["metadata"]["name"] in desired]
            if kept and omitted:
                self.fail(f"sync {name}: replica {role}/{ordinal} kept in part: {[p['metadata']['name'] for p in omitted]} "
                          f"deleted, {[p['metadata']['name'] for p in kept]} kept (the instance is replaced whole)")
            for pod in kept:
                # A kept replica on the current render is returned exactly as it was created.
                original = self.created_from.get(pod["metadata"]["name"])
                if original is not None and fingerprint(pod) == current_fp \
                        and dumps(desired[pod["metadata"]["name"]]) != original:
                    self.fail(f"sync {name}: kept Pod {pod['metadata']['name']} is not returned byte-identical")
            if not omitted:
                continue
            healthy = (len(live) == size == len(pods) and admitted(wl) and not cond_true(wl or {}, "Evicted")
                       and all(pod_phase(p) not in ("Failed", "Succeeded") for p in pods))
            # A Workload being deleted gives its Pods up (Kueue stops them): a lagging view may still
            # list them as live after the pass that deleted it.
            departed = (len(live) < len(pods) or any(pod_phase(p) in ("Failed", "Succeeded") for p in pods)
                        or (wl is not None and deleting(wl))
                        or (cond_true(wl or {}, "Evicted") and not all(gated(p) for p in pods))
                        or (admitted(wl) and len(pods) < size))
            # Kueue placing the group elsewhere than its Pods run is replaced as a rollout is.
            obsolete = any(fingerprint(p) != current_fp for p in pods) or (admitted(wl) and placed_elsewhere(wl, live))
            # A newer incarnation of the ordinal is listed beside it: a pass already gave it up.
            replaced_before = max(map(incarnation, pods)) < max(map(incarnation, by_ordinal[(role, ordinal)]))
            if replaced_before:
                why = "replaced"
            elif not declared:
                why = "shed"
            elif departed:
                why = "departed"
            elif obsolete and healthy:
                why = "rollout"
            elif obsolete and not admitted(wl):
                why = "superseded"
            else:
                self.fail(f"sync {name}: deleted replica {role}/{ordinal} without a reason (healthy={healthy}, "
                          f"obsolete={obsolete}, admitted={admitted(wl)}, hold={hold!r})")
            if why in ("rollout", "superseded") and hold is not None:
                self.fail(f"sync {name}: replica {role}/{ordinal} deleted for a {why} while new replicas are held "
                          f"({hold})")
            released = all(deleting(p) and KUEUE_FINALIZER not in (p["metadata"].get("finalizers") or []) for p in pods)
            if wl is not None and not deleting(wl) and group not in deletes and not (replaced_before and released):
                self.fail(f"sync {name}: replica {role}/{ordinal} deleted ({why}) without deleting its Workload {group}")
            if why == "rollout" and self._view_ready(pods, size):
                replaced[role].append(ordinal)
        # The availability gate, judged on the view the pass had: a Ready replica is turned over only
        # when every other declared replica is Ready and admitted, one per role per pass (a replica
        # that is not Ready serves nothing and may go at once).
        for role, ordinals in replaced.items():
            if len(ordinals) > 1:
                self.fail(f"sync {name}: {len(ordinals)} Ready replicas of role {role} turned over in one pass: {ordinals}")
            size = int(roles[role].get("size", 1))
            for other in range(int(roles[role].get("replicas", 1))):
                if other == ordinals[0]:
                    continue
                newest = newest_incarnation(by_ordinal.get((role, other), []))
                wl = self.workloads.get(labels(newest[0]).get(vocab.LABEL_KUEUE_POD_GROUP_NAME, "") if newest else "")
                if not (self._view_ready(newest, size) and admitted(wl)):
                    self.fail(f"sync {name}: role {role} turned over Ready ordinal {ordinals[0]} while ordinal {other} "
                              f"is not Ready and admitted (the availability and cadence gates)")
        # Shed ordinals: their Workloads are deleted even when customize no longer lists them.
        if not finalizing:
            for role, spec_role in roles.items():
                for (r, ordinal), pods in by_ordinal.items():
                    if r == role and ordinal >= int(spec_role.get("replicas", 1)) and any(not deleting(p) for p in pods):
                        group = labels(newest_incarnation(pods)[0]).get(vocab.LABEL_KUEUE_POD_GROUP_NAME, "")
                        if group not in deletes:
                            self.fail(f"sync {name}: shed replica {role}/{ordinal} without deleting Workload {group}")
        # New Pods: scale-up is immediate; nothing is created into an occupied ordinal (checked at create).
        for pod_name, pod in desired.items():
            _, role, ordinal = pod_ordinal(pod)
            if role in roles and ordinal >= int(roles[role].get("replicas", 1)):
                self.fail(f"sync {name}: returned Pod {pod_name} of an undeclared ordinal")
            if finalizing:
                self.fail(f"finalize {name}: returned Pod {pod_name}")

    def _check_intent(self, deployment: str, intent: SetAdmissionCheck, facts: dict[str, tuple[str, str | None]]) -> None:
        wl = self.workloads.get(intent.workload)
        if wl is None:
            return
        entry = check_state(wl) or {}
        if admitted(wl) and entry.get("state") == READY and intent.state != READY:
            self.fail(f"check on admitted {intent.workload} taken from Ready to {intent.state}")
        if intent.state == RETRY and admitted(wl):
            self.fail(f"Retry written on admitted {intent.workload}")
        if intent.state != READY:
            return
        parent = self.parents.get(deployment)
        if not reserved(wl) and (parent is None or len(parent["spec"]["roles"]) > 1):
            self.fail(f"Ready written on {intent.workload} of a set, which holds no quota (Kueue would admit it alone "
                      f"on reservation)")
        members = [p for p in self.pods.values() if labels(p).get(vocab.LABEL_KUEUE_POD_GROUP_NAME) == intent.workload]
        if members:
            others = [p["metadata"]["name"] for p in self._ordinal_pods(*pod_ordinal(members[0]))
                      if labels(p).get(vocab.LABEL_KUEUE_POD_GROUP_NAME) != intent.workload]
            if others:
                self.fail(f"Ready written on {intent.workload} while Pods of an earlier incarnation of its replica "
                          f"are still there: {others} (two incarnations would run at once)")
        info = self.wl_info[intent.workload]
        role = wl["spec"]["podSets"][0]["name"]
        if role in facts and facts[role][0] != info["fingerprint"]:
            self.fail(f"Ready written on {intent.workload}, whose Pods are an obsolete render of role {role}")
        parent = self.parents.get(deployment)
        if parent is None:
            return
        roles = parent["spec"]["roles"]
        if len(roles) > 1:
            ns = parent["metadata"]["namespace"]
            missing = []
            for r in roles:
                for o in range(int(r.get("replicas", 1))):
                    slots = [self.workloads.get(g) for g in names.pod_groups(ns, deployment, r["name"], o)]
                    if not any(reserved(wl) or admitted(wl) for wl in slots):
                        missing.append(f"{r['name']}/{o}")
            if missing:
                self.fail(f"Ready written on {intent.workload} while the set is incomplete: {missing} hold no quota")

    def check_departure_events(self) -> None:
        """Every replica that ran and then went away (outside deletion) has exactly one Event.

        With lagging views at most one: a view may still list a preempted replica's Pods as running
        while its Workload, re-queued, reads reserved but not admitted — the same picture as a
        group Kueue has just admitted whose Workload the view has not caught up with, which must not
        be torn down. The planner then supersedes it quietly; the Workload's eviction is in Kueue's
        own events."""
        for inc in self.all_incarnations:
            if self.lagging and len(inc.events) <= 1:
                continue
            if inc.gone and inc.ran and not inc.gone_while_finalizing and not inc.forced and len(inc.events) != 1:
                self.fail(f"replica {inc.deployment}/{inc.role}/{inc.ordinal} (incarnation {inc.id}) ran and departed "
                          f"with {len(inc.events)} departure events")

    # --- reading state for stories ---------------------------------------------------------------

    def status(self, name: str) -> dict[str, Any]:
        return self.parents[name].get("status") or {}

    def condition(self, name: str, type_: str) -> dict[str, Any]:
        return next(c for c in self.status(name).get("conditions", []) if c["type"] == type_)

    def role_status(self, name: str, role: str) -> dict[str, Any]:
        return next(r for r in self.status(name).get("roles", []) if r["name"] == role)

    def replica_pods(self, name: str, role: str, ordinal: int) -> list[dict[str, Any]]:
        return sorted(self._ordinal_pods(name, role, ordinal), key=lambda p: p["metadata"]["name"])

    def workload_of(self, name: str, role: str, ordinal: int) -> dict[str, Any] | None:
        return self.workloads.get(self.group(name, role, ordinal))

    def group(self, name: str, role: str, ordinal: int) -> str:
        """The pod group of the replica's newest incarnation in the store (slot 0 when it has no Pod)."""
        newest = newest_incarnation(self._ordinal_pods(name, role, ordinal))
        if newest:
            return labels(newest[0]).get(vocab.LABEL_KUEUE_POD_GROUP_NAME, "")
        ns = self.parents[name]["metadata"]["namespace"] if name in self.parents else self.namespace
        return names.pod_group(ns, name, role, ordinal)

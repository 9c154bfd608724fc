"""The soak's watcher: one observation every half second, every invariant judged on it.

An observation reads each kind once (one list call per kind; the slow-moving kinds every few
ticks) and everything is derived from that one read, never from a second read of moving state.
The invariants (bench/soak.md#invariants):

- ``turnover``: never more than one Ready replica of a role lost at once to a turnover; a replica
  lost while a departure fault covers it (its Pod or Workload deleted, its node NotReady or deleted,
  a preemption in its queue) is counted apart;
- ``untouched``: a deployment that is converged and that nothing touched since keeps its children
  (Pods, Workloads, Services, router objects: the same UIDs, none added) through every platform
  fault — an operator, Metacontroller, Kueue or API server restart changes nothing;
- ``ordinal``: never two Running Pods of one (deployment, role, ordinal, member);
- ``leftover``: once a deleted deployment is gone, no Pod, Workload, Service or router object of it
  is left after the garbage collector's grace;
- ``webhook-5xx``: the admission webhooks never answer 5xx while the operator and the API server
  are up (probed directly, and the API server's own webhook metrics), nor the hooks an internal 500
  (the operator's metrics);
- ``rss``: the operator's resident memory stays under a bound;
- ``events``: Events of our deployments do not grow while everything is converged and untouched,
  and no (reason, object) passes a hard bound;
- ``convergence`` (judged by the schedule with :meth:`Watcher.converged`): after the last fault,
  every deployment converges within the bound.
"""

from __future__ import annotations

import copy
import ssl
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import httpx
import orjson

from app import timestamps, vocab
from app.api.v1 import ModelDeployment
from app.model.context import RenderOptions, build_context
from app.render import names
from app.render.errors import RenderError
from app.render.pod import render_role
from app.world import World
from bench.soak_ledger import Ledger
from bench.soak_readylog import PodWatch, ReadyLog
from bench.soak_world import NAMESPACE, PREEMPTOR_LABEL, Shape

TICK_SECONDS = 0.5
SLUGGISH_SECONDS = 3.0  # an observation slower than this: the API server is not answering in time
CHILDREN_EVERY = 4  # ticks between reads of Services and router objects (and Nodes)
EVENTS_EVERY = 10
METRICS_EVERY = 5  # probes between reads of the operator's metrics
PROBE_SECONDS = 1.0
LEFTOVER_GRACE_SECONDS = 45.0
#: Pods are the finalize hook's own to wait for (engine and router Pods alike: docs/metacontroller.md#finalize),
#: so none is left once the deployment is gone; the slack covers only this watcher's lists, read one
#: after another (the Pods before the deployments).
LEFTOVER_POD_GRACE_SECONDS = 5.0
#: A Pod bound to a node that is gone waits for the pod garbage collector, which force-deletes such
#: orphans only after a quarantine of its own (40 s, checked every 20 s), whoever owned them.
ORPHANED_POD_GRACE_SECONDS = 120.0
RSS_LIMIT_MIB = 512.0
EVENTS_PER_OBJECT_LIMIT = 400
#: Ordinals searched for Workloads beyond the declared ones (scale-down leftovers).
EXTRA_ORDINALS = 6

CHILD_KINDS = {
    "services": "/api/v1/namespaces/{ns}/services",
    "deployments": "/apis/apps/v1/namespaces/{ns}/deployments",
    "configmaps": "/api/v1/namespaces/{ns}/configmaps",
    "serviceaccounts": "/api/v1/namespaces/{ns}/serviceaccounts",
    "roles": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "rolebindings": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
}
WORLD_KINDS = {
    "instancetypes": "/apis/worker.gpustack.ai/v1/instancetypes",
    "kvcachepools": "/apis/worker.gpustack.ai/v1/kvcachepools",
    "kvcachebackends": "/apis/worker.gpustack.ai/v1/kvcachebackends",
    "kvcachepoolbindings": "/apis/worker.gpustack.ai/v1/namespaces/{ns}/kvcachepoolbindings",
}


# --- readers of one object ---------------------------------------------------------------------


def labels(obj: dict[str, Any]) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def uid(obj: dict[str, Any]) -> str:
    return obj["metadata"]["uid"]


def deleting(obj: dict[str, Any]) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def cond_true(obj: dict[str, Any], type_: str) -> bool:
    return any(c.get("type") == type_ and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def owner_uids(obj: dict[str, Any]) -> set[str]:
    return {o.get("uid", "") for o in obj["metadata"].get("ownerReferences") or []}


def pod_ready(pod: dict[str, Any]) -> bool:
    return (not deleting(pod) and (pod.get("status") or {}).get("phase") == "Running"
            and cond_true(pod, "Ready"))


def event_last_occurred(events: list[dict[str, Any]]) -> dict[tuple[str, str, str], float]:
    """Per (reason, kind, name), the latest occurrence the Events record: `series.lastObservedTime`,
    `lastTimestamp` or `eventTime` (when the reporter saw it, not when the API server took it: an
    Event recorded while the API server was down is posted once it is back)."""
    out: dict[tuple[str, str, str], float] = {}
    for ev in events:
        inv = ev.get("involvedObject") or {}
        stamp = ((ev.get("series") or {}).get("lastObservedTime") or ev.get("lastTimestamp") or ev.get("eventTime"))
        when = timestamps.parse(stamp)
        if when is None:
            continue
        key = (ev.get("reason", ""), inv.get("kind", ""), inv.get("name", ""))
        out[key] = max(out.get(key, 0.0), when.timestamp())
    return out


def pod_key(pod: dict[str, Any]) -> tuple[str, str, int, str] | None:
    lab = labels(pod)
    try:
        return (lab[vocab.LABEL_INSTANCE], lab[vocab.LABEL_COMPONENT], int(lab[vocab.LABEL_POD_ORDINAL]),
                lab.get(vocab.LABEL_MEMBER_INDEX, "0"))
    except (KeyError, ValueError):
        return None


def replica_key(pod: dict[str, Any]) -> tuple[str, str, int] | None:
    """(owning deployment's UID, role, ordinal) of one of our Pods."""
    key = pod_key(pod)
    owners = sorted(owner_uids(pod))
    return (owners[0], key[1], key[2]) if key is not None and owners else None


def node_ready(node: dict[str, Any]) -> bool:
    return cond_true(node, "Ready") and not node["metadata"].get("deletionTimestamp")


@dataclass
class Observation:
    tick: int
    t0: float  # soak seconds when the reads began
    t1: float  # … and ended
    mds: dict[str, dict[str, Any]]
    pods: list[dict[str, Any]]
    workloads: dict[str, dict[str, Any]]
    world: list[dict[str, Any]]
    scalers: dict[str, dict[str, Any]] | None = None
    children: dict[str, list[dict[str, Any]]] | None = None
    nodes: list[dict[str, Any]] | None = None
    events: list[dict[str, Any]] | None = None
    # derived
    pods_of: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # by owner deployment UID
    converged: dict[str, str] = field(default_factory=dict)  # name -> "" when converged, else why not


class Watcher:
    """Runs in its own thread; `latest` is the last observation (with convergence judged)."""

    def __init__(self, api: httpx.Client, ledger: Ledger, shapes: list[Shape], *, render_options: RenderOptions,
                 webhook_url: str, webhook_verify: str, operators: Callable[[], list[tuple[int | None, str]]],
                 scalers: bool, nodes: set[str] | None = None,
                 pod_watch_client: httpx.Client | None = None) -> None:
        self.api = api
        self.ledger = ledger
        self.shapes = {s.name: s for s in shapes}
        self.options = render_options
        self.webhook = httpx.Client(base_url=webhook_url, verify=ssl.create_default_context(cafile=webhook_verify),
                                    timeout=8)
        self.hooks = httpx.Client(timeout=5)
        # Every operator replica: (its pid while it runs, else None; its own hooks URL). Each is
        # scraped and measured on its own: behind one address the counters of two would interleave.
        self.operators = operators
        self.with_scalers = scalers
        self.expected_nodes = nodes or set()
        self.latest: Observation | None = None
        self.tick = 0
        self.read_failures = 0
        # Spans (soak seconds) in which the API server did not answer our reads in time: a webhook
        # that answers 503 "the API server could not be reached" then says the truth.
        self.sluggish: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-watcher", daemon=True)
        self._prober = threading.Thread(target=self._probe, name="soak-prober", daemon=True)
        self._children: dict[str, list[dict[str, Any]]] | None = None
        self._nodes: list[dict[str, Any]] | None = None
        # turnover state: (md uid, role, ordinal) seen Ready; lost ordinals per (md uid, role) ->
        # (explained by a departure, soak seconds when first seen lost)
        self._was_ready: set[tuple[str, str, int]] = set()
        self._lost: dict[tuple[str, str], dict[int, tuple[bool, float]]] = defaultdict(dict)
        # Every Ready window of every Pod, from a watch: a replica Ready only between two
        # observations still ends its loss (bench/soak_readylog.py).
        self.ready_log = ReadyLog(replica_key, lambda pod: (pod_key(pod) or ("", "", 0, "0"))[3], pod_ready)
        self._pod_watch = (PodWatch(pod_watch_client, NAMESPACE, self.ready_log, ledger.now)
                           if pod_watch_client is not None else None)
        # untouched state: name -> (md uid, established at, {kind: uids})
        self._baseline: dict[str, tuple[str, float, dict[str, frozenset[str]]]] = {}
        # deletions: name -> (old uid, seen gone at)
        self.deleted: dict[str, tuple[str, float | None]] = {}
        self.cleaned: dict[str, float] = {}  # name -> seconds from gone to nothing left
        # webhook probes and metrics
        self.probes: dict[str, int] = defaultdict(int)
        self.hook_errors: dict[str, dict[str, float]] = {}  # hooks URL -> its replica's counters
        self.webhook_5xx_seen: dict[str, float] = {}
        self.rss_mib: float = 0.0
        self.rss_peak_mib: float = 0.0
        self.rss_samples: list[tuple[float, float]] = []
        self._rss_pids: set[int] = set()
        self.event_totals: dict[tuple[str, str, str], int] = {}
        # (reason, kind, name) -> the latest occurrence its Events record (epoch seconds)
        self.event_last_occurred: dict[tuple[str, str, str], float] = {}
        self.events_at = float("-inf")  # soak seconds when the last Event list was read
        self._hooks_pids: dict[str, int | None] = {}
        self.observations = 0
        # How often each invariant had something to judge (bench/soak.md: evidence it was exercised).
        self.stats: dict[str, int] = defaultdict(int)
        self.tick_seconds: list[float] = []
        self.on_observation: list[Callable[[Observation], None]] = []

    def pod_watch_failures(self) -> int:
        return self._pod_watch.failures if self._pod_watch is not None else 0

    # --- thread -------------------------------------------------------------------------------------

    def start(self) -> None:
        if self._pod_watch is not None:
            self._pod_watch.start()
        self._thread.start()
        self._prober.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self._prober.join(30)
        if self._pod_watch is not None:
            self._pod_watch.stop()

    def _probe(self) -> None:
        """The webhooks probed every second and the hooks' metrics read every few seconds, in their
        own thread: a frozen operator must not stall the observations."""
        n = 0
        while not self._stop.wait(PROBE_SECONDS):
            n += 1
            try:
                self.probe_webhooks()
                if n % METRICS_EVERY == 0:
                    self.check_hook_metrics()
            except Exception as exc:  # noqa: BLE001 - a failed probe is reported, the prober goes on
                self.ledger.violation("watcher", f"the prober failed: {type(exc).__name__}: {exc}", [],
                                      key=f"probe/{type(exc).__name__}:{exc}")

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                obs = self.observe()
            except (httpx.HTTPError, OSError, KeyError, ValueError) as exc:
                self.read_failures += 1
                self.sluggish.append((self.ledger.now() - (time.monotonic() - began), self.ledger.now()))
                if self.read_failures % 20 == 1:
                    print(f"[soak] observation failed ({type(exc).__name__}: {exc}); retrying", flush=True)
                self._stop.wait(TICK_SECONDS)
                continue
            try:
                self.judge(obs)
            except Exception as exc:  # noqa: BLE001 - a bug in a check must not stop the watcher
                self.ledger.violation("watcher", f"the watcher failed on an observation: {type(exc).__name__}: {exc}",
                                      [], key=f"{type(exc).__name__}:{exc}")
            self.latest = obs
            self.observations += 1
            for hook in self.on_observation:
                hook(obs)
            spent = time.monotonic() - began
            self.tick_seconds.append(spent)
            if spent > SLUGGISH_SECONDS:
                self.sluggish.append((obs.t0, obs.t1))
            self._stop.wait(max(0.0, TICK_SECONDS - spent))

    # --- reads --------------------------------------------------------------------------------------

    def _list(self, path: str) -> list[dict[str, Any]]:
        response = self.api.get(path.format(ns=NAMESPACE), timeout=10)
        response.raise_for_status()
        return orjson.loads(response.content)["items"]

    def observe(self) -> Observation:
        self.tick += 1
        t0 = self.ledger.now()
        pods = self._list("/api/v1/namespaces/{ns}/pods")
        workloads = {w["metadata"]["name"]: w for w in self._list("/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/workloads")}
        mds = {m["metadata"]["name"]: m for m in self._list("/apis/worker.gpustack.ai/v1/namespaces/{ns}/modeldeployments")}
        world: list[dict[str, Any]] = []
        for kind, path in WORLD_KINDS.items():
            for obj in self._list(path):
                obj.setdefault("kind", {"instancetypes": "InstanceType", "kvcachepools": "KVCachePool",
                                        "kvcachebackends": "KVCacheBackend",
                                        "kvcachepoolbindings": "KVCachePoolBinding"}[kind])
                obj.setdefault("apiVersion", "worker.gpustack.ai/v1")
                world.append(obj)
        scalers = None
        if self.with_scalers:
            scalers = {s["metadata"]["name"]: s for s in
                       self._list("/apis/worker.gpustack.ai/v1/namespaces/{ns}/modeldeploymentscalers")}
        children = nodes = events = None
        if self.tick % CHILDREN_EVERY == 0 or self._children is None:
            children = {kind: self._list(path) for kind, path in CHILD_KINDS.items()}
            nodes = self._list("/api/v1/nodes")
            self._children, self._nodes = children, nodes
        if self.tick % EVENTS_EVERY == 0:
            events = self._list("/api/v1/namespaces/{ns}/events")
        obs = Observation(self.tick, t0, self.ledger.now(), mds, pods, workloads, world, scalers, children, nodes, events)
        for pod in pods:
            for owner in owner_uids(pod):
                obs.pods_of.setdefault(owner, []).append(pod)
        return obs

    # --- judging ------------------------------------------------------------------------------------

    def judge(self, obs: Observation) -> None:
        world = World.of(copy.deepcopy(obs.world))
        for name, md in obs.mds.items():
            obs.converged[name] = self.why_not_converged(obs, md, world)
        self.check_turnovers(obs)
        self.check_ordinals(obs)
        self.check_untouched(obs)
        self.check_deletions(obs)
        self.check_rss(obs)
        if obs.events is not None:
            self.check_events(obs)

    def group_names(self, md: dict[str, Any], extra: int = 0) -> dict[str, tuple[str, int]]:
        out = {}
        for role in md["spec"]["roles"]:
            for ordinal in range(int(role.get("replicas", 1)) + extra):
                for group in names.pod_groups(NAMESPACE, md["metadata"]["name"], role["name"], ordinal):
                    out[group] = (role["name"], ordinal)
        return out

    def fingerprints(self, md: dict[str, Any], world: World) -> dict[str, str] | str:
        try:
            parsed = ModelDeployment.model_validate(copy.deepcopy(md))
            ctx = build_context(parsed, world, self.options)
            return {role.name: render_role(ctx, role).fingerprint for role in parsed.spec.roles}
        except RenderError as exc:
            return f"render failed: {exc}"
        except ValueError as exc:
            return f"unparsable: {exc}"

    def why_not_converged(self, obs: Observation, md: dict[str, Any], world: World) -> str:
        """"" when the deployment is converged: phase Ready, observedGeneration == generation,
        ReplicasUpToDate, every declared replica whole and Ready on the current render (fingerprint
        computed here from the observed world), its Workload admitted, nothing else left, the router
        ready, and its scaler (if any) agreeing."""
        name = md["metadata"]["name"]
        if deleting(md):
            return "deleting"
        status = md.get("status") or {}
        if status.get("phase") != vocab.PHASE_READY:
            return f"phase {status.get('phase')}"
        if status.get("observedGeneration") != md["metadata"].get("generation"):
            return f"observedGeneration {status.get('observedGeneration')} != generation {md['metadata'].get('generation')}"
        if not cond_true(md, vocab.COND_REPLICAS_UP_TO_DATE):
            return "ReplicasUpToDate not True"
        fps = self.fingerprints(md, world)
        if isinstance(fps, str):
            return fps
        pods = obs.pods_of.get(uid(md), [])
        if any(deleting(p) for p in pods):
            return "a Pod is terminating"
        by_role: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for pod in pods:
            by_role[labels(pod).get(vocab.LABEL_COMPONENT, "")].append(pod)
        for role in md["spec"]["roles"]:
            want = int(role.get("replicas", 1)) * int(role.get("size", 1))
            have = by_role.get(role["name"], [])
            if len(have) != want:
                return f"role {role['name']}: {len(have)} Pods, {want} declared"
            if not all(pod_ready(p) for p in have):
                return f"role {role['name']}: not every Pod Ready"
            stale = [p["metadata"]["name"] for p in have
                     if (p["metadata"].get("annotations") or {}).get(vocab.ANNOTATION_FINGERPRINT) != fps[role["name"]]]
            if stale:
                return f"role {role['name']}: {len(stale)} Pod(s) not on the current render {fps[role['name']]}"
        groups = self.group_names(md)
        # Each replica's Workload is its Pods' group; the ordinal's other slot holds nothing once
        # it converged (docs/kueue.md#incarnation-slots).
        in_use = {(labels(p).get(vocab.LABEL_COMPONENT, ""), labels(p).get(vocab.LABEL_POD_ORDINAL, "")):
                  labels(p).get(vocab.LABEL_KUEUE_POD_GROUP_NAME, "") for p in pods}
        for group, (role_name, ordinal) in groups.items():
            wl = obs.workloads.get(group)
            if in_use.get((role_name, str(ordinal))) != group:
                if wl is not None:
                    return f"Workload {group} of an earlier incarnation of {role_name}/{ordinal} left"
                continue
            if wl is None or deleting(wl) or not cond_true(wl, "Admitted") or cond_true(wl, "Evicted"):
                return f"Workload of {role_name}/{ordinal} not admitted"
        for group in self.group_names(md, EXTRA_ORDINALS):
            if group not in groups and group in obs.workloads:
                return f"Workload {group} of an undeclared ordinal left"
        if md["spec"].get("router"):
            router = status.get("router") or {}
            if not router.get("desired") or router.get("ready") != router.get("desired"):
                return f"router {router.get('ready')}/{router.get('desired')} ready"
        if obs.scalers is not None and name in obs.scalers:
            why = self.scaler_disagrees(obs.scalers[name], md)
            if why:
                return why
        return ""

    @staticmethod
    def scaler_disagrees(scaler: dict[str, Any], md: dict[str, Any]) -> str:
        spec, status = scaler["spec"], scaler.get("status") or {}
        if status.get("observedGeneration") != scaler["metadata"].get("generation"):
            return "scaler not observed"
        declared = {r["name"]: int(r.get("replicas", 1)) for r in md["spec"]["roles"]}
        for role in spec.get("roles") or []:
            want = int(role.get("ratio", 1)) * int(spec["replicas"])
            if declared.get(role["name"]) != want:
                return f"scaler: role {role['name']} declares {declared.get(role['name'])}, scaler wants {want}"
        if status.get("replicas") != spec["replicas"]:
            return f"scaler status.replicas {status.get('replicas')} != spec {spec['replicas']}"
        return ""

    def all_converged(self, obs: Observation, present: set[str], absent: set[str]) -> str:
        """"" when every deployment in `present` is converged, every one in `absent` is gone and
        cleaned up, no preemptor is left and every node is Ready; else the first reason."""
        for name in sorted(present):
            if name not in obs.mds:
                return f"{name}: not created yet"
            why = obs.converged.get(name, "not judged")
            if why:
                return f"{name}: {why}"
        for name in sorted(absent):
            if name in obs.mds:
                return f"{name}: still present"
            if name in self.deleted and name not in self.cleaned:
                return f"{name}: children left"
        if any(labels(p).get(PREEMPTOR_LABEL) for p in obs.pods):
            return "a preemptor Pod is left"
        if self._nodes is not None:
            down = [n["metadata"]["name"] for n in self._nodes if not node_ready(n)]
            if down:
                return f"nodes not Ready: {down}"
            missing = sorted(self.expected_nodes - {n["metadata"]["name"] for n in self._nodes})
            if missing:
                return f"nodes missing: {missing}"
        return ""

    # --- invariants ---------------------------------------------------------------------------------

    def api_sluggish(self, start: float, end: float, margin: float = 5.0) -> bool:
        """Whether our own reads found the API server failing or slow within [start, end]."""
        return any(a - margin <= end and start <= b + margin for a, b in list(self.sluggish))

    def instance_ready(self, pods: list[dict[str, Any]], size: int) -> bool:
        live = [p for p in pods if not deleting(p)]
        return len(live) == size and all(pod_ready(p) for p in live)

    def check_turnovers(self, obs: Observation) -> None:
        alive: set[tuple[str, str]] = set()
        for name, md in obs.mds.items():
            if deleting(md):
                continue
            md_uid = uid(md)
            by_ordinal: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
            for pod in obs.pods_of.get(md_uid, []):
                key = pod_key(pod)
                if key is not None:
                    by_ordinal[(key[1], key[2])].append(pod)
            for role in md["spec"]["roles"]:
                r, replicas, size = role["name"], int(role.get("replicas", 1)), int(role.get("size", 1))
                alive.add((md_uid, r))
                lost = self._lost[(md_uid, r)]
                for ordinal in list(lost):
                    if ordinal >= replicas:
                        del lost[ordinal]
                self._was_ready = {k for k in self._was_ready if not (k[0] == md_uid and k[1] == r and k[2] >= replicas)}
                for ordinal in range(replicas):
                    key = (md_uid, r, ordinal)
                    pods = by_ordinal.get((r, ordinal), [])
                    if self.instance_ready(pods, size):
                        self._was_ready.add(key)
                        lost.pop(ordinal, None)
                        continue
                    if ordinal in lost and self.ready_log.ready_after(key, size, lost[ordinal][1]):
                        del lost[ordinal]  # Ready again between two observations, and lost again: judged anew
                        self.stats["Ready windows shorter than a tick, seen by the Pod watch"] += 1
                    if key in self._was_ready and ordinal not in lost:
                        explained = self.ledger.explained(name, r, ordinal, obs.t0) or self.on_unready_node(pods)
                        lost[ordinal] = (explained, obs.t0)
                        self.stats["Ready replicas lost, explained by a departure" if explained
                                   else "Ready replicas lost to a turnover"] += 1
                unexplained = sorted(o for o, (why, _) in lost.items() if not why)
                self.stats["most Ready replicas of a role lost to turnovers at once"] = max(
                    self.stats["most Ready replicas of a role lost to turnovers at once"], len(unexplained))
                if len(unexplained) > 1:
                    self.ledger.violation(
                        "turnover", f"{name}/{r}: {len(unexplained)} Ready replicas lost at once, no departure "
                        f"explains them: ordinals {unexplained} (departures counted apart: "
                        f"{sorted(o for o, (why, _) in lost.items() if why)}); "
                        + "; ".join(f"ordinal {o} lost since {lost[o][1]:.2f}s, its Pods per the watch: "
                                    f"{', '.join(self.ready_log.history((md_uid, r, o), lost[o][1] - 30)) or 'none'}"
                                    for o in unexplained),
                        [f"ModelDeployment/{name}"] + [p["metadata"]["name"] for o in unexplained
                                                       for p in by_ordinal.get((r, o), [])],
                        key=f"{md_uid}/{r}/{unexplained}")
        for key in list(self._lost):
            if key not in alive:
                del self._lost[key]

    def on_unready_node(self, pods: list[dict[str, Any]]) -> bool:
        """A Pod of the replica is on a node that is not Ready or is gone (the node lifecycle
        controller marks its Pods not Ready: a departure, whoever caused it — a fault of the soak's,
        or kwok's heartbeats lagging after an API server restart)."""
        if self._nodes is None:
            return False
        ready = {n["metadata"]["name"] for n in self._nodes if node_ready(n)}
        return any(p["spec"].get("nodeName") and p["spec"]["nodeName"] not in ready for p in pods)

    def check_ordinals(self, obs: Observation) -> None:
        running: dict[tuple[str, str, int, str], list[dict[str, Any]]] = defaultdict(list)
        for pod in obs.pods:
            key = pod_key(pod)
            if key is not None and (pod.get("status") or {}).get("phase") == "Running":
                running[key].append(pod)
        self.stats["ordinals checked for two holders"] += len(running)
        for key, pods in running.items():
            if len(pods) > 1:
                names_ = sorted(p["metadata"]["name"] for p in pods)
                self.ledger.violation("ordinal", f"{len(pods)} Pods of {key[0]}/{key[1]} ordinal {key[2]} member "
                                      f"{key[3]} Running at once: {names_}", names_, key=str(sorted(uid(p) for p in pods)))

    def child_uids(self, obs: Observation, md: dict[str, Any]) -> dict[str, frozenset[str]] | None:
        if obs.children is None:
            return None
        md_uid = uid(md)
        out = {"pods": frozenset(uid(p) for p in obs.pods_of.get(md_uid, []))}
        groups = self.group_names(md, EXTRA_ORDINALS)
        out["workloads"] = frozenset(uid(w) for n, w in obs.workloads.items() if n in groups)
        for kind, items in obs.children.items():
            out[kind] = frozenset(uid(o) for o in items if md_uid in owner_uids(o))
        return out

    def check_untouched(self, obs: Observation) -> None:
        for name in list(self._baseline):
            if name not in obs.mds:
                del self._baseline[name]
        for name, md in obs.mds.items():
            touched = self.ledger.last_touch(name)
            base = self._baseline.get(name)
            busy = self.ledger.in_flight(name)
            if base is not None and (base[0] != uid(md) or touched >= base[1] - 1.0 or busy):
                del self._baseline[name]
                base = None
            if base is not None:
                now = self.child_uids(obs, md)
                if now is None:
                    continue
                self.stats["untouched deployments compared"] += 1
                down = [c for c in ("operator", "metacontroller", "kueue", "kube-apiserver")
                        if self.ledger.was_down(c, obs.t0, obs.t1, margin=15.0)]
                if down:
                    self.stats["… of them within 15 s of a restart or freeze"] += 1
                for kind, before in base[2].items():
                    after = now.get(kind, frozenset())
                    if before != after:
                        self.ledger.violation(
                            "untouched", f"{name}: nothing touched it since {base[1]:.1f}s, yet its {kind} changed: "
                            f"{len(before - after)} gone, {len(after - before)} new",
                            [f"ModelDeployment/{name}", *sorted(before ^ after)], key=f"{name}/{kind}/{sorted(before ^ after)}")
                        del self._baseline[name]
                        break
            elif not obs.converged.get(name, "x") and touched < obs.t0 - 1.0 and not busy:
                snapshot = self.child_uids(obs, md)
                if snapshot is not None:
                    self._baseline[name] = (uid(md), obs.t0, snapshot)

    def watch_deletion(self, name: str, old_uid: str) -> None:
        """The schedule deleted `name`: from the moment it is gone, its children get the grace."""
        self.deleted[name] = (old_uid, None)
        self.cleaned.pop(name, None)

    def leftovers(self, obs: Observation, name: str, old_uid: str) -> list[str]:
        found = [f"Pod/{p['metadata']['name']}" for p in obs.pods
                 if labels(p).get(vocab.LABEL_INSTANCE) == name or old_uid in owner_uids(p)]
        shape = self.shapes.get(name)
        if shape is not None:
            fake = {"metadata": {"name": name}, "spec": {"roles": [
                {"name": r, "replicas": 0} for r in shape.roles()]}}
            for group in self.group_names(fake, EXTRA_ORDINALS + 4):
                if group in obs.workloads:
                    found.append(f"Workload/{group}")
        for kind, items in (self._children or {}).items():
            for obj in items:
                if labels(obj).get(vocab.LABEL_INSTANCE) == name or old_uid in owner_uids(obj):
                    found.append(f"{kind}/{obj['metadata']['name']}")
        return found

    def on_missing_nodes(self, obs: Observation, left: list[str]) -> list[str]:
        """The leftover Pods bound to a node the last Node list does not have (the pod garbage
        collector's to remove: bench/soak.md#invariants)."""
        if self._nodes is None:
            return []
        nodes = {n["metadata"]["name"] for n in self._nodes}
        bound = {f"Pod/{p['metadata']['name']}": p["spec"].get("nodeName") for p in obs.pods}
        return [o for o in left if bound.get(o) and bound[o] not in nodes]

    def check_deletions(self, obs: Observation) -> None:
        for name, (old_uid, gone_at) in list(self.deleted.items()):
            md = obs.mds.get(name)
            if md is not None and uid(md) == old_uid:
                continue  # still finalizing
            if md is not None:  # re-created: the old one's check is over
                del self.deleted[name]
                continue
            if gone_at is None:
                self.deleted[name] = (old_uid, obs.t0)
                gone_at = obs.t0
            if name in self.cleaned:
                continue
            left = self.leftovers(obs, name, old_uid)
            orphaned = set(self.on_missing_nodes(obs, left))
            if left and set(left) <= orphaned:
                grace = ORPHANED_POD_GRACE_SECONDS
            elif any(o.startswith("Pod/") for o in left):
                grace = LEFTOVER_POD_GRACE_SECONDS
            else:
                grace = LEFTOVER_GRACE_SECONDS
            if not left and obs.children is not None:
                self.cleaned[name] = round(obs.t1 - gone_at, 2)
            elif left and obs.t0 - gone_at > grace:
                self.ledger.violation("leftover", f"{name} deleted {obs.t0 - gone_at:.0f}s ago, yet {len(left)} "
                                      f"object(s) of it are left: {left[:8]}", left, key=f"{old_uid}")
                self.cleaned[name] = round(obs.t1 - gone_at, 2)

    def check_rss(self, obs: Observation) -> None:
        """Every replica's RSS; the figure kept is the largest."""
        rss: dict[int, float] = {}
        for pid, _ in self.operators():
            if pid is None:
                continue
            try:
                text = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            for line in text.splitlines():
                if line.startswith("VmRSS:"):
                    rss[pid] = int(line.split()[1]) / 1024
        if not rss:
            return
        self.rss_mib = max(rss.values())
        self.rss_peak_mib = max(self.rss_peak_mib, self.rss_mib)
        if set(rss) != self._rss_pids or self.tick % 20 == 0:
            self.rss_samples.append((round(obs.t1, 1), round(self.rss_mib, 1)))
            self._rss_pids = set(rss)
        for pid, mib in rss.items():
            if mib > RSS_LIMIT_MIB:
                self.ledger.violation("rss", f"operator RSS {mib:.0f} MiB over the {RSS_LIMIT_MIB:.0f} MiB bound",
                                      [f"pid {pid}"], key=f"rss/{pid}")

    def event_counts(self, events: list[dict[str, Any]]) -> dict[tuple[str, str, str], int]:
        out: dict[tuple[str, str, str], int] = defaultdict(int)
        for ev in events:
            inv = ev.get("involvedObject") or {}
            count = int(ev.get("count") or (ev.get("series") or {}).get("count") or 1)
            out[(ev.get("reason", ""), inv.get("kind", ""), inv.get("name", ""))] += count
        return out

    def check_events(self, obs: Observation) -> None:
        assert obs.events is not None
        self.event_totals = dict(self.event_counts(obs.events))
        self.event_last_occurred = event_last_occurred(obs.events)
        self.events_at = obs.t0
        for (reason, kind, name), count in self.event_totals.items():
            if count > EVENTS_PER_OBJECT_LIMIT:
                self.ledger.violation("events", f"{count} {reason} Events on {kind}/{name} (bound "
                                      f"{EVENTS_PER_OBJECT_LIMIT})", [f"{kind}/{name}"], key=f"{reason}/{kind}/{name}")

    def md_event_counts(self) -> dict[tuple[str, str, str], int]:
        return {k: v for k, v in self.event_totals.items() if k[1] == vocab.KIND_MODEL_DEPLOYMENT}

    def events_read_after(self, t: float, timeout: float = 20.0) -> dict[tuple[str, str, str], int] | None:
        """Our deployments' Event counts from the first Event list read after `t` (soak seconds)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.events_at >= t:
                return self.md_event_counts()
            time.sleep(0.2)
        return None

    PROBE_OBJECT = {"apiVersion": "worker.gpustack.ai/v1", "kind": "ModelDeployment",
                    "metadata": {"name": "soak-probe", "namespace": NAMESPACE},
                    "spec": {"model": {"name": "Qwen/Qwen2.5-0.5B-Instruct"},
                             "engine": {"name": "vLLM", "version": "0.33.0"},
                             "roles": [{"name": "server", "replicas": 1,
                                        "instanceType": "gpustack-nvidia-a10g-linux-amd64"}]}}

    def probe_webhooks(self) -> None:
        for path in ("/webhooks/validate", "/webhooks/mutate"):
            review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                      "request": {"uid": f"soak-{time.monotonic_ns()}", "operation": "CREATE",
                                  "kind": {"group": "worker.gpustack.ai", "version": "v1", "kind": "ModelDeployment"},
                                  "resource": {"group": "worker.gpustack.ai", "version": "v1",
                                               "resource": "modeldeployments"},
                                  "namespace": NAMESPACE, "name": "soak-probe",
                                  "object": self.PROBE_OBJECT, "userInfo": {"username": "soak"}}}
            sent = self.ledger.now()
            try:
                response = self.webhook.post(path, json=review)
            except httpx.HTTPError as exc:
                self.probes[f"{path} unreachable"] += 1
                if not self.ledger.was_down("operator", sent, self.ledger.now()):
                    self.probes[f"{path} unreachable while up"] += 1
                    self.ledger.violation("webhook-5xx", f"{path} unreachable while the operator was up: "
                                          f"{type(exc).__name__}: {exc}", [path], key=f"{path}/unreachable/{int(sent)}")
                continue
            got = self.ledger.now()
            code = response.status_code
            if code == 200:
                try:
                    code = int(((response.json().get("response") or {}).get("status") or {}).get("code") or 200)
                except ValueError:
                    code = 599
            self.probes[f"{path} {code}"] += 1
            if code == 503 and self.api_sluggish(sent, got):
                self.probes[f"{path} 503 while the API server was slow"] += 1
                continue
            if code >= 500 and not self.ledger.was_down("operator", sent, got) \
                    and not self.ledger.was_down("kube-apiserver", sent, got):
                self.ledger.violation("webhook-5xx", f"{path} answered {code} while the operator and the API server "
                                      f"were up: {response.text[:300]}", [path], key=f"{path}/{int(sent)}")

    def check_hook_metrics(self) -> None:
        for pid, url in self.operators():
            self._check_hook_metrics(pid, url)

    def _check_hook_metrics(self, pid: int | None, url: str) -> None:
        try:
            text = self.hooks.get(f"{url}/metrics").text
        except httpx.HTTPError:
            return
        if pid != self._hooks_pids.get(url):  # a restarted replica counts from zero
            self.hook_errors[url], self._hooks_pids[url] = {}, pid
        errors: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("modeldeployment_hook_errors_total{"):
                lab, value = line.rsplit(" ", 1)
                errors[lab[len("modeldeployment_hook_errors_total"):]] = float(value)
        for key, value in errors.items():
            before = self.hook_errors[url].get(key, 0.0)
            if 'kind="internal"' in key and value > before:
                self.ledger.violation("webhook-5xx", f"the hooks answered {value - before:.0f} internal error(s) "
                                      f"(500) {key}", [f"operator /metrics at {url}"], key=f"{url}{key}/{value}")
        self.hook_errors[url] = errors

"""Chaos soak on the real stack (bench/soak.md): N deployments of mixed shapes on the loopback control
plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, Kueue, the real
Metacontroller and the operator as a process), a seeded random schedule of user operations,
departures and platform faults, and the invariants of bench/soak_watch.py judged every half second.

    .venv/bin/python -m bench.soak --seed 7 --duration 20m --size 8

The seed and the command that reruns it are printed first. The schedule is a series of episodes:

1. chaos: user operations at a steady rate, departures among them, and (often) a platform fault
   running in the background while the operations go on (an edit lands while the operator is
   down, a Pod is deleted while the API server restarts…);
2. quiet: nothing new until every deployment converges (bounded: `--bound`);
3. the episode's headline fault, alone (the kinds taken in turn, so each gets its figures);
4. quiet again: the time from the end of the headline fault to every deployment converged is that
   fault kind's convergence figure; then a short dwell checks nothing moves while converged.

The choices (what, on whom, how long) come from the seed; the timing of a real cluster does not,
so a rerun replays the same decisions against the timings it meets.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Callable

import httpx
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import cluster as e2e_cluster  # noqa: E402  (tests/e2e/cluster.py)
import md_operator  # noqa: E402  (tests/e2e/md_operator.py)

from app import timestamps, vocab  # noqa: E402
from app.control import stalls  # noqa: E402
from app.control.observed import placement_hosts  # noqa: E402
from app.settings import Settings  # noqa: E402
from bench import soak_world as sw  # noqa: E402
from bench.soak_ledger import Action, Ledger  # noqa: E402
from bench.soak_watch import (EXTRA_ORDINALS, Observation, Watcher, cond_true, deleting, owner_uids,  # noqa: E402
                              pod_key, uid)

NS = sw.NAMESPACE
MD_PATH = f"/apis/worker.gpustack.ai/v1/namespaces/{NS}/modeldeployments"
SCALER_PATH = f"/apis/worker.gpustack.ai/v1/namespaces/{NS}/modeldeploymentscalers"
WL_PATH = f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NS}/workloads"
POD_PATH = f"/api/v1/namespaces/{NS}/pods"
JSON_PATCH = {"Content-Type": "application/json-patch+json"}
MERGE_PATCH = {"Content-Type": "application/merge-patch+json"}

#: Every deployment converges within this many seconds after the last fault (bench/soak.md).
DEFAULT_BOUND_SECONDS = 240.0
CHAOS_SECONDS = (25.0, 32.0)
CHAOS_OVERRUN_SECONDS = 90.0  # operations go on at most this long for a chaos fault still under way
OP_INTERVAL = (0.03, 0.25)
FREEZE_SECONDS = (12.0, 16.0)  # longer than Metacontroller's 10 s hook timeout
NODE_DOWN_SECONDS = (8.0, 20.0)
NODE_GONE_TIMEOUT_SECONDS = 150.0  # a deleted node's Pods are garbage-collected within this
PREEMPT_HOLD_SECONDS = (5.0, 12.0)
DWELL_SECONDS = 6.0

USER_OPS = ("image", "env", "args", "scale-up", "scale-down", "delete", "recreate", "refused", "edit-in-flight")
SCALER_OPS = ("scale-scaler",)
DEPARTURES = ("pod-delete", "workload-delete", "preemption", "node-notready", "node-delete")
PLATFORM = ("operator-kill", "operator-freeze", "metacontroller-restart", "kueue-restart", "apiserver-restart",
            "pool-endpoint", "runtime-version")
FAULTS = DEPARTURES + PLATFORM
# User operations drawn in chaos, by weight.
OP_WEIGHTS = {"image": 4, "env": 3, "args": 3, "scale-up": 3, "scale-down": 3, "delete": 1, "recreate": 2,
              "refused": 3, "edit-in-flight": 2, "scale-scaler": 3}
# Departures and background platform faults drawn in chaos, per operation.
DEPARTURE_CHANCE = 0.12
BACKGROUND_PLATFORM_CHANCE = 0.7


#: Kueue's topology-aware failed-node replacement is off: when a node goes NotReady or is deleted it
#: recomputes the topology assignment of the Workloads on it, but a plain Pod cannot move (its node
#: selector is immutable) and the operator never replaces a Pod on a NotReady node, so the Workload
#: ends up claiming a node its Pod does not run on and the next replica placed by that accounting
#: never fits (bench/soak.md#bugs-found-on-the-way). Kueue 0.19 skips the recomputation for
#: single-Pod Workloads only, not for pod groups such as ours.
KUEUE_FEATURE_GATES = {"TASFailedNodeReplacement": False, "TASFailedNodeReplacementFailFast": False,
                       "TASReplaceNodeOnPodTermination": False}


#: Kubernetes' own processes that a real control plane runs as kubelet-supervised static Pods, and
#: that exit by design on some faults (kube-scheduler on a corrupted cache after an API server
#: restart): their exit is reported and they are started again, as the kubelet would.
SUPERVISED_CONTROL_PLANE = ("kube-scheduler", "kube-controller-manager")


def last_error_line(path: Path | None) -> str:
    """The last error line (klog `E`/`F`) of a component's log, for the report."""
    if path is None or not path.is_file():
        return ""
    errors = [line for line in path.read_text(errors="replace").splitlines() if line[:1] in ("E", "F")]
    return errors[-1][:300] if errors else ""


def log(line: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {line}", flush=True)


def parse_duration(text: str) -> float:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"--duration {text!r}: give seconds or a number with s, m or h (e.g. 20m)")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return round(ordered[low] + (ordered[high] - ordered[low]) * (rank - low), 2)


def scaler_kind_installed() -> bool:
    """The ModelDeploymentScaler is in the tree: its CRD and a CompositeController for it."""
    crd = ROOT / "manifests" / "crds" / f"{sw.SCALER_CRD}.yaml"
    controllers = [p for p in (ROOT / "manifests" / "metacontroller").glob("*.yaml")
                   if "modeldeploymentscalers" in p.read_text()]
    return crd.is_file() and bool(controllers)


class Keeper:
    """Starts processes from one long-lived thread: the control plane's children die with the
    thread that started them (PR_SET_PDEATHSIG), so a component restarted from a short-lived fault
    thread would be killed when that thread ends."""

    def __init__(self) -> None:
        self.jobs: queue.Queue[tuple[Callable[[], None], threading.Event, list[BaseException]]] = queue.Queue()
        threading.Thread(target=self._run, name="soak-keeper", daemon=True).start()

    def _run(self) -> None:
        while True:
            job, done, errors = self.jobs.get()
            try:
                job()
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller
                errors.append(exc)
            done.set()

    def call(self, job: Callable[[], None]) -> None:
        done, errors = threading.Event(), []  # type: ignore[var-annotated]
        self.jobs.put((job, done, errors))
        done.wait()
        if errors:
            raise errors[0]


class Soak:
    def __init__(self, cp: e2e_cluster.ControlPlane, op: md_operator.Operator, shapes: list[sw.Shape],
                 rng: random.Random, *, bound: float, scalers: bool) -> None:
        self.cp = cp
        self.op = op
        self.shapes = {s.name: s for s in shapes}
        self.rng = rng
        self.bound = bound
        self.scalers = scalers
        self.ledger = Ledger()
        self.keeper = Keeper()
        self.api = cp.http_client(timeout=20)
        self.bg_api = cp.http_client(timeout=20)
        self.present: set[str] = set()
        self.absent: set[str] = set()
        self.counter = 0
        self.background: list[threading.Thread] = []
        self.platform_busy = threading.Lock()
        self.preempting = threading.Lock()
        self.node_manifests = {m["metadata"]["name"]: m for pool in cp.node_pools for m in pool.manifests()}
        self.nodes_out: set[str] = set()
        self.convergence: dict[str, list[float]] = defaultdict(list)
        self.chaos_convergence: list[float] = []
        self.unconverged: list[dict[str, Any]] = []
        # The operator's reported Kueue stalls and the restart its message names (follow_the_way_out).
        self.remedies: list[dict[str, Any]] = []
        self.apiserver_totals: dict[str, float] = defaultdict(float)
        self.apiserver_by_resource: dict[str, float] = defaultdict(float)
        self.webhook_calls: dict[str, float] = defaultdict(float)
        self._apiserver_last: dict[str, dict[str, float]] = {}
        self._scraped_at = 0.0
        self.apiserver_lock = threading.Lock()
        self.events_dwells = 0
        self.late_events = 0  # Event growth in dwells that occurred before them (delivered late)
        # Kubernetes' own control-plane processes that exited on their own and were started again
        # (as the kubelet restarts a static Pod): reported, not violations (bench/soak.md#invariants).
        self.control_plane_restarts: list[dict[str, Any]] = []
        self.episodes = 0
        settings = Settings()
        self.watcher = Watcher(cp.http_client(timeout=10), self.ledger, shapes,
                               render_options=settings.render_options(),
                               webhook_url=f"https://127.0.0.1:{op.webhook_port}", webhook_verify=str(cp.ca_cert_path),
                               operators=self.operators, scalers=scalers,
                               nodes=set(self.node_manifests), pod_watch_client=cp.http_client())

    def operators(self) -> list[tuple[int | None, str]]:
        """Each operator replica: its pid while it runs, and its own hooks URL (not the front's)."""
        out = []
        for replica in self.op.replicas:
            comp = self.cp.components.get(replica.name)
            out.append((comp.pid if comp is not None and comp.alive() else None,
                        f"http://127.0.0.1:{replica.hooks_port}"))
        return out

    # --- small API helpers -------------------------------------------------------------------------

    def request(self, method: str, path: str, client: httpx.Client | None = None, **kw: Any) -> httpx.Response:
        """One API call; while the API server is away (a restart) it is tried again, up to 2 minutes."""
        client = client or self.api
        deadline = time.monotonic() + 120
        while True:
            try:
                return client.request(method, path, **kw)
            except httpx.TransportError as exc:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
                time.sleep(1.0)

    def md(self, name: str) -> dict[str, Any] | None:
        r = self.request("GET", f"{MD_PATH}/{name}")
        return r.json() if r.status_code == 200 else None

    def obs(self) -> Observation:
        while self.watcher.latest is None:
            time.sleep(0.2)
        return self.watcher.latest

    def wait_fresh(self, after: float) -> Observation:
        """The first observation whose reads began after `after` (soak seconds)."""
        while True:
            o = self.obs()
            if o.t0 >= after:
                return o
            time.sleep(0.1)

    def apiserver_up(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if self.api.get("/readyz", timeout=3).status_code == 200:
                    return
            time.sleep(0.5)
        raise RuntimeError("the API server did not come back")

    # --- setup ----------------------------------------------------------------------------------------

    def setup(self) -> None:
        cards = sw.tight_cards(list(self.shapes.values()))
        it = sw.tight_instance_type(cards)
        status = it.pop("status")
        self.cp.apply(it)
        self.request("PATCH", f"/apis/worker.gpustack.ai/v1/instancetypes/{sw.TIGHT}/status",
                     headers=MERGE_PATCH, content=json.dumps({"status": status}))
        self.cp.apply(sw.tight_kueue(cards))
        self.cp.apply(sw.ready_again_stage())
        for shape in self.shapes.values():
            self.create(shape.name)
        if self.scalers:
            for shape in self.shapes.values():
                if shape.scaled:
                    r = self.request("POST", SCALER_PATH, json=sw.scaler(shape))
                    if r.status_code >= 300:
                        raise RuntimeError(f"creating the scaler of {shape.name}: {r.status_code} {r.text[:400]}")
        self.watcher.start()
        self.scrape_apiserver()
        log(f"waiting for {len(self.shapes)} deployments to converge (bound {self.bound:.0f}s)")
        t, why = self.wait_converged(self.ledger.now(), self.bound * 2)
        if why:
            raise RuntimeError(f"the deployments never converged before the soak started: {why}")
        log(f"converged after {t:.1f}s; the schedule starts")

    def create(self, name: str) -> httpx.Response:
        r = self.request("POST", MD_PATH, json=sw.fresh(self.shapes[name]))
        if r.status_code < 300:
            self.present.add(name)
            self.absent.discard(name)
        return r

    # --- the schedule ---------------------------------------------------------------------------------

    def run(self, duration: float, first: tuple[str, ...] = ()) -> None:
        """`first`: headline faults the schedule opens with, in order (then the kinds in turn)."""
        self.setup()
        start = self.ledger.now()
        headlines: list[str] = list(reversed(first))
        while self.ledger.now() - start < duration:
            self.episodes += 1
            self.ledger.episode = self.episodes
            if not headlines:
                headlines = list(FAULTS)
                self.rng.shuffle(headlines)
            headline = headlines.pop()
            log(f"episode {self.episodes}: chaos, then {headline} "
                f"({self.ledger.now() - start:.0f}/{duration:.0f}s, {self.count('op')} ops, "
                f"{self.count('departure') + self.count('platform')} faults, {len(self.ledger.violations)} violations)")
            self.chaos()
            began = self.ledger.now()
            t, why = self.wait_converged(self.last_action_end(), self.bound)
            self.record_convergence("chaos", t, why, began)
            action = self.fault(headline, background=False)
            end = action.end if action.end is not None else self.ledger.now()
            t, why = self.wait_converged(end, self.bound)
            self.record_convergence(headline, t, why, end)
            if not why:
                self.dwell()
        # The last quiet: everything must converge once more, and nothing may be left of the deletes.
        t, why = self.wait_converged(self.last_action_end(), self.bound)
        self.record_convergence("final", t, why, self.ledger.now())
        self.scrape_apiserver()

    def count(self, category: str) -> int:
        return sum(1 for a in self.ledger.actions if a.category == category)

    def last_action_end(self) -> float:
        for t in self.background:
            t.join()
        self.background = [t for t in self.background if t.is_alive()]
        ends = [a.end for a in self.ledger.actions if a.end is not None]
        return max(ends) if ends else self.ledger.now()

    def chaos(self) -> None:
        length = self.rng.uniform(*CHAOS_SECONDS)
        end = self.ledger.now() + length
        if self.rng.random() < BACKGROUND_PLATFORM_CHANCE:
            self.spawn(self.rng.choice(PLATFORM), delay=self.rng.uniform(0, length * 0.6))
        # Operations go on past the phase's length while a fault started in it is still under way
        # (a node waiting for its Pods to be collected, a preemptor holding its quota).
        while self.ledger.now() < end or (any(t.is_alive() for t in self.background)
                                          and self.ledger.now() < end + CHAOS_OVERRUN_SECONDS):
            if self.rng.random() < DEPARTURE_CHANCE and self.ledger.now() < end:
                kind = self.rng.choice(DEPARTURES)
                if kind in ("preemption", "node-notready", "node-delete"):
                    self.spawn(kind)
                else:
                    self.fault(kind, background=True)
            else:
                self.user_op(self.pick_op())
            time.sleep(self.rng.uniform(*OP_INTERVAL))

    def spawn(self, kind: str, delay: float = 0.0) -> None:
        def body() -> None:
            time.sleep(delay)
            try:
                self.fault(kind, background=True)
            except Exception as exc:  # noqa: BLE001 - a fault that could not be carried out is logged
                log(f"{kind} not carried out: {type(exc).__name__}: {exc}")

        thread = threading.Thread(target=body, name=f"fault-{kind}", daemon=True)
        thread.start()
        self.background.append(thread)

    def wait_converged(self, since: float, bound: float) -> tuple[float, str]:
        """Seconds from `since` until one observation (read after `since`) shows everything
        converged; or (bound, why) when the bound passes first. A deployment whose status names a
        replica Kueue admitted and never placed gets the way out that status names, once per wait,
        as its platform team would (a Kueue restart), and the bound starts again from there."""
        deadline = since + bound
        why = "no observation"
        remedied = False
        while self.ledger.now() < deadline:
            self.check_components()
            o = self.wait_fresh(since)
            why = self.watcher.all_converged(o, self.present, self.absent)
            if not why:
                return max(0.0, o.t1 - since), ""
            reported = {name: (md.get("status") or {}).get("phaseMessage", "") for name, md in o.mds.items()
                        if stalls.WAY_OUT in ((md.get("status") or {}).get("phaseMessage") or "")}
            if reported and not remedied:
                self.follow_the_way_out(reported)
                remedied = True
                deadline = self.ledger.now() + bound
            time.sleep(0.2)
        return bound, why

    def follow_the_way_out(self, reported: dict[str, str]) -> None:
        """The operator named a Kueue stall it cannot release (docs/kueue.md#an-admitted-replica-kueue-never-places):
        restart Kueue as its message says, and record it apart from the faults."""
        log(f"the operator reports a Kueue ungate stall ({', '.join(sorted(reported))}); restarting Kueue as it says")
        began = self.ledger.now()
        self.restart("kueue-restart", "kueue", self.probe_ready("kueue_probe"), category="remedy")
        self.remedies.append({"time": round(began, 1), "episode": self.episodes, "deployments": sorted(reported),
                              "message": next(iter(reported.values()))})

    def record_convergence(self, kind: str, t: float, why: str, began: float) -> None:
        if why:
            self.ledger.violation("convergence", f"not converged {self.bound:.0f}s after the last fault "
                                  f"(episode {self.episodes}, after {kind}): {why}", [why.split(':')[0]],
                                  key=f"{self.episodes}/{kind}")
            self.unconverged.append({"episode": self.episodes, "after": kind, "why": why})
            return
        if kind == "chaos":
            self.chaos_convergence.append(round(t, 2))
        else:
            self.convergence[kind].append(round(t, 2))
        log(f"converged {t:.1f}s after {kind}")

    def dwell(self) -> None:
        """Converged and untouched: our deployments' Events must not grow. Growth whose latest
        occurrence is from before the dwell is the late delivery of an earlier one (the SyncErrors
        Metacontroller records while the API server is down reach it once it is back), not growth;
        the API's stamps are whole seconds, hence the second."""
        began = time.time()
        first = self.watcher.events_read_after(self.ledger.now())
        time.sleep(DWELL_SECONDS)
        second = self.watcher.events_read_after(self.ledger.now())
        if first is None or second is None:
            return
        self.events_dwells += 1
        grown = {k: second.get(k, 0) - v for k, v in first.items() if second.get(k, 0) > v}
        grown.update({k: v for k, v in second.items() if k not in first})
        late = {k for k in grown if self.watcher.event_last_occurred.get(k, began) < began - 1.0}
        self.late_events += sum(grown[k] for k in late)
        grown = {k: v for k, v in grown.items() if k not in late}
        if grown:
            self.ledger.violation("events", f"Events of converged, untouched deployments grew during a "
                                  f"{DWELL_SECONDS:.0f}s dwell: {sorted(grown.items())[:6]}",
                                  [f"{k[1]}/{k[2]}" for k in grown], key=f"dwell/{self.episodes}")

    def check_components(self) -> None:
        for name, comp in self.cp.components.items():
            if self.ledger.was_down(name, self.ledger.now(), self.ledger.now(), margin=5.0):
                continue  # being restarted by the schedule
            if comp.proc is not None and not comp.stopped and comp.proc.poll() is not None:
                if name in SUPERVISED_CONTROL_PLANE:
                    self.control_plane_restarts.append({"time": round(self.ledger.now(), 1), "component": name,
                                                        "code": comp.proc.returncode,
                                                        "last_error": last_error_line(comp.log)})
                    log(f"{name} exited on its own with code {comp.proc.returncode}; started again")
                else:
                    self.ledger.violation("component", f"{name} exited on its own with code {comp.proc.returncode}",
                                          [name], key=f"{name}/{comp.pid}")
                self.keeper.call(comp.start)

    # --- choosing ---------------------------------------------------------------------------------------

    def pick_op(self) -> str:
        kinds = [k for k in OP_WEIGHTS if k != "scale-scaler" or self.scalers]
        return self.rng.choices(kinds, weights=[OP_WEIGHTS[k] for k in kinds])[0]

    def pick_present(self, predicate: Callable[[sw.Shape], bool] = lambda s: True) -> sw.Shape | None:
        names = sorted(n for n in self.present if predicate(self.shapes[n]))
        return self.shapes[self.rng.choice(names)] if names else None

    def next_value(self) -> int:
        self.counter += 1
        return self.counter

    # --- user operations --------------------------------------------------------------------------------

    def user_op(self, kind: str) -> Action | None:
        handler = getattr(self, "op_" + kind.replace("-", "_"))
        try:
            return handler()
        except RuntimeError as exc:  # the API server away for longer than request() waits
            log(f"{kind} not carried out: {exc}")
            return None

    def patch_md(self, action: Action, name: str, patch: list[dict[str, Any]],
                 before: dict[str, Any] | None = None) -> None:
        """One JSON patch; `before` (the object as read just now) is what a refused write is
        compared with (read here when not given)."""
        before = before if before is not None else self.md(name)
        try:
            r = self.request("PATCH", f"{MD_PATH}/{name}", headers=JSON_PATCH, content=json.dumps(patch))
        except RuntimeError as exc:
            self.ledger.finish(action, "failed", str(exc)[:200])
            return
        if r.status_code < 300:
            self.ledger.finish(action, "ok", json.dumps(patch)[:160])
            return
        # A refused write (the webhooks down, fail closed): nothing may have changed.
        self.ledger.finish(action, "refused", f"{r.status_code} {self.message(r)[:200]}")
        self.check_unchanged(name, before, f"{action.kind} refused with {r.status_code}")

    @staticmethod
    def message(r: httpx.Response) -> str:
        try:
            return str(r.json().get("message", r.text))
        except ValueError:
            return r.text

    def check_unchanged(self, name: str, before: dict[str, Any] | None, what: str) -> None:
        after = self.md(name)
        if before is None or after is None:
            return
        shape = self.shapes[name]

        def comparable(md: dict[str, Any]) -> Any:
            spec = json.loads(json.dumps(md["spec"]))
            if shape.scaled and self.scalers:  # the scaler owns the roles' replicas
                for role in spec["roles"]:
                    role.pop("replicas", None)
            return spec

        if comparable(before) != comparable(after):
            self.ledger.violation("refused-changed", f"{name}: {what}, yet its spec changed",
                                  [f"ModelDeployment/{name}"], key=f"{name}/{after['metadata'].get('resourceVersion')}")

    def role_index(self, shape: sw.Shape) -> int:
        return self.rng.randrange(len(shape.roles()))

    def op_image(self, kind: str = "image", shape: sw.Shape | None = None) -> Action | None:
        shape = shape or self.pick_present()
        if shape is None:
            return None
        md = self.md(shape.name)
        if md is None:
            return None
        i = self.role_index(shape)
        role = md["spec"]["roles"][i]
        action = self.ledger.begin("op", kind, f"{shape.name}/{role['name']}", touch=[shape.name])
        if "image" in role and self.rng.random() < 0.3:
            patch = [{"op": "remove", "path": f"/spec/roles/{i}/image"}]  # back to the synthesized image
        else:
            engine = "vllm" if shape.engine == "vLLM" else "sglang"
            patch = [{"op": "add", "path": f"/spec/roles/{i}/image", "value": f"registry.local/{engine}:soak-{self.next_value()}"}]
        self.patch_md(action, shape.name, patch, before=md)
        return action

    def op_edit_in_flight(self) -> Action | None:
        o = self.obs()
        rolling = [n for n, md in o.mds.items() if n in self.present and not deleting(md) and any(
            c.get("type") == vocab.COND_REPLICAS_UP_TO_DATE and c.get("reason") == vocab.REASON_ROLLOUT_IN_PROGRESS
            for c in (md.get("status") or {}).get("conditions") or [])]
        if not rolling:
            return self.op_image()
        return self.op_image("edit-in-flight", self.shapes[self.rng.choice(sorted(rolling))])

    def op_env(self) -> Action | None:
        shape = self.pick_present()
        if shape is None:
            return None
        i = self.role_index(shape)
        action = self.ledger.begin("op", "env", f"{shape.name}/{shape.roles()[i]}", touch=[shape.name])
        env = [{"name": "SOAK_EDIT", "value": str(self.next_value())}]
        if self.rng.random() < 0.3:
            env.append({"name": "SOAK_EXTRA", "value": "x"})
        self.patch_md(action, shape.name, [{"op": "add", "path": f"/spec/roles/{i}/env", "value": env}])
        return action

    def op_args(self) -> Action | None:
        shape = self.pick_present()
        if shape is None:
            return None
        i = self.role_index(shape)
        base = list(shape.manifest["spec"]["roles"][i].get("extraArgs") or [])
        flag = "--max-num-seqs" if shape.engine == "vLLM" else "--max-running-requests"
        args = base + [flag, str(self.rng.choice((16, 32, 64, 128, 256)))] if self.rng.random() < 0.8 else base
        action = self.ledger.begin("op", "args", f"{shape.name}/{shape.roles()[i]}", touch=[shape.name])
        self.patch_md(action, shape.name, [{"op": "add", "path": f"/spec/roles/{i}/extraArgs", "value": args}])
        return action

    def limits(self, shape: sw.Shape, i: int) -> tuple[int, int]:
        initial = int(shape.manifest["spec"]["roles"][i]["replicas"])
        return 1, initial if shape.tight else shape.max_replicas

    def op_scale(self, step: int) -> Action | None:
        if self.scalers and self.rng.random() < 0.5:
            scaled = self.pick_present(lambda s: s.scaled)
            if scaled is not None:
                return self.op_scale_scaler(step)
        shape = self.pick_present(lambda s: not (s.scaled and self.scalers))
        if shape is None:
            return None
        md = self.md(shape.name)
        if md is None:
            return None
        i = self.role_index(shape)
        low, high = self.limits(shape, i)
        current = int(md["spec"]["roles"][i].get("replicas", 1))
        target = current + step
        kind = "scale-up" if step > 0 else "scale-down"
        if not low <= target <= high:
            target = current - step  # at the edge: go the other way
            kind = "scale-up" if target > current else "scale-down"
            if not low <= target <= high:
                return None
        action = self.ledger.begin("op", kind, f"{shape.name}/{shape.roles()[i]} {current}->{target}", touch=[shape.name])
        for ordinal in range(target, current):  # shed by the user's word, not lost to a turnover
            self.ledger.explain(action, shape.name, shape.roles()[i], ordinal)
        self.patch_md(action, shape.name, [{"op": "test", "path": f"/spec/roles/{i}/replicas", "value": current},
                                           {"op": "replace", "path": f"/spec/roles/{i}/replicas", "value": target}],
                      before=md)
        return action

    def op_scale_up(self) -> Action | None:
        return self.op_scale(+1)

    def op_scale_down(self) -> Action | None:
        return self.op_scale(-1)

    def op_scale_scaler(self, step: int | None = None) -> Action | None:
        """`kubectl scale mds/<name> --replicas=N`: the scaler sets every governed role's replicas."""
        shape = self.pick_present(lambda s: s.scaled)
        if shape is None or not self.scalers:
            return None
        r = self.request("GET", f"{SCALER_PATH}/{shape.name}")
        if r.status_code != 200:
            return None
        current = int(r.json()["spec"]["replicas"])
        step = step if step is not None else self.rng.choice((-1, 1))
        target = current + step
        if not 1 <= target <= shape.max_replicas:
            target = current - step
        action = self.ledger.begin("op", "scale-scaler", f"mds/{shape.name} {current}->{target}", touch=[shape.name])
        for role in shape.roles():  # ratio 1 on every role (bench/soak_world.py)
            for ordinal in range(target, current):
                self.ledger.explain(action, shape.name, role, ordinal)
        proc = self.cp.kubectl("scale", f"mds/{shape.name}", "-n", NS, f"--replicas={target}", check=False, timeout=30)
        if proc.returncode == 0:
            self.ledger.finish(action, "ok")
        else:
            self.ledger.finish(action, "refused", proc.stderr.strip()[:200])
        return action

    def op_delete(self) -> Action | None:
        if len(self.absent) >= 2:
            return self.op_recreate()
        tight = [n for n in self.present if self.shapes[n].tight]
        # The last deployment of the small pool stays: preemption needs a victim there.
        shape = self.pick_present(lambda s: not (s.tight and len(tight) <= 1))
        if shape is None:
            return None
        md = self.md(shape.name)
        if md is None:
            return None
        action = self.ledger.begin("op", "delete", shape.name, touch=[shape.name])
        r = self.request("DELETE", f"{MD_PATH}/{shape.name}")
        if r.status_code < 300:
            self.present.discard(shape.name)
            self.absent.add(shape.name)
            self.watcher.watch_deletion(shape.name, uid(md))
            self.ledger.finish(action, "ok")
        else:
            self.ledger.finish(action, "failed", f"{r.status_code} {self.message(r)[:200]}")
        return action

    def op_recreate(self) -> Action | None:
        ready = sorted(n for n in self.absent if n in self.watcher.cleaned)
        if not ready:
            return None if not self.present else self.op_env()
        name = self.rng.choice(ready)
        action = self.ledger.begin("op", "recreate", name, touch=[name])
        r = self.create(name)
        if r.status_code < 300:
            self.ledger.finish(action, "ok")
        else:
            self.ledger.finish(action, "refused", f"{r.status_code} {self.message(r)[:200]}")
        return action

    REFUSALS = ("frozen-instance-type", "reserved-env", "reserved-arg", "frozen-engine", "pod-bound", "frozen-size")

    def op_refused(self) -> Action | None:
        """An edit the webhooks (or the CRD's rules) must refuse: a 4xx, and nothing changes."""
        shape = self.pick_present()
        if shape is None:
            return None
        md = self.md(shape.name)
        if md is None:
            return None
        i = self.role_index(shape)
        role = md["spec"]["roles"][i]
        which = self.rng.choice(self.REFUSALS)
        patch: list[dict[str, Any]]
        if which == "frozen-instance-type":
            other = sw.H20 if role["instanceType"] != sw.H20 else sw.A10G
            patch = [{"op": "replace", "path": f"/spec/roles/{i}/instanceType", "value": other}]
        elif which == "reserved-env":
            patch = [{"op": "add", "path": f"/spec/roles/{i}/env",
                      "value": [{"name": "GPUSTACK_REPLICA_SIZE", "value": "3"}]}]
        elif which == "reserved-arg":
            patch = [{"op": "add", "path": f"/spec/roles/{i}/extraArgs",
                      "value": ["--kv_transfer_config", "{}"] if shape.engine == "vLLM" else ["--disaggregation-mode", "prefill"]}]
        elif which == "frozen-engine":
            patch = [{"op": "replace", "path": "/spec/engine/name", "value": "SGLang" if shape.engine == "vLLM" else "vLLM"}]
        elif which == "pod-bound":
            patch = [{"op": "replace", "path": f"/spec/roles/{i}/replicas", "value": 5000}]
        else:
            patch = [{"op": "replace", "path": f"/spec/roles/{i}/size", "value": int(role.get("size", 1)) + 1}]
        action = self.ledger.begin("op", "refused", f"{shape.name}/{role['name']} {which}")
        try:
            r = self.request("PATCH", f"{MD_PATH}/{shape.name}", headers=JSON_PATCH, content=json.dumps(patch))
        except RuntimeError as exc:
            self.ledger.finish(action, "failed", str(exc)[:200])
            return action
        if r.status_code < 300:
            self.ledger.finish(action, "admitted", json.dumps(patch)[:160])
            self.ledger.violation("refusal", f"{shape.name}: an edit that must be refused was admitted ({which}): "
                                  f"{json.dumps(patch)}", [f"ModelDeployment/{shape.name}"], key=f"{action.seq}")
            self.ledger.touch([shape.name])
            return action
        self.ledger.finish(action, "refused", f"{r.status_code} {self.message(r)[:200]}")
        self.check_unchanged(shape.name, md, f"{which} refused with {r.status_code}")
        return action

    # --- faults -----------------------------------------------------------------------------------------

    def fault(self, kind: str, background: bool) -> Action:
        category = "departure" if kind in DEPARTURES else "platform"
        if category == "platform" and kind not in ("pool-endpoint", "runtime-version"):
            if not self.platform_busy.acquire(blocking=not background):
                # Another component fault is running in the background: a related-object change instead.
                kind = self.rng.choice(("pool-endpoint", "runtime-version"))
            else:
                try:
                    return getattr(self, "fault_" + kind.replace("-", "_"))()
                finally:
                    self.platform_busy.release()
        return getattr(self, "fault_" + kind.replace("-", "_"))()

    def our_pods(self, o: Observation) -> list[dict[str, Any]]:
        uids = {uid(md): n for n, md in o.mds.items() if n in self.present}
        return [p for p in o.pods if not deleting(p) and any(ref.get("uid") in uids
                                                             for ref in p["metadata"].get("ownerReferences") or [])]

    def fault_pod_delete(self) -> Action:
        pods = self.our_pods(self.obs())
        if not pods:
            return self.ledger.finish(self.ledger.begin("departure", "pod-delete", "-"), "skipped", "no Pod")
        pod = self.rng.choice(sorted(pods, key=lambda p: p["metadata"]["name"]))
        name, role, ordinal, _ = pod_key(pod) or ("?", "?", -1, "")
        action = self.ledger.begin("departure", "pod-delete", pod["metadata"]["name"], touch=[name])
        self.ledger.explain(action, name, role, ordinal)
        r = self.request("DELETE", f"{POD_PATH}/{pod['metadata']['name']}", client=self.bg_api)
        return self.ledger.finish(action, "ok" if r.status_code < 300 else f"failed {r.status_code}")

    def fault_workload_delete(self) -> Action:
        o = self.obs()
        ours: list[tuple[str, str, str, int]] = []
        for name, md in o.mds.items():
            if name not in self.present or deleting(md):
                continue
            for group, (role, ordinal) in self.watcher.group_names(md).items():
                if group in o.workloads and not deleting(o.workloads[group]):
                    ours.append((group, name, role, ordinal))
        if not ours:
            return self.ledger.finish(self.ledger.begin("departure", "workload-delete", "-"), "skipped", "no Workload")
        group, name, role, ordinal = self.rng.choice(sorted(ours))
        action = self.ledger.begin("departure", "workload-delete", f"{group} ({name}/{role}/{ordinal})", touch=[name])
        self.ledger.explain(action, name, role, ordinal)
        r = self.request("DELETE", f"{WL_PATH}/{group}", client=self.bg_api)
        return self.ledger.finish(action, "ok" if r.status_code < 300 else f"failed {r.status_code}")

    def fault_preemption(self) -> Action:
        """A higher-priority Pod in the small pool's queue: Kueue preempts one of our Workloads."""
        if not self.preempting.acquire(blocking=False):
            return self.fault_workload_delete()  # one preemptor at a time
        try:
            return self._preempt()
        finally:
            self.preempting.release()

    def _preempt(self) -> Action:
        victims = sorted(n for n in self.present if self.shapes[n].tight)
        name = f"soak-preemptor-{self.next_value()}"
        # One card more than the queue has free: Kueue must preempt at least one of our Workloads.
        queue = self.request("GET", f"/apis/kueue.x-k8s.io/v1beta2/clusterqueues/{sw.TIGHT}", client=self.bg_api).json()
        quota = used = 0
        for group in queue["spec"]["resourceGroups"]:
            for flavor in group["flavors"]:
                quota += sum(int(r["nominalQuota"]) for r in flavor["resources"] if r["name"] == "nvidia.com/gpu")
        for flavor in (queue.get("status") or {}).get("flavorsReservation") or []:
            used += sum(int(r.get("total", 0)) for r in flavor.get("resources") or [] if r["name"] == "nvidia.com/gpu")
        cards = max(1, min(quota, quota - used + 1))
        action = self.ledger.begin("departure", "preemption", f"{name} ({cards} of {quota} cards, {used} reserved)",
                                   touch=victims)
        for victim in victims:
            self.ledger.explain(action, victim)
        r = self.request("POST", POD_PATH, client=self.bg_api, json=sw.preemptor(name, cards))
        if r.status_code >= 300:
            return self.ledger.finish(action, "failed", f"{r.status_code} {self.message(r)[:200]}")
        pod_uid = r.json()["metadata"]["uid"]
        evicted = ""
        deadline = time.monotonic() + 25
        while time.monotonic() < deadline and not evicted:
            o = self.obs()
            for wl in o.workloads.values():
                if pod_uid in owner_uids(wl) and cond_true(wl, "QuotaReserved"):
                    evicted = "the preemptor reserved its quota"
            for victim in victims:
                md = o.mds.get(victim)
                for group in self.watcher.group_names(md) if md is not None else {}:
                    wl = o.workloads.get(group)
                    if wl is not None and cond_true(wl, "Evicted"):
                        evicted = f"{victim}:{group} evicted"
            time.sleep(0.3)
        time.sleep(self.rng.uniform(*PREEMPT_HOLD_SECONDS))
        self.request("DELETE", f"{POD_PATH}/{name}", client=self.bg_api, params={"gracePeriodSeconds": 0})
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.request("GET", f"{POD_PATH}/{name}", client=self.bg_api).status_code == 404:
                break
            time.sleep(0.5)
        return self.ledger.finish(action, "ok" if evicted else "no-eviction", evicted or "nothing preempted")

    def pick_node(self) -> tuple[str, set[str]] | None:
        """A node hosting Pods of ours (not already out), and the deployments with Pods on it."""
        o = self.obs()
        hosting: dict[str, set[str]] = defaultdict(set)
        for pod in self.our_pods(o):
            node = pod["spec"].get("nodeName")
            key = pod_key(pod)
            if node and key and node not in self.nodes_out:
                hosting[node].add(key[0])
        if not hosting:
            return None
        node = self.rng.choice(sorted(hosting))
        return node, hosting[node]

    def replicas_on(self, node: str) -> set[tuple[str, str, int]]:
        """Fresh reads: every (deployment, role, ordinal) with a Pod bound to the node or a Workload
        Kueue places on it. The observation a node fault picked its node from is up to a tick old,
        and a replica just admitted there (its Pod bound a moment later) is changed by the fault too:
        Kueue re-places it (bench/soak.md#bugs-found-on-the-way)."""
        out = {(k[0], k[1], k[2]) for p in self.pods_on(node) if (k := pod_key(p)) is not None}
        mds = self.request("GET", MD_PATH, client=self.bg_api).json()["items"]
        groups = {g: (md["metadata"]["name"], *where) for md in mds
                  for g, where in self.watcher.group_names(md, EXTRA_ORDINALS).items()}
        for workload in self.request("GET", WL_PATH, client=self.bg_api).json()["items"]:
            replica = groups.get(workload["metadata"]["name"])
            if replica is not None and node in (placement_hosts(workload) or set()):
                out.add(replica)
        return out

    def cover_node(self, action: Action, node: str, names: set[str]) -> None:
        """Explains the loss of every replica the node holds now (fresh reads), and widens the fault
        to its deployment: before the node changes, and again while the fault is under way."""
        for deployment, role, ordinal in self.replicas_on(node):
            if deployment not in names:
                names.add(deployment)
                self.ledger.widen(action, [deployment])
            self.ledger.explain(action, deployment, role, ordinal)

    def fault_node_notready(self) -> Action:
        """kwok stops playing the node's kubelet (its label removed) and the node reports NotReady;
        after a while both come back."""
        picked = self.pick_node()
        if picked is None:
            return self.ledger.finish(self.ledger.begin("departure", "node-notready", "-"), "skipped", "no node")
        node, names = picked
        self.nodes_out.add(node)
        action = self.ledger.begin("departure", "node-notready", f"{node} ({', '.join(sorted(names))})", touch=names)
        label = e2e_cluster.KWOK_NODE_LABEL.replace("/", "~1")
        try:
            self.cover_node(action, node, names)
            self.request("PATCH", f"/api/v1/nodes/{node}", client=self.bg_api, headers=JSON_PATCH,
                         content=json.dumps([{"op": "remove", "path": f"/metadata/labels/{label}"}]))
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            self.request("PATCH", f"/api/v1/nodes/{node}/status", client=self.bg_api,
                         headers={"Content-Type": "application/strategic-merge-patch+json"},
                         content=json.dumps({"status": {"conditions": [
                             {"type": "Ready", "status": "False", "reason": "SoakNotReady",
                              "message": "the soak stopped this node's kubelet", "lastHeartbeatTime": now,
                              "lastTransitionTime": now}]}}))
            self.cover_node(action, node, names)
            time.sleep(self.rng.uniform(*NODE_DOWN_SECONDS))
            self.cover_node(action, node, names)
        finally:
            deadline = time.monotonic() + NODE_GONE_TIMEOUT_SECONDS
            while time.monotonic() < deadline:  # through an API server restart, if one is under way
                r = self.request("PATCH", f"/api/v1/nodes/{node}", client=self.bg_api, headers=MERGE_PATCH,
                                 content=json.dumps({"metadata": {"labels": {e2e_cluster.KWOK_NODE_LABEL:
                                                                             e2e_cluster.KWOK_NODE_LABEL_VALUE}}}))
                if r.status_code < 300:
                    break
                time.sleep(1.0)
            self.nodes_out.discard(node)
            self.ledger.touch(names)
        return self.ledger.finish(action, "ok")

    def fault_node_delete(self) -> Action:
        """The Node object deleted, then the node joins again: at once, as a kubelet registers its
        node again with its Pods still bound (Kueue may have re-placed their Workloads meanwhile:
        bench/soak.md, bug 3), or once the pod garbage collector has removed its Pods (a machine
        replaced). The fault ends when the node is Ready and no Pod is bound to a missing node."""
        picked = self.pick_node()
        if picked is None:
            return self.ledger.finish(self.ledger.begin("departure", "node-delete", "-"), "skipped", "no node")
        node, names = picked
        quick = self.rng.random() < 0.5
        self.nodes_out.add(node)
        action = self.ledger.begin("departure", "node-delete", f"{node} ({', '.join(sorted(names))}; "
                                   f"{'registers again at once' if quick else 'joins once its Pods are gone'})",
                                   touch=names)
        try:
            self.cover_node(action, node, names)
            self.request("DELETE", f"/api/v1/nodes/{node}", client=self.bg_api)
            self.cover_node(action, node, names)
            time.sleep(self.rng.uniform(*NODE_DOWN_SECONDS))
            self.cover_node(action, node, names)
            deadline = time.monotonic() + NODE_GONE_TIMEOUT_SECONDS
            while not quick and time.monotonic() < deadline and self.pods_on(node):
                time.sleep(2.0)
        finally:
            self.rejoin(node)
            deadline = time.monotonic() + NODE_GONE_TIMEOUT_SECONDS
            while time.monotonic() < deadline and self.orphans():
                time.sleep(2.0)
            self.nodes_out.discard(node)
            self.ledger.touch(names)
        return self.ledger.finish(action, "ok")

    def pods_on(self, node: str) -> list[dict[str, Any]]:
        return self.request("GET", POD_PATH, client=self.bg_api,
                            params={"fieldSelector": f"spec.nodeName={node}"}).json()["items"]

    def orphans(self) -> list[str]:
        """Pods bound to a node that does not exist (the pod garbage collector's next victims)."""
        nodes = {n["metadata"]["name"] for n in self.request("GET", "/api/v1/nodes", client=self.bg_api).json()["items"]}
        pods = self.request("GET", POD_PATH, client=self.bg_api).json()["items"]
        return [p["metadata"]["name"] for p in pods if p["spec"].get("nodeName") and p["spec"]["nodeName"] not in nodes]

    def rejoin(self, node: str) -> None:
        """Creates the node again (through API server restarts) and waits until kwok has it Ready."""
        deadline = time.monotonic() + NODE_GONE_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            current = self.request("GET", f"/api/v1/nodes/{node}", client=self.bg_api)
            if current.status_code == 200 and not current.json()["metadata"].get("deletionTimestamp"):
                if any(c.get("type") == "Ready" and c.get("status") == "True"
                       for c in (current.json().get("status") or {}).get("conditions") or []):
                    return
            elif current.status_code == 404:
                self.request("POST", "/api/v1/nodes", client=self.bg_api, json=self.node_manifests[node])
            time.sleep(1.0)
        self.ledger.violation("component", f"node {node} could not be registered again", [f"Node/{node}"])

    def fault_operator_kill(self) -> Action:
        """One of the operator's replicas is killed (SIGKILL) and started again; the other answers
        meanwhile (the fronts skip a replica that refuses connections, as a Service does)."""
        replica = self.rng.choice(self.op.replicas)
        comp = self.cp.components[replica.name]
        action = self.ledger.begin("platform", "operator-kill", f"{replica.name} pid {comp.pid}")
        self.ledger.down("operator")
        try:
            comp.stopped = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(comp.pid, signal.SIGKILL)  # type: ignore[arg-type]
            comp.proc.wait(10)  # type: ignore[union-attr]
            time.sleep(self.rng.uniform(0.0, 3.0))
            self.keeper.call(lambda: self.cp.start_component(replica.name))
            self.op.wait_listening()
        finally:
            self.ledger.up("operator")
        return self.ledger.finish(action, "ok", f"new pid {comp.pid}")

    def fault_operator_freeze(self) -> Action:
        replica = self.rng.choice(self.op.replicas)
        comp = self.cp.components[replica.name]
        hold = self.rng.uniform(*FREEZE_SECONDS)
        action = self.ledger.begin("platform", "operator-freeze", f"{replica.name} pid {comp.pid} for {hold:.1f}s")
        self.ledger.down("operator")
        try:
            os.killpg(comp.pid, signal.SIGSTOP)  # type: ignore[arg-type]
            time.sleep(hold)
        finally:
            os.killpg(comp.pid, signal.SIGCONT)  # type: ignore[arg-type]
            self.op.wait_listening()
            self.ledger.up("operator")
        return self.ledger.finish(action, "ok")

    def restart(self, kind: str, component: str, ready: Callable[[], None], category: str = "platform") -> Action:
        action = self.ledger.begin(category, kind, component)
        if component == "kube-apiserver":
            self.scrape_apiserver()
        self.ledger.down(component)
        try:
            self.cp.stop_component(component)
            self.keeper.call(lambda: self.cp.start_component(component))
            ready()
        except Exception as exc:  # noqa: BLE001 - recorded; the soak goes on
            self.ledger.violation("component", f"{component} did not come back after a restart: {exc}", [component])
        finally:
            self.ledger.up(component)
        return self.ledger.finish(action, "ok")

    def probe_ready(self, port_name: str) -> Callable[[], None]:
        def ready() -> None:
            url = f"http://127.0.0.1:{self.cp.ports[port_name]}/readyz"
            e2e_cluster.wait_until(lambda: httpx.get(url, timeout=2).status_code == 200, 120, 0.5, url)
        return ready

    def fault_metacontroller_restart(self) -> Action:
        return self.restart("metacontroller-restart", "metacontroller", self.probe_ready("metacontroller_probe"))

    def fault_kueue_restart(self) -> Action:
        return self.restart("kueue-restart", "kueue", self.probe_ready("kueue_probe"))

    def fault_apiserver_restart(self) -> Action:
        return self.restart("apiserver-restart", "kube-apiserver", self.apiserver_and_kubelets_up)

    def apiserver_and_kubelets_up(self) -> None:
        """The API server answers, then the fake kubelets start afresh. A real kubelet keeps
        renewing its node's Lease through an API server restart; kwok 0.8.0 gives a Lease up after
        one conflict (`Failed to sync lease ... the object has been modified`), and its nodes then
        flap NotReady every grace period for the rest of the run (bench/soak.md).
        Restarting kwok once the API server is back restores the kubelet's behaviour."""
        self.apiserver_up()
        # Most restarts leave kwok's Leases renewing; restart kwok only when one has lapsed (a kwok
        # restart is itself a risk: Pods it did not play again once left a deployment Degraded).
        with contextlib.suppress(Exception):
            e2e_cluster.wait_until(self.kubelets_renewing, 30, 1.0, "kwok renewing every node's Lease")
            return
        # Not while a node fault has a node out of kwok's hands: a kwok started then did not play
        # that node's Pods once it came back (a Pod deleted on it stayed Terminating for minutes).
        e2e_cluster.wait_until(lambda: not self.nodes_out, NODE_GONE_TIMEOUT_SECONDS + 30, 1.0,
                               "node faults to end before kwok restarts")
        self.cp.stop_component("kwok")
        self.keeper.call(lambda: self.cp.start_component("kwok"))
        e2e_cluster.wait_until(self.kubelets_renewing, 60, 1.0, "kwok renewing every node's Lease")

    def kubelets_renewing(self) -> bool:
        """Every node's Lease was renewed in the last 20 seconds (kwok renews about every 10)."""
        r = self.request("GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", client=self.bg_api)
        if r.status_code != 200:
            return False
        renewed = {lease["metadata"]["name"]: (lease.get("spec") or {}).get("renewTime")
                   for lease in r.json()["items"]}
        nodes = [n for n in self.node_manifests if n not in self.nodes_out]
        cutoff = time.time() - 20
        return all(renewed.get(n) and timestamps.epoch_seconds(renewed[n]) >= cutoff for n in nodes)

    def fault_pool_endpoint(self) -> Action:
        users = sorted(n for n in self.present if self.shapes[n].cached)
        endpoint = f"soak-master-{self.next_value()}.gpustack-system.svc:50051"
        action = self.ledger.begin("platform", "pool-endpoint", f"{sw.POOL} -> {endpoint}", touch=users)
        r = self.request("PATCH", f"/apis/worker.gpustack.ai/v1/kvcachepools/{sw.POOL}/status", client=self.bg_api,
                         headers=MERGE_PATCH, content=json.dumps({"status": {"clientEndpoint": endpoint}}))
        return self.ledger.finish(action, "ok" if r.status_code < 300 else f"failed {r.status_code}")

    def fault_runtime_version(self) -> Action:
        # Preferably a type that a deployment without an image uses (its image follows the runtime).
        o = self.obs()
        imageless = {r["instanceType"] for n, md in o.mds.items() if n in self.present
                     for r in md["spec"]["roles"] if not r.get("image")}
        choices = sorted(imageless & {sw.A10G, sw.TIGHT, sw.H20}) or [sw.A10G, sw.TIGHT]
        it = self.rng.choice(choices)
        users = sorted(n for n in self.present if it in self.shapes[n].instance_types)
        current = self.request("GET", f"/apis/worker.gpustack.ai/v1/instancetypes/{it}", client=self.bg_api).json()
        version = ((current.get("status") or {}).get("detail") or {}).get("runtimeVersion")
        new = "13.0" if version == "12.9" else "12.9"
        action = self.ledger.begin("platform", "runtime-version", f"{it} {version} -> {new}", touch=users)
        r = self.request("PATCH", f"/apis/worker.gpustack.ai/v1/instancetypes/{it}/status", client=self.bg_api,
                         headers=MERGE_PATCH,
                         content=json.dumps({"status": {"detail": {"runtimeVersion": new, "runtimeVersions": [new]}}}))
        return self.ledger.finish(action, "ok" if r.status_code < 300 else f"failed {r.status_code}")

    # --- metrics ----------------------------------------------------------------------------------------

    def scrape_apiserver(self) -> None:
        """apiserver_request_total by verb (and by resource), and the API server's calls of our
        webhooks by code, accumulated across API server restarts (a restart resets the counters)."""
        with self.apiserver_lock:
            try:
                text = self.api.get("/metrics", timeout=20).text
            except httpx.HTTPError:
                return
            current: dict[str, dict[str, float]] = {"verb": defaultdict(float), "resource": defaultdict(float),
                                                    "webhook": defaultdict(float)}
            for line in text.splitlines():
                if line.startswith("apiserver_request_total{"):
                    lab, value = line.rsplit(" ", 1)
                    verb = re.search(r'verb="([^"]*)"', lab)
                    res = re.search(r'resource="([^"]*)"', lab)
                    current["verb"][verb.group(1) if verb else "?"] += float(value)
                    current["resource"][res.group(1) if res else "?"] += float(value)
                elif line.startswith("apiserver_admission_webhook_request_total{") and "gpustack" in line:
                    lab, value = line.rsplit(" ", 1)
                    name = re.search(r'name="([^"]*)"', lab)
                    code = re.search(r'code="([^"]*)"', lab)
                    current["webhook"][f"{name.group(1) if name else '?'} {code.group(1) if code else '?'}"] += float(value)
            now = self.ledger.now()
            for family, totals in (("verb", self.apiserver_totals), ("resource", self.apiserver_by_resource),
                                   ("webhook", self.webhook_calls)):
                last = self._apiserver_last.get(family, {})
                for key, value in current[family].items():
                    before = last.get(key, 0.0)
                    delta = value - before if value >= before else value
                    totals[key] += delta
                    code = key.rsplit(" ", 1)[-1]
                    if family == "webhook" and delta > 0 and code.startswith("5") \
                            and not self.ledger.was_down("operator", self._scraped_at, now, margin=10.0) \
                            and not self.ledger.was_down("kube-apiserver", self._scraped_at, now, margin=10.0) \
                            and not (code == "503" and self.watcher.api_sluggish(self._scraped_at, now)):
                        self.ledger.violation("webhook-5xx", f"the API server's calls of {key.rsplit(' ', 1)[0]} "
                                              f"got {delta:.0f} answer(s) {key.rsplit(' ', 1)[-1]} between "
                                              f"{self._scraped_at:.0f}s and {now:.0f}s, the operator up",
                                              [key], key=f"{key}/{now:.0f}")
                self._apiserver_last[family] = dict(current[family])
            self._scraped_at = now

    def metrics_loop(self, stop: threading.Event) -> None:
        while not stop.wait(15):
            if not self.ledger.was_down("kube-apiserver", self.ledger.now() - 2, self.ledger.now()):
                self.scrape_apiserver()


def git_describe() -> dict[str, str]:
    """The code that ran: the checkout's HEAD (dirty when files outside the soak's own differ), or,
    for a run from a clean `git archive` export, the commit named by SOAK_EXPORT_COMMIT."""
    exported = os.environ.get("SOAK_EXPORT_COMMIT")
    if exported:
        subject = subprocess.run(["git", "log", "-1", "--format=%s", exported], cwd=os.environ.get("SOAK_EXPORT_REPO", ROOT),
                                 capture_output=True, text=True, check=False).stdout.strip()
        return {"commit": exported, "dirty": "no (a clean export of the commit)", "subject": subject[:120]}

    def run(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()

    dirty = [line for line in run("status", "--porcelain", "--untracked-files=no").splitlines()
             if not line[3:].startswith("bench/soak")]
    return {"commit": run("rev-parse", "HEAD"), "dirty": "yes" if dirty else "no",
            "subject": run("log", "-1", "--format=%s")[:120]}


def summarize(soak: Soak, seed: int, duration: float, size: int, command: str, started: str,
              wall_seconds: float) -> dict[str, Any]:
    ledger = soak.ledger.as_json()
    actions = soak.ledger.actions
    by_kind: dict[str, Counter[str]] = {c: Counter() for c in ("op", "departure", "platform", "remedy")}
    results: dict[str, Counter[str]] = defaultdict(Counter)
    for a in actions:
        by_kind[a.category][a.kind] += 1
        results[a.kind][a.result.split(" ")[0] or "?"] += 1
    convergence = {kind: {"n": len(v), "p50": quantile(v, 0.5), "p99": quantile(v, 0.99), "max": max(v) if v else None,
                          "samples": v} for kind, v in sorted(soak.convergence.items())}
    chaos = soak.chaos_convergence
    w = soak.watcher
    ticks = w.tick_seconds
    required_ops = set(USER_OPS) | (set(SCALER_OPS) if soak.scalers else set())
    return {
        "seed": seed, "command": command, "started": started, "duration_seconds": duration,
        "wall_seconds": round(wall_seconds, 1), "size": size, "code": git_describe(),
        "deployments": {s.name: s.kind for s in soak.shapes.values()},
        "scalers": soak.scalers, "bound_seconds": soak.bound, "episodes": soak.episodes,
        "operations": sum(by_kind["op"].values()),
        "faults": sum(by_kind["departure"].values()) + sum(by_kind["platform"].values()),
        "by_kind": {c: dict(sorted(v.items())) for c, v in by_kind.items()},
        "results_by_kind": {k: dict(v) for k, v in sorted(results.items())},
        "kinds_missing": sorted((required_ops - set(by_kind["op"])) | (set(DEPARTURES) - set(by_kind["departure"]))
                                | (set(PLATFORM) - set(by_kind["platform"]))),
        "violations": ledger["violations"],
        "unconverged": soak.unconverged,
        "remedies": soak.remedies,
        "convergence_after_fault": convergence,
        "convergence_after_chaos": {"n": len(chaos), "p50": quantile(chaos, 0.5), "p99": quantile(chaos, 0.99),
                                    "max": max(chaos) if chaos else None},
        "delete_cleanup_seconds": dict(sorted(w.cleaned.items())),
        "operator_rss_mib": {"peak": round(w.rss_peak_mib, 1), "limit": 512.0, "samples": w.rss_samples},
        "apiserver_requests_by_verb": {k: int(v) for k, v in sorted(soak.apiserver_totals.items(), key=lambda kv: -kv[1])},
        "apiserver_requests_by_resource_top": {k: int(v) for k, v in sorted(
            soak.apiserver_by_resource.items(), key=lambda kv: -kv[1])[:15]},
        "apiserver_webhook_calls_by_code": {k: int(v) for k, v in sorted(soak.webhook_calls.items())},
        "webhook_probes": dict(sorted(w.probes.items())),
        "events_top": [{"reason": k[0], "object": f"{k[1]}/{k[2]}", "count": v} for k, v in sorted(
            w.event_totals.items(), key=lambda kv: -kv[1])[:12]],
        "events_dwells": soak.events_dwells,
        "events_delivered_late": soak.late_events,
        "control_plane_restarts": soak.control_plane_restarts,
        "invariant_evidence": dict(w.stats),
        "observations": {"count": w.observations, "failed_reads": w.read_failures,
                         "api_server_slow_or_failing_spans": len(w.sluggish),
                         "tick_p50_seconds": quantile(ticks, 0.5), "tick_p99_seconds": quantile(ticks, 0.99),
                         "pod_watch_events": w.ready_log.events,
                         "pod_watch_broken": w.pod_watch_failures()},
        "loadavg": os.getloadavg(),
        "outages": ledger["outages"],
        "actions": ledger["actions"],
    }


def run(seed: int, duration: float, size: int, *, bound: float = DEFAULT_BOUND_SECONDS, out_json: Path | None = None,
        out_md: Path | None = None, keep: bool = False, command: str = "",
        first: tuple[str, ...] = ()) -> dict[str, Any]:
    """Starts a control plane, runs the soak, writes the results; returns the summary."""
    rng = random.Random(seed)
    shapes = sw.shapes(size)
    scalers = scaler_kind_installed()
    bin_dir = e2e_cluster.ensure_built()
    pools = tuple(e2e_cluster.DEFAULT_NODE_POOLS) + (
        e2e_cluster.NodePool("tight", sw.TIGHT_NODES, sw.TIGHT, "nvidia.com/gpu", 2),)
    cp = e2e_cluster.ControlPlane(bin_dir=bin_dir, nodes=pools, kueue_feature_gates=KUEUE_FEATURE_GATES)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    t0 = time.monotonic()
    summary: dict[str, Any] = {}
    failed = True
    cp.start()
    stop_metrics = threading.Event()
    try:
        op = md_operator.start_operator(cp)
        if scalers:
            wire_scalers(cp, op)
        log(f"control plane up in {time.monotonic() - t0:.0f}s; {len(shapes)} deployments: "
            f"{', '.join(s.name for s in shapes)}; scalers {'on' if scalers else 'off (the kind is not installed)'}")
        soak = Soak(cp, op, shapes, rng, bound=bound, scalers=scalers)
        threading.Thread(target=soak.metrics_loop, args=(stop_metrics,), daemon=True).start()
        try:
            soak.run(duration, first)
        finally:
            stop_metrics.set()
            soak.watcher.stop()
            summary = summarize(soak, seed, duration, size, command, started, time.monotonic() - t0)
            if out_json is not None:
                write_json(summary, out_json)
            if out_md is not None:
                from bench.soak_report import write_report
                write_report(summary, out_md)
        failed = bool(summary["violations"])
        return summary
    finally:
        cp.stop(keep_work_dir=keep or failed)


def write_json(summary: dict[str, Any], path: Path) -> None:
    """The summary indented, the history one action per line (thousands of them)."""
    body = json.dumps({k: v for k, v in summary.items() if k != "actions"}, indent=1, default=str)
    actions = ",\n".join("  " + json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in a.items()},
                                            default=str, separators=(",", ":"))
                          for a in summary["actions"])
    path.write_text(body[:-2] + ',\n "actions": [\n' + actions + "\n ]\n}\n")


def wire_scalers(cp: e2e_cluster.ControlPlane, op: md_operator.Operator) -> None:
    """The scaler's CompositeController by URL (its hooks on our hooks port) and every webhook of
    our configurations by URL, unless md_operator already installed them."""
    listed = cp.kubectl_json("get", "compositecontrollers")["items"]
    if not any(c["spec"]["parentResource"]["resource"] == "modeldeploymentscalers" for c in listed):
        for path in sorted((ROOT / "manifests" / "metacontroller").glob("*.yaml")):
            for doc in e2e_cluster.load_yaml_docs(path):
                if doc.get("kind") != "CompositeController" or \
                        doc["spec"]["parentResource"]["resource"] != "modeldeploymentscalers":
                    continue
                for hook in (doc["spec"].get("hooks") or {}).values():
                    webhook = hook.get("webhook") or {}
                    hook["webhook"] = {"url": f"http://127.0.0.1:{op.hooks_port}{webhook.get('path', '')}",
                                       "timeout": webhook.get("timeout", "10s")}
                cp.apply(doc)
    for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        conf = cp.kubectl_json("get", kind, "modeldeployment-operator")
        patch = []
        for i, hook in enumerate(conf.get("webhooks") or []):
            service = (hook.get("clientConfig") or {}).get("service")
            if service:
                patch.append({"op": "replace", "path": f"/webhooks/{i}/clientConfig",
                              "value": {"url": f"https://127.0.0.1:{op.webhook_port}{service.get('path', '/')}",
                                        "caBundle": cp.ca_bundle_b64}})
        if patch:
            cp.kubectl("patch", kind, "modeldeployment-operator", "--type=json", "-p", json.dumps(patch))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=None, help="the schedule's seed (default: a random one, printed)")
    parser.add_argument("--duration", type=parse_duration, default=parse_duration("20m"),
                        help="how long the schedule runs, e.g. 180, 3m, 20m (default 20m)")
    parser.add_argument("--size", type=int, default=8, help="number of deployments (default 8)")
    parser.add_argument("--bound", type=float, default=DEFAULT_BOUND_SECONDS,
                        help="seconds every deployment has to converge after the last fault")
    parser.add_argument("--json", type=Path, default=None, help="write the results here (e.g. bench/soak.json)")
    parser.add_argument("--md", type=Path, default=None, help="write the report here (e.g. bench/soak.md)")
    parser.add_argument("--keep", action="store_true", help="keep the control plane's work dir (logs)")
    parser.add_argument("--first", action="append", default=[], choices=FAULTS, metavar="KIND",
                        help="a headline fault the schedule opens with (repeatable, in order)")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    command = (f".venv/bin/python -m bench.soak --seed {seed} --duration {args.duration:.0f} --size {args.size}"
               + (f" --bound {args.bound:.0f}" if args.bound != DEFAULT_BOUND_SECONDS else "")
               + "".join(f" --first {kind}" for kind in args.first))
    print(f"[soak] seed {seed}", flush=True)
    print(f"[soak] rerun: {command}", flush=True)
    summary = run(seed, args.duration, args.size, bound=args.bound, out_json=args.json, out_md=args.md,
                  keep=args.keep, command=command, first=tuple(args.first))
    print(f"[soak] {summary['operations']} operations, {summary['faults']} faults, "
          f"{len(summary['violations'])} violations; kinds missing: {summary['kinds_missing'] or 'none'}", flush=True)
    for v in summary["violations"]:
        print(f"[soak]   {v['time']}s {v['invariant']}: {v['message']}", flush=True)
    return 1 if summary["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())

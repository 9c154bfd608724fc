"""`modeldeployment status` and `plan`: a live deployment read through the kubeconfig, shown as a
table of its replicas, and an edit's effect planned by the sync hook's own planner
(docs/operations.md#why-is-it-not-serving).

Reads only: nothing here writes to the cluster. The tables are pure functions of what was read,
so they are tested without a cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app import timestamps, vocab
from app.admission import files
from app.api.hooks import HookRequest
from app.api.objects import KubeObject
from app.api.v1 import ModelDeployment
from app.control.rollout import Action
from app.control.sync import Refusal, SyncResult, SyncSettings, reconcile
from app.kube.executor import utc_now
from app.render import names
from app.world import World, related_map


@dataclass
class LiveView:
    """One deployment as the cluster has it: the object, its Pods, its Workloads, the objects its
    render reads (InstanceTypes, the Binding, pools, backends, the ModelArtifact)."""

    md: KubeObject
    pods: list[KubeObject] = field(default_factory=list)
    workloads: list[KubeObject] = field(default_factory=list)
    world: list[KubeObject] = field(default_factory=list)


# --- status -------------------------------------------------------------------------------------


def age(since: str | None, now: str) -> str:
    """A duration as kubectl prints ages (45s, 3m, 2h, 4d); '-' for no time."""
    start, clock = timestamps.parse(since), timestamps.parse(now)
    if start is None or clock is None:
        return "-"
    seconds = max(0, int((clock - start).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _reason(entry: KubeObject, now: str) -> str:
    """The reason, with a starting container's progress against its startup probe's budget."""
    reason = str(entry.get("reason") or "-")
    start, clock = timestamps.parse(entry.get("startedAt")), timestamps.parse(now)
    budget = entry.get("startupBudgetSeconds")
    if start is not None and clock is not None and isinstance(budget, int):
        return f"{reason} {max(0, int((clock - start).total_seconds()))}s/{budget}s"
    return reason


def _pods_of(pods: list[KubeObject], role: str, ordinal: int) -> list[KubeObject]:
    return sorted((p for p in pods if ((p.get("metadata") or {}).get("labels") or {}).get(vocab.LABEL_COMPONENT) == role
                   and ((p.get("metadata") or {}).get("labels") or {}).get(vocab.LABEL_POD_ORDINAL) == str(ordinal)),
                  key=lambda p: str(p["metadata"].get("name")))


def status_rows(view: LiveView, now: str) -> list[list[str]]:
    """One row per replica of every role: declared ones (Ready unless listed as not), then the
    listed ones beyond (leaving); a role whose list was capped ends with a count of the rest."""
    rows = []
    for role in (view.md.get("status") or {}).get("roles") or []:
        listed = {e["ordinal"]: e for e in role.get("notReady") or [] if isinstance(e, dict) and "ordinal" in e}
        unlisted = int(role.get("notReadyUnlisted") or 0)
        last_listed = max(listed, default=-1)
        for ordinal in sorted(set(range(int(role.get("desired") or 0))) | set(listed)):
            pods = _pods_of(view.pods, role["name"], ordinal)
            entry = listed.get(ordinal)
            if entry is not None:
                stage, reason, since, message = (str(entry.get("stage")), _reason(entry, now),
                                                 age(entry.get("since"), now), str(entry.get("message") or ""))
            elif unlisted and ordinal > last_listed:
                stage, reason, since, message = "?", "-", "-", "not listed (status lists the first not-Ready ones)"
            else:
                stage, reason, since, message = vocab.PHASE_READY, "-", "-", ""
            nodes = sorted({str((p.get("spec") or {}).get("nodeName")) for p in pods if (p.get("spec") or {}).get("nodeName")})
            rows.append([role["name"], f"r{ordinal}", stage, reason, since,
                         ",".join(str(p["metadata"].get("name")) for p in pods) or "-", ",".join(nodes) or "-", message])
        if unlisted:
            rows.append([role["name"], "…", f"{unlisted} more not Ready", "-", "-", "-", "-", ""])
    return rows


STATUS_HEADER = ["ROLE", "REPLICA", "STAGE", "REASON", "AGE", "PODS", "NODE", "MESSAGE"]


def table(header: list[str], rows: list[list[str]]) -> str:
    """Columns padded as kubectl's tables are (the last one is not)."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
    lines = ["   ".join([*(cell.ljust(w) for cell, w in zip(r, widths)), r[-1]]).rstrip() for r in [header, *rows]]
    return "\n".join(lines)


def status_text(view: LiveView, now: str) -> str:
    meta = view.md.get("metadata") or {}
    status = view.md.get("status") or {}
    head = (f"{meta.get('namespace')}/{meta.get('name')}: {status.get('phase') or 'no status yet'}"
            f"{' — ' + status['phaseMessage'] if status.get('phaseMessage') else ''}")
    return f"{head}\n{table(STATUS_HEADER, status_rows(view, now))}"


# --- plan ---------------------------------------------------------------------------------------


def proposed_parent(edited: KubeObject, live: KubeObject) -> KubeObject:
    """The edited object as the API server would store it over the live one: the live identity
    (uid, resourceVersion, finalizers), the next generation when the spec changes, the live status
    (the last pass's answer, which the planner reads back)."""
    out = copy.deepcopy(edited)
    meta = out.setdefault("metadata", {})
    live_meta = live.get("metadata") or {}
    for key in ("uid", "resourceVersion", "creationTimestamp", "finalizers"):
        if key in live_meta:
            meta[key] = copy.deepcopy(live_meta[key])
    generation = int(live_meta.get("generation") or 1)
    meta["generation"] = generation + (1 if out.get("spec") != live.get("spec") else 0)
    out["status"] = copy.deepcopy(live.get("status") or {})
    return out


def hook_request(parent: KubeObject, view: LiveView) -> HookRequest:
    """The sync hook's request Metacontroller would send for `parent` with the live children and
    related objects (the same door as a `render`: the model parses the parent once)."""
    children: dict[str, Any] = {key: {} for key in vocab.DECLARED_CHILD_MAPS}
    for pod in view.pods:
        meta = pod["metadata"]
        children[vocab.CHILD_PODS][f"{meta.get('namespace')}/{meta.get('name')}"] = pod
    return HookRequest(parent=parent, deployment=ModelDeployment.model_validate(parent), children=children,
                       related=related_map([*view.world, *view.workloads]))


def plan(parent: KubeObject, view: LiveView, settings: SyncSettings, now: str) -> SyncResult | Refusal:
    """One pass of the sync hook's planner (the same function) on the edited object and the live world."""
    return reconcile(hook_request(parent, view), settings, now=now)


def _replica(md: KubeObject, role: str, ordinal: int) -> str:
    return names.instance(str(md["metadata"]["name"]), role, ordinal)


def plan_lines(parent: KubeObject, live: KubeObject, result: SyncResult) -> list[str]:
    """What the pass does, per role: replicas added and shed, replaced now, and the ones that roll
    after them in the order the rollout takes them (docs/kueue.md#rollout-cadence)."""
    live_roles = {r.get("name"): r for r in (live.get("spec") or {}).get("roles") or [] if isinstance(r, dict)}
    lines = []
    for role_plan in result.plans:
        was = int((live_roles.get(role_plan.role) or {}).get("replicas") or 0)
        entries = sorted(role_plan.ordinals, key=lambda e: e.ordinal)
        def labels(*actions: Action, up_to_date: bool | None = None, since: int = 0) -> list[str]:
            return [_replica(parent, role_plan.role, e.ordinal) for e in entries
                    if e.action in actions and e.ordinal >= since and (up_to_date is None or e.up_to_date == up_to_date)]

        added = labels(Action.CREATE, Action.WAIT, since=was)
        shed = labels(Action.SHED)
        now_replaced = labels(Action.REPLACE, Action.SUPERSEDE)
        later = labels(Action.KEEP, up_to_date=False)
        rebuilt = labels(Action.REBUILD)
        said = [f"role {role_plan.role}: {was} -> {sum(1 for e in entries if e.action != Action.SHED)} replicas"]
        for text, found in (("added", added), ("shed (scale-down)", shed), ("replaced now", now_replaced),
                            ("then replaced one at a time, each once the one before is Ready", later),
                            ("rebuilt (departed)", rebuilt)):
            if found:
                said.append(f"  {text}: {', '.join(found)}")
        if role_plan.hold:
            said.append(f"  new replicas held: {role_plan.hold}")
        if len(said) == 1:
            said.append("  unchanged")
        lines += said
    return lines


# --- the commands ---------------------------------------------------------------------------------


class LiveError(Exception):
    """No cluster to read, or no such deployment: the message says which and the way out."""


def _live(args: argparse.Namespace) -> tuple[Any, str]:
    """The API client's configuration (kubeconfig as kubectl reads it) and the namespace to read."""
    from lightkube import KubeConfig
    from lightkube.core.exceptions import ConfigError

    try:
        config = KubeConfig.from_file(args.kubeconfig) if args.kubeconfig else KubeConfig.from_env()
    except (ConfigError, OSError) as exc:
        raise LiveError(f"no cluster to read ({exc}) — set KUBECONFIG, pass --kubeconfig FILE, or run inside the "
                        "cluster") from exc
    single = config.get()
    namespace = args.namespace or (single.namespace if single is not None else None) or "default"
    return config, namespace


def read_view(config: Any, namespace: str, name: str) -> LiveView:
    """The deployment, its Pods and Workloads and the objects its render reads, live (LiveError when absent)."""
    from app.kube.client import ClusterUnreachable, Kube

    async def read() -> Any:
        kube = Kube(config, timeout=30.0)
        try:
            return await kube.deployment_view(namespace, name)
        finally:
            await kube.close()

    try:
        md, pods, workloads, world = asyncio.run(read())
    except ClusterUnreachable as exc:
        raise LiveError(f"{exc} — check the kubeconfig's context (kubectl cluster-info)") from exc
    if md is None:
        raise LiveError(f"ModelDeployment {namespace}/{name} not found — `kubectl get modeldeployments -n {namespace}` "
                        "lists them")
    return LiveView(md, pods, workloads, world)


def cmd_status(args: argparse.Namespace) -> int:
    """The roles and their replicas as a table; with --watch, again whenever a row changes."""
    config, namespace = _live(args)
    shown = ""
    while True:
        text = status_text(read_view(config, namespace, args.name), utc_now())
        if text != shown:
            print(text + ("\n" if args.watch else ""), flush=True)
            shown = text
        if not args.watch:
            return 0
        time.sleep(args.interval)


def _one_deployment(file: Path, namespace: str) -> tuple[list[Any], str, str]:
    docs = [d for d in files.read_documents(file, "-f") if isinstance(d.obj, dict)
            and d.obj.get("kind") == vocab.KIND_MODEL_DEPLOYMENT]
    if len(docs) != 1:
        raise LiveError(f"-f {file}: holds {len(docs)} ModelDeployments — plan one at a time")
    meta = docs[0].obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(meta, dict) or not isinstance(name, str) or not name:
        raise LiveError(f"-f {file}: metadata.name is missing — name the deployment to compare with")
    meta["namespace"] = meta.get("namespace") or namespace
    return docs, str(meta["namespace"]), name


def cmd_plan(args: argparse.Namespace) -> int:
    """What the operator does with the file's deployment over the live one: the webhooks' verdict
    (as `validate --old`), then one pass of the sync hook's planner. Writes nothing."""
    from app.admission import mutate
    from app.admission.offline import judge_documents
    from app.settings import Settings

    config, namespace = _live(args)
    docs, namespace, name = _one_deployment(args.file, namespace)
    view = read_view(config, namespace, name)
    world = World.of(view.world)
    options = Settings()
    logging.getLogger("app.admission.review").setLevel(logging.WARNING)  # the verdict is printed below
    [judged] = judge_documents(docs, [view.md], world, kv_cache_dtype_owned=options.kv_cache_dtype_owned)
    for warning in judged.verdict.warnings:
        print(f"Warning: {warning}")
    if not judged.verdict.allowed:
        print(f"refused: the webhooks refuse this edit of {judged.label}, so nothing changes:\n{judged.verdict.message}")
        return 1
    obj = mutate.apply_patch(judged.obj, mutate.accelerator_defaults(judged.obj, world))
    result = plan(proposed_parent(obj, view.md), view, SyncSettings(options=options.render_options()), utc_now())
    if isinstance(result, Refusal):
        print(f"refused: the operator cannot render it, so nothing changes:\n{result.message}")
        return 1
    print(f"{judged.label}: allowed; the operator's next pass:")
    print("\n".join(plan_lines(obj, view.md, result)))
    return 0

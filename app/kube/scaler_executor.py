"""A ModelDeploymentScaler pass's side effects (docs/autoscaling.md#trust): confirm the scaler
against the API server, then write the governed roles' replicas on its deployment, or its own units
(a park or a wake, docs/scale-to-zero.md#idle-after), then record its Events."""

from __future__ import annotations

import logging
from typing import Iterable

from app.api.objects import KubeObject
from app.control.intents import ApplyRoleReplicas, Intent, RecordEvent, SetScalerUnits
from app.kube.client import Kube
from app.kube.executor import ParentRef, foreign, matching, record_event

log = logging.getLogger(__name__)


async def confirm_scaler(kube: Kube, parent: ParentRef) -> KubeObject:
    """The live scaler, or ParentMismatch when it is not the one the request names."""
    return matching(await kube.scaler(parent.namespace, parent.name), parent)


def scaler_write_problem(intent: ApplyRoleReplicas, parent: ParentRef, live: KubeObject) -> str | None:
    """Why a replicas write is not exactly what the live scaler asks for (None when it is): only the
    deployment its deploymentRef names, in its namespace, only its roles, each at ratio × replicas."""
    if intent.namespace != parent.namespace:
        return f"namespace {intent.namespace!r} is not the scaler's {parent.namespace!r}"
    spec = live.get("spec") or {}
    target = (spec.get("deploymentRef") or {}).get("name")
    if intent.deployment != target:
        return f"deployment {intent.deployment!r} is not the one the scaler names ({target!r})"
    units = spec.get("replicas", 1)
    roles = spec.get("roles") or []
    wanted = tuple((r.get("name"), r.get("ratio", 1) * units) for r in roles if isinstance(r, dict))
    if intent.replicas != wanted:
        return f"replicas {intent.replicas} are not the live scaler's {wanted} (it changed since; the next pass writes)"
    return None


def scaler_units_problem(intent: SetScalerUnits, parent: ParentRef) -> str | None:
    """Why a park or wake is not this scaler's own (None when it is)."""
    if (intent.namespace, intent.scaler, intent.scaler_uid) != (parent.namespace, parent.name, parent.uid):
        return f"scaler {intent.namespace}/{intent.scaler} (uid {intent.scaler_uid!r}) is not the parent"
    return None


class ScalerExecutor:
    """Carries out one scaler pass's intents: confirm the scaler, write, then record the Events.

    `run` answers the API server's refusal of the write (a webhook's message), so the pass can
    report it; any other failure raises and the hook answers 5xx (Metacontroller retries)."""

    def __init__(self, kube: Kube | None) -> None:
        self.kube = kube

    async def run(self, parent: ParentRef, intents: Iterable[Intent]) -> str | None:
        intents = list(intents)
        if not intents:
            return None
        if self.kube is None:
            for intent in intents:
                log.info("no API server: skipped %s", intent)
            return None
        live = await confirm_scaler(self.kube, parent)
        refusal = None
        for intent in intents:
            if isinstance(intent, ApplyRoleReplicas):
                problem = scaler_write_problem(intent, parent, live)
                if problem is not None:
                    log.warning("dropped a replicas write of %s/%s: %s", parent.namespace, parent.name, problem)
                    continue
                refusal = await self.kube.apply_role_replicas(intent.namespace, intent.deployment,
                                                              intent.deployment_uid, intent.replicas)
                if refusal is None:
                    log.info("scaler %s/%s set %s on %s", parent.namespace, parent.name, intent.replicas,
                             intent.deployment)
            elif isinstance(intent, SetScalerUnits):
                problem = scaler_units_problem(intent, parent)
                if problem is not None:
                    log.warning("dropped a park or wake of %s/%s: %s", parent.namespace, parent.name, problem)
                    continue
                # A refused park or wake (someone scaled the scaler since) is decided again by the next pass.
                lost = await self.kube.set_scaler_units(intent.namespace, intent.scaler, intent.scaler_uid,
                                                        intent.current, intent.units)
                log.info("scaler %s/%s units %d -> %d: %s", parent.namespace, parent.name, intent.current,
                         intent.units, lost or "written")
        await self.record(parent, [i for i in intents if isinstance(i, RecordEvent)])
        return refusal

    async def record(self, parent: ParentRef, events: list[RecordEvent]) -> None:
        assert self.kube is not None
        for event in events:
            problem = foreign(event, parent, {})
            if problem is not None:
                log.warning("dropped an Event of scaler %s/%s: %s (%s)", parent.namespace, parent.name, problem, event)
                continue
            await record_event(self.kube, event)

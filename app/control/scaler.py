"""A ModelDeploymentScaler's pass: pure functions of the hook request (docs/autoscaling.md).

The scaler sets `ratio × spec.replicas` on each listed role of its deployment. One pass reads the
scaler and its deployment (Metacontroller's related object) and decides: the status (units
declared and Ready, per-role desired/declared/ready, the conditions), whether to write, and the
Events. The write itself is an intent the executor carries out, after confirming the scaler
against the API server (docs/autoscaling.md#trust).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from app import vocab
from app.api.objects import KubeObject
from app.api.scaler import ModelDeploymentScaler, ScalerHookRequest
from app.api.v1 import ModelDeployment
from app.control.bounds import REMEDY as POD_BOUND_REMEDY
from app.control import parking
from app.control.intents import ApplyRoleReplicas, Intent, RecordEvent, SetScalerUnits, parent_event
from app.control.status import merge_conditions
from app.model.condition import ConditionValue

# Come back after a write the deployment's webhooks refused: the cause may be gone by then.
RESYNC_REFUSED_SECONDS = 30.0


@dataclass(frozen=True)
class ScalerSettings:
    max_pods_per_deployment: int = vocab.DEFAULT_MAX_PODS_PER_DEPLOYMENT


@dataclass
class ScalerResult:
    status: KubeObject
    intents: list[Intent] = field(default_factory=list)
    resync_after: float | None = None
    # The values the pass decided on, kept so a refused write can be reported without replanning.
    scaler: ModelDeploymentScaler | None = None
    deployment: ModelDeployment | None = None


@dataclass(frozen=True)
class RoleFacts:
    """One governed role as this pass sees it."""

    name: str
    ratio: int
    desired: int
    declared: int  # 0 when the deployment lacks the role
    ready: int
    admitted: int


def customize(scaler: ModelDeploymentScaler) -> dict[str, Any]:
    """The one related object: the target deployment, so that its edits and readiness resync the scaler."""
    return {"relatedResources": [{
        "apiVersion": vocab.API_VERSION, "resource": vocab.PLURAL_MODEL_DEPLOYMENTS,
        "namespace": scaler.metadata.namespace, "names": [scaler.spec.deployment_ref.name]}]}


# --- reading the deployment ------------------------------------------------------------------------


def _bounded(value: Any) -> int:
    """A count read back from the deployment's status, bounded by the spec's limits."""
    if isinstance(value, bool) or not isinstance(value, int):
        return 0
    return max(0, min(value, vocab.MAX_ROLE_REPLICAS))


def _role_statuses(md: ModelDeployment) -> dict[str, dict[str, Any]]:
    entries = (md.status or {}).get("roles") or []
    return {e["name"]: e for e in entries if isinstance(e, dict) and isinstance(e.get("name"), str)}


def role_facts(scaler: ModelDeploymentScaler, md: ModelDeployment | None) -> list[RoleFacts]:
    statuses = _role_statuses(md) if md is not None else {}
    facts = []
    for role in scaler.spec.roles:
        declared_role = md.role(role.name) if md is not None else None
        entry = statuses.get(role.name, {})
        declared = declared_role.replicas if declared_role is not None else 0
        admitted = entry.get("admitted", entry.get("quotaReserved"))
        facts.append(RoleFacts(name=role.name, ratio=role.ratio, desired=scaler.spec.desired(role), declared=declared,
                               ready=min(_bounded(entry.get("ready")), declared),
                               admitted=min(_bounded(admitted), declared)))
    return facts


def selector(scaler: ModelDeploymentScaler) -> str:
    """The governed roles' leader Pods as a label selector string (HPA's Pods and Resource metrics)."""
    roles = sorted(r.name for r in scaler.spec.roles)
    component = (f"{vocab.LABEL_COMPONENT}={roles[0]}" if len(roles) == 1
                 else f"{vocab.LABEL_COMPONENT} in ({','.join(roles)})")
    return ",".join([f"{vocab.LABEL_NAME}={vocab.APP_NAME}", f"{vocab.LABEL_INSTANCE}={scaler.spec.deployment_ref.name}",
                     component, f"{vocab.LABEL_MEMBER_INDEX}=0"])


def role_ratios(scaler: ModelDeploymentScaler) -> str:
    return ",".join(f"{r.name}×{r.ratio}" for r in scaler.spec.roles)


def units(facts: list[RoleFacts], count: str) -> int:
    """Whole units: min over roles of floor(count / ratio)."""
    return min((getattr(f, count) // f.ratio for f in facts), default=0)


# --- field ownership (the deployment's managedFields) ----------------------------------------------


def _replicas_owned(fields_v1: Any, role: str) -> bool:
    """Whether a managedFields entry's fieldsV1 holds `spec.roles[name=role].replicas`."""
    roles = ((fields_v1 or {}).get("f:spec") or {}).get("f:roles") if isinstance(fields_v1, dict) else None
    if not isinstance(roles, dict):
        return False
    for key, item in roles.items():
        if not key.startswith("k:"):
            continue
        try:
            ident = json.loads(key[2:])
        except ValueError:
            continue
        if isinstance(ident, dict) and ident.get("name") == role and isinstance(item, dict) and "f:replicas" in item:
            return True
    return False


def replicas_managers(deployment: KubeObject, role: str) -> list[str] | None:
    """The field managers owning one role's `replicas`; None when the request carries no managedFields."""
    entries = (deployment.get("metadata") or {}).get("managedFields")
    if not isinstance(entries, list):
        return None
    return sorted({str(e.get("manager")) for e in entries
                   if isinstance(e, dict) and _replicas_owned(e.get("fieldsV1"), role)})


def ours_everywhere(deployment: KubeObject, facts: list[RoleFacts]) -> bool:
    """The scaler's manager owns every governed role's replicas (True when ownership cannot be read)."""
    for fact in facts:
        managers = replicas_managers(deployment, fact.name)
        if managers is not None and vocab.SCALER_FIELD_MANAGER not in managers:
            return False
    return True


# --- the rules ---------------------------------------------------------------------------------------


def missing_roles(scaler: ModelDeploymentScaler, md: ModelDeployment) -> list[str]:
    return [r.name for r in scaler.spec.roles if md.role(r.name) is None]


def step_refusal(scaler: ModelDeploymentScaler, md: ModelDeployment, max_pods: int) -> str | None:
    """Why the deployment cannot take this scaler's replicas (None when it can): a role's bound or the
    deployment's Pod bound (docs/admission.md#the-rules, rule 21)."""
    for role in scaler.spec.roles:
        want = scaler.spec.desired(role)
        if want > vocab.MAX_ROLE_REPLICAS:
            return (f"spec.replicas {scaler.spec.replicas} × ratio {role.ratio} sets {want} replicas on role "
                    f"{role.name}, above a role's {vocab.MAX_ROLE_REPLICAS}; at most "
                    f"{vocab.MAX_ROLE_REPLICAS // role.ratio} units fit")
    total = pods_after(scaler, md)
    if total > max_pods:
        return (f"{total} Pods would be declared by ModelDeployment {md.metadata.name} at {scaler.spec.replicas} units, "
                f"above {max_pods} ({vocab.SETTING_MAX_PODS_PER_DEPLOYMENT}); at most {max_units(scaler, md, max_pods)} "
                f"units fit — {POD_BOUND_REMEDY}")
    return None


def pods_after(scaler: ModelDeploymentScaler, md: ModelDeployment, replicas: int | None = None) -> int:
    """The deployment's total Pods once the scaler's replicas are set (others as declared)."""
    units_ = scaler.spec.replicas if replicas is None else replicas
    total = 0
    for role in md.spec.roles:
        governed = scaler.spec.role(role.name)
        total += (governed.ratio * units_ if governed is not None else role.replicas) * role.size
    return total


def max_units(scaler: ModelDeploymentScaler, md: ModelDeployment, max_pods: int) -> int:
    """The most units the deployment's Pod bound admits (0 when even one does not fit)."""
    fixed = sum(r.replicas * r.size for r in md.spec.roles if scaler.spec.role(r.name) is None)
    per_unit = sum(g.ratio * r.size for r in md.spec.roles if (g := scaler.spec.role(r.name)) is not None)
    if per_unit == 0:
        return vocab.MAX_SCALER_REPLICAS
    return max(0, min((max_pods - fixed) // per_unit, vocab.MAX_SCALER_REPLICAS))


def conflict(previous: KubeObject | None, facts: list[RoleFacts]) -> list[RoleFacts]:
    """Governed roles someone else changed: the last status saw the role set as desired, the desired
    count has not moved since, and the deployment now declares another."""
    before = {e.get("name"): e for e in ((previous or {}).get("roles") or []) if isinstance(e, dict)}
    changed = []
    for fact in facts:
        prior = before.get(fact.name) or {}
        if (prior.get("desired") == fact.desired and prior.get("declared") == fact.desired
                and fact.declared != fact.desired):
            changed.append(fact)
    return changed


# --- conditions --------------------------------------------------------------------------------------


def _active(status: str, reason: str, message: str) -> ConditionValue:
    return ConditionValue(vocab.COND_SCALER_ACTIVE, status, reason, message)


def quota_condition(md: ModelDeployment | None, facts: list[RoleFacts]) -> ConditionValue:
    t = vocab.COND_SCALER_QUOTA_RESERVED
    if md is not None and facts and all(f.desired == 0 and f.declared == 0 for f in facts):
        return ConditionValue(t, "Unknown", vocab.REASON_PARKED, "parked: no replica of the governed roles asks for "
                              "quota (docs/scale-to-zero.md#how-quota-moves)")
    if md is None or any(f.declared == 0 for f in facts):
        return ConditionValue(t, "Unknown", vocab.REASON_DEPLOYMENT_UNKNOWN,
                              "the deployment or one of its governed roles is not there to report quota")
    waiting = {f.name: f.declared - f.admitted for f in facts if f.declared > f.admitted}
    if not waiting:
        return ConditionValue(t, "True", vocab.REASON_RESERVED,
                              "every replica of the governed roles is admitted by Kueue")
    if (md.status or {}).get("observedGeneration") != md.metadata.generation:
        return ConditionValue(t, "Unknown", vocab.REASON_ADMISSION_IN_FLIGHT,
                              f"ModelDeployment {md.metadata.name} has not reported its current replicas yet")
    new = sum(max(0, f.declared - f.ready) for f in facts)
    per_role = ", ".join(f"{name} {count}" for name, count in waiting.items())
    return ConditionValue(t, "False", vocab.REASON_QUOTA_PENDING,
                          f"{sum(waiting.values())} of {new} new replicas wait for quota ({per_role}); Kueue admits "
                          "a step's replicas of every role together, so none runs until the pool fits all of them")


def _listing(facts: list[RoleFacts], attr: str) -> str:
    return ", ".join(f"{f.name} {getattr(f, attr)}" for f in facts)


# --- the pass ----------------------------------------------------------------------------------------


def _event(scaler: ModelDeploymentScaler, reason: str, type_: str, message: str) -> RecordEvent:
    return parent_event(scaler.metadata, reason, message, type_=type_, kind=vocab.KIND_MODEL_DEPLOYMENT_SCALER)


def _status(scaler: ModelDeploymentScaler, facts: list[RoleFacts], values: list[ConditionValue],
            now: str) -> KubeObject:
    previous = (scaler.status or {}).get("conditions") or []
    out: KubeObject = {
        "replicas": units(facts, "declared"),
        "readyReplicas": units(facts, "ready"),
        "selector": selector(scaler),
        "roleRatios": role_ratios(scaler),
        "roles": [{"name": f.name, "desired": f.desired, "declared": f.declared, "ready": f.ready} for f in facts],
        "phase": parking.state(scaler, units(facts, "ready")),
        "conditions": merge_conditions(values, previous, scaler.metadata.generation, now),
    }
    if scaler.spec.scale_to_zero is not None:
        out["lastRequestTime"] = parking.last_activity(scaler, now, units(facts, "ready"))
    since = parking.parked_since(scaler, now)
    if since is not None:
        out["parkedSince"] = since
    return out


def park_or_wake(result: ScalerResult, decision: parking.Decision, facts: list[RoleFacts],
                 quota: ConditionValue, now: str) -> ScalerResult:
    """The pass that parks or wakes: the scaler's own units are set, and the next pass (the spec
    changed) writes the roles (docs/scale-to-zero.md#idle-after)."""
    scaler = result.scaler
    assert scaler is not None and decision.units is not None
    result.intents.append(SetScalerUnits(namespace=scaler.metadata.namespace, scaler=scaler.metadata.name,
                                         scaler_uid=scaler.metadata.uid, current=scaler.spec.replicas,
                                         units=decision.units))
    result.intents.append(_event(scaler, decision.reason, vocab.EVENT_TYPE_NORMAL, decision.message))
    active = _active("True", vocab.REASON_SCALER_SYNCED, decision.message)
    result.status = _status(scaler, facts, [active, quota], now)
    if decision.units == 0:
        result.status["parkedSince"] = now
    return result


def _conflict_message(md: ModelDeployment, deployment: KubeObject, changed: list[RoleFacts]) -> str:
    parts = []
    for fact in changed:
        managers = [m for m in (replicas_managers(deployment, fact.name) or []) if m != vocab.SCALER_FIELD_MANAGER]
        who = f" (set by {', '.join(managers)})" if managers else ""
        parts.append(f"roles[{fact.name}].replicas is {fact.declared}{who}, not {fact.desired}")
    return (f"ModelDeployment {md.metadata.name}: {'; '.join(parts)}: this scaler owns those fields and sets them "
            "back; omit a governed role's replicas from the files you apply, or delete the scaler to scale by hand "
            "(docs/autoscaling.md#field-ownership)")


def plan(request: ScalerHookRequest, settings: ScalerSettings, *, now: str) -> ScalerResult:
    """One pass: the status, and the write and Events the executor carries out."""
    scaler, deployment, md = request.scaler, request.target, request.deployment
    facts = role_facts(scaler, md)
    quota = quota_condition(md, facts)
    result = ScalerResult(status={}, scaler=scaler, deployment=md)
    ref = f"ModelDeployment {scaler.metadata.namespace}/{scaler.spec.deployment_ref.name}"
    if md is None or md.metadata.deletion_timestamp:
        why = "does not exist" if md is None else "is being deleted"
        active = _active("False", vocab.REASON_DEPLOYMENT_NOT_FOUND,
                         f"{ref} {why}: nothing is written until it exists; create it, or delete this scaler "
                         "(spec.deploymentRef is frozen)")
        result.status = _status(scaler, facts, [active, quota], now)
        return result
    missing = missing_roles(scaler, md)
    if missing:
        declared = ", ".join(r.name for r in md.spec.roles)
        active = _active("False", vocab.REASON_ROLE_NOT_FOUND,
                         f"{ref} declares no role {', '.join(missing)} (its roles: {declared}): nothing is written; "
                         "recreate the scaler with the deployment's role names")
        result.status = _status(scaler, facts, [active, quota], now)
        return result
    refusal = step_refusal(scaler, md, settings.max_pods_per_deployment)
    if refusal is not None:
        return refused(result, refusal, now)
    last = parking.last_activity(scaler, now, units(facts, "ready"))
    decision = parking.decide(scaler, md.metadata.name, last, parking.parked_since(scaler, now), now)
    if decision.units is not None:
        return park_or_wake(result, decision, facts, quota, now)
    result.resync_after = parking.seconds_until_idle(scaler, last, now)
    assert deployment is not None
    changed = conflict(scaler.status, facts)
    differs = any(f.declared != f.desired for f in facts)
    if differs or not ours_everywhere(deployment, facts):
        result.intents.append(ApplyRoleReplicas(
            namespace=md.metadata.namespace, deployment=md.metadata.name, deployment_uid=md.metadata.uid,
            replicas=tuple((f.name, f.desired) for f in facts)))
    if changed:
        message = _conflict_message(md, deployment, changed)
        active = _active("False", vocab.REASON_CONFLICT, message)
        result.intents.append(_event(scaler, vocab.EVENT_REPLICAS_CONFLICT, vocab.EVENT_TYPE_WARNING, message))
    elif differs:
        message = (f"setting {_listing(facts, 'desired')} on {ref} (declared: {_listing(facts, 'declared')}), "
                   f"{scaler.spec.replicas} units")
        active = _active("True", vocab.REASON_SCALER_SYNCED, message)
        result.intents.append(_event(scaler, vocab.EVENT_SCALED, vocab.EVENT_TYPE_NORMAL, message))
    else:
        active = _active("True", vocab.REASON_SCALER_SYNCED,
                         f"{ref} declares {_listing(facts, 'desired')}: {scaler.spec.replicas} units")
    result.status = _status(scaler, facts, [active, quota], now)
    return result


def refused(result: ScalerResult, message: str, now: str) -> ScalerResult:
    """The pass's answer when the step cannot be written: ScaleRefused with the reason, a Warning Event,
    no write, and a retry later (the cause may go away: another role scaled down, the bound raised)."""
    scaler = result.scaler
    assert scaler is not None
    facts = role_facts(scaler, result.deployment)
    quota = quota_condition(result.deployment, facts)
    text = f"the step to {scaler.spec.replicas} units is not written: {message}"
    active = _active("False", vocab.REASON_SCALE_REFUSED, text)
    intents: list[Intent] = [i for i in result.intents
                             if isinstance(i, RecordEvent) and i.reason != vocab.EVENT_SCALED]
    intents.append(_event(scaler, vocab.EVENT_SCALE_REFUSED, vocab.EVENT_TYPE_WARNING, text))
    return replace(result, status=_status(scaler, facts, [active, quota], now), intents=intents,
                   resync_after=RESYNC_REFUSED_SECONDS)


def write_of(result: ScalerResult) -> ApplyRoleReplicas | None:
    return next((i for i in result.intents if isinstance(i, ApplyRoleReplicas)), None)

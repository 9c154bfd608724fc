"""Admission of a ModelDeploymentScaler (docs/autoscaling.md#admission): rules and its review.

Every refusal at once, each with its path, what is wrong and the way out. The deployment and the
namespace's other scalers are read live; a write the API server cannot be asked about is refused
(fail closed). A `/scale` write (HPA, KEDA, `kubectl scale`) reaches the webhook as a `Scale`
object: it is judged as the stored scaler with the new replicas, so an autoscaler's step past a
bound is refused where it is made, and the HPA reports the message.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from pydantic import ValidationError

from app import durations, vocab
from app.admission import fields, review
from app.admission.model import Refusal
from app.api.objects import KubeObject
from app.api.scaler import SCALER_FROZEN_WHY, ModelDeploymentScaler
from app.api.strict import field_path
from app.api.v1 import ModelDeployment
from app.control import scaler as scaling
from app.control.bounds import REMEDY as POD_BOUND_REMEDY
from app.kube.client import ClusterUnreachable

log = logging.getLogger(__name__)

# (namespace, deployment name) -> (the deployment or None, every scaler of the namespace)
ScalerWorldSource = Callable[[str, str], Awaitable[tuple[KubeObject | None, list[KubeObject]]]]
# (namespace, name) -> the stored scaler or None
StoredScalerSource = Callable[[str, str], Awaitable[KubeObject | None]]


@dataclass(frozen=True)
class ScalerSubject:
    """One scaler under review, its stored version, and what the cluster holds beside it."""

    scaler: ModelDeploymentScaler
    old: ModelDeploymentScaler | None = None
    deployment: ModelDeployment | None = None  # None: the deployment does not exist (yet)
    others: list[ModelDeploymentScaler] = field(default_factory=list)  # the namespace's other scalers
    max_pods: int = vocab.DEFAULT_MAX_PODS_PER_DEPLOYMENT


def _role_path(subject: ScalerSubject, name: str) -> str:
    index = next((i for i, r in enumerate(subject.scaler.spec.roles) if r.name == name), 0)
    return f"spec.roles[{index}]"


def frozen_deployment_ref(s: ScalerSubject) -> list[Refusal]:
    if s.old is None or s.old.spec.deployment_ref.name == s.scaler.spec.deployment_ref.name:
        return []
    return [Refusal("spec.deploymentRef.name",
                    f"is frozen: it was {s.old.spec.deployment_ref.name!r}, this update sets "
                    f"{s.scaler.spec.deployment_ref.name!r}", SCALER_FROZEN_WHY)]


def frozen_roles(s: ScalerSubject) -> list[Refusal]:
    if s.old is None:
        return []
    before = {r.name: r.ratio for r in s.old.spec.roles}
    after = {r.name: r.ratio for r in s.scaler.spec.roles}
    if before == after:
        return []
    return [Refusal("spec.roles", f"the set of roles and their ratios is frozen: it was {_ratios(before)}, this "
                    f"update sets {_ratios(after)}", SCALER_FROZEN_WHY)]


def _ratios(roles: dict[str, int]) -> str:
    return ", ".join(f"{name}×{ratio}" for name, ratio in roles.items())


def duplicate_roles(s: ScalerSubject) -> list[Refusal]:
    counts = Counter(r.name for r in s.scaler.spec.roles)
    return [Refusal(_role_path(s, name) + ".name", f"role {name!r} is listed {count} times",
                    "list each role once, with its ratio")
            for name, count in counts.items() if count > 1]


def governed_elsewhere(s: ScalerSubject) -> list[Refusal]:
    """A role has one scaler: two would fight over its replicas."""
    refusals = []
    mine = s.scaler.metadata.name
    for other in s.others:
        if other.metadata.name == mine or other.spec.deployment_ref.name != s.scaler.spec.deployment_ref.name:
            continue
        for role in s.scaler.spec.roles:
            if other.spec.role(role.name) is not None:
                refusals.append(Refusal(
                    _role_path(s, role.name) + ".name",
                    f"role {role.name!r} of ModelDeployment {s.scaler.spec.deployment_ref.name} is already governed "
                    f"by ModelDeploymentScaler {other.metadata.namespace or s.scaler.metadata.namespace}/"
                    f"{other.metadata.name}",
                    "one scaler per role: drop the role here, or delete that scaler and list its roles in this one"))
    return refusals


def undeclared_roles(s: ScalerSubject) -> list[Refusal]:
    if s.deployment is None:
        return []
    declared = ", ".join(r.name for r in s.deployment.spec.roles)
    return [Refusal(_role_path(s, role.name) + ".name",
                    f"ModelDeployment {s.deployment.metadata.name} declares no role {role.name!r} (its roles: "
                    f"{declared})", "name one of the deployment's roles")
            for role in s.scaler.spec.roles if s.deployment.role(role.name) is None]


def role_bound(s: ScalerSubject) -> list[Refusal]:
    refusals = []
    for role in s.scaler.spec.roles:
        want = s.scaler.spec.desired(role)
        if want > vocab.MAX_ROLE_REPLICAS:
            refusals.append(Refusal(
                "spec.replicas",
                f"{s.scaler.spec.replicas} units × ratio {role.ratio} would set {want} replicas on role {role.name}, "
                f"above a role's {vocab.MAX_ROLE_REPLICAS}",
                f"at most {vocab.MAX_ROLE_REPLICAS // role.ratio} units: lower spec.replicas (an HPA's or KEDA's "
                "maxReplicas included)"))
    return refusals


def pod_bound(s: ScalerSubject) -> list[Refusal]:
    """The deployment's Pod bound (docs/admission.md#the-rules, rule 21) with this scaler's replicas."""
    md = s.deployment
    if md is None or undeclared_roles(s):
        return []
    total = scaling.pods_after(s.scaler, md)
    if total <= s.max_pods:
        return []
    fit = scaling.max_units(s.scaler, md, s.max_pods)
    return [Refusal("spec.replicas",
                    f"{s.scaler.spec.replicas} units would declare {total} Pods on ModelDeployment {md.metadata.name}, "
                    f"above {s.max_pods} ({vocab.SETTING_MAX_PODS_PER_DEPLOYMENT})",
                    f"at most {fit} units fit: lower spec.replicas (an HPA's or KEDA's maxReplicas included), or "
                    f"{POD_BOUND_REMEDY}")]


def scale_to_zero_durations(s: ScalerSubject) -> list[Refusal]:
    """spec.scaleToZero's durations within their bounds (docs/scale-to-zero.md#the-scaler-fields)."""
    stz = s.scaler.spec.scale_to_zero
    if stz is None:
        return []
    refusals = []
    idle = durations.seconds(stz.idle_after)
    if idle is not None and idle < vocab.MIN_IDLE_AFTER_SECONDS:
        refusals.append(Refusal(
            "spec.scaleToZero.idleAfter", f"{stz.idle_after} is shorter than {vocab.MIN_IDLE_AFTER_SECONDS}s; idleness "
            f"is learned from the engines' counters at most every {int(vocab.IDLENESS_WRITE_INTERVAL_SECONDS)} s",
            f"set idleAfter to {vocab.MIN_IDLE_AFTER_SECONDS}s or more (e.g. 15m)"))
    wake = durations.seconds(stz.wake_timeout)
    if wake is not None and not vocab.MIN_WAKE_TIMEOUT_SECONDS <= wake <= vocab.MAX_WAKE_TIMEOUT_SECONDS:
        refusals.append(Refusal(
            "spec.scaleToZero.wakeTimeout", f"{stz.wake_timeout} is outside {vocab.MIN_WAKE_TIMEOUT_SECONDS}s.."
            f"{vocab.MAX_WAKE_TIMEOUT_SECONDS // 3600}h; a wake waits for Kueue admission, image pull and model load",
            "set wakeTimeout in minutes (the default 15m suits most models)"))
    return refusals


def _pair(md: ModelDeployment) -> list[str]:
    return [r.name for r in md.spec.roles if r.kind in (vocab.ROLE_KIND_PREFILL, vocab.ROLE_KIND_DECODE)]


def pair_split(s: ScalerSubject) -> list[Refusal]:
    """A prefill/decode pair parks and wakes as a pair: a scaler that can park (spec.replicas 0 or
    scaleToZero) governs both roles of the pair or neither."""
    md = s.deployment
    if md is None or (s.scaler.spec.replicas > 0 and s.scaler.spec.scale_to_zero is None):
        return []
    pair = _pair(md)
    governed = [name for name in pair if s.scaler.spec.role(name) is not None]
    if len(pair) < 2 or len(governed) != 1:
        return []
    missing = next(name for name in pair if name not in governed)
    return [Refusal(_role_path(s, governed[0]) + ".name",
                    f"this scaler can park role {governed[0]!r} but not its pair {missing!r} of ModelDeployment "
                    f"{md.metadata.name}; a prefill/decode pair parks and wakes as a pair",
                    f"list role {missing!r} in spec.roles with its ratio (recreate the scaler: the role set is frozen)")]


def parks_part(s: ScalerSubject) -> list[Refusal]:
    """scaleToZero parks the whole deployment, so the scaler governs every role (a role left serving
    would keep the deployment's endpoint on its Pods, and nothing would wake the rest)."""
    md = s.deployment
    if md is None or s.scaler.spec.scale_to_zero is None:
        return []
    ungoverned = [r.name for r in md.spec.roles if s.scaler.spec.role(r.name) is None]
    if not ungoverned:
        return []
    return [Refusal("spec.scaleToZero",
                    f"ModelDeployment {md.metadata.name} has role(s) {', '.join(ungoverned)} this scaler does not "
                    "govern; scaleToZero parks the whole deployment",
                    "list every role of the deployment in spec.roles, or remove spec.scaleToZero")]


RULES = (frozen_deployment_ref, frozen_roles, duplicate_roles, governed_elsewhere, undeclared_roles, role_bound,
         pod_bound, scale_to_zero_durations, pair_split, parks_part)


def judge(subject: ScalerSubject) -> list[Refusal]:
    return [refusal for rule in RULES for refusal in rule(subject)]


def parse_refusals(obj: Any) -> tuple[ModelDeploymentScaler | None, list[Refusal]]:
    """The scaler, or the schema's objections as refusals."""
    try:
        return ModelDeploymentScaler.model_validate(obj), []
    except ValidationError as exc:
        # The API server's own words for the scaler's schema first (docs/admission.md#offline): a /scale
        # write past a bound reaches here without the API server's check of the whole object.
        if isinstance(obj, dict):
            named = fields.value_refusals(obj, vocab.KIND_MODEL_DEPLOYMENT_SCALER)
            if named:
                return None, named
        refusals = []
        for error in exc.errors(include_url=False, include_input=False):
            path = field_path(tuple(error.get("loc", ())))
            refusals.append(Refusal(path, str(error.get("msg", "invalid")),
                                    "see `kubectl explain modeldeploymentscaler.spec` for the field's type and bounds"))
        return None, refusals


def _parsed_others(objects: list[KubeObject]) -> list[ModelDeploymentScaler]:
    others = []
    for obj in objects:
        try:
            others.append(ModelDeploymentScaler.model_validate(obj))
        except ValidationError:
            continue  # a stored scaler the schema admitted always parses; anything else governs nothing
    return others


def _deployment(obj: KubeObject | None) -> ModelDeployment | None:
    if obj is None:
        return None
    try:
        return ModelDeployment.model_validate(obj)
    except ValidationError:
        return None


# --- the review ----------------------------------------------------------------------------------


def _unreachable(uid: str, detail: str) -> dict[str, Any]:
    message = (f"the API server could not be reached to read what this decision depends on (the deployment and the "
               f"namespace's scalers): {detail} — admission fails closed; retry once the API server is reachable")
    return review.answer(uid, allowed=False, code=503, reason="ServiceUnavailable", message=message)


def _scale_replicas(scale: Any) -> int:
    replicas = ((scale or {}).get("spec") or {}).get("replicas", 0) if isinstance(scale, dict) else None
    if isinstance(replicas, bool) or not isinstance(replicas, int):
        raise review.MalformedReview("a Scale without an integer spec.replicas")
    return replicas


async def _object_under_review(request: review.ReviewRequest, stored: StoredScalerSource) -> tuple[Any, Any]:
    """(the scaler as it would be stored, its stored version): a /scale write is the stored scaler
    with the Scale's replicas."""
    if request.sub_resource != vocab.SCALE_SUBRESOURCE:
        old = request.old_object if request.operation == "UPDATE" else None
        return request.object, old
    if request.kind and request.kind != vocab.KIND_SCALE:
        raise review.MalformedReview(f"a /scale write carries a {request.kind}, not a {vocab.KIND_SCALE}")
    current = await stored(request.namespace, request.name)
    if current is None:
        raise review.MalformedReview(f"a /scale write for ModelDeploymentScaler {request.namespace}/{request.name}, "
                                     "which is not stored")
    spec = dict(current.get("spec") or {})
    spec["replicas"] = _scale_replicas(request.object)
    return {**current, "spec": spec}, current


async def validate_scaler_review(body: Any, world: ScalerWorldSource, stored: StoredScalerSource, *,
                                 max_pods: int) -> dict[str, Any]:
    uid = review.request_uid(body)
    try:
        request = review.read_review(body)
        if request.operation not in ("CREATE", "UPDATE") or request.sub_resource not in ("", vocab.SCALE_SUBRESOURCE):
            return review.answer(uid, allowed=True)
        if not isinstance(request.object, dict):
            raise review.MalformedReview("request.object is missing")
        try:
            async with asyncio.timeout(review.READ_BUDGET_SECONDS):
                obj, old = await _object_under_review(request, stored)
                scaler, refusals = parse_refusals(review._prepare(obj, request))
                if scaler is None:
                    return review.refuse(uid, refusals)
                deployment, listed = await world(scaler.metadata.namespace, scaler.spec.deployment_ref.name)
        except (ClusterUnreachable, TimeoutError) as exc:
            return _unreachable(uid, str(exc) or type(exc).__name__)
        old_scaler = parse_refusals(old)[0] if isinstance(old, dict) else None
        subject = ScalerSubject(scaler=scaler, old=old_scaler, deployment=_deployment(deployment),
                                others=_parsed_others(listed), max_pods=max_pods)
        refusals = judge(subject)
        log.info("validate scaler %s %s/%s%s: %s", request.operation, scaler.metadata.namespace, scaler.metadata.name,
                 f" ({request.sub_resource})" if request.sub_resource else "",
                 "allowed" if not refusals else f"{len(refusals)} refusal(s)")
        return review.refuse(uid, refusals) if refusals else review.answer(uid, allowed=True)
    except review.MalformedReview as exc:
        return review.answer(uid, allowed=False, code=400, reason="BadRequest", message=f"malformed AdmissionReview: {exc}")
    except Exception as exc:  # noqa: BLE001 - the API server must get a parseable answer
        log.exception("scaler review %s failed", uid)
        return review.answer(uid, allowed=False, code=500, reason="InternalError",
                             message=f"the ModelDeploymentScaler webhook failed while reviewing: {type(exc).__name__}: {exc}")


# --- offline: `modeldeployment validate` on a file holding scalers (and their deployments) -----------


def offline_refusals(obj: KubeObject, old: KubeObject | None, deployments: list[KubeObject],
                     scalers: list[KubeObject], *, max_pods: int) -> list[Refusal]:
    """The webhook's rules against the objects of the files given (a deployment in the same file is
    "the existing deployment"; without one, the rules that read it are skipped, as for a scaler
    created before its deployment)."""
    scaler, refusals = parse_refusals(obj)
    if scaler is None:
        return refusals
    namespace = scaler.metadata.namespace
    target = next((d for d in deployments
                   if (d.get("metadata") or {}).get("name") == scaler.spec.deployment_ref.name
                   and (d.get("metadata") or {}).get("namespace", namespace) == namespace), None)
    subject = ScalerSubject(scaler=scaler, old=parse_refusals(old)[0] if old is not None else None,
                            deployment=_deployment(target), others=_parsed_others(scalers), max_pods=max_pods)
    return judge(subject)

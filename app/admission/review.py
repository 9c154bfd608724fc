"""AdmissionReview (admission.k8s.io/v1) in and out (the offline `modeldeployment validate` is app.admission.offline).

Contract with the API server (docs/admission.md):

- a body that is a JSON object always gets HTTP 200 and a well-formed AdmissionReview echoing
  `request.uid` (empty when the body carries none); a review we cannot read is refused in it
  (status code 400), an internal failure too (500) — the API server always gets a parseable answer;
- a body that is not JSON, or JSON but not an object, is not an AdmissionReview at all: the HTTP
  layer answers 400 (app.web.webhooks);
- refusals: `allowed: false`, `status.code` 403, `status.message` every refusal (one per line),
  `status.details.causes[]` one per refusal with its `field`; cluster objects unreadable: 503,
  fail closed;
- mutations: `patchType: JSONPatch`, `patch` base64 of the RFC 6902 operations;
- warnings: `warnings[]` (each kept under the API server's 256-character limit).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from app import vocab
from app.admission import mutate, objectmeta, validate
from app.admission.model import Notice, Refusal, Verdict
from app.api.objects import KubeObject
from app.api.v1 import ModelDeployment
from app.kube.client import ClusterUnreachable
from app.world import World

log = logging.getLogger(__name__)

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
WARNING_LIMIT = 256
# The cluster read must end well inside the webhook's timeoutSeconds (5).
READ_BUDGET_SECONDS = 4.5

WorldSource = Callable[[ModelDeployment], Awaitable[World]]


class MalformedReview(Exception):
    """The body is a JSON object but not a usable AdmissionReview request."""


@dataclass(frozen=True)
class ReviewRequest:
    uid: str
    operation: str
    namespace: str
    name: str
    kind: str
    sub_resource: str
    object: Any
    old_object: Any


def request_uid(body: Any) -> str:
    request = body.get("request") if isinstance(body, dict) else None
    uid = request.get("uid") if isinstance(request, dict) else None
    return uid if isinstance(uid, str) else ""


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def read_review(body: Any) -> ReviewRequest:
    if not isinstance(body, dict):
        raise MalformedReview("the body is not a JSON object")
    if body.get("kind") != KIND or body.get("apiVersion") != API_VERSION:
        raise MalformedReview(f"expected kind {KIND} of apiVersion {API_VERSION}, got kind "
                              f"{str(body.get('kind'))[:64]!r} of apiVersion {str(body.get('apiVersion'))[:64]!r}")
    request = body.get("request")
    if not isinstance(request, dict):
        raise MalformedReview("the AdmissionReview carries no request")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise MalformedReview("request.uid is missing")
    operation = request.get("operation")
    if not isinstance(operation, str) or not operation:
        raise MalformedReview("request.operation is missing")
    kind = request.get("kind")
    return ReviewRequest(
        uid=uid,
        operation=operation,
        namespace=_text(request.get("namespace")),
        name=_text(request.get("name")),
        kind=_text(kind.get("kind")) if isinstance(kind, dict) else "",
        sub_resource=_text(request.get("subResource")),
        object=request.get("object"),
        old_object=request.get("oldObject"),
    )


def answer(uid: str, *, allowed: bool, code: int | None = None, reason: str | None = None, message: str = "",
           causes: list[dict[str, str]] | None = None, warnings: list[str] | None = None,
           patch: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if not allowed:
        status: dict[str, Any] = {"status": "Failure", "code": code or 403, "reason": reason or "Forbidden",
                                  "message": message}
        if causes:
            status["details"] = {"causes": causes}
        response["status"] = status
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch, separators=(",", ":")).encode()).decode()
    if warnings:
        response["warnings"] = [w if len(w) <= WARNING_LIMIT else w[: WARNING_LIMIT - 1] + "…" for w in warnings]
    return {"apiVersion": API_VERSION, "kind": KIND, "response": response}


def refusal_message(refusals: list[Refusal]) -> str:
    """The text both the webhook and `modeldeployment validate` print: one refusal per line."""
    lines = [str(r) for r in refusals]
    if len(lines) == 1:
        return lines[0]
    return f"{len(lines)} problems:\n" + "\n".join(lines)


def warning_lines(notices: list[Notice]) -> list[str]:
    return [str(n) for n in notices]


def refuse(uid: str, refusals: list[Refusal], warnings: list[Notice] | None = None) -> dict[str, Any]:
    causes = [{"reason": "FieldValueForbidden", "field": r.path, "message": f"{r.problem} — {r.remedy}"}
              for r in refusals]
    return answer(uid, allowed=False, code=403, reason="Forbidden", message=refusal_message(refusals),
                  causes=causes, warnings=warning_lines(warnings or []))


def _unreachable(uid: str, detail: str) -> dict[str, Any]:
    message = (f"the API server could not be reached to read the cluster objects this decision depends on "
               f"(InstanceTypes, the KVCachePoolBinding, its pool and backend): {detail} — admission fails closed; "
               "retry once the API server is reachable")
    return answer(uid, allowed=False, code=503, reason="ServiceUnavailable", message=message)


def _prepare(obj: KubeObject, request: ReviewRequest) -> KubeObject:
    """The object with the namespace and name the request carries, when the object itself omits them."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return obj
    patched = dict(meta)
    if not patched.get("namespace") and request.namespace:
        patched["namespace"] = request.namespace
    if not patched.get("name"):
        if request.name:
            patched["name"] = request.name
        elif objectmeta.generated_name(patched) is not None:
            # The API server keeps 58 characters and appends five random ones; judge the longest names by that.
            patched["name"] = objectmeta.generated_name(patched)
    return {**obj, "metadata": patched}


def _skip(request: ReviewRequest) -> str | None:
    """Why a request is not ours to judge (allowed unchanged), or None."""
    if request.operation not in ("CREATE", "UPDATE"):
        return f"operation {request.operation}"
    if request.sub_resource:
        return f"subresource {request.sub_resource}"
    if request.kind and request.kind != vocab.KIND_MODEL_DEPLOYMENT:
        return f"kind {request.kind}"
    return None


async def _read_world(source: WorldSource, md: ModelDeployment) -> World:
    try:
        async with asyncio.timeout(READ_BUDGET_SECONDS):
            return await source(md)
    except TimeoutError as exc:
        raise ClusterUnreachable(f"no answer within {READ_BUDGET_SECONDS:g}s") from exc
    except ClusterUnreachable:
        raise
    except Exception as exc:  # noqa: BLE001 - any failed read fails closed with its reason
        log.warning("reading the cluster objects of %s/%s failed: %r", md.metadata.namespace, md.metadata.name, exc)
        raise ClusterUnreachable(f"{type(exc).__name__}: {exc}") from exc


# What a handler decides once the request is ours: (uid, request, the object with its namespace and
# name filled in, when the review started) -> the answer.
Judge = Callable[[str, ReviewRequest, dict[str, Any], float], Awaitable[dict[str, Any]]]


async def _handle_review(body: Any, what: str, judge: Judge) -> dict[str, Any]:
    """Both handlers' frame: requests that are not ours are allowed unchanged, the object must be
    there; a malformed review answers 400 and any failure 500, so the API server always gets an answer."""
    uid = request_uid(body)
    started = time.monotonic()
    try:
        request = read_review(body)
        if _skip(request) is not None:
            return answer(uid, allowed=True)
        if not isinstance(request.object, dict):
            raise MalformedReview("request.object is missing")
        return await judge(uid, request, _prepare(request.object, request), started)
    except MalformedReview as exc:
        return answer(uid, allowed=False, code=400, reason="BadRequest", message=f"malformed AdmissionReview: {exc}")
    except Exception as exc:  # noqa: BLE001 - the API server must get a parseable answer
        log.exception("%s review %s failed", what, uid)
        return answer(uid, allowed=False, code=500, reason="InternalError",
                      message=f"the ModelDeployment webhook failed while reviewing: {type(exc).__name__}: {exc}")


async def mutate_review(body: Any, source: WorldSource) -> dict[str, Any]:
    async def judge(uid: str, request: ReviewRequest, obj: dict[str, Any], started: float) -> dict[str, Any]:
        finalizer = mutate.finalizer_on_create(obj, request.operation)
        if not mutate.roles_to_default(obj):
            return answer(uid, allowed=True, patch=finalizer)
        md, _errors = validate.parse(obj)
        if md is None:
            # Not a valid ModelDeployment: the schema check after this webhook reports it precisely.
            return answer(uid, allowed=True, patch=finalizer)
        try:
            world = await _read_world(source, md)
        except ClusterUnreachable as exc:
            return _unreachable(uid, str(exc))
        ops = mutate.accelerator_defaults(obj, world)
        log.info("mutate %s %s/%s: %d default(s) in %.0f ms", request.operation, md.metadata.namespace,
                 md.metadata.name, len(ops), (time.monotonic() - started) * 1000)
        return answer(uid, allowed=True, patch=finalizer + ops)

    return await _handle_review(body, "mutating", judge)


async def validate_review(body: Any, source: WorldSource, *, kv_cache_dtype_owned: bool,
                          max_pods: int = vocab.DEFAULT_MAX_PODS_PER_DEPLOYMENT) -> dict[str, Any]:
    async def judge(uid: str, request: ReviewRequest, obj: dict[str, Any], started: float) -> dict[str, Any]:
        old = request.old_object if request.operation == "UPDATE" and isinstance(request.old_object, dict) else None
        if request.operation == "UPDATE" and old is None:
            raise MalformedReview("an UPDATE carries no request.oldObject")
        world: World | None = None
        md, _errors = validate.parse(obj)
        if md is not None and not md.metadata.deletion_timestamp:
            try:
                world = await _read_world(source, md)
            except ClusterUnreachable as exc:
                return _unreachable(uid, str(exc))
        verdict = validate.validate(obj, old, world, kv_cache_dtype_owned=kv_cache_dtype_owned, max_pods=max_pods)
        meta = found if isinstance(found := obj.get("metadata"), dict) else {}
        log.info("validate %s %s/%s: %s (%d refusal(s), %d warning(s)) in %.0f ms", request.operation,
                 meta.get("namespace"), meta.get("name"), "allowed" if verdict.allowed else "refused",
                 len(verdict.refusals), len(verdict.warnings), (time.monotonic() - started) * 1000)
        return verdict_answer(uid, verdict)

    return await _handle_review(body, "validating", judge)


def verdict_answer(uid: str, verdict: Verdict) -> dict[str, Any]:
    if verdict.refusals:
        return refuse(uid, verdict.refusals, verdict.warnings)
    return answer(uid, allowed=True, warnings=warning_lines(verdict.warnings))

"""AdmissionReview (admission.k8s.io/v1) in and out, and the offline `modeldeployment validate`.

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
import copy
import json
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable

from app import vocab
from app.admission import corrections, fields, files, mutate, objectmeta, validate
from app.admission.model import Notice, Refusal, Verdict
from app.api.objects import KubeObject
from app.api.v1 import ModelDeployment
from app.kube.client import ClusterUnreachable
from app.world import World
from app.yamlread import Document

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
        if not mutate.roles_to_default(obj):
            return answer(uid, allowed=True)
        md, _errors = validate.parse(obj)
        if md is None:
            # Not a valid ModelDeployment: the schema check after this webhook reports it precisely.
            return answer(uid, allowed=True)
        try:
            world = await _read_world(source, md)
        except ClusterUnreachable as exc:
            return _unreachable(uid, str(exc))
        ops = mutate.accelerator_defaults(obj, world)
        log.info("mutate %s %s/%s: %d default(s) in %.0f ms", request.operation, md.metadata.namespace,
                 md.metadata.name, len(ops), (time.monotonic() - started) * 1000)
        return answer(uid, allowed=True, patch=ops)

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


# --- offline: `modeldeployment validate -f md.yaml [--world DIR] [--old old.yaml]` -------------


def _review(obj: KubeObject, old: KubeObject | None, uid: str) -> dict[str, Any]:
    meta = found if isinstance(found := obj.get("metadata"), dict) else {}
    return {"apiVersion": API_VERSION, "kind": KIND, "request": {
        "uid": uid, "operation": "UPDATE" if old is not None else "CREATE",
        "kind": {"group": vocab.GROUP, "version": vocab.VERSION, "kind": vocab.KIND_MODEL_DEPLOYMENT},
        "resource": {"group": vocab.GROUP, "version": vocab.VERSION, "resource": vocab.PLURAL_MODEL_DEPLOYMENTS},
        "namespace": meta.get("namespace", ""), "name": meta.get("name", ""),
        "object": obj, "oldObject": old,
    }}


async def review_offline(obj: KubeObject, old: KubeObject | None, world: World, *,
                         kv_cache_dtype_owned: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """What the API server would do: the mutating webhook, its patch applied, then the validating one."""

    async def source(_md: ModelDeployment) -> World:
        return world

    mutated = await mutate_review(_review(obj, old, "offline-mutate"), source)
    response = mutated["response"]
    if not response["allowed"]:
        return mutated, mutated
    if response.get("patch"):
        obj = mutate.apply_patch(obj, json.loads(base64.b64decode(response["patch"])))
    validated = await validate_review(_review(obj, old, "offline-validate"), source,
                                      kv_cache_dtype_owned=kv_cache_dtype_owned)
    return mutated, validated


@dataclass(frozen=True)
class OfflineVerdict:
    """What `modeldeployment validate` prints for one object: the cluster's answer, as text."""

    allowed: bool
    message: str  # the refusals, one per line (as the webhook's status.message), "" when allowed
    warnings: list[str]


def _message_lines(message: str) -> list[str]:
    """The webhook's status.message back as its lines (it prefixes "N problems:" above one)."""
    lines = message.splitlines()
    if len(lines) > 1 and lines[0].endswith("problems:"):
        return lines[1:]
    return lines


def offline_verdict(obj: KubeObject, old: KubeObject | None, world: World, *,
                    kv_cache_dtype_owned: bool, extra: list[Refusal] | None = None) -> OfflineVerdict:
    """The API server's own checks first (apiVersion, kind, strict unknown fields, as kubectl's
    strict field validation asks), then both webhooks on what the user meant (a near-miss field
    renamed), every refusal reported together; `extra`: refusals about the file (a duplicate)."""
    strict = fields.api_server_refusals(obj) + list(extra or [])
    target = corrections.corrected(obj) if strict else obj
    _mutated, validated = asyncio.run(review_offline(target, old, world, kv_cache_dtype_owned=kv_cache_dtype_owned))
    response = validated["response"]
    warnings = list(response.get("warnings") or [])
    rules = [] if response["allowed"] else _message_lines(response["status"]["message"])
    return _combined(strict, rules, warnings)


def _combined(strict: list[Refusal], rules: list[str], warnings: list[str]) -> OfflineVerdict:
    """The API server's refusals, then the rules' lines that name a field they did not (a field the
    API server's checks refused already is named once, by them)."""
    if not strict and not rules:
        return OfflineVerdict(True, "", warnings)
    refused = {r.path for r in strict}
    lines = [str(r) for r in strict] + [line for line in rules if not corrections.covered(line.split(": ", 1)[0], refused)]
    message = lines[0] if len(lines) == 1 else f"{len(lines)} problems:\n" + "\n".join(lines)
    return OfflineVerdict(False, message, warnings)


def scaler_verdict(obj: KubeObject, old: KubeObject | None, deployments: list[KubeObject], scalers: list[KubeObject],
                   *, extra: list[Refusal] | None = None) -> OfflineVerdict:
    """A ModelDeploymentScaler as the cluster judges it: the API server's checks against its CRD
    (apiVersion, kind, unknown fields, types, bounds, the name), then the scaler webhook's rules on
    what the user meant (docs/admission.md#offline)."""
    from app.admission import scaler as scaler_admission

    kind = vocab.KIND_MODEL_DEPLOYMENT_SCALER
    strict = fields.api_server_refusals(obj, kind) + list(extra or [])
    target = corrections.corrected(obj, kind) if strict else obj
    rules = scaler_admission.offline_refusals(target, old, deployments, scalers,
                                              max_pods=vocab.DEFAULT_MAX_PODS_PER_DEPLOYMENT)
    return _combined(strict, [str(r) for r in rules], [])


@dataclass(frozen=True)
class Judged:
    """One object of a file with the cluster's verdict on it (`modeldeployment validate|render`)."""

    kind: str  # vocab.KIND_MODEL_DEPLOYMENT or vocab.KIND_MODEL_DEPLOYMENT_SCALER
    label: str  # how the verdict names it: `team-a/qwen-chat`, `ModelDeploymentScaler team-a/pd`, with its file
    obj: KubeObject  # as judged (namespace `default` when unset)
    verdict: OfflineVerdict


def _label(kind: str, meta: dict[str, Any], where: str | None) -> str:
    name = meta.get("name")
    if name is not None and not isinstance(name, str):
        name = fields._shown(name)
    elif not name:
        prefix = meta.get("generateName")
        name = f"{prefix}<5 random characters>" if isinstance(prefix, str) and prefix else "<no name>"
    namespace = meta.get("namespace")
    text = f"{namespace if isinstance(namespace, str) else fields._shown(namespace)}/{name}"
    if kind != vocab.KIND_MODEL_DEPLOYMENT:
        text = f"{kind} {text}"
    return f"{text} ({where})" if where else text


def _identity(kind: str, meta: dict[str, Any]) -> tuple[str, str, str] | None:
    name = meta.get("name")
    return (kind, str(meta.get("namespace")), name) if isinstance(name, str) and name else None


def duplicate_documents(judged: list[tuple[str, KubeObject, str]]) -> dict[int, list[Refusal]]:
    """A second document with the kind, namespace and name of an earlier one (index -> refusal):
    `kubectl apply` would apply both, the later over the earlier, so one file describes two objects
    where the cluster keeps one."""
    first: dict[tuple[str, str, str], str] = {}
    out: dict[int, list[Refusal]] = {}
    for index, (kind, obj, where) in enumerate(judged):
        key = _identity(kind, obj["metadata"]) if isinstance(obj.get("metadata"), dict) else None
        if key is None:
            continue
        if key in first:
            out[index] = [Refusal("metadata.name", f"{kind} {key[1]}/{key[2]} is also the document at {first[key]}: "
                                  "applied together, the later replaces the earlier",
                                  "keep one document per object: merge the two, or rename one")]
        else:
            first[key] = where
    return out


def _stored(obj: KubeObject, olds: list[KubeObject]) -> KubeObject | None:
    meta = obj["metadata"]
    by_name = {str((o.get("metadata") or {}).get("name")): o for o in olds if isinstance(o.get("metadata"), dict)}
    stored = by_name.get(meta["name"]) if isinstance(meta.get("name"), str) else None
    if stored is None and len(olds) == 1:
        stored = olds[0]
    if stored is not None and isinstance(stored.get("metadata"), dict):
        stored["metadata"].setdefault("namespace", meta["namespace"])
    return stored


def judge_documents(docs: list[Document], olds: list[KubeObject], cluster: World, *,
                    kv_cache_dtype_owned: bool, name_files: bool = False) -> list[Judged]:
    """Every ModelDeployment and ModelDeploymentScaler of a file (near misses of either kind
    included), judged as the cluster would; `--old` objects make each an update of its stored version."""
    picked: list[tuple[str, KubeObject, str]] = []
    for doc in docs:
        kind = corrections.judged_kind(doc.obj)
        if kind is None:
            continue
        obj = copy.deepcopy(doc.obj)
        if not isinstance(obj.get("metadata"), dict):
            obj["metadata"] = {} if obj.get("metadata") is None else obj["metadata"]
        if isinstance(obj["metadata"], dict) and not obj["metadata"].get("namespace"):
            obj["metadata"]["namespace"] = "default"
        picked.append((kind, obj, f"{doc.file}:{doc.line}"))
    usable = [(kind, obj) for kind, obj, _where in picked if isinstance(obj["metadata"], dict)]
    duplicates = duplicate_documents(picked)
    deployments = [obj for kind, obj in usable if kind == vocab.KIND_MODEL_DEPLOYMENT]
    scalers = [obj for kind, obj in usable if kind == vocab.KIND_MODEL_DEPLOYMENT_SCALER]
    old_deployments = [o for o in olds if corrections.judged_kind(o) == vocab.KIND_MODEL_DEPLOYMENT]
    old_scalers = [o for o in olds if corrections.judged_kind(o) == vocab.KIND_MODEL_DEPLOYMENT_SCALER]
    out: list[Judged] = []
    for index, (kind, obj, where) in enumerate(picked):
        meta = obj["metadata"] if isinstance(obj["metadata"], dict) else {"namespace": "default"}
        extra = duplicates.get(index, [])
        if kind == vocab.KIND_MODEL_DEPLOYMENT:
            stored = _stored(obj, old_deployments) if isinstance(obj["metadata"], dict) else None
            verdict = offline_verdict(obj, stored, cluster, kv_cache_dtype_owned=kv_cache_dtype_owned, extra=extra)
        else:
            stored = _stored(obj, old_scalers) if isinstance(obj["metadata"], dict) else None
            verdict = scaler_verdict(obj, stored, deployments, scalers, extra=extra)
        if verdict.allowed and not meta.get("name") and meta.get("generateName"):
            verdict = OfflineVerdict(True, "", [*verdict.warnings, "metadata.generateName: `kubectl create` takes it; "
                                                "`kubectl apply` refuses generateName (it needs metadata.name)"])
        out.append(Judged(kind, _label(kind, meta, where if name_files else None), obj, verdict))
    return out


def no_objects(file: Path) -> str:
    return (f"{file} holds no ModelDeployment or ModelDeploymentScaler — pass a YAML file with a document of "
            f"apiVersion: {vocab.API_VERSION} and one of those kinds (examples/ has some)")


def validate_offline(file: Path, world: Path | None, old: Path | None, *, kv_cache_dtype_owned: bool | None = None,
                     out: Any = None, err: Any = None) -> int:
    """Runs the API server's checks and the webhooks' code on a file; prints refusals (exit 1) or
    `allowed` and warnings (exit 0)."""
    out = out or sys.stdout
    err = err or sys.stderr
    if kv_cache_dtype_owned is None:
        from app.settings import Settings

        kv_cache_dtype_owned = Settings().kv_cache_dtype_owned
    try:
        docs = files.read_documents(file, "-f")
        olds = files.read_objects(old, "--old") if old is not None else []
        cluster = World.of(files.read_objects(world, "--world")) if world is not None else World()
    except files.InputError as exc:  # missing or unreadable files, YAML errors: one line each
        print(f"error: {exc}", file=err)
        return 2
    quiet = log.level
    log.setLevel(logging.WARNING)  # the verdict is printed; the per-review log line is for the service
    try:
        judged = judge_documents(docs, olds, cluster, kv_cache_dtype_owned=kv_cache_dtype_owned,
                                 name_files=file != files.STDIN and file.is_dir())
    finally:
        log.setLevel(quiet)
    if not judged:
        print(f"error: {no_objects(file)}", file=err)
        return 2
    return print_judged(judged, out, err)


def print_judged(judged: list[Judged], out: Any, err: Any) -> int:
    """`<label>: allowed`, or `<label>: refused` and every refusal; warnings to `err` as kubectl prints them."""
    status = 0
    for item in judged:
        for warning in item.verdict.warnings:
            print(f"Warning: {warning}", file=err)
        if item.verdict.allowed:
            print(f"{item.label}: allowed", file=out)
        else:
            status = 1
            print(f"{item.label}: refused", file=out)
            print(item.verdict.message, file=out)
    return status

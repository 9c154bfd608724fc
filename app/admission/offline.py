"""The offline `modeldeployment validate -f md.yaml [--world DIR] [--old old.yaml]` (docs/admission.md#offline).

Each ModelDeployment and ModelDeploymentScaler of a file is judged as the cluster would judge it:
the API server's own checks first, then the webhooks' code through the same AdmissionReview
(`app.admission.review`) and the scaler's rules (`app.admission.scaler`).
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app import vocab
from app.admission import corrections, fields, files, mutate, objectmeta
from app.admission import scaler as scaler_admission
from app.admission.model import Refusal
from app.admission.review import API_VERSION, KIND, mutate_review, validate_review
from app.admission.review import log as review_log
from app.api.objects import KubeObject
from app.api.v1 import ModelDeployment
from app.world import World
from app.yamlread import Document

def api_server_refusals(raw: KubeObject, kind: str = vocab.KIND_MODEL_DEPLOYMENT) -> list[Refusal]:
    """Everything the API server refuses before a webhook runs, in its order: apiVersion and kind,
    unknown fields (strict), metadata, then the spec's values against the CRD schema."""
    return (fields.type_refusals(raw, kind) + fields.unknown_fields(raw, kind) + objectmeta.metadata_refusals(raw, kind)
            + fields.value_refusals(raw, kind))


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
    strict = api_server_refusals(obj) + list(extra or [])
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
    kind = vocab.KIND_MODEL_DEPLOYMENT_SCALER
    strict = api_server_refusals(obj, kind) + list(extra or [])
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
    quiet = review_log.level
    review_log.setLevel(logging.WARNING)  # the verdict is printed; the per-review log line is for the service
    try:
        judged = judge_documents(docs, olds, cluster, kv_cache_dtype_owned=kv_cache_dtype_owned,
                                 name_files=file != files.STDIN and file.is_dir())
    finally:
        review_log.setLevel(quiet)
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

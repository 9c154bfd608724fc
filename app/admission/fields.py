"""What the API server checks before any webhook, for the offline `modeldeployment validate`.

On a cluster, kubectl sends `fieldValidation=Strict` (its default since 1.27), so the API server
refuses a ModelDeployment with a field its CRD schema does not declare (`replica: 4`,
`instancetype:`) and one of another apiVersion or kind, before any webhook sees it. The offline
command must answer the same, so it walks the object against the very schema the CRD is
generated from (`app.api.crd`) and names a near miss ("did you mean").

Pure functions; the webhook never needs them (the API server has done this by the time it calls).
"""

from __future__ import annotations

import copy
import difflib
from functools import lru_cache
from typing import Any

from app import vocab
from app.admission.model import Refusal
from app.api.objects import KubeObject

# ObjectMeta's fields (k8s.io/apimachinery metav1.ObjectMeta, JSON names): the CRD schema says only
# `type: object` for metadata, the API server checks it as ObjectMeta.
OBJECT_META_FIELDS = (
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
    "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations",
    "ownerReferences", "finalizers", "managedFields",
)
UNKNOWN_REMEDY = "remove it: the API server refuses fields its schema does not declare (kubectl explain modeldeployment.spec lists them)"
NEAR_MISS_CUTOFF = 0.75


@lru_cache(maxsize=1)
def _schema() -> dict[str, Any]:
    from app.api.crd import model_deployment_crd

    schema: dict[str, Any] = model_deployment_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def near_miss(key: str, known: list[str]) -> str | None:
    """The declared field `key` most likely meant: same letters in another case, else a close spelling."""
    folded = [k for k in known if k.lower() == key.lower()]
    if folded:
        return folded[0]
    close = difflib.get_close_matches(key, known, n=1, cutoff=NEAR_MISS_CUTOFF)
    return close[0] if close else None


def _unknown(path: str, key: str, known: list[str]) -> Refusal:
    guess = near_miss(key, known)
    problem = f"unknown field {key!r}" + (f" (did you mean {guess!r}?)" if guess else "")
    remedy = f"rename it to {guess!r}" if guess else UNKNOWN_REMEDY
    return Refusal(f"{path}.{key}" if path else key, problem, remedy)


def _walk(value: Any, schema: dict[str, Any], path: str, out: list[Refusal]) -> None:
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    if isinstance(value, dict):
        properties = schema.get("properties")
        if properties is not None:
            known = list(properties)
            for key, item in value.items():
                if key not in properties:
                    out.append(_unknown(path, str(key), known))
                else:
                    _walk(item, properties[key], f"{path}.{key}" if path else str(key), out)
        elif isinstance(schema.get("additionalProperties"), dict):
            for key, item in value.items():
                _walk(item, schema["additionalProperties"], f"{path}.{key}", out)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            _walk(item, schema["items"], f"{path}[{index}]", out)


def unknown_fields(raw: KubeObject) -> list[Refusal]:
    """Every field the CRD schema (or ObjectMeta) does not declare, with its near miss."""
    out: list[Refusal] = []
    _walk(raw, _schema(), "", out)  # metadata: `type: object` there, checked as ObjectMeta below
    meta = raw.get("metadata")
    if isinstance(meta, dict):
        out += [_unknown("metadata", str(key), list(OBJECT_META_FIELDS)) for key in meta
                if key not in OBJECT_META_FIELDS]
    return out


def is_candidate(obj: KubeObject) -> bool:
    """An object the user meant as a ModelDeployment: that kind, or a near miss of it in our group."""
    kind = obj.get("kind")
    if kind == vocab.KIND_MODEL_DEPLOYMENT:
        return True
    api_version = obj.get("apiVersion")
    ours = isinstance(api_version, str) and api_version.split("/")[0] == vocab.GROUP
    return ours and isinstance(kind, str) and near_miss(kind, [vocab.KIND_MODEL_DEPLOYMENT]) is not None


def type_refusals(raw: KubeObject) -> list[Refusal]:
    """apiVersion and kind: the API server serves ModelDeployment as worker.gpustack.ai/v1 only."""
    out: list[Refusal] = []
    api_version = raw.get("apiVersion")
    if api_version != vocab.API_VERSION:
        out.append(Refusal("apiVersion", f"{api_version!r} does not serve ModelDeployment (no matches for kind "
                           f"ModelDeployment in version {api_version})", f"set apiVersion: {vocab.API_VERSION}"))
    kind = raw.get("kind")
    if kind != vocab.KIND_MODEL_DEPLOYMENT:
        out.append(Refusal("kind", f"{kind!r} is not a kind of {vocab.API_VERSION} (did you mean "
                           f"{vocab.KIND_MODEL_DEPLOYMENT!r}?)", f"set kind: {vocab.KIND_MODEL_DEPLOYMENT}"))
    return out


def corrected(raw: KubeObject) -> KubeObject:
    """The object with each unknown field that has an undeclared near miss renamed to it, so that
    the rules can still run on what the user meant (the refusal of the unknown field stands)."""
    fixed = copy.deepcopy(raw)
    fixed["apiVersion"], fixed["kind"] = vocab.API_VERSION, vocab.KIND_MODEL_DEPLOYMENT
    _rename(fixed, _schema())
    return fixed


def _rename(value: Any, schema: dict[str, Any]) -> None:
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    if isinstance(value, dict) and schema.get("properties") is not None:
        properties = schema["properties"]
        for key in [k for k in list(value) if k not in properties]:
            guess = near_miss(str(key), list(properties))
            if guess is not None and guess not in value:
                value[guess] = value.pop(key)
        for key, item in value.items():
            if key in properties:
                _rename(item, properties[key])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _rename(item, schema["items"])

"""What the user meant, for the offline commands: which objects of a file are meant as
ModelDeployments or ModelDeploymentScalers (`judged_kind`), and the object as the user meant it, for the webhooks' rules in
`modeldeployment validate`.

`app.admission.fields` names everything the API server would refuse; `corrected` then reads the
object the way the user most likely meant it (a near-miss field renamed, `"2"` read as 2, `vllm` as
`vLLM`, a value out of bounds left to its default), against the same CRD schema and with the same
readings of each value (`fields`' schema walk), so that the webhooks' rules still run and report
alongside without repeating a problem `fields` named. Pure functions.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from app import vocab
from app.admission.fields import (
    JUDGED_KINDS,
    _bounds_refusal,
    _declared_type,
    _int_or_string,
    _items_refusal,
    _rename,
    _schema,
    _shown,
    _string_refusal,
    _type_ok,
    meant_kind,
    near_miss,
)
from app.api.objects import KubeObject


# The group's other kinds: none is a misspelt ModelDeployment or ModelDeploymentScaler.
OTHER_KINDS = (vocab.KIND_INSTANCE_TYPE, vocab.KIND_KV_CACHE_POOL, vocab.KIND_KV_CACHE_POOL_BINDING,
               vocab.KIND_KV_CACHE_BACKEND, vocab.KIND_MODEL_ARTIFACT)


def judged_kind(obj: KubeObject) -> str | None:
    """The kind the offline commands judge `obj` as: ModelDeployment or ModelDeploymentScaler (that
    kind, or in our group a near miss of one, the closer one), or None."""
    kind = obj.get("kind")
    if kind in JUDGED_KINDS:
        return str(kind)
    api_version = obj.get("apiVersion")
    ours = isinstance(api_version, str) and api_version.split("/")[0] == vocab.GROUP
    if not ours or not isinstance(kind, str) or kind in OTHER_KINDS or near_miss(kind, list(JUDGED_KINDS)) is None:
        return None
    return meant_kind(kind)


def covered(path: str, refused: set[str]) -> bool:
    """Whether a refusal at `path` repeats one of `refused` (the same field, or a field inside it)."""
    return any(path == p or path.startswith(p + ".") or path.startswith(p + "[") for p in refused)


def corrected(raw: KubeObject, kind: str = vocab.KIND_MODEL_DEPLOYMENT) -> KubeObject:
    """The object as the user meant it, for the webhooks' rules (the refusals above stand): each
    unknown field with an undeclared near miss renamed to it, a value of the wrong JSON type read as
    the declared one where that is unambiguous (`"2"` -> 2, `0.33` -> "0.33", `vllm` -> `vLLM`), and
    an optional value the schema refuses left out, so that its default applies."""
    fixed = copy.deepcopy(raw)
    fixed["apiVersion"], fixed["kind"] = vocab.API_VERSION, kind
    _rename(fixed, _schema(kind))
    spec = fixed.get("spec")
    if isinstance(spec, dict):
        _fix_object(spec, _schema(kind)["properties"]["spec"])
    return fixed


_MISSING = object()


def _fixed_value(value: Any, schema: dict[str, Any]) -> Any:
    """The value read as its declared type, or _MISSING when it cannot be (or breaks a bound)."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return value
    want = _declared_type(schema)
    if want in ("integer", "int-or-string") and isinstance(value, float) and value.is_integer():
        value = int(value)
    elif want == "integer" and isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()):
        value = int(value)
    elif want == "string" and isinstance(value, (bool, int, float)):
        value = _shown(value)
    elif want == "boolean" and isinstance(value, str) and value.strip().lower() in ("true", "false"):
        value = value.strip().lower() == "true"
    elif want == "array" and isinstance(value, str) and (schema.get("items") or {}).get("type") == "string":
        value = value.split()  # `extraArgs: "-tp 2"`
    elif want == "array" and isinstance(value, dict) and (schema.get("items") or {}).get("type") == "object":
        value = [value]  # a list item written without its '- '
    elif want == "object" and isinstance(value, (str, int, float)) and schema.get("required"):
        value = {schema["required"][0]: value}  # `engine: vLLM`, `model: Qwen/...`
    if isinstance(value, str) and schema.get("enum") is not None and value not in schema["enum"]:
        folded = [e for e in schema["enum"] if str(e).lower() == value.lower()]
        value = folded[0] if folded else _MISSING
    if value is _MISSING or not _type_ok(value, schema):
        return _MISSING
    if isinstance(value, dict):
        _fix_object(value, schema)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            kept = [_fixed_value(item, items) for item in value]
            value[:] = [item for item in kept if item is not _MISSING]
        if _items_refusal("", "", value, schema) is not None:
            return _MISSING
    elif isinstance(value, str) and schema.get("enum") is None and not _int_or_string(schema):
        # (A quantity that does not parse is kept: the rules that read it name it, and its default
        # would make others refuse what the user did not write.)
        if _string_refusal("", "", value, schema, False) is not None:
            return _MISSING
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if _bounds_refusal("", "", value, schema) is not None:
            return _MISSING
    return value


def _fix_object(value: dict[str, Any], schema: dict[str, Any]) -> None:
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    for key in list(value):
        if key not in properties:
            continue
        if value[key] is None:
            del value[key]  # the API server prunes a null
            continue
        fixed = _fixed_value(value[key], properties[key])
        if fixed is not _MISSING:
            value[key] = fixed
        elif key not in required:
            del value[key]

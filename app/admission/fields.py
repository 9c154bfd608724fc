"""What the API server checks before any webhook, for the offline `modeldeployment validate`.

On a cluster, kubectl sends `fieldValidation=Strict` (its default since 1.27), so the API server
refuses a ModelDeployment with a field its CRD schema does not declare (`replica: 4`,
`instancetype:`), one of another apiVersion or kind, a value of the wrong type (`replicas: "2"`,
`version: 0.33`), outside its bounds or enum, a missing required field, and a `metadata.name` that
is not a DNS-1123 subdomain, all before any webhook sees it. The offline command must answer the
same, so it walks the object against the very schema the CRD is generated from (`app.api.crd`):
the types, enums, bounds, lengths, patterns and required fields come from there, never from a
hand list. Each refusal names the field, what is wrong (echoing the value) and the fix.

`app.admission.corrections.corrected` then gives the webhooks what the user meant (a near-miss
field renamed, `"2"` read as 2, `vllm` as `vLLM`, a value out of bounds left to its default), so
that their rules still run and report alongside, without repeating a problem named here.

Pure functions; the webhook never needs them (the API server has done this by the time it calls).
"""

from __future__ import annotations

import copy
import difflib
import json
import re
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
NEAR_MISS_CUTOFF = 0.75

# The API server's name rules (k8s.io/apimachinery validation): a custom resource's name is a
# DNS-1123 subdomain, its namespace a DNS-1123 label.
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
SUBDOMAIN_MAX = 253
LABEL_MAX = 63
SUBDOMAIN_RULE = ("a lowercase DNS-1123 subdomain: lowercase letters, digits, '-' and '.', starting and ending "
                  f"with a letter or digit, at most {SUBDOMAIN_MAX} characters")
LABEL_RULE = ("a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a letter or digit, "
              f"at most {LABEL_MAX} characters")

# The CRD's patterns, in words (the others are quoted as they are).
PATTERN_WORDS = {
    DNS1123_LABEL.pattern: f"is not {LABEL_RULE}",
    "^/": "is not an absolute path (it must start with '/')",
}
QUANTITY_WORDS = "is not a Kubernetes quantity (a number with an optional suffix, as in 2, 500m or 16Gi)"

JSON_WORDS = {"boolean": "a boolean", "integer": "a whole number", "number": "a number", "string": "a string",
              "array": "a list", "object": "a mapping", "null": "null"}


# The kinds of our group a file may hold for the offline commands, each judged against its own CRD.
JUDGED_KINDS = (vocab.KIND_MODEL_DEPLOYMENT, vocab.KIND_MODEL_DEPLOYMENT_SCALER)


@lru_cache(maxsize=2)
def _schema(kind: str = vocab.KIND_MODEL_DEPLOYMENT) -> dict[str, Any]:
    from app.api.crd import model_deployment_crd, model_deployment_scaler_crd

    crd = model_deployment_scaler_crd() if kind == vocab.KIND_MODEL_DEPLOYMENT_SCALER else model_deployment_crd()
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
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
    remedy = (f"rename it to {guess!r}" if guess else
              f"remove it: the API server refuses fields its schema does not declare; the fields here are "
              f"{', '.join(known)}")
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


def unknown_fields(raw: KubeObject, kind: str = vocab.KIND_MODEL_DEPLOYMENT) -> list[Refusal]:
    """Every field the CRD schema (or ObjectMeta) does not declare, with its near miss."""
    out: list[Refusal] = []
    _walk(raw, _schema(kind), "", out)  # metadata: `type: object` there, checked as ObjectMeta below
    meta = raw.get("metadata")
    if isinstance(meta, dict):
        out += [_unknown("metadata", str(key), list(OBJECT_META_FIELDS)) for key in meta
                if key not in OBJECT_META_FIELDS]
    return out


# --- values: types, enums, bounds, lengths, patterns, required fields ---------------------------


def _json_type(value: Any) -> str:
    """The JSON type of a decoded YAML value, as the API server names it (a whole float is an integer:
    kubectl sends `2.0` as `2`)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _shown(value: Any) -> str:
    """A value as the user wrote it in YAML (`true`, `0.33`, `'two'`), shortened."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, (int, float)):
        text = repr(value)
    elif isinstance(value, str):
        text = repr(value)
    else:
        text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _plain(value: Any) -> str:
    """A scalar as YAML shows it unquoted (`vLLM`, `0.33`, `true`)."""
    return value if isinstance(value, str) else _shown(value)


def _int_or_string(schema: dict[str, Any]) -> bool:
    return bool(schema.get("x-kubernetes-int-or-string"))


def _declared_type(schema: dict[str, Any]) -> str | None:
    return "int-or-string" if _int_or_string(schema) else schema.get("type")


def _range(schema: dict[str, Any]) -> str:
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and high is not None:
        return f" from {low} to {high}"
    if low is not None:
        return f" of at least {low}"
    if high is not None:
        return f" of at most {high}"
    return ""


def _what(schema: dict[str, Any]) -> str:
    """The field's description up to its first full stop or parenthesis, to say what it is."""
    text = str(schema.get("description") or "").strip()
    for stop in (". ", " (", ":"):
        text = text.split(stop)[0]
    return text.rstrip(".")


def _example(schema: dict[str, Any]) -> str:
    """A value of the field's type, for a remedy (its default, its first allowed value, its minimum)."""
    if "default" in schema and not isinstance(schema["default"], (dict, list)):
        return _shown(schema["default"]).strip("'")
    if schema.get("enum"):
        return str(schema["enum"][0])
    kind = _declared_type(schema)
    if kind in ("integer", "int-or-string"):
        return str(schema.get("minimum", 1))
    if kind == "boolean":
        return "true"
    if kind == "array":
        return "[...]"
    if kind == "object":
        required = schema.get("required") or []
        inner = ", ".join(f"{key}: {_example(schema['properties'][key])}" for key in required
                          if key in (schema.get("properties") or {}))
        return "{" + inner + "}" if inner else "{...}"
    return _string_example(schema)


def _string_example(schema: dict[str, Any]) -> str:
    """A string for a remedy: the schema's own example in its help text (`(e.g. Qwen/Qwen2.5-72B-Instruct)`), a
    name for a name pattern, else an empty pair of quotes to fill (never an angle-bracket placeholder,
    which YAML would read as text)."""
    found = re.search(r"\(e\.g\. ([^)]+?)\)", str(schema.get("description") or ""))
    if found:
        return found.group(1).split(",")[0].strip().strip("`")
    if schema.get("pattern") == DNS1123_LABEL.pattern:
        return "example"
    return '""'


def _fill(key: str, schema: dict[str, Any]) -> str:
    """How to fill a field in a remedy: `name: Qwen/Qwen2.5-72B-Instruct (the model the engine
    serves)`, or `name: with the variable name as its value` when the schema has no example."""
    example = _example(schema)
    what = _what(schema)
    first = what.split(" ")[0]
    if what[1:2].islower() and not any(c.isupper() for c in first[1:]):
        what = what[:1].lower() + what[1:]
    if example == '""':
        article = "" if what.startswith(("the ", "a ", "an ")) else "the "
        return f"{key}: with {article}{what or 'text'} as its value (a non-empty string)"
    return f"{key}: {example}" + (f" ({what})" if what else "")


def _type_refusal(path: str, key: str, value: Any, schema: dict[str, Any]) -> Refusal:
    want = _declared_type(schema)
    got = _json_type(value)
    shown = _shown(value)
    if want == "string":
        problem = f"{shown} is {JSON_WORDS.get(got, got)}, and the field is a string"
        if got in ("integer", "number", "boolean"):
            quoted = f'- "{shown}" (quote the list item)' if key.endswith("]") else f'{key}: "{shown}"'
            return Refusal(path, f"{problem} (YAML reads an unquoted {shown} as {JSON_WORDS[got]})",
                           f"quote it: {quoted}")
        return Refusal(path, problem, f"write it as one string: {key}: {_example(schema)}")
    if want in ("integer", "int-or-string"):
        scope = _range(schema)
        if isinstance(value, str):
            if re.fullmatch(r"[+-]?\d+", value.strip()):
                return Refusal(path, f"{shown} is a string (quoted), and the field is an integer",
                               f"write it without quotes: {key}: {int(value)}")
            return Refusal(path, f"{shown} is not a whole number; the field is an integer{scope}",
                           f"write a whole number{scope} without quotes, e.g. {key}: {_example(schema)}")
        if got == "number":
            return Refusal(path, f"{shown} is not a whole number; the field is an integer{scope}",
                           f"write a whole number{scope}, e.g. {key}: {_example(schema)}")
        what = "an integer or a quantity string" if want == "int-or-string" else f"an integer{scope}"
        return Refusal(path, f"{shown} is {JSON_WORDS.get(got, got)}, and the field is {what}",
                       f"write a whole number{scope}, e.g. {key}: {_example(schema)}")
    if want == "boolean":
        if isinstance(value, str) and value.strip().lower() in ("true", "false", "yes", "no", "on", "off"):
            return Refusal(path, f"{shown} is a string (quoted), and the field is a boolean",
                           f"write {key}: true or {key}: false, without quotes")
        return Refusal(path, f"{shown} is {JSON_WORDS.get(got, got)}, and the field is a boolean",
                       f"write {key}: true or {key}: false")
    if want == "array":
        items = schema.get("items") or {}
        if isinstance(value, str) and items.get("type") == "string":
            return Refusal(path, f"{shown} is a string, and the field is a list of strings",
                           f"write it as a list, one item per token: {key}: {json.dumps(value.split())}")
        if isinstance(value, dict):
            return Refusal(path, f"{key} is a mapping, and the field is a list",
                           f"put '- ' before the first field of each item (a list of mappings: {key}: then "
                           f"'- {next(iter(value), 'name')}: ...')")
        return Refusal(path, f"{shown} is {JSON_WORDS.get(got, got)}, and the field is a list",
                       f"write it as a list: {key}: [{shown}]")
    if want == "object":
        properties = list(schema.get("properties") or {})
        required = [k for k in schema.get("required") or [] if k in properties]
        problem = f"{shown} is {JSON_WORDS.get(got, got)}, and the field is a mapping of {', '.join(properties)}"
        if required and got in ("string", "integer", "number", "boolean"):
            first = required[0]
            return Refusal(path, problem, f"write it as a mapping: {key}: {{{first}: {_plain(value)}}}")
        return Refusal(path, problem, f"write it as a mapping, e.g. {key}: {_example(schema)}")
    return Refusal(path, f"{shown} is {JSON_WORDS.get(got, got)}, not {want}", f"write {want} here")


def _type_ok(value: Any, schema: dict[str, Any]) -> bool:
    want = _declared_type(schema)
    got = _json_type(value)
    if want == "int-or-string":
        return got in ("integer", "string")
    if want == "number":
        return got in ("integer", "number")
    return want is None or got == want


def _enum_guess(value: str, allowed: list[str]) -> str | None:
    """The allowed value meant: another case, a close spelling, or the one it is the start of (`llm-d`)."""
    guess = near_miss(value, allowed)
    if guess is None and value:
        started = [a for a in allowed if a.lower().startswith(value.lower())]
        guess = started[0] if len(started) == 1 else None
    return guess


def _enum_refusal(path: str, key: str, value: Any, allowed: list[Any]) -> Refusal | None:
    if value in allowed:
        return None
    names = [str(a) for a in allowed]
    shown_allowed = ", ".join(repr(a) for a in names)
    guess = _enum_guess(value, [n for n in names if n]) if isinstance(value, str) else None
    if guess is not None:
        case = " (the values are case-sensitive)" if guess.lower() == str(value).lower() else ""
        return Refusal(path, f"{_shown(value)} is not one of {shown_allowed}; did you mean {guess!r}?{case}",
                       f"set {key}: {guess}")
    return Refusal(path, f"{_shown(value)} is not one of {shown_allowed}", f"set {key} to one of {shown_allowed}")


def _string_refusal(path: str, key: str, value: str, schema: dict[str, Any], required: bool) -> Refusal | None:
    low, high = schema.get("minLength"), schema.get("maxLength")
    if low is not None and len(value) < low:
        if value == "":
            return Refusal(path, "is empty", f"set {_fill(key, schema)}" if required
                           else f"set {_fill(key, schema)}, or leave the field out")
        return Refusal(path, f"{_shown(value)} is {len(value)} characters; the field takes at least {low}",
                       f"lengthen it to at least {low} characters")
    if high is not None and len(value) > high:
        return Refusal(path, f"{_shown(value)} is {len(value)} characters, over the {high} the field takes",
                       f"shorten it to at most {high} characters")
    pattern = schema.get("pattern")
    if pattern and not re.search(pattern, value):
        if _int_or_string(schema):
            return Refusal(path, f"{_shown(value)} {QUANTITY_WORDS}", f"write a number, e.g. {key}: {_example(schema)}")
        words = PATTERN_WORDS.get(pattern, f"does not match the pattern {pattern}")
        if pattern == DNS1123_LABEL.pattern:
            return Refusal(path, f"{_shown(value)} {words}", f"rename it, e.g. {key}: {suggested_name(value)}")
        return Refusal(path, f"{_shown(value)} {words}", f"change {key} to match")
    return None


def _bounds_refusal(path: str, key: str, value: float, schema: dict[str, Any]) -> Refusal | None:
    low, high = schema.get("minimum"), schema.get("maximum")
    scope = _range(schema)
    what = _what(schema)
    hint = f" ({what})" if what else ""
    if low is not None and value < low:
        return Refusal(path, f"{_shown(value)} is below the minimum of {low}", f"set {key} to a whole number{scope}{hint}")
    if high is not None and value > high:
        return Refusal(path, f"{_shown(value)} is above the maximum of {high}", f"set {key} to a whole number{scope}{hint}")
    return None


def _items_refusal(path: str, key: str, value: list[Any], schema: dict[str, Any]) -> Refusal | None:
    low, high = schema.get("minItems"), schema.get("maxItems")
    if low is not None and len(value) < low:
        return Refusal(path, f"holds {len(value)} item(s); the field takes at least {low}",
                       f"declare at least {low} item(s) under {key}")
    if high is not None and len(value) > high:
        return Refusal(path, f"holds {len(value)} items; the field takes at most {high}",
                       f"keep at most {high} items under {key}")
    return None


def _check(value: Any, schema: dict[str, Any], path: str, key: str, required: bool, out: list[Refusal]) -> None:
    """One value against its schema node (null values are pruned by the API server: not checked)."""
    if value is None or schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    if not _type_ok(value, schema):
        out.append(_type_refusal(path, key, value, schema))
        return
    problem: Refusal | None = None
    if isinstance(value, str):
        if schema.get("enum") is not None:
            problem = _enum_refusal(path, key, value, schema["enum"])
        else:
            problem = _string_refusal(path, key, value, schema, required)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        problem = _bounds_refusal(path, key, value, schema)
    elif isinstance(value, list):
        problem = _items_refusal(path, key, value, schema)
        items = schema.get("items")
        if isinstance(items, dict):
            for index, item in enumerate(value):
                item_path = f"{path}[{index}]"
                if item is None:
                    out.append(_type_refusal(item_path, f"{key}[{index}]", item, items))
                elif isinstance(item, (dict, list)):
                    _check(item, items, item_path, key, True, out)
                else:  # a scalar item: its remedy writes the item, not the list's key
                    _check(item, items, item_path, f"{key}[{index}]", True, out)
    elif isinstance(value, dict):
        _check_object(value, schema, path, out)
    if problem is not None:
        out.append(problem)


def _check_object(value: dict[str, Any], schema: dict[str, Any], path: str, out: list[Refusal]) -> None:
    properties = schema.get("properties") or {}
    required = schema.get("required") or []
    for name in required:
        if value.get(name) is None and name in properties:
            field_path = f"{path}.{name}" if path else name
            out.append(Refusal(field_path, "is required and missing", f"add {_fill(name, properties[name])}"))
    for name, item in value.items():
        if name in properties:
            _check(item, properties[name], f"{path}.{name}" if path else str(name), str(name), name in required, out)


def value_refusals(raw: KubeObject, kind: str = vocab.KIND_MODEL_DEPLOYMENT) -> list[Refusal]:
    """Every value of the spec the CRD schema refuses: type, enum, bounds, length, pattern, required.

    Read with each near-miss field renamed (`instancetype` -> `instanceType`), so a typo is named
    once, as an unknown field, not again as a missing required one."""
    out: list[Refusal] = []
    spec_schema = _schema(kind)["properties"]["spec"]
    renamed = copy.deepcopy(raw)
    _rename(renamed, _schema(kind))
    spec = renamed.get("spec")
    if spec is None:
        out.append(Refusal("spec", "is required and missing", f"add spec: {_example(spec_schema)} ({_what(spec_schema)})"))
    else:
        _check(spec, spec_schema, "spec", "spec", True, out)
    return out


def suggested_name(name: str) -> str:
    """`name` made a lowercase DNS-1035 label (a letter first: every name the operator derives from it
    must be one), e.g. `Qwen_Chat` -> `qwen-chat`."""
    text = re.sub(r"[^a-z0-9-]+", "-", name.lower())
    text = re.sub(r"-{2,}", "-", text).strip("-")
    text = text.lstrip("0123456789-") or "md"
    return text[:LABEL_MAX].rstrip("-")


def meant_kind(kind: Any) -> str:
    """The kind of our group a written kind most likely means (itself when it is one)."""
    if kind in JUDGED_KINDS:
        return str(kind)
    if isinstance(kind, str):
        scored = sorted(JUDGED_KINDS, key=lambda k: difflib.SequenceMatcher(None, kind.lower(), k.lower()).ratio(),
                        reverse=True)
        return scored[0]
    return vocab.KIND_MODEL_DEPLOYMENT


def type_refusals(raw: KubeObject, kind: str = vocab.KIND_MODEL_DEPLOYMENT) -> list[Refusal]:
    """apiVersion and kind: the API server serves our kinds as worker.gpustack.ai/v1 only."""
    out: list[Refusal] = []
    api_version = raw.get("apiVersion")
    if api_version != vocab.API_VERSION:
        out.append(Refusal("apiVersion", f"{_shown(api_version) if api_version is not None else 'a missing apiVersion'} "
                           f"does not serve {kind} (no matches for kind {kind} in that version)",
                           f"set apiVersion: {vocab.API_VERSION}"))
    written = raw.get("kind")
    if written != kind:
        shown = _shown(written) if written is not None else "a missing kind"
        out.append(Refusal("kind", f"{shown} is not a kind of {vocab.API_VERSION} (did you mean {kind!r}?)",
                           f"set kind: {kind}"))
    return out


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

"""ObjectMeta as the API server validates it, for the offline `modeldeployment validate`
(docs/admission.md#offline): the name or generateName, the namespace, label keys and values,
annotation keys and their total size, finalizers. One small function per field; each refusal names
the field, echoes the value and gives the fix. Pure functions.

The rules are k8s.io/apimachinery's (IsQualifiedName, IsValidLabelValue, ValidateAnnotations'
256 KiB, the name generator's 58-character prefix); `tests/e2e/test_validate_parity.py` checks
them against the real kube-apiserver with generated keys, values and names.
"""

from __future__ import annotations

import re
from typing import Any

from app import vocab
from app.admission.fields import (
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN,
    JSON_WORDS,
    LABEL_MAX,
    LABEL_RULE,
    SUBDOMAIN_MAX,
    SUBDOMAIN_RULE,
    _json_type,
    _plain,
    _shown,
    suggested_name,
)
from app.admission.model import Refusal
from app.api.objects import KubeObject

# ObjectMeta as the API server checks it (k8s.io/apimachinery validation: IsQualifiedName,
# IsValidLabelValue, ValidateAnnotations' total size, the name generator's 58-character prefix).
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
QUALIFIED_RULE = ("a qualified name: an optional DNS-1123 subdomain prefix and '/', then at most 63 characters of "
                  "letters, digits, '-', '_' and '.', starting and ending with a letter or digit")
LABEL_VALUE_RULE = ("at most 63 characters of letters, digits, '-', '_' and '.', starting and ending with a letter or "
                    "digit (or empty)")
ANNOTATIONS_MAX_BYTES = 256 * 1024
GENERATED_PREFIX_MAX = 58  # the API server keeps 58 characters of generateName and appends 5 random ones
GENERATED_SUFFIX = 5


def qualified_name_problem(key: str) -> str | None:
    """Why `key` is not a qualified name (a label or annotation key), or None."""
    prefix, slash, name = key.rpartition("/")
    if key.count("/") > 1:
        return "holds more than one '/'"
    if slash and not prefix:
        return "has an empty prefix before '/'"
    if slash and (len(prefix) > SUBDOMAIN_MAX or not DNS1123_SUBDOMAIN.match(prefix)):
        return f"has the prefix {prefix[:60]!r}, which is not {SUBDOMAIN_RULE}"
    if not name:
        return "has an empty name part"
    if len(name) > LABEL_MAX:
        return f"has a name part of {len(name)} characters, over {LABEL_MAX}"
    if not QUALIFIED_NAME.match(name):
        return f"has the name part {name[:60]!r}, which is not letters, digits, '-', '_' and '.' starting and ending " \
               "with a letter or digit"
    return None


def label_value_problem(value: str) -> str | None:
    """Why `value` is not a label value, or None."""
    if len(value) > LABEL_MAX:
        return f"is {len(value)} characters, over the {LABEL_MAX} a label value takes"
    if value and not QUALIFIED_NAME.match(value):
        return f"is not {LABEL_VALUE_RULE}"
    return None


def _mapping_of_strings(meta: dict[str, Any], field: str) -> tuple[dict[str, Any], list[Refusal]]:
    """metadata.labels/annotations as a mapping, and refusals for it or its values not being strings."""
    entries = meta.get(field)
    if entries is None:
        return {}, []
    if not isinstance(entries, dict):
        return {}, [Refusal(f"metadata.{field}", f"{_shown(entries)} is {JSON_WORDS.get(_json_type(entries), '?')}, "
                            f"and {field} are a mapping of strings", f"write {field} as key: \"value\" pairs")]
    out = [Refusal(f"metadata.{field}.{key}", f"{_shown(item)} is {JSON_WORDS.get(_json_type(item), '?')}; "
                   f"{field[:-1]} values are strings", f'quote it: {key}: "{_plain(item)}"')
           for key, item in entries.items() if item is not None and not isinstance(item, str)]
    return entries, out


def label_refusals(meta: dict[str, Any]) -> list[Refusal]:
    """metadata.labels: each key a qualified name, each value a label value."""
    entries, out = _mapping_of_strings(meta, "labels")
    for key, value in entries.items():
        problem = qualified_name_problem(str(key))
        if problem is not None:
            out.append(Refusal(f"metadata.labels.{key}", f"the label key {_shown(str(key))} {problem}",
                               f"rename the key: a label key is {QUALIFIED_RULE}"))
        if isinstance(value, str):
            problem = label_value_problem(value)
            if problem is not None:
                out.append(Refusal(f"metadata.labels.{key}", f"the label value {_shown(value)} {problem}",
                                   "shorten or respell the value, or move it to metadata.annotations (any text, "
                                   "256 KiB in all)"))
    return out


def annotation_refusals(meta: dict[str, Any]) -> list[Refusal]:
    """metadata.annotations: each key a qualified name (read lowercased), 256 KiB of keys and values in all."""
    entries, out = _mapping_of_strings(meta, "annotations")
    for key in entries:
        problem = qualified_name_problem(str(key).lower())
        if problem is not None:
            out.append(Refusal(f"metadata.annotations.{key}", f"the annotation key {_shown(str(key))} {problem}",
                               f"rename the key: an annotation key is {QUALIFIED_RULE}"))
    total = sum(len(str(k).encode("utf-8", "surrogatepass")) + len(v.encode("utf-8", "surrogatepass"))
                for k, v in entries.items() if isinstance(v, str))
    if total > ANNOTATIONS_MAX_BYTES:
        out.append(Refusal("metadata.annotations", f"the annotations hold {total:,} bytes of keys and values, over "
                           f"the {ANNOTATIONS_MAX_BYTES:,} (256 KiB) the API server takes",
                           "keep large data out of annotations: a ConfigMap, or the image"))
    return out


def generated_name(meta: dict[str, Any]) -> str | None:
    """The longest name the API server generates from metadata.generateName (58 characters of it and
    five random ones), judged with 'x' for them; None without a usable generateName."""
    prefix = meta.get("generateName")
    if not isinstance(prefix, str) or not prefix:
        return None
    return prefix[:GENERATED_PREFIX_MAX] + "x" * GENERATED_SUFFIX


def name_refusals(meta: dict[str, Any], kind: str) -> list[Refusal]:
    """metadata.name (or, without it, metadata.generateName): a DNS-1123 subdomain."""
    name = meta.get("name")
    prefix = meta.get("generateName")
    out: list[Refusal] = []
    if prefix is not None and not isinstance(prefix, str):
        out.append(Refusal("metadata.generateName", f"{_shown(prefix)} is {JSON_WORDS.get(_json_type(prefix), '?')}, "
                           "and generateName is a string", f'quote it: generateName: "{suggested_name(str(prefix))}-"'))
    elif isinstance(prefix, str) and prefix:
        base = prefix[:-1] if prefix.endswith("-") else prefix
        if len(prefix) > SUBDOMAIN_MAX or not DNS1123_SUBDOMAIN.match(base):
            out.append(Refusal("metadata.generateName", f"{prefix[:60]!r} is not the start of a valid name: the API "
                               f"server takes {SUBDOMAIN_RULE} (a trailing '-' allowed here)",
                               f"set generateName: {suggested_name(prefix)}-"))
    if name is None and not prefix:
        out.append(Refusal("metadata.name", "is required and missing",
                           f"add a name under metadata, e.g. name: my-{kind.lower()} ({SUBDOMAIN_RULE})"))
    elif name is not None and not isinstance(name, str):
        out.append(Refusal("metadata.name", f"{_shown(name)} is {JSON_WORDS.get(_json_type(name), '?')}, and a name "
                           "is a string", f'quote it: name: "{suggested_name(str(name))}"'))
    elif isinstance(name, str) and (len(name) > SUBDOMAIN_MAX or not DNS1123_SUBDOMAIN.match(name)):
        out.append(Refusal("metadata.name", f"{_shown(name)} is not a valid name for a {kind}: the API server "
                           f"takes {SUBDOMAIN_RULE}",
                           f"rename it, e.g. name: {suggested_name(name)} (a name cannot change once created)"))
    return out


def namespace_refusals(meta: dict[str, Any]) -> list[Refusal]:
    namespace = meta.get("namespace")
    if namespace is not None and (not isinstance(namespace, str) or len(namespace) > LABEL_MAX
                                  or not DNS1123_LABEL.match(namespace)):
        return [Refusal("metadata.namespace", f"{_shown(namespace)} is not a namespace name: {LABEL_RULE}",
                        f"set namespace: {suggested_name(str(namespace))}")]
    return []


def finalizer_refusals(meta: dict[str, Any]) -> list[Refusal]:
    """metadata.finalizers: a list of qualified names."""
    found = meta.get("finalizers")
    if found is None:
        return []
    if not isinstance(found, list):
        return [Refusal("metadata.finalizers", f"{_shown(found)} is {JSON_WORDS.get(_json_type(found), '?')}, and "
                        "finalizers are a list of strings", "write it as a list, or leave it out")]
    out: list[Refusal] = []
    for index, item in enumerate(found):
        problem = qualified_name_problem(item) if isinstance(item, str) else "is not a string"
        if problem is not None:
            out.append(Refusal(f"metadata.finalizers[{index}]", f"{_shown(item)} {problem}",
                               f"a finalizer is {QUALIFIED_RULE}; leave finalizers to the controllers that own them"))
    return out


def metadata_refusals(raw: KubeObject, kind: str = vocab.KIND_MODEL_DEPLOYMENT) -> list[Refusal]:
    """What the API server checks of ObjectMeta: the name (or generateName), the namespace, labels,
    annotations and finalizers."""
    meta = raw.get("metadata")
    example = f"metadata: {{name: my-{kind.lower()}}}"
    if meta is None:
        return [Refusal("metadata", "is required and missing", f"add {example}")]
    if not isinstance(meta, dict):
        return [Refusal("metadata", f"{_shown(meta)} is {JSON_WORDS.get(_json_type(meta), 'not a mapping')}, "
                        "and the field is a mapping", f"write it as a mapping: {example}")]
    return (name_refusals(meta, kind) + namespace_refusals(meta) + label_refusals(meta) + annotation_refusals(meta)
            + finalizer_refusals(meta))

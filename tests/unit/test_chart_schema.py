"""charts/modeldeployment/values.schema.json: every value of values.yaml is declared and typed, the
defaults validate, and the values people get wrong are refused with the key named. (helm applies
the same schema in tests/e2e/test_install.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import jsonschema
import pytest
import yaml

CHART = Path(__file__).resolve().parents[2] / "charts" / "modeldeployment"
SCHEMA = json.loads((CHART / "values.schema.json").read_text())
DEFAULTS = yaml.safe_load((CHART / "values.yaml").read_text())


def validator() -> jsonschema.Draft7Validator:
    jsonschema.Draft7Validator.check_schema(SCHEMA)
    return jsonschema.Draft7Validator(SCHEMA)


def undeclared(values: Any, node: dict[str, Any], path: str = "") -> Iterator[str]:
    """Key paths of values.yaml the schema does not declare with a type. A free-form map (labels,
    resource quantities: `additionalProperties` is a schema) is declared as a whole."""
    if not ("type" in node or "enum" in node):
        yield f"{path} (no type)"
    if isinstance(values, dict) and "properties" in node:
        for key, value in values.items():
            child = node["properties"].get(key)
            if child is None:
                yield f"{path}.{key}".lstrip(".")
            else:
                yield from undeclared(value, child, f"{path}.{key}".lstrip("."))


def test_every_value_in_values_yaml_is_declared_with_a_type():
    missing = list(undeclared(DEFAULTS, SCHEMA))
    assert not missing, f"declare these in charts/modeldeployment/values.schema.json with a type: {missing}"


def test_every_map_refuses_unknown_keys():
    def maps(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
        if "properties" in node:
            yield path, node
            for key, child in node["properties"].items():
                yield from maps(child, f"{path}.{key}" if path else key)
        for child in (node.get("items"),):
            if isinstance(child, dict):
                yield from maps(child, f"{path}[]")

    found = list(maps(SCHEMA, ""))
    assert len(found) > 10
    for path, node in found:
        assert node.get("additionalProperties") is False, f"{path or '(top)'} admits unknown keys"


def test_the_defaults_validate():
    assert not list(validator().iter_errors(DEFAULTS))


def with_value(path: str, value: Any) -> dict[str, Any]:
    values = json.loads(json.dumps(DEFAULTS))
    *parents, last = path.split(".")
    node = values
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return values


@pytest.mark.parametrize(("path", "value", "where", "says"), [
    ("logging.format", "JSON", "logging.format", None),  # was silently text before
    ("logging.fromat", "json", "logging", "fromat"),  # a typo'd key
    ("logging.level", "info", "logging.level", None),
    ("replicas", "two", "replicas", None),
    ("replicas", 0, "replicas", None),
    ("certificate.mode", "vault", "certificate.mode", None),
    ("certificate.duration", "1 year", "certificate.duration", None),
    ("webhook.failurePolicy", "fail", "webhook.failurePolicy", None),
    ("webhook.timeoutSeconds", 60, "webhook.timeoutSeconds", None),
    ("podDisruptionBudget.minAvailabe", 1, "podDisruptionBudget", "minAvailabe"),
    ("podDisruptionBudget.maxUnavailable", 0, "podDisruptionBudget.maxUnavailable", None),
    ("image.pullPolicy", "always", "image.pullPolicy", None),
    ("settings.gangReleaseAfterSeconds", "600s", "settings.gangReleaseAfterSeconds", None),
    ("settings.kvCacheDtypeOwned", "yes", "settings.kvCacheDtypeOwned", None),
    ("ports.webhook", 70000, "ports.webhook", None),
    ("networkPolicy.enabled", "true", "networkPolicy.enabled", None),
    ("metrics.serviceMonitor.interval", "thirty", "metrics.serviceMonitor.interval", None),
    ("kueue.localQueues", [{"name": "q"}], "kueue.localQueues.0", "namespace"),
    ("namespaceOverride", "ML_System", "namespaceOverride", None),
    ("replica", 2, "", "replica"),  # a typo at the top
])
def test_a_bad_value_is_refused_naming_its_key(path: str, value: Any, where: str, says: str | None):
    """`where`: the path the error is reported at; `says`: what its message must name there (an
    unknown or missing key is reported at its parent)."""
    errors = list(validator().iter_errors(with_value(path, value)))
    assert errors, path
    located = {".".join(str(p) for p in e.absolute_path) for e in errors}
    assert where in located, (path, located, [e.message for e in errors])
    if says is not None:
        assert any(says in e.message for e in errors), [e.message for e in errors]

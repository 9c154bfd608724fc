"""The CRDs are generated from the models; the committed YAML must not drift."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from app.api.crd import all_crds

CRD_DIR = Path(__file__).resolve().parents[2] / "manifests" / "crds"


def test_committed_crds_match_the_models():
    generated = all_crds()
    committed = {p.name: yaml.safe_load(p.read_text()) for p in CRD_DIR.glob("*.yaml")}
    assert set(committed) == set(generated), "run `modeldeployment crds`"
    for name, crd in generated.items():
        assert committed[name] == crd, f"{name} drifted from the models: run `modeldeployment crds`"


def _walk(node, path="$"):
    yield path, node
    for key, child in (node.get("properties") or {}).items():
        yield from _walk(child, f"{path}.{key}")
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{path}[]")


def test_every_schema_node_is_structural():
    for name, crd in all_crds().items():
        root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for path, node in _walk(root):
            assert "$ref" not in node and "title" not in node, (name, path)
            assert node.get("type") or node.get("x-kubernetes-int-or-string") or \
                node.get("x-kubernetes-preserve-unknown-fields"), (name, path, node)
            for branch in node.get("anyOf", []):
                assert branch.get("type") != "null", (name, path)


def test_model_deployment_crd_carries_printer_columns_short_name_category_and_status():
    crd = all_crds()["modeldeployments.worker.gpustack.ai.yaml"]
    names = crd["spec"]["names"]
    assert names["shortNames"] == ["md"] and names["categories"] == ["gpustack"]
    version = crd["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    assert [c["name"] for c in version["additionalPrinterColumns"]] == ["Engine", "Roles", "Phase", "Endpoint", "Age"]
    schema = version["schema"]["openAPIV3Schema"]
    roles = schema["properties"]["spec"]["properties"]["roles"]
    assert roles["x-kubernetes-list-type"] == "map" and roles["x-kubernetes-list-map-keys"] == ["name"]
    assert roles["maxItems"] == 10 and roles["minItems"] == 1
    role = roles["items"]["properties"]
    assert role["replicas"]["default"] == 1 and role["size"]["default"] == 1 and role["kind"]["default"] == "Server"
    assert role["env"]["x-kubernetes-list-map-keys"] == ["name"]
    assert role["ports"]["x-kubernetes-list-map-keys"] == ["port", "protocol"]
    assert role["replicas"]["description"]
    status = schema["properties"]["status"]["properties"]
    assert "observedGeneration" in status and status["conditions"]["x-kubernetes-list-map-keys"] == ["type"]


def _spec_schema() -> dict:
    crd = all_crds()["modeldeployments.worker.gpustack.ai.yaml"]
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def _node(path: str) -> dict:
    node = _spec_schema()
    for part in path.split("."):
        node = node["items"] if part == "[]" else node["properties"][part]
    return node


# The frozen fields (docs/admission.md#frozen-and-editable-fields), each with the CEL transition rule that keeps it frozen without the webhook.
FROZEN_VALUE_RULES = [
    ("model", "self == oldSelf"),
    ("engine.name", "self == oldSelf"),
    ("kvCache", "self == oldSelf"),
    ("router.name", "self == oldSelf"),
    ("roles", "oldSelf.exists(o, o.name == r.name)"),
    ("roles.[].kind", "self == oldSelf"),
    ("roles.[].size", "self == oldSelf"),
    ("roles.[].instanceType", "self == oldSelf"),
    ("roles.[].command", "self == oldSelf"),
    ("roles.[].resources.accelerator", "string(self) == string(oldSelf)"),
    ("roles.[].resources.acceleratorSlicedMemoryPercentage", "self == oldSelf"),
    ("roles.[].resources.acceleratorSlicedCoresPercentage", "self == oldSelf"),
    ("roles.[].resources.acceleratorPartitionedProfile", "self == oldSelf"),
    ("roles.[].resources.interface", "string(self) == string(oldSelf)"),
]


@pytest.mark.parametrize("path,rule", FROZEN_VALUE_RULES, ids=[p for p, _ in FROZEN_VALUE_RULES])
def test_frozen_fields_carry_a_cel_transition_rule(path: str, rule: str):
    validations = _node(path).get("x-kubernetes-validations", [])
    (hit,) = [v for v in validations if rule in v["rule"]]
    assert "oldSelf" in hit["rule"] and hit["reason"] == "FieldValueForbidden"
    assert "frozen" in hit["message"] and "created rather than edited" in hit["message"]
    if path.startswith("roles.[]."):
        assert "--type=json" in hit["message"]  # as good as the webhook's: the merge-patch trap is named


# Optional frozen fields may not be added or removed: a rule on the enclosing object says so.
FROZEN_PRESENCE_RULES = [
    ("", ".kvCache", "has(self.kvCache) == has(oldSelf.kvCache)"),
    ("roles.[]", ".command", "has(self.command) == has(oldSelf.command)"),
    ("roles.[]", ".resources.accelerator",
     "(has(self.resources) && has(self.resources.accelerator)) == (has(oldSelf.resources) && has(oldSelf.resources.accelerator))"),
    ("roles.[]", ".resources.interface", "has(oldSelf.resources.interface)"),
]


@pytest.mark.parametrize("owner,field_path,rule", FROZEN_PRESENCE_RULES, ids=[f for _, f, _ in FROZEN_PRESENCE_RULES])
def test_optional_frozen_fields_may_not_appear_or_vanish(owner: str, field_path: str, rule: str):
    node = _node(owner) if owner else _spec_schema()
    (hit,) = [v for v in node["x-kubernetes-validations"] if v.get("fieldPath") == field_path]
    assert rule in hit["rule"] and "may not be added or removed" in hit["message"]


def test_router_block_may_come_and_go():
    # router.name is frozen in place only: no presence rule for spec.router.
    assert not [v for v in _spec_schema()["x-kubernetes-validations"] if v.get("fieldPath") == ".router"]


def test_the_take_over_command_is_bounded_so_its_rule_fits_the_cel_budget():
    command = _node("roles.[].command")
    assert command["maxItems"] == 256 and command["items"]["maxLength"] == 16384

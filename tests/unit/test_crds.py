"""The CRDs are generated from the models; the committed YAML must not drift."""

from __future__ import annotations

from pathlib import Path

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

"""Admission: the mutating default, AdmissionReview in and out, fail-closed reads, and the offline CLI."""

from __future__ import annotations

import asyncio
import base64
import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from app import vocab
from app.admission import offline, review
from app.admission.mutate import accelerator_defaults, apply_patch, finalizer_on_create, roles_to_default
from app.api.v1 import ModelDeployment
from app.kube.client import ClusterUnreachable
from app.world import World, load_yaml_objects

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
WORLD = World.of(load_yaml_objects(EXAMPLES / "world"))
A10G = "gpustack-nvidia-a10g-linux-amd64"
CPU = "gpustack-cpu-linux-amd64"
EXAMPLE_FILES = sorted((EXAMPLES / "deployments").glob("*.yaml"))


def md(*roles: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "worker.gpustack.ai/v1", "kind": "ModelDeployment",
        "metadata": {"name": "qwen", "namespace": "team-a", **meta},
        "spec": {"model": {"name": "Qwen/Qwen2.5-7B-Instruct"}, "engine": {"name": "vLLM", "version": "0.29.0"},
                 "roles": list(roles) or [{"name": "server", "instanceType": A10G}]},
    }


def admission_review(obj: Any, old: Any = None, *, operation: str | None = None, uid: str = "uid-1") -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "operation": operation or ("UPDATE" if old is not None else "CREATE"),
        "kind": {"group": "worker.gpustack.ai", "version": "v1", "kind": "ModelDeployment"},
        "resource": {"group": "worker.gpustack.ai", "version": "v1", "resource": "modeldeployments"},
        "namespace": "team-a", "name": "qwen", "object": obj, "oldObject": old}}


def world_source(world: World = WORLD) -> review.WorldSource:
    async def source(_md: ModelDeployment) -> World:
        return world

    return source


def unreachable_source() -> review.WorldSource:
    async def source(_md: ModelDeployment) -> World:
        raise ClusterUnreachable("the API server could not be reached: connection refused")

    return source


def hanging_source() -> review.WorldSource:
    async def source(_md: ModelDeployment) -> World:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    return source


# Every create is born with Metacontroller's finalizer (docs/metacontroller.md#finalize).
FINALIZER_OP = {"op": "add", "path": "/metadata/finalizers", "value": [vocab.FINALIZER_METACONTROLLER]}


def mutate(body: Any, source: review.WorldSource | None = None) -> dict[str, Any]:
    return asyncio.run(review.mutate_review(body, source or world_source()))


def validate(body: Any, source: review.WorldSource | None = None, owned: bool = True) -> dict[str, Any]:
    return asyncio.run(review.validate_review(body, source or world_source(), kv_cache_dtype_owned=owned))


def patch_of(answer: dict[str, Any]) -> list[dict[str, Any]]:
    response = answer["response"]
    assert response["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(response["patch"]))


# --- the mutating default -----------------------------------------------------------------------


def test_accelerator_defaults_to_one_on_an_acceleratable_type() -> None:
    obj = md({"name": "a", "instanceType": A10G}, {"name": "b", "instanceType": A10G, "resources": {}},
             {"name": "c", "instanceType": A10G, "resources": {"accelerator": 0}},
             {"name": "d", "instanceType": CPU}, {"name": "e", "instanceType": "missing"})
    answer = mutate(admission_review(obj))
    assert answer["response"]["allowed"] is True and answer["response"]["uid"] == "uid-1"
    ops = patch_of(answer)
    assert ops == [
        FINALIZER_OP,
        {"op": "add", "path": "/spec/roles/0/resources", "value": {"accelerator": 1}},
        {"op": "add", "path": "/spec/roles/1/resources/accelerator", "value": 1},
    ]
    patched = apply_patch(obj, ops)
    assert [r.get("resources") for r in patched["spec"]["roles"]] == [
        {"accelerator": 1}, {"accelerator": 1}, {"accelerator": 0}, None, None]


def test_a_null_resources_block_is_replaced() -> None:
    obj = md({"name": "a", "instanceType": A10G, "resources": None})
    ops = accelerator_defaults(obj, WORLD)
    assert ops == [{"op": "add", "path": "/spec/roles/0/resources", "value": {"accelerator": 1}}]
    assert apply_patch(obj, ops)["spec"]["roles"][0]["resources"] == {"accelerator": 1}


def test_nothing_to_default_reads_nothing_and_patches_only_the_finalizer() -> None:
    obj = md({"name": "a", "instanceType": A10G, "resources": {"accelerator": 2}})
    answer = mutate(admission_review(obj), unreachable_source())
    assert answer["response"]["allowed"] is True and patch_of(answer) == [FINALIZER_OP]
    assert mutate(admission_review(obj, obj), unreachable_source())["response"] == {"uid": "uid-1", "allowed": True}


def test_mutation_declines_for_an_object_being_deleted() -> None:
    obj = md({"name": "a", "instanceType": A10G}, deletionTimestamp="2026-11-29T00:00:00Z")
    assert roles_to_default(obj) == []
    answer = mutate(admission_review(obj, obj), unreachable_source())
    assert answer["response"] == {"uid": "uid-1", "allowed": True}


def test_mutation_fails_closed_when_the_type_cannot_be_read() -> None:
    answer = mutate(admission_review(md()), unreachable_source())
    response = answer["response"]
    assert response["allowed"] is False and response["status"]["code"] == 503
    assert "API server could not be reached" in response["status"]["message"]


def test_mutation_leaves_an_invalid_object_to_the_schema() -> None:
    obj = md({"name": "a", "instanceType": A10G, "replicas": "many"})
    assert patch_of(mutate(admission_review(obj))) == [FINALIZER_OP]


def test_accelerator_defaults_is_pure_over_the_world() -> None:
    obj = md({"name": "a", "instanceType": A10G})
    assert accelerator_defaults(obj, World()) == []  # unknown type: validation refuses it


# --- validation through the review ---------------------------------------------------------------


def test_refusal_is_a_well_formed_review_with_every_cause() -> None:
    obj = md({"name": "a", "instanceType": "missing", "extraArgs": ["--kv_transfer_config", "{}"]})
    answer = validate(admission_review(obj))
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == "uid-1" and response["allowed"] is False
    status = response["status"]
    assert status["code"] == 403 and status["reason"] == "Forbidden"
    fields = [c["field"] for c in status["details"]["causes"]]
    assert fields == ["spec.roles[0].instanceType", "spec.roles[0].extraArgs[0]"]
    assert status["message"].startswith("2 problems:\n")
    assert ("spec.roles[0].extraArgs[0]: --kv_transfer_config is --kv-transfer-config, which the operator owns on "
            "vLLM — remove it, or take over the command line with roles[].command") in status["message"]


def test_allowed_with_warnings() -> None:
    obj = md({"name": "a", "instanceType": A10G, "resources": {"accelerator": 1}, "extraArgs": ["--api-key", "x"]})
    response = validate(admission_review(obj))["response"]
    assert response["allowed"] is True
    assert any("--api-key" in w and "401" in w for w in response["warnings"])


def test_validation_fails_closed_when_the_api_server_is_unreachable() -> None:
    response = validate(admission_review(md()), unreachable_source())["response"]
    assert response["allowed"] is False and response["uid"] == "uid-1"
    assert response["status"]["code"] == 503
    assert "API server could not be reached" in response["status"]["message"]
    assert "connection refused" in response["status"]["message"]


def test_a_hanging_read_is_cut_inside_the_webhook_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(review, "READ_BUDGET_SECONDS", 0.05)
    response = validate(admission_review(md()), hanging_source())["response"]
    assert response["allowed"] is False and "could not be reached" in response["status"]["message"]


def test_any_failed_read_fails_closed() -> None:
    async def broken(_md: ModelDeployment) -> World:
        raise OSError("connection reset by peer")

    response = validate(admission_review(md()), broken)["response"]
    assert response["status"]["code"] == 503 and "connection reset by peer" in response["status"]["message"]


def test_an_object_being_deleted_reads_nothing() -> None:
    obj = md({"name": "a", "instanceType": "gone", "resources": {"accelerator": 1}},
             deletionTimestamp="2026-11-29T00:00:00Z")
    old = copy.deepcopy(obj)
    del old["metadata"]["deletionTimestamp"]
    response = validate(admission_review(obj, old), unreachable_source())["response"]
    assert response["allowed"] is True


def test_a_missing_object_is_refused_not_crashed() -> None:
    body = admission_review(None)
    for answer in (validate(body), mutate(body)):
        assert answer["response"]["allowed"] is False and answer["response"]["status"]["code"] == 400
        assert answer["response"]["uid"] == "uid-1"


def test_an_update_without_old_object_is_refused() -> None:
    response = validate(admission_review(md(), operation="UPDATE"))["response"]
    assert response["allowed"] is False and "oldObject" in response["status"]["message"]


@pytest.mark.parametrize("body", [
    {},
    {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"},
    {"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "u"}},
    {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": []},
    {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 7, "operation": "CREATE"}},
])
def test_malformed_reviews_get_a_well_formed_refusal(body: dict[str, Any]) -> None:
    for answer in (validate(body), mutate(body)):
        assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
        assert answer["response"]["allowed"] is False
        assert answer["response"]["status"]["code"] == 400
        assert answer["response"]["uid"] == review.request_uid(body)


def test_an_unparseable_object_is_refused_with_schema_paths() -> None:
    obj = md({"name": "A_B", "instanceType": A10G, "replicas": -1})
    status = validate(admission_review(obj))["response"]["status"]
    fields = {c["field"] for c in status["details"]["causes"]}
    assert {"spec.roles[0].name", "spec.roles[0].replicas"} <= fields


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_other_operations_are_not_ours(operation: str) -> None:
    assert validate(admission_review(md(), operation=operation))["response"] == {"uid": "uid-1", "allowed": True}


def test_namespace_and_generated_name_come_from_the_request() -> None:
    obj = md({"name": "r" * 40, "instanceType": A10G, "replicas": 2})
    del obj["metadata"]["namespace"]
    obj["metadata"].pop("name")
    obj["metadata"]["generateName"] = "g" * 10
    response = validate(admission_review(obj))["response"]
    assert response["allowed"] is True  # qwen from request.name: short enough
    body = admission_review(obj)
    body["request"]["name"] = ""
    obj["metadata"]["generateName"] = "g" * 15
    status = validate(body)["response"]["status"]
    assert "ggggggggggggggg" in status["message"]  # generateName + 5 random characters is judged


def test_warnings_are_capped_at_the_api_server_limit() -> None:
    long = review.answer("u", allowed=True, warnings=["x" * 1000])
    assert len(long["response"]["warnings"][0]) == review.WARNING_LIMIT


# --- examples: what a user would apply must pass untouched ----------------------------------------


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=[p.stem for p in EXAMPLE_FILES])
def test_examples_pass_untouched(path: Path) -> None:
    obj = load_yaml_objects(path)[0]
    mutated = mutate(admission_review(obj))
    assert mutated["response"]["allowed"] is True and patch_of(mutated) == [FINALIZER_OP]  # born with it
    validated = validate(admission_review(obj))["response"]
    assert validated["allowed"] is True, validated.get("status")
    # An update that changes nothing is accepted too.
    assert validate(admission_review(obj, copy.deepcopy(obj)))["response"]["allowed"] is True


# --- the offline CLI --------------------------------------------------------------------------------


def _cli(tmp_path: Path, obj: dict[str, Any], old: dict[str, Any] | None = None,
         world: Path | None = EXAMPLES / "world") -> tuple[int, str, str]:
    file = tmp_path / "md.yaml"
    file.write_text(yaml.safe_dump(obj))
    old_file = None
    if old is not None:
        old_file = tmp_path / "old.yaml"
        old_file.write_text(yaml.safe_dump(old))
    out, err = io.StringIO(), io.StringIO()
    code = offline.validate_offline(file, world, old_file, kv_cache_dtype_owned=True, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_cli_prints_the_webhooks_message(tmp_path: Path) -> None:
    obj = md({"name": "a", "instanceType": A10G, "extraArgs": ["--kv-events-config", "{}", "--api-key", "k"],
              "env": [{"name": "GPUSTACK_MEMBER_INDEX", "value": "0"}]})
    code, out, err = _cli(tmp_path, obj)
    assert code == 1
    webhook = validate(admission_review(apply_patch(obj, accelerator_defaults(obj, WORLD))))["response"]
    assert webhook["status"]["message"] in out
    assert out.startswith("team-a/qwen: refused\n")
    for warning in webhook["warnings"]:
        assert f"Warning: {warning}" in err


def test_cli_allows_and_prints_warnings(tmp_path: Path) -> None:
    obj = md({"name": "a", "instanceType": A10G, "env": [{"name": "VLLM_API_KEY", "value": "k"}]})
    code, out, err = _cli(tmp_path, obj)
    assert code == 0 and out == "team-a/qwen: allowed\n"
    assert "Warning: spec.roles[0].env[0].name: VLLM_API_KEY" in err


def test_cli_checks_an_update_against_the_stored_object(tmp_path: Path) -> None:
    old = md({"name": "a", "instanceType": A10G, "command": ["vllm", "serve", "m"]})
    new = md({"name": "a", "instanceType": A10G, "replicas": 3})
    code, out, _ = _cli(tmp_path, new, old)
    assert code == 1 and "spec.roles[0].command:" in out and "--type=json" in out


def test_cli_defaults_like_the_mutating_webhook(tmp_path: Path) -> None:
    # The stored object carries the webhook's default; an update omitting it gets it again.
    old = md({"name": "a", "instanceType": A10G, "resources": {"accelerator": 1}})
    new = md({"name": "a", "instanceType": A10G, "replicas": 4})
    assert _cli(tmp_path, new, old)[0] == 0


def test_cli_without_a_world_refuses_unknown_types(tmp_path: Path) -> None:
    code, out, _ = _cli(tmp_path, md(), world=None)
    assert code == 1 and "does not exist" in out


def test_cli_rejects_a_file_without_deployments(tmp_path: Path) -> None:
    file = tmp_path / "empty.yaml"
    file.write_text("kind: ConfigMap\n")
    err = io.StringIO()
    assert offline.validate_offline(file, None, None, kv_cache_dtype_owned=True, out=io.StringIO(), err=err) == 2
    assert "no ModelDeployment" in err.getvalue()


def test_cli_entry_point_runs_the_examples() -> None:
    from app.cli import main

    for path in EXAMPLE_FILES:
        assert main(["validate", "-f", str(path), "--world", str(EXAMPLES / "world")]) == 0


def test_only_a_create_gets_the_finalizer_and_a_malformed_list_is_left_to_the_validating_half() -> None:
    obj = md({"name": "a", "instanceType": A10G})
    assert finalizer_on_create(obj, "CREATE") == [FINALIZER_OP]
    assert finalizer_on_create(obj, "UPDATE") == []
    obj["metadata"]["finalizers"] = "not-a-list"
    assert finalizer_on_create(obj, "CREATE") == []

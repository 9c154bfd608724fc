"""The admission webhooks over HTTP: AdmissionReview v1 in and out, never a 5xx, fail closed.

The app is built as in production (`create_app`, lifespan included) over the example world
directory; a Kube stand-in replaces the world directory for the API-unreachable cases.
"""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any, Iterator

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app import vocab
from app.admission.review import request_uid
from app.api.v1 import ModelDeployment
from app.kube.client import ClusterUnreachable
from app.main import create_app
from app.settings import Settings
from app.world import World, load_yaml_objects

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
EXAMPLE_OBJECTS = [load_yaml_objects(p)[0] for p in sorted((EXAMPLES / "deployments").glob("*.yaml"))]
PATHS = ("/webhooks/mutate", "/webhooks/validate")


def _name(obj: Any) -> str:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""


def review(obj: Any, old: Any = None, *, uid: str = "3f1c2b7e-0000-4000-8000-000000000001",
           operation: str | None = None) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "operation": operation or ("UPDATE" if old is not None else "CREATE"),
        "kind": {"group": "worker.gpustack.ai", "version": "v1", "kind": "ModelDeployment"},
        "resource": {"group": "worker.gpustack.ai", "version": "v1", "resource": "modeldeployments"},
        "requestKind": {"group": "worker.gpustack.ai", "version": "v1", "kind": "ModelDeployment"},
        "namespace": "team-a", "name": _name(obj),
        "userInfo": {"username": "alice"}, "dryRun": False,
        "object": obj, "oldObject": old}}


def assert_well_formed(answer: dict[str, Any], uid: str) -> dict[str, Any]:
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == uid
    assert isinstance(response["allowed"], bool)
    if not response["allowed"]:
        assert isinstance(response["status"]["code"], int) and response["status"]["code"] >= 400
        assert isinstance(response["status"]["message"], str) and response["status"]["message"]
    if "patch" in response:
        assert response["patchType"] == "JSONPatch"
        ops = json.loads(base64.b64decode(response["patch"]))
        assert isinstance(ops, list) and all(op["op"] == "add" for op in ops)
    for warning in response.get("warnings", []):
        assert isinstance(warning, str) and len(warning) <= 256
    return response


# --- the happy path --------------------------------------------------------------------------------


@pytest.mark.parametrize("obj", EXAMPLE_OBJECTS, ids=[o["metadata"]["name"] for o in EXAMPLE_OBJECTS])
def test_examples_are_admitted(client: TestClient, obj: dict[str, Any]) -> None:
    for path in PATHS:
        res = client.post(path, json=review(obj))
        assert res.status_code == 200
        response = assert_well_formed(res.json(), "3f1c2b7e-0000-4000-8000-000000000001")
        assert response["allowed"] is True
        # A create is born with Metacontroller's finalizer (docs/metacontroller.md#finalize); nothing else.
        assert patch_of(response) == ([FINALIZER_OP] if path == "/webhooks/mutate" else [])


def patch_of(response: dict[str, Any]) -> list[dict[str, Any]]:
    return json.loads(base64.b64decode(response["patch"])) if "patch" in response else []


FINALIZER_OP = {"op": "add", "path": "/metadata/finalizers", "value": [vocab.FINALIZER_METACONTROLLER]}


def test_mutate_defaults_the_accelerator(client: TestClient) -> None:
    obj = copy.deepcopy(EXAMPLE_OBJECTS[-1])
    obj["spec"]["roles"][0].pop("resources")
    response = assert_well_formed(client.post("/webhooks/mutate", json=review(obj, uid="u-9")).json(), "u-9")
    assert patch_of(response) == [FINALIZER_OP, {"op": "add", "path": "/spec/roles/0/resources", "value": {"accelerator": 1}}]
    updated = client.post("/webhooks/mutate", json=review(obj, obj, uid="u-10")).json()["response"]
    assert patch_of(updated) == [{"op": "add", "path": "/spec/roles/0/resources", "value": {"accelerator": 1}}]


def test_a_create_is_born_with_metacontrollers_finalizer_once(client: TestClient) -> None:
    obj = copy.deepcopy(EXAMPLE_OBJECTS[-1])
    obj["metadata"]["finalizers"] = ["example.com/keep"]
    response = client.post("/webhooks/mutate", json=review(obj)).json()["response"]
    assert patch_of(response) == [{"op": "add", "path": "/metadata/finalizers/-", "value": vocab.FINALIZER_METACONTROLLER}]
    obj["metadata"]["finalizers"].append(vocab.FINALIZER_METACONTROLLER)
    assert patch_of(client.post("/webhooks/mutate", json=review(obj)).json()["response"]) == []


def test_validate_refuses_with_paths_and_ways_out(client: TestClient) -> None:
    obj = copy.deepcopy(EXAMPLE_OBJECTS[0])
    obj["spec"]["roles"][0]["extraArgs"] = ["--disaggregation-mo", "prefill"]
    obj["spec"]["roles"][0]["env"] = [{"name": "MOONCAKE_TENANT_ID", "value": "team-b"}]
    response = assert_well_formed(client.post("/webhooks/validate", json=review(obj, uid="u-2")).json(), "u-2")
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert ("spec.roles[0].extraArgs[0]: --disaggregation-mo is --disaggregation-mode, which the operator owns on "
            "SGLang — remove it, or take over the command line with roles[].command") in message
    assert "spec.roles[0].env[0].name: MOONCAKE_TENANT_ID is owned by the operator on SGLang" in message
    causes = [c["field"] for c in response["status"]["details"]["causes"]]
    assert causes == ["spec.roles[0].extraArgs[0]", "spec.roles[0].env[0].name"]


def test_frozen_field_update_is_refused(client: TestClient) -> None:
    old = EXAMPLE_OBJECTS[-1]
    new = copy.deepcopy(old)
    new["spec"]["roles"][0]["size"] = 2
    response = client.post("/webhooks/validate", json=review(new, old)).json()["response"]
    assert response["allowed"] is False
    assert response["status"]["message"].startswith("spec.roles[0].size: ")
    assert "created rather than edited" in response["status"]["message"]


def test_missing_instance_type_is_refused_and_not_mutated(client: TestClient) -> None:
    obj = copy.deepcopy(EXAMPLE_OBJECTS[-1])
    obj["spec"]["roles"][0]["instanceType"] = "gpustack-nvidia-b200-linux-amd64"
    obj["spec"]["roles"][0].pop("resources")
    mutated = client.post("/webhooks/mutate", json=review(obj)).json()["response"]
    assert mutated["allowed"] is True and patch_of(mutated) == [FINALIZER_OP]
    validated = client.post("/webhooks/validate", json=review(obj)).json()["response"]
    assert validated["allowed"] is False
    assert "spec.roles[0].instanceType: InstanceType 'gpustack-nvidia-b200-linux-amd64' does not exist" in \
        validated["status"]["message"]


@pytest.mark.parametrize("path", PATHS)
def test_missing_object_is_refused_in_a_review(client: TestClient, path: str) -> None:
    res = client.post(path, json=review(None, uid="u-3"))
    assert res.status_code == 200
    response = assert_well_formed(res.json(), "u-3")
    assert response["allowed"] is False and response["status"]["code"] == 400


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("body", [b"", b"not json", b"[1, 2]", b'"review"', b"null", b"\xff\xfe", b"[" * 100000])
def test_a_body_that_is_not_an_admission_review_gets_400(client: TestClient, path: str, body: bytes) -> None:
    res = client.post(path, content=body, headers={"content-type": "application/json"})
    assert res.status_code == 400
    assert "error" in res.json()


# --- the API server cannot be read -----------------------------------------------------------------


class UnreachableKube:
    """A Kube stand-in whose live reads fail the way the real client reports it."""

    def __init__(self) -> None:
        self.calls = 0

    async def world_for(self, md: ModelDeployment, *, instance_types_only: bool = False) -> World:
        self.calls += 1
        raise ClusterUnreachable("the API server could not be reached: ConnectError")

    async def close(self) -> None:
        return None


class LiveKube:
    """A Kube stand-in answering from a fixed world (the live read path, not the directory)."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.seen: list[str] = []
        self.scopes: list[bool] = []

    async def world_for(self, md: ModelDeployment, *, instance_types_only: bool = False) -> World:
        self.seen.append(md.metadata.name)
        self.scopes.append(instance_types_only)
        return self.world

    async def close(self) -> None:
        return None


@pytest.fixture
def kube_client() -> Iterator[TestClient]:
    app = create_app(Settings(kube="off"))
    with TestClient(app) as test_client:
        app.state.service.directory_world = None
        yield test_client


def test_unreachable_api_server_fails_closed(kube_client: TestClient) -> None:
    kube = UnreachableKube()
    kube_client.app.state.service.kube = kube  # type: ignore[attr-defined]
    obj = copy.deepcopy(EXAMPLE_OBJECTS[-1])
    obj["spec"]["roles"][0].pop("resources")
    for path in PATHS:
        response = assert_well_formed(kube_client.post(path, json=review(obj, uid="u-4")).json(), "u-4")
        assert response["allowed"] is False
        assert response["status"]["code"] == 503
        assert "the API server could not be reached" in response["status"]["message"]
    assert kube.calls == 2


def test_no_api_server_configured_fails_closed(kube_client: TestClient) -> None:
    kube_client.app.state.service.kube = None  # type: ignore[attr-defined]
    response = kube_client.post("/webhooks/validate", json=review(EXAMPLE_OBJECTS[0])).json()["response"]
    assert response["allowed"] is False and "could not be reached" in response["status"]["message"]


def test_deletion_update_needs_no_read(kube_client: TestClient) -> None:
    kube_client.app.state.service.kube = UnreachableKube()  # type: ignore[attr-defined]
    old = copy.deepcopy(EXAMPLE_OBJECTS[-1])
    new = copy.deepcopy(old)
    new["metadata"]["deletionTimestamp"] = "2026-11-29T00:00:00Z"
    new["metadata"]["finalizers"] = []
    for path in PATHS:
        assert kube_client.post(path, json=review(new, old)).json()["response"]["allowed"] is True


def test_live_reads_decide(kube_client: TestClient) -> None:
    kube = LiveKube(World.of(load_yaml_objects(EXAMPLES / "world")))
    kube_client.app.state.service.kube = kube  # type: ignore[attr-defined]
    for obj in EXAMPLE_OBJECTS:
        assert kube_client.post("/webhooks/validate", json=review(obj)).json()["response"]["allowed"] is True
    assert kube.seen == [o["metadata"]["name"] for o in EXAMPLE_OBJECTS]
    assert kube.scopes == [False] * len(EXAMPLE_OBJECTS)  # validation reads the whole world


def test_the_mutating_webhook_reads_only_instance_types(kube_client: TestClient) -> None:
    kube = LiveKube(World.of(load_yaml_objects(EXAMPLES / "world")))
    kube_client.app.state.service.kube = kube  # type: ignore[attr-defined]
    obj = copy.deepcopy(EXAMPLE_OBJECTS[-1])
    obj["spec"]["roles"][0].pop("resources")
    response = kube_client.post("/webhooks/mutate", json=review(obj)).json()["response"]
    assert response["allowed"] is True and response.get("patch")
    assert kube.scopes == [True]


# --- fuzzing: never a 5xx, always a well-formed answer with the request's uid ---------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)
FIELD_NAMES = st.sampled_from([
    "apiVersion", "kind", "metadata", "name", "namespace", "spec", "model", "engine", "version", "kvCache", "poolRef",
    "router", "roles", "replicas", "size", "instanceType", "resources", "accelerator", "interface", "command",
    "extraArgs", "env", "ports", "port", "topology", "requiredLevel", "additionalVolumes", "subPath", "image",
    "deletionTimestamp", "acceleratorPartitionedProfile", "acceleratorSlicedMemoryPercentage", "kind", "value",
])
ARGS = st.lists(st.sampled_from([
    "--kv_transfer_config", "--kv-transfer-conf", "--kv-transfer-config.kv_role", "-tp", "-tp=x", "--port", "0",
    "65536", "--port=8000", "--api-key", "--kv-cache-dtype", "--tp", "--dp", "--nnodes", "2", "{}", "$(X)", "-O3",
    "--hicache-storage-b", "--", "--disaggregation-mode=prefill", "--config", "a.yaml", "-pp", "-dpl", "4",
]), max_size=8)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            out += _paths(value, (*prefix, index))
    return out


@st.composite
def edited_deployments(draw: st.DrawFn) -> dict[str, Any]:
    """An example deployment with a few fields replaced, deleted or added at random."""
    obj = copy.deepcopy(draw(st.sampled_from(EXAMPLE_OBJECTS)))
    for _ in range(draw(st.integers(0, 4))):
        paths = [p for p in _paths(obj) if p]
        path = draw(st.sampled_from(paths))
        parent: Any = obj
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "delete", "add", "args"]))
        if action == "replace":
            parent[path[-1]] = draw(JSON)
        elif action == "delete":
            del parent[path[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(FIELD_NAMES)] = draw(JSON)
        elif action == "args":
            roles = obj.get("spec", {}).get("roles") if isinstance(obj.get("spec"), dict) else None
            if isinstance(roles, list) and roles and isinstance(roles[0], dict):
                roles[0][draw(st.sampled_from(["extraArgs", "command"]))] = draw(ARGS)
    return obj


@st.composite
def reviews(draw: st.DrawFn) -> dict[str, Any]:
    obj = draw(edited_deployments() | JSON)
    old = draw(st.none() | edited_deployments() | JSON)
    body = review(obj, old, uid=draw(st.text(min_size=1, max_size=36)),
                  operation=draw(st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT", ""]) | st.text(max_size=8)))
    request = body["request"]
    for key in draw(st.lists(st.sampled_from(sorted(request)), max_size=3, unique=True)):
        if draw(st.booleans()):
            del request[key]
        else:
            request[key] = draw(JSON)
    if draw(st.integers(0, 9)) == 0:
        body[draw(st.sampled_from(["apiVersion", "kind", "request"]))] = draw(JSON)
    return body


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                         HealthCheck.too_slow])


@FUZZ
@given(body=reviews(), path=st.sampled_from(PATHS))
def test_fuzzed_reviews_always_get_a_well_formed_answer(client: TestClient, body: dict[str, Any], path: str) -> None:
    res = client.post(path, json=body)
    assert res.status_code == 200, res.text
    assert_well_formed(res.json(), request_uid(body))


@FUZZ
@given(body=JSON, path=st.sampled_from(PATHS))
def test_fuzzed_bodies_never_get_a_5xx(client: TestClient, body: Any, path: str) -> None:
    res = client.post(path, json=body)
    if isinstance(body, dict):
        assert res.status_code == 200, res.text
        assert_well_formed(res.json(), request_uid(body))
    else:
        assert res.status_code == 400


@FUZZ
@given(obj=edited_deployments())
def test_fuzzed_deployments_decide_consistently(client: TestClient, obj: dict[str, Any]) -> None:
    """Whatever the object, both halves answer; an allowed object stays allowed after its own patch."""
    mutated = assert_well_formed(client.post("/webhooks/mutate", json=review(obj, uid="m")).json(), "m")
    validated = assert_well_formed(client.post("/webhooks/validate", json=review(obj, uid="v")).json(), "v")
    if not validated["allowed"]:
        assert validated["status"]["code"] in (400, 403)
        assert validated["status"]["code"] != 500, validated["status"]["message"]
    assert mutated["allowed"] is True

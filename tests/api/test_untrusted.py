"""The hooks and webhooks trust nothing (docs/metacontroller.md#trust): malformed, forged and oversized
requests get a 4xx with a JSON body naming the problem, never a plan and never a 5xx."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app import vocab
from app.main import create_app
from app.settings import Settings
from tests.conftest import EXAMPLES, world_objects
from tests.helpers import parent, request

A10G = "gpustack-nvidia-a10g-linux-amd64"


@pytest.fixture(scope="module")
def client():
    app = create_app(Settings(world_dir=Path(EXAMPLES / "world"), kube="off", max_body_bytes=1024 * 1024))
    with TestClient(app) as c:
        yield c


def post(client, hook: str, body) -> "object":
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post(f"/hooks/{hook}", content=content, headers={"content-type": "application/json"})


def error_of(response) -> str:
    assert response.headers["content-type"].startswith("application/json")
    return response.json()["error"]


@pytest.mark.parametrize("key", ["Pod.v1", "Service.v1", "Deployment.apps/v1"])
@pytest.mark.parametrize("hook", ["sync", "finalize"])
def test_a_missing_or_null_child_map_is_a_400_never_a_plan(client, hook, key):
    body = request(parent("qwen-chat"))
    del body["children"][key]
    response = post(client, hook, body)
    assert response.status_code == 400 and key in error_of(response) and "missing" in error_of(response)
    body["children"][key] = None
    response = post(client, hook, body)
    assert response.status_code == 400 and key in error_of(response)


def test_no_children_at_all_is_a_400(client):
    body = request(parent("qwen-chat"))
    del body["children"]
    assert post(client, "sync", body).status_code == 400


@pytest.mark.parametrize("field", ["name", "uid"])
@pytest.mark.parametrize("hook", ["sync", "finalize", "customize"])
def test_a_parent_without_its_identity_is_a_400(client, hook, field):
    md = parent("qwen-chat")
    del md["metadata"][field]
    response = post(client, hook, request(md))
    assert response.status_code == 400
    assert f"$.parent.metadata.{field}" in error_of(response)


@pytest.mark.parametrize("mutate, where", [
    (lambda b: b["parent"]["metadata"].__setitem__("generation", 2**64), "$.parent.metadata.generation"),
    (lambda b: b["parent"].__setitem__("status", {"conditions": [["x"]]}), "$.parent.status.conditions[0]"),
    (lambda b: b["parent"].__setitem__("status", {"roles": [{"name": "server", "desired": "many"}]}),
     "$.parent.status.roles[0].desired"),
    (lambda b: b["children"]["Pod.v1"].__setitem__("team-a/x", {"metadata": {"name": "x", "labels": ["a"]}}),
     "labels"),
    (lambda b: b["related"].__setitem__("Workload.kueue.x-k8s.io/v1beta2", {"team-a/w": 3}), "$.related"),
    (lambda b: b.__setitem__("finalizing", "yes"), "$.finalizing"),
])
def test_wrongly_typed_fields_are_a_400_naming_the_field(client, mutate, where):
    body = request(parent("qwen-chat"))
    mutate(body)
    response = post(client, "sync", body)
    assert response.status_code == 400, response.text
    assert where in error_of(response)


def test_deep_nesting_is_a_400(client):
    for depth in (300, 2000, 100_000):
        nested = b"[" * depth + b"]" * depth
        body = b'{"parent": {"metadata": {"name": "a", "uid": "u"}, "spec": {"x": ' + nested + b"}}}"
        for hook in ("sync", "customize"):
            response = post(client, hook, body)
            assert 400 <= response.status_code < 500, (hook, depth, response.text[:200])
            error_of(response)


def test_a_deeply_nested_child_is_never_a_500(client):
    """A kept Pod's spec is echoed back; nesting JSON cannot encode back is the request's fault (400)."""
    first = post(client, "sync", request(parent("qwen-chat"))).json()
    pods = [c for c in first["children"] if c["kind"] == "Pod"]
    deep: dict = {}
    cursor = deep
    for _ in range(400):
        cursor["x"] = {}
        cursor = cursor["x"]
    pods[0]["spec"]["deep"] = deep
    pods[0]["metadata"].setdefault("uid", "pod-uid")
    response = post(client, "sync", request(parent("qwen-chat"), children=pods))
    assert response.status_code < 500 and response.json()


def test_an_answer_json_cannot_carry_is_a_bad_request():
    from app.api.hooks import BadHookRequest, sync_response_bytes

    with pytest.raises(BadHookRequest, match="64-bit"):
        sync_response_bytes({"children": [{"spec": {"x": 2**70}}]})


def test_a_body_above_the_limit_is_a_413_in_json(client):
    big = b'{"parent": "' + b"x" * (1024 * 1024 + 1) + b'"}'
    for path in ("/hooks/sync", "/webhooks/validate"):
        response = client.post(path, content=big, headers={"content-type": "application/json"})
        assert response.status_code == 413
        assert "MODELDEPLOYMENT_MAX_BODY_BYTES" in error_of(response)


def test_a_lone_surrogate_uid_is_echoed_in_json(client):
    for path in ("/webhooks/mutate", "/webhooks/validate"):
        body = b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "\\ud800x"}}'
        response = client.post(path, content=body, headers={"content-type": "application/json"})
        assert response.status_code == 200
        assert response.json()["response"]["uid"] == "\ud800x"


def test_an_unrepresentable_instance_type_quantity_fails_the_render_naming_the_type(client):
    world = copy.deepcopy(world_objects())
    for obj in world:
        if obj["metadata"]["name"] == A10G:
            obj["spec"]["unitResources"]["cpu"] = "1e999999"
    response = post(client, "sync", request(parent("qwen-chat"), world=world))
    assert response.status_code == 429
    message = error_of(response)
    assert A10G in message and "spec.unitResources.cpu" in message and "1e999999" in message


def test_a_stored_deployment_above_the_pod_bound_is_refused_by_sync(client):
    md = parent("qwen-chat")
    md["spec"]["roles"][0]["replicas"] = 1024
    md["spec"]["roles"][0]["size"] = 4
    response = post(client, "sync", request(md))
    assert response.status_code == 429
    assert vocab.SETTING_MAX_PODS_PER_DEPLOYMENT in error_of(response)
    # Finalize is not bounded: a teardown creates no Pod and must never wedge the finalizer.
    assert post(client, "finalize", request(md)).status_code == 200


def test_each_listener_serves_only_its_paths():
    from app.web.guard import HOOK_PATHS, WEBHOOK_PATHS, Listener

    app = create_app(Settings(world_dir=Path(EXAMPLES / "world"), kube="off"))
    with TestClient(Listener(app, HOOK_PATHS)) as hooks, TestClient(Listener(app, WEBHOOK_PATHS)) as webhooks:
        assert hooks.post("/webhooks/validate", json={}).status_code == 404
        assert webhooks.post("/hooks/sync", json=request(parent("qwen-chat"))).status_code == 404
        assert hooks.post("/hooks/sync", json=request(parent("qwen-chat"))).status_code == 200
        assert webhooks.post("/webhooks/validate", json={}).status_code == 200
        assert hooks.get("/healthz").status_code == 200 and webhooks.get("/healthz").status_code == 200


def test_a_large_body_of_cheap_values_is_a_413_before_it_is_decoded():
    from app.web.guard import DENSE_CHECK_BYTES

    app = create_app(Settings(world_dir=Path(EXAMPLES / "world"), kube="off", max_body_values=1_000_000))
    count = DENSE_CHECK_BYTES // 3 + 10
    dense = b'{"parent": {"metadata": {"name": "x", "uid": "u"}}, "related": {"X.v1": {"a": [' + \
        b",".join([b"{}"] * count) + b"]}}}"
    with TestClient(app) as c:
        for path in ("/hooks/sync", "/webhooks/validate"):
            response = c.post(path, content=dense, headers={"content-type": "application/json"})
            assert response.status_code == 413
            assert vocab.SETTING_MAX_BODY_VALUES in error_of(response)
        # The same size in long strings decodes cheaply and is read.
        sparse = b'{"parent": "' + b"x" * (DENSE_CHECK_BYTES + 10) + b'"}'
        assert c.post("/hooks/sync", content=sparse, headers={"content-type": "application/json"}).status_code == 400


def test_a_deeply_nested_admission_review_is_refused_in_an_admission_review(client):
    deep: dict = {}
    cursor = deep
    for _ in range(vocab.MAX_JSON_DEPTH + 5):
        cursor["x"] = {}
        cursor = cursor["x"]
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-1", "operation": "CREATE", "object": {"spec": deep}}}
    for path in ("/webhooks/mutate", "/webhooks/validate"):
        response = client.post(path, content=json.dumps(body).encode(), headers={"content-type": "application/json"})
        assert response.status_code == 200
        answer = response.json()["response"]
        assert answer["uid"] == "u-1" and answer["allowed"] is False and answer["status"]["code"] == 400
        assert "nested deeper" in answer["status"]["message"]

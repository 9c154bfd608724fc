"""A bounded fuzz of all five endpoints, in-process: whatever arrives, the answer is JSON
and never a 5xx, an AdmissionReview echoes its uid, and every write the executor makes is one the
real parent could have caused (docs/metacontroller.md#trust). bench/fuzz.py runs the same generators for longer.

Requests are valid ones (sync/finalize with observed children, customize, admission CREATE and
UPDATE) with one random mutation each: a field deleted, or replaced by any JSON value (huge
integers, lone surrogates, deep nesting, wrong types), or the whole body replaced by junk.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app import vocab
from app.kube.executor import Executor
from app.main import create_app
from app.render import names
from app.settings import Settings
from tests.conftest import EXAMPLES
from tests.helpers import parent, request

REAL = parent("qwen-cached")
NAMESPACE, NAME, UID = REAL["metadata"]["namespace"], REAL["metadata"]["name"], REAL["metadata"]["uid"]
REAL_GROUPS = {group for role in REAL["spec"]["roles"] for k in range(vocab.MAX_ROLE_REPLICAS)
               for group in names.pod_groups(NAMESPACE, NAME, role["name"], k)}
HOOKS = ("/hooks/sync", "/hooks/finalize", "/hooks/customize")
WEBHOOKS = ("/webhooks/mutate", "/webhooks/validate")


class RecordingKube:
    """The API server as the executor sees it: the real parent exists; every write is recorded."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, Any]] = []

    async def model_deployment(self, namespace, name):
        if (namespace, name) != (NAMESPACE, NAME):
            return None
        return REAL

    async def workload(self, namespace, name):
        return {"metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"}}

    async def delete_workload(self, namespace, name, uid):
        self.writes.append(("delete_workload", (namespace, name)))
        return True

    async def create_event(self, body):
        self.writes.append(("create_event", body))

    async def apply_workload_check(self, namespace, name, body):
        self.writes.append(("apply_workload_check", (namespace, name)))


def allowed_write(write: tuple[str, Any]) -> bool:
    kind, what = write
    if kind == "create_event":
        involved = what["involvedObject"]
        return (what["metadata"]["namespace"], involved["namespace"], involved["name"], involved["uid"]) == \
            (NAMESPACE, NAMESPACE, NAME, UID)
    namespace, workload = what
    return namespace == NAMESPACE and workload in REAL_GROUPS


@pytest.fixture(scope="module")
def service():
    app = create_app(Settings(world_dir=Path(EXAMPLES / "world"), kube="off", max_body_bytes=4 * 1024 * 1024))
    with TestClient(app, raise_server_exceptions=False) as client:
        kube = RecordingKube()
        app.state.service.executor = Executor(kube)  # type: ignore[arg-type]
        yield client, kube


def base_bodies(client: TestClient) -> dict[str, dict[str, Any]]:
    first = client.post("/hooks/sync", json=request(REAL)).json()
    observed = [{**c, "metadata": {**c["metadata"], "uid": f"uid-{c['metadata']['name']}"},
                 "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
                for c in first["children"]]
    scaled_down = {**REAL, "status": {"roles": [{"name": r["name"], "desired": 8} for r in REAL["spec"]["roles"]]}}
    sync_body = request(scaled_down, children=observed)
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": {"uid": "7f0b2c1e-0000-4000-8000-000000000001", "operation": "UPDATE",
                          "kind": {"group": vocab.GROUP, "version": vocab.VERSION, "kind": vocab.KIND_MODEL_DEPLOYMENT},
                          "namespace": NAMESPACE, "name": NAME, "object": REAL, "oldObject": REAL}}
    return {"/hooks/sync": sync_body, "/hooks/finalize": {**sync_body, "finalizing": True},
            "/hooks/customize": {"controller": {}, "parent": REAL},
            "/webhooks/mutate": review, "/webhooks/validate": review}


LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12),
    st.sampled_from(["\ud800", "a\udfffb", "", "1e999999", "-1", "team-a/x", "Pod.v1"]),
)
VALUES = st.recursive(LEAVES, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)


def deep(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value] if depth % 2 else {"x": value}
    return value


REPLACEMENTS = st.one_of(VALUES, st.integers(min_value=100, max_value=1500).map(deep))


def paths(value: Any, prefix: tuple = (), limit: int = 400) -> list[tuple]:
    """Every path into a JSON value (breadth-first, at most `limit`)."""
    out, queue = [], [(prefix, value)]
    while queue and len(out) < limit:
        path, current = queue.pop(0)
        out.append(path)
        if isinstance(current, dict):
            queue.extend((path + (k,), v) for k, v in current.items())
        elif isinstance(current, list):
            queue.extend((path + (i,), v) for i, v in enumerate(current))
    return out


def mutated(body: dict[str, Any], data: st.DataObject) -> bytes:
    how = data.draw(st.sampled_from(["replace", "replace", "delete", "junk"]))
    if how == "junk":
        junk = data.draw(st.one_of(REPLACEMENTS, st.binary(max_size=64)))
        return junk if isinstance(junk, bytes) else json.dumps(junk).encode()
    body = json.loads(json.dumps(body))
    path = data.draw(st.sampled_from(paths(body)[1:]))
    holder = body
    for key in path[:-1]:
        holder = holder[key]
    if how == "delete":
        del holder[path[-1]]
    else:
        holder[path[-1]] = data.draw(REPLACEMENTS)
    return json.dumps(body).encode()


def check(client: TestClient, kube: RecordingKube, path: str, content: bytes) -> None:
    kube.writes.clear()
    response = client.post(path, content=content, headers={"content-type": "application/json"})
    assert response.status_code < 500, (path, response.status_code, response.text[:500])
    answer = response.json()
    assert isinstance(answer, dict)
    if path in WEBHOOKS and response.status_code == 200:
        try:
            sent = json.loads(content)
        except ValueError:
            sent = None
        uid = (sent.get("request") or {}).get("uid") if isinstance(sent, dict) and isinstance(
            sent.get("request"), dict) else None
        assert answer["response"]["uid"] == (uid if isinstance(uid, str) else "")
        # Nor an internal error inside the AdmissionReview (the API server would show it as one).
        assert (answer["response"].get("status") or {}).get("code") != 500, answer["response"]["status"]
    forbidden = [w for w in kube.writes if not allowed_write(w)]
    assert not forbidden, (path, forbidden)


@pytest.mark.parametrize("path", HOOKS + WEBHOOKS)
def test_the_unmutated_requests_are_answered(service, path):
    client, kube = service
    check(client, kube, path, json.dumps(base_bodies(client)[path]).encode())
    if path in ("/hooks/sync", "/hooks/finalize"):
        assert kube.writes, "the base request exercises the executor (a scale-down from 8 deletes Workloads)"


@pytest.mark.parametrize("path", HOOKS + WEBHOOKS)
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                    HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_any_mutation_is_answered_in_json_without_a_5xx_or_a_foreign_write(service, path, data):
    client, kube = service
    check(client, kube, path, mutated(base_bodies_cached(client)[path], data))


_BASES: dict[str, Any] = {}


def base_bodies_cached(client: TestClient) -> dict[str, dict[str, Any]]:
    if not _BASES:
        _BASES.update(base_bodies(client))
    return _BASES


def test_a_forged_parent_in_another_namespace_writes_nothing(service):
    client, kube = service
    body = base_bodies_cached(client)["/hooks/sync"]
    forged = json.loads(json.dumps(body))
    forged["parent"]["metadata"]["namespace"] = "kube-system"
    check(client, kube, "/hooks/sync", json.dumps(forged).encode())
    assert kube.writes == []
    forged["parent"]["metadata"]["namespace"] = NAMESPACE
    forged["parent"]["metadata"]["uid"] = "another-uid"
    response = client.post("/hooks/sync", json=forged)
    assert response.status_code == 409 and kube.writes == []

"""The hook endpoints in-process: never a 200 that would delete children
(docs/metacontroller.md#a-200-without-children)."""

from __future__ import annotations

import copy
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app import vocab
from tests.conftest import world_objects
from tests.helpers import parent, request


def test_sync_answers_children_and_status(client):
    response = client.post("/hooks/sync", json=request(parent("qwen-chat")))
    assert response.status_code == 200
    body = response.json()
    assert set(body) <= {"status", "children", "resyncAfterSeconds"}
    assert len([c for c in body["children"] if c["kind"] == "Pod"]) == 4
    assert body["status"]["phase"] == vocab.PHASE_STARTING


def test_finalize_answers_finalized(client):
    response = client.post("/hooks/finalize", json=request(parent("qwen-chat")))
    assert response.status_code == 200
    assert response.json()["finalized"] is True


def test_customize_answers_related_rules(client):
    response = client.post("/hooks/customize", json={"controller": {}, "parent": parent("pd-pair")})
    assert response.status_code == 200
    assert {r["resource"] for r in response.json()["relatedResources"]} >= {"instancetypes", "workloads"}


@pytest.mark.parametrize("body", [b"", b"not json", b"[]", b"{}", b'{"parent": 3}', b'{"parent": {}}'])
def test_malformed_requests_never_get_a_200(client, body):
    for hook in ("sync", "finalize", "customize"):
        response = client.post(f"/hooks/{hook}", content=body, headers={"content-type": "application/json"})
        assert response.status_code >= 400, (hook, body)
        assert "error" in response.json()


def test_a_parent_outside_the_schema_is_refused_not_emptied(client):
    md = parent("qwen-chat")
    md["spec"]["roles"] = []
    response = client.post("/hooks/sync", json=request(md))
    assert response.status_code == 422


def test_render_failure_is_429_with_retry_after(client):
    world = copy.deepcopy(world_objects())
    for obj in world:
        if obj["metadata"]["name"] == "gpustack-nvidia-a10g-linux-amd64":
            obj["status"]["detail"] = {}
    response = client.post("/hooks/sync", json=request(parent("qwen-chat"), world=world))
    assert response.status_code == 429
    assert response.headers["retry-after"] == "30"
    assert "has not observed its hardware yet" in response.json()["error"]


def test_internal_errors_answer_500(client, monkeypatch):
    import app.web.hooks as hooks

    def boom(*args, **kwargs):
        raise RuntimeError("planner exploded")

    monkeypatch.setattr(hooks, "reconcile", boom)
    response = client.post("/hooks/sync", json=request(parent("qwen-chat")))
    assert response.status_code == 500 and "planner exploded" in response.json()["error"]


def test_metrics_count_hook_calls(client):
    client.post("/hooks/sync", json=request(parent("qwen-chat")))
    text = client.get("/metrics").text
    assert 'modeldeployment_hook_duration_seconds_count{hook="sync"}' in text


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutation=st.dictionaries(st.sampled_from(["parent", "children", "related", "finalizing", "controller"]),
                                json_values, max_size=3))
def test_fuzzed_requests_are_answered_200_only_with_children_and_status(client, mutation):
    body = request(parent("qwen-chat"))
    body.update(mutation)
    response = client.post("/hooks/sync", json=body)
    assert response.status_code != 200 or {"children", "status"} <= set(response.json())
    assert response.status_code < 500 or "error" in response.json()


def test_an_api_server_gone_mid_pass_answers_503_not_an_internal_error(client, monkeypatch):
    """The soak's API server restart (bench/soak.md): the executor's write timed out and the sync
    hook answered 500 "internal error", counted as an internal failure of the service."""
    import httpx2

    async def api_server_gone(*args, **kwargs):
        raise httpx2.ReadTimeout("timed out")

    monkeypatch.setattr(client.app.state.service.executor, "run", api_server_gone)
    response = client.post("/hooks/sync", json=request(parent("qwen-chat")))
    assert response.status_code == 503 and response.headers["retry-after"] == "5"
    assert "the API server is unavailable" in response.json()["error"]
    metrics = client.get("/metrics").text
    assert 'modeldeployment_hook_errors_total{hook="sync",kind="api_unavailable"}' in metrics


def after_answer_errors(client) -> float:
    """modeldeployment_hook_errors_total{hook="finalize",kind="after_answer"}, 0 before the first."""
    prefix = 'modeldeployment_hook_errors_total{hook="finalize",kind="after_answer"} '
    lines = [line for line in client.get("/metrics").text.splitlines() if line.startswith(prefix)]
    return float(lines[0][len(prefix):]) if lines else 0.0


def test_an_unfinished_teardown_answers_first_and_its_deletes_follow(client, monkeypatch):
    """docs/metacontroller.md#finalize: a finalize answering `finalized: false` stands whatever its
    Workload deletes do, so it is given before them; a delete that then fails is counted, and the
    next pass plans it again. A finished teardown still waits on its side effects."""
    import httpx2

    from app.render import names
    from tests.helpers import pods, running, sync, workload

    md = parent("qwen-chat")
    md["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    observed = [running(p, f"uid-{i}") for i, p in enumerate(pods(sync(md)))]
    group = names.pod_group("team-a", "qwen-chat", "server", 0)
    standing = workload("team-a", group)
    standing["metadata"]["uid"] = "wl-0"
    carried: list[list[object]] = []

    async def api_server_gone(parent_ref, intents):
        carried.append(list(intents))
        raise httpx2.ReadTimeout("timed out")

    executor = client.app.state.service.executor
    monkeypatch.setattr(executor, "run", api_server_gone)
    errors_before = after_answer_errors(client)
    response = client.post("/hooks/finalize", json=request(md, children=observed, extra_related=[standing],
                                                          finalizing=True))
    assert response.status_code == 200, response.text
    assert response.json()["finalized"] is False and response.json()["children"] == []
    # The counter is process-wide (another test may have counted before): wait for it to grow by one.
    # The deletes run on the service's loop after the answer: each request below gives it a turn.
    deadline = time.monotonic() + 30
    while after_answer_errors(client) < errors_before + 1:
        assert time.monotonic() < deadline, "the deletes after the answer never ran"
        time.sleep(0.05)
    assert {type(i).__name__ for i in carried[0]} == {"DeleteWorkload"}
    assert "wl-0" in {getattr(i, "uid", None) for i in carried[0]}

    monkeypatch.undo()
    finished = client.post("/hooks/finalize", json=request(md, finalizing=True))
    assert finished.status_code == 200 and finished.json()["finalized"] is True


def test_a_stopping_service_finishes_the_deletes_it_carries_out_after_an_answer(monkeypatch):
    """docs/metacontroller.md#finalize: the lifespan's shutdown (the listeners stopped) waits for an
    unfinished teardown's deletes, within MODELDEPLOYMENT_SHUTDOWN_DRAIN_SECONDS. The deletes below
    can finish only once that wait has begun, so they are carried out only if it waits for them."""
    import asyncio

    from fastapi.testclient import TestClient

    from app.main import create_app
    from app.render import names
    from app.settings import Settings
    from tests.conftest import EXAMPLES
    from tests.helpers import pods, running, sync, workload

    md = parent("qwen-chat")
    md["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    observed = [running(p, f"uid-{i}") for i, p in enumerate(pods(sync(md)))]
    standing = workload("team-a", names.pod_group("team-a", "qwen-chat", "server", 0))
    standing["metadata"]["uid"] = "wl-0"
    draining: list[float] = []
    carried: list[str] = []

    with TestClient(create_app(Settings(world_dir=EXAMPLES / "world", kube="off"))) as client:
        executor = client.app.state.service.executor
        drain = executor.drain

        async def drain_seen(seconds: float) -> int:
            draining.append(seconds)
            return await drain(seconds)

        async def deletes_that_outlast_the_answer(parent_ref, intents):
            while not draining:
                await asyncio.sleep(0.01)
            carried.extend(getattr(i, "uid", "") for i in intents)

        monkeypatch.setattr(executor, "drain", drain_seen)
        monkeypatch.setattr(executor, "run", deletes_that_outlast_the_answer)
        response = client.post("/hooks/finalize", json=request(md, children=observed, extra_related=[standing],
                                                              finalizing=True))
        assert response.status_code == 200 and response.json()["finalized"] is False
    assert draining == [Settings().shutdown_drain_seconds]
    assert "wl-0" in carried


def test_api_unavailable_is_the_api_servers_absence_only():
    import httpx2
    from lightkube.core.exceptions import ApiError

    from app.web.answers import api_unavailable

    def api_error(code: int) -> ApiError:
        req = httpx2.Request("GET", "https://api/x")
        return ApiError(request=req, response=httpx2.Response(code, request=req, json={"code": code, "message": "m"}))

    assert api_unavailable(httpx2.ConnectError("refused")) and api_unavailable(TimeoutError())
    assert api_unavailable(api_error(503)) and api_unavailable(api_error(429))
    assert not api_unavailable(api_error(422)) and not api_unavailable(RuntimeError("a bug"))


def test_the_scaler_sync_answers_503_too_when_the_api_server_is_gone(client, monkeypatch):
    """The same soak finding on the scaler's hook: its write timed out during the API server restart."""
    import httpx2

    import app.web.scaler_hooks as scaler_hooks

    async def api_server_gone(request):
        raise httpx2.ConnectError("connection refused")

    monkeypatch.setattr(scaler_hooks, "_sync", api_server_gone)
    response = client.post("/hooks/scaler/sync", json={})
    assert response.status_code == 503 and response.headers["retry-after"] == "5"
    metrics = client.get("/metrics").text
    assert 'modeldeployment_hook_errors_total{hook="scaler-sync",kind="api_unavailable"}' in metrics


def test_a_joint_set_at_its_release_bound_runs_its_pass_again_with_the_holders(client):
    """docs/kueue.md#deadlock-release: the first pass cannot decide whether the set yields; the
    handler lists the deployments (none without an API server: the set is alone) and runs it again."""
    from app.render import names
    from tests.helpers import pods, sync, workload

    md = parent("pd-pair")
    del md["spec"]["router"]
    gated = []  # the set's Pods, still behind Kueue's admission gate
    for i, pod in enumerate(pods(sync(md))):
        pod["metadata"]["uid"] = f"pod-{i}"
        pod["spec"]["schedulingGates"] = [{"name": vocab.KUEUE_SCHEDULING_GATE}]
        gated.append(pod)
    groups = [names.pod_group("team-a", md["metadata"]["name"], role["name"], o) for role in md["spec"]["roles"]
              for o in range(role["replicas"])]
    held = []
    for i, group in enumerate(groups):
        wl = workload("team-a", group, reserved=i < 3, admitted=False)  # reserved since 2026-11-29: long past
        wl["metadata"]["uid"] = f"wl-{i}"
        wl["status"]["admissionChecks"] = [{"name": vocab.ADMISSION_CHECK_NAME, "state": "Pending", "message": "",
                                            "lastTransitionTime": "2026-11-29T12:00:00Z"}]
        held.append(wl)
    response = client.post("/hooks/sync", json=request(md, children=gated, extra_related=held))
    assert response.status_code == 200, response.text
    record = response.json()["status"]["jointAdmission"]
    assert set(record) >= {"releasedAt", "have", "want"} and "holdingSince" not in record  # it yielded

"""The activator in-process (docs/scale-to-zero.md#the-activator): a fake cluster, a fake upstream
engine, the ASGI app driven directly. Held requests are forwarded unchanged once the deployment
serves, streams stay streams, and the bounded hold answers 503 with Retry-After and a reason."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field, replace
from typing import Any, AsyncIterator

import httpx2 as httpx

from app import vocab
from app.activator import metrics
from app.activator.cluster import target_of
from app.activator.proxy import Activator, DeploymentState
from app.activator.settings import ActivatorSettings
from app.activator.targets import Target, fail_reason, ready_addresses, service_of, wait_reason
from app.model.serving import serving

TARGET = Target(namespace="team-a", deployment="qwen-pd", scaler="qwen-pd", wake_timeout=5.0, port=8000,
                selector={"app.kubernetes.io/instance": "qwen-pd"})
HOST = "qwen-pd-router.team-a.svc.cluster.local:8000"
SETTINGS = ActivatorSettings(poll_seconds=0.01, wake_interval_seconds=60, max_held=4, retry_after_seconds=7)
QUOTA = "waiting for quota in ClusterQueue gpu-a10g: couldn't assign flavors to pod set decode"


@dataclass
class FakeCluster:
    """A deployment that serves after `serve_after` reads of its state."""

    behind: Target | None = TARGET  # the deployment behind the endpoint Service
    serve_after: int = 3
    failed: str | None = None
    reads: int = 0
    wakes: list[str] = field(default_factory=list)

    async def target(self, service: str, namespace: str | None) -> Target | None:
        return self.behind if service == "qwen-pd-router" else None

    async def request_wake(self, target: Target, when: str) -> None:
        self.wakes.append(when)

    async def state(self, target: Target) -> DeploymentState:
        self.reads += 1
        if self.failed:
            return DeploymentState(False, failed=self.failed)
        if self.reads > self.serve_after:
            return DeploymentState(True, ("10.0.0.5:8000",), parked_since="2026-12-01T00:00:00Z")
        return DeploymentState(False)

    async def wait_reason(self, target: Target) -> str:
        return QUOTA


async def chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


def engine(request: httpx.Request) -> httpx.Response:
    """The fake engine: echoes what it received, so the test sees what was forwarded (its answer
    streamed, as a real transport's is)."""
    echo = {"method": request.method, "url": str(request.url), "body": request.content.decode(),
            "headers": {k: v for k, v in request.headers.items()}}
    return httpx.Response(200, content=chunks(json.dumps(echo).encode()),
                          headers={"x-engine": "stub", "content-type": "application/json"})


def activator(cluster: FakeCluster, handler: Any = engine, settings: ActivatorSettings = SETTINGS) -> Activator:
    return Activator(cluster, settings, client=httpx.AsyncClient(transport=httpx.MockTransport(handler)))


async def call(app: Activator, path: str = "/v1/chat/completions", body: bytes = b'{"model": "m"}',
               headers: list[tuple[bytes, bytes]] | None = None, sent: list[dict[str, Any]] | None = None
               ) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [] if sent is None else sent
    scope = {"type": "http", "method": "POST", "path": path, "raw_path": path.encode(), "query_string": b"a=1",
             "headers": [(b"host", HOST.encode()), (b"content-type", b"application/json"),
                         (b"authorization", b"Bearer k"), (b"connection", b"keep-alive"), *(headers or [])]}
    chunks = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return chunks.pop(0) if chunks else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)

    await app(scope, receive, send)
    return messages


def status_of(messages: list[dict[str, Any]]) -> int:
    return int(messages[0]["status"])


def headers_of(messages: list[dict[str, Any]]) -> dict[str, str]:
    return {k.decode().lower(): v.decode() for k, v in messages[0]["headers"]}


def test_the_engines_header_names_are_forwarded_as_it_spelled_them() -> None:
    def spelled(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers=[("X-Stub-Pod", "p-0")], content=chunks(b"{}"))

    messages = asyncio.run(call(activator(FakeCluster(), spelled)))
    names = [k for k, _ in messages[0]["headers"]]
    assert b"X-Stub-Pod" in names and vocab.HEADER_WOKEN.encode() in names


def body_of(messages: list[dict[str, Any]]) -> bytes:
    return b"".join(m.get("body", b"") for m in messages[1:])


# --- hold, wake, forward ------------------------------------------------------------------------------


def test_a_held_request_is_forwarded_unchanged_once_the_deployment_serves() -> None:
    cluster = FakeCluster()
    messages = asyncio.run(call(activator(cluster)))
    assert status_of(messages) == 200
    echo = json.loads(body_of(messages))
    assert echo["url"] == "http://10.0.0.5:8000/v1/chat/completions?a=1"
    assert echo["method"] == "POST" and echo["body"] == '{"model": "m"}'
    assert echo["headers"]["authorization"] == "Bearer k" and echo["headers"]["host"] == HOST
    assert echo["headers"].get("connection") != "keep-alive"  # hop-by-hop, the connection's own
    assert "user-agent" not in echo["headers"] and "accept-encoding" not in echo["headers"]  # nothing added
    headers = headers_of(messages)
    assert headers["x-engine"] == "stub" and float(headers[vocab.HEADER_WOKEN.lower()]) >= 0
    assert len(cluster.wakes) == 1


def test_concurrent_held_requests_ask_for_one_wake_and_are_all_answered() -> None:
    cluster = FakeCluster(serve_after=5)
    app = activator(cluster, settings=SETTINGS.model_copy(update={"max_held": 50}))

    async def many() -> list[list[dict[str, Any]]]:
        return await asyncio.gather(*(call(app) for _ in range(20)))

    answers = asyncio.run(many())
    assert [status_of(m) for m in answers] == [200] * 20
    assert len(cluster.wakes) == 1
    assert cluster.reads <= 10  # one reader for the deployment, not one per request


def test_a_stream_is_forwarded_chunk_by_chunk_as_the_engine_sends_it() -> None:
    """The engine sends its second event only after the client got the first: a proxy that buffered
    the answer would wait forever (the test's timeout)."""
    first_seen = asyncio.Event()
    events = [b'data: {"choices":[{"delta":{"content":"Hel"}}]}\n\n', b'data: {"choices":[{"delta":'
              b'{"content":"lo"}}]}\n\n', b"data: [DONE]\n\n"]

    async def stream() -> AsyncIterator[bytes]:
        yield events[0]
        await asyncio.wait_for(first_seen.wait(), timeout=5)
        yield events[1]
        yield events[2]

    def sse(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=stream())

    sent: list[dict[str, Any]] = []

    class Watching(list[dict[str, Any]]):
        def append(self, message: dict[str, Any]) -> None:
            super().append(message)
            if message.get("body") == events[0]:
                first_seen.set()

    watched = Watching()
    asyncio.run(call(activator(FakeCluster(serve_after=0), sse), sent=watched))
    sent = list(watched)
    assert headers_of(sent)["content-type"] == "text/event-stream"
    assert [m["body"] for m in sent[1:] if m.get("body")] == events


# --- the bounds ------------------------------------------------------------------------------------------


def test_past_the_hold_bound_a_request_is_answered_503_with_retry_after_at_once() -> None:
    cluster = FakeCluster(serve_after=10_000)
    slow = replace(TARGET, wake_timeout=0.3)
    cluster.behind = slow
    app = activator(cluster, settings=SETTINGS.model_copy(update={"max_held": 2}))

    async def three() -> list[list[dict[str, Any]]]:
        held = [asyncio.create_task(call(app)) for _ in range(2)]
        await asyncio.sleep(0.05)
        overflow = await call(app)
        return [overflow, *await asyncio.gather(*held)]

    overflow, *timed_out = asyncio.run(three())
    assert status_of(overflow) == 503 and headers_of(overflow)["retry-after"] == "7"
    assert "2 requests are held already" in json.loads(body_of(overflow))["error"]["message"]
    for messages in timed_out:
        assert status_of(messages) == 503 and headers_of(messages)["retry-after"] == "7"
        assert QUOTA in json.loads(body_of(messages))["error"]["message"]


def test_a_wake_that_cannot_succeed_fails_before_its_deadline() -> None:
    cluster = FakeCluster(failed="Kueue cannot admit the wake: ClusterQueue gpu-a10g is inactive")
    messages = asyncio.run(call(activator(cluster)))
    assert status_of(messages) == 503 and "inactive" in json.loads(body_of(messages))["error"]["message"]


def test_a_host_that_names_no_deployment_is_answered_404() -> None:
    messages = asyncio.run(call(activator(FakeCluster(behind=None))))
    assert status_of(messages) == 404


def test_without_a_scaler_nothing_wakes_and_the_503_says_so() -> None:
    cluster = FakeCluster(serve_after=10_000)
    cluster.behind = replace(TARGET, scaler=None, wake_timeout=0.1)
    messages = asyncio.run(call(activator(cluster)))
    assert status_of(messages) == 503 and "no ModelDeploymentScaler" in json.loads(body_of(messages))["error"]["message"]
    assert cluster.wakes == []


def test_the_metrics_count_wakes_and_held_requests() -> None:
    before = metrics.WAKES.labels("team-a", "qwen-pd")._value.get()
    asyncio.run(call(activator(FakeCluster())))
    assert metrics.WAKES.labels("team-a", "qwen-pd")._value.get() == before + 1
    assert metrics.HELD.labels("team-a", "qwen-pd")._value.get() == 0


# --- the pure reads --------------------------------------------------------------------------------------


def test_a_host_names_a_service_and_maybe_its_namespace() -> None:
    assert service_of("qwen-pd-router.team-a.svc.cluster.local:8000") == ("qwen-pd-router", "team-a")
    assert service_of("qwen-pd-router:8000") == ("qwen-pd-router", None)
    assert service_of("qwen-pd-router.team-a") == ("qwen-pd-router", "team-a")
    assert service_of("10.96.4.7:8000") == ("10.96.4.7", None)  # a client that dialled the ClusterIP


def test_a_pair_serves_only_when_both_roles_and_the_router_do() -> None:
    roles = [{"name": "prefill", "kind": "Prefill", "ready": 1}, {"name": "decode", "kind": "Decode", "ready": 0}]
    assert not serving({"roles": roles, "router": {"ready": 1}})
    roles[1]["ready"] = 1
    assert serving({"roles": roles, "router": {"ready": 1}})
    assert not serving({"roles": roles, "router": {"ready": 0}})
    assert not serving({})


def _workload(reserved: str, reason: str = "Pending", message: str = "couldn't assign flavors",
              active: bool = True) -> dict[str, Any]:
    return {"metadata": {"name": "w"}, "spec": {"queueName": "team-a-gpu", "active": active},
            "status": {"conditions": [{"type": "QuotaReserved", "status": reserved, "reason": reason,
                                       "message": message}]}}


def test_the_wait_reason_names_the_cluster_queue_and_kueues_message() -> None:
    reason = wait_reason([_workload("False")], {"team-a-gpu": "gpu-a10g"})
    assert reason == "waiting for quota in ClusterQueue gpu-a10g: couldn't assign flavors"
    assert "admitted" in wait_reason([_workload("True")], {})


def test_a_rejected_or_deactivated_wake_or_an_image_pull_failure_fails_fast() -> None:
    assert "cannot admit" in (fail_reason([_workload("False", reason="Inadmissible")], []) or "")
    assert "deactivated" in (fail_reason([_workload("False", active=False)], []) or "")
    yielded = _workload("False", active=False)  # the joint deadlock release's: it queues again one bound later
    yielded["metadata"]["annotations"] = {vocab.ANNOTATION_GANG_RELEASED_AT: "2026-11-30T00:00:00Z"}
    assert fail_reason([yielded], []) is None
    pod = {"metadata": {"name": "p"}, "status": {"containerStatuses": [
        {"state": {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}}}]}}
    assert "cannot pull its image" in (fail_reason([], [pod]) or "")
    assert fail_reason([_workload("False")], []) is None


def test_only_ready_running_pods_are_upstreams() -> None:
    def pod(ip: str, ready: str, deleting: bool = False) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": ip}
        if deleting:
            meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
        return {"metadata": meta, "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": ready}]}}

    assert ready_addresses([pod("10.0.0.2", "True"), pod("10.0.0.3", "False"), pod("10.0.0.4", "True", True)],
                           8000) == ["10.0.0.2:8000"]


def test_an_endpoint_service_names_its_deployment_and_the_scaler_that_wakes_it() -> None:
    service = {"metadata": {"name": "qwen-pd-router", "namespace": "team-a",
                            "labels": {vocab.LABEL_NAME: vocab.APP_NAME, vocab.LABEL_INSTANCE: "qwen-pd"},
                            "annotations": {vocab.ANNOTATION_SERVING_SELECTOR: '{"app": "router"}'}},
               "spec": {"ports": [{"port": 8000, "targetPort": 8080}]}}
    scalers = [{"metadata": {"name": "s"}, "spec": {"deploymentRef": {"name": "qwen-pd"},
                                                    "scaleToZero": {"idleAfter": "15m", "wakeTimeout": "5m"}}}]
    target = target_of(service, scalers, 900.0)
    assert target is not None and (target.deployment, target.scaler, target.wake_timeout, target.port) == (
        "qwen-pd", "s", 300.0, 8080)
    assert target.selector == {"app": "router"}
    assert target_of({"metadata": {"labels": {}}}, [], 900.0) is None


def test_a_hold_is_not_reused_once_nothing_waits_on_it() -> None:
    """A deployment that served and parked again is read afresh: no stale upstream is forwarded to."""
    cluster = FakeCluster(serve_after=0)
    app = activator(cluster)
    asyncio.run(call(app))
    assert app.holds == {}
    cluster.serve_after, cluster.reads = 10_000, 0
    cluster.behind = replace(TARGET, wake_timeout=0.2)
    assert status_of(asyncio.run(call(app))) == 503


def test_held_streams_do_not_wait_for_each_other_past_their_first_byte() -> None:
    """The release lets release_batch requests wait on the engine at once, not release_batch streams:
    ten streams that end only when all ten have started all finish."""
    started: list[int] = []
    all_started = asyncio.Event()

    async def stream() -> AsyncIterator[bytes]:
        yield b"data: first\n\n"
        await asyncio.wait_for(all_started.wait(), timeout=5)
        yield b"data: [DONE]\n\n"

    def sse(request: httpx.Request) -> httpx.Response:
        started.append(1)
        if len(started) == 10:
            all_started.set()
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=stream())

    app = activator(FakeCluster(serve_after=0), sse, SETTINGS.model_copy(update={"max_held": 20, "release_batch": 2}))

    async def ten() -> list[list[dict[str, Any]]]:
        return await asyncio.gather(*(call(app) for _ in range(10)))

    assert [status_of(m) for m in asyncio.run(ten())] == [200] * 10


def test_a_named_target_port_is_the_pods_container_port_of_that_name() -> None:
    pod = {"metadata": {"name": "r"}, "spec": {"containers": [{"ports": [{"name": "http", "containerPort": 8000}]}]},
           "status": {"podIP": "10.0.0.7", "conditions": [{"type": "Ready", "status": "True"}]}}
    assert ready_addresses([pod], "http") == ["10.0.0.7:8000"]
    assert ready_addresses([pod], "grpc") == []
    service = {"metadata": {"name": "pd-router", "namespace": "team-a",
                            "labels": {vocab.LABEL_NAME: vocab.APP_NAME, vocab.LABEL_INSTANCE: "pd"}},
               "spec": {"ports": [{"port": 8000, "targetPort": "http"}]}}
    target = target_of(service, [], 900.0)
    assert target is not None and target.port == "http"


def test_a_failed_read_of_the_target_is_a_clean_503() -> None:
    class Broken(FakeCluster):
        async def target(self, service: str, namespace: str | None) -> Target | None:
            raise RuntimeError("the API server is away")

    messages = asyncio.run(call(activator(Broken())))
    assert status_of(messages) == 503 and "the API server is away" in json.loads(body_of(messages))["error"]["message"]


def test_one_request_after_another_asks_for_one_wake_per_interval() -> None:
    cluster = FakeCluster(serve_after=1)
    app = activator(cluster)

    async def one_by_one() -> None:
        for _ in range(3):
            cluster.reads = 0
            assert status_of(await call(app)) == 200

    asyncio.run(one_by_one())
    assert len(cluster.wakes) == 1


def test_a_request_to_a_deployment_already_serving_is_forwarded_unmarked() -> None:
    """kube-proxy may still send a request to the activator just after the switch back: it is
    forwarded at once, and not marked woken (nothing was woken for it)."""
    messages = asyncio.run(call(activator(FakeCluster(serve_after=0))))
    assert status_of(messages) == 200 and vocab.HEADER_WOKEN.lower() not in headers_of(messages)

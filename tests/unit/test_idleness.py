"""Idleness from the engines' own request counters (docs/scale-to-zero.md#idle-after)."""

from __future__ import annotations

import asyncio
from typing import Any

from app import vocab
from app.control import idleness
from app.kube.idleness import IdlenessReader, leader_address

VLLM = """# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 12.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 3.0
vllm:num_requests_running{engine="0",model_name="m"} 0.0
vllm:num_requests_waiting{engine="0",model_name="m"} 0.0
vllm:prompt_tokens_total{engine="0",model_name="m"} 999.0
"""
SGLANG = """sglang:num_requests_total{model_name="m"} 7.0
sglang:num_running_reqs{model_name="m"} 2.0
sglang:num_queue_reqs{model_name="m"} 1.0
"""


def test_vllms_counters_sum_over_their_labels() -> None:
    assert idleness.counts(VLLM) == idleness.Counts(completed=15.0, in_flight=0.0)


def test_sglangs_real_names_are_read() -> None:
    assert idleness.counts(SGLANG) == idleness.Counts(completed=7.0, in_flight=3.0)


def test_text_without_the_counters_reads_as_none() -> None:
    assert idleness.counts("process_cpu_seconds_total 3\n# junk\n") is None


def test_a_moved_counter_or_a_request_in_flight_is_activity() -> None:
    assert idleness.active(idleness.Counts(15, 0), idleness.Counts(16, 0))
    assert idleness.active(idleness.Counts(15, 0), idleness.Counts(15, 1))
    assert not idleness.active(idleness.Counts(15, 0), idleness.Counts(15, 0))
    assert not idleness.active(None, idleness.Counts(0, 0))  # a fresh engine that served nothing
    assert idleness.active(None, idleness.Counts(15, 0))  # the first look compares with the engine's start


def test_a_leader_whose_counters_cannot_be_read_is_never_called_idle() -> None:
    assert idleness.active(idleness.Counts(15, 0), None)


def test_the_annotation_is_written_at_most_every_thirty_seconds() -> None:
    assert idleness.write_due(None, 100.0)
    assert not idleness.write_due(100.0, 100.0 + vocab.IDLENESS_WRITE_INTERVAL_SECONDS - 1)
    assert idleness.write_due(100.0, 100.0 + vocab.IDLENESS_WRITE_INTERVAL_SECONDS)


def _pod(ready: str = "True", ip: str | None = "10.0.0.9", role: str = "decode") -> dict[str, Any]:
    return {"metadata": {"name": "p", "labels": {vocab.LABEL_COMPONENT: role}},
            "spec": {"containers": [{"ports": [{"containerPort": 8000}]}]},
            "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": ready}]}}


def test_only_ready_leaders_are_scraped_on_their_serving_port() -> None:
    assert leader_address(_pod()) == "10.0.0.9:8000"
    assert leader_address(_pod(ready="False")) is None
    assert leader_address(_pod(ip=None)) is None


class _Obj(dict[str, Any]):
    def to_dict(self) -> dict[str, Any]:
        return dict(self)


class _Client:
    """lightkube's list and patch as the reader calls them."""

    def __init__(self, scalers: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
        self.scalers, self.pods, self.patches = scalers, pods, []  # type: ignore[var-annotated]

    def list(self, res: Any, **kwargs: Any) -> Any:
        items = self.scalers if "Scaler" in res.__name__ else self.pods

        async def gen() -> Any:
            for item in items:
                yield _Obj(item)
        return gen()

    async def patch(self, res: Any, name: str, body: Any, **kwargs: Any) -> None:
        self.patches.append((name, body))


class _Kube:
    def __init__(self, client: _Client) -> None:
        self.client = client


def test_a_round_writes_the_last_request_of_a_busy_deployment_once_per_interval() -> None:
    scaler = {"metadata": {"name": "s", "namespace": "team-a"},
              "spec": {"deploymentRef": {"name": "pd"}, "roles": [{"name": "decode"}], "replicas": 1,
                       "scaleToZero": {"idleAfter": "15m"}}}
    client = _Client([scaler], [_pod()])
    reader = IdlenessReader(_Kube(client))  # type: ignore[arg-type]

    async def scrape(address: str, limit: asyncio.Semaphore) -> bool:
        return True

    reader._scrape = scrape  # type: ignore[method-assign]
    asyncio.run(reader.round(1000.0))
    asyncio.run(reader.round(1010.0))
    assert [name for name, _ in client.patches] == ["s"]
    assert vocab.ANNOTATION_LAST_REQUEST in client.patches[0][1]["metadata"]["annotations"]
    asyncio.run(reader.round(1000.0 + vocab.IDLENESS_WRITE_INTERVAL_SECONDS))
    assert len(client.patches) == 2


def test_a_parked_scaler_is_not_scraped() -> None:
    scaler = {"metadata": {"name": "s", "namespace": "team-a"},
              "spec": {"deploymentRef": {"name": "pd"}, "roles": [{"name": "decode"}], "replicas": 0,
                       "scaleToZero": {"idleAfter": "15m"}}}
    client = _Client([scaler], [_pod()])
    asyncio.run(IdlenessReader(_Kube(client)).round(1000.0))  # type: ignore[arg-type]
    assert client.patches == []

"""Logs (one format, the level from settings) and the per-deployment metrics of the sync hook."""

from __future__ import annotations

import copy
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from app import vocab
from app.control.intents import SetWorkloadActive
from app.web import metrics
from tests.conftest import EXAMPLES
from tests.helpers import parent, request

ROOT = Path(__file__).resolve().parents[2]


def sample(metric: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(metric, labels)


def test_a_sync_sets_phase_and_replicas_per_role_and_finalize_removes_them(client):
    md = parent("qwen-chat")
    md["metadata"]["name"] = "metrics-life"
    ns = md["metadata"]["namespace"]
    assert client.post("/hooks/sync", json=request(md)).status_code == 200
    assert sample("modeldeployment_phase", namespace=ns, name="metrics-life", phase=vocab.PHASE_STARTING) == 1
    assert sample("modeldeployment_phase", namespace=ns, name="metrics-life", phase=vocab.PHASE_READY) == 0
    replicas = {kind: sample("modeldeployment_role_replicas", namespace=ns, name="metrics-life", role="server",
                             kind=kind) for kind in ("desired", "ready", "quota_reserved")}
    assert replicas == {"desired": 4, "ready": 0, "quota_reserved": 0}
    assert sample("modeldeployment_rollout_in_progress", namespace=ns, name="metrics-life") == 0
    assert sample("modeldeployment_last_sync_timestamp_seconds", namespace=ns, name="metrics-life") > 0
    text = client.get("/metrics").text
    assert 'modeldeployment_role_replicas{kind="desired",name="metrics-life"' in text

    assert client.post("/hooks/finalize", json=request(md)).json()["finalized"] is True
    assert sample("modeldeployment_phase", namespace=ns, name="metrics-life", phase=vocab.PHASE_STARTING) is None
    assert sample("modeldeployment_role_replicas", namespace=ns, name="metrics-life", role="server",
                  kind="desired") is None


def test_a_render_failure_is_counted_by_reason(client):
    md = parent("qwen-chat")
    md["metadata"]["name"] = "metrics-unrenderable"
    ns = md["metadata"]["namespace"]
    before = sample("modeldeployment_render_failures_total", namespace=ns, name="metrics-unrenderable",
                    reason="retryable") or 0
    response = client.post("/hooks/sync", json=request(md, world=[]))
    assert response.status_code == 429
    after = sample("modeldeployment_render_failures_total", namespace=ns, name="metrics-unrenderable",
                   reason="retryable") or 0
    spec = sample("modeldeployment_render_failures_total", namespace=ns, name="metrics-unrenderable",
                  reason="spec") or 0
    assert after + spec == before + 1


def _status(quota: str, since: str, *, up_to_date_reason: str = vocab.REASON_UP_TO_DATE) -> dict:
    return {"phase": vocab.PHASE_STARTING,
            "roles": [{"name": "decode", "desired": 2, "ready": 1, "quotaReserved": 2}],
            "conditions": [{"type": vocab.COND_QUOTA_RESERVED, "status": quota, "lastTransitionTime": since},
                           {"type": vocab.COND_REPLICAS_UP_TO_DATE, "status": "False", "reason": up_to_date_reason,
                            "lastTransitionTime": since}]}


def test_admission_wait_rollouts_and_joint_releases():
    md = {"metadata": {"namespace": "obs", "name": "waits"}, "status": _status("False", "2026-11-29T12:00:00Z")}
    now = "2026-11-29T12:00:42Z"
    metrics.observe_sync(md, _status("True", now, up_to_date_reason=vocab.REASON_ROLLOUT_IN_PROGRESS), [], None, now)
    assert sample("modeldeployment_admission_wait_seconds_count", namespace="obs", name="waits") == 1
    assert sample("modeldeployment_admission_wait_seconds_sum", namespace="obs", name="waits") == 42
    assert sample("modeldeployment_rollout_in_progress", namespace="obs", name="waits") == 1
    # Already True before: no second observation.
    held = copy.deepcopy(md)
    held["status"] = _status("True", now)
    metrics.observe_sync(held, _status("True", now), [], None, "2026-11-29T12:01:00Z")
    assert sample("modeldeployment_admission_wait_seconds_count", namespace="obs", name="waits") == 1
    # A pass that deactivates the set's groups now is a release; a later one repeating it is not.
    release = SetWorkloadActive(namespace="obs", workload="w", uid="u", resource_version="1", active=False,
                                released_at="2026-11-29T12:02:00Z")
    metrics.observe_sync(held, _status("False", now), [release], None, "2026-11-29T12:02:00Z")
    metrics.observe_sync(held, _status("False", now), [release], None, "2026-11-29T12:02:05Z")
    assert sample("modeldeployment_joint_admission_releases_total", namespace="obs", name="waits") == 1
    # A role that goes away loses its series.
    renamed = _status("True", now)
    renamed["roles"][0]["name"] = "server"
    metrics.observe_sync(held, renamed, [], None, now)
    assert sample("modeldeployment_role_replicas", namespace="obs", name="waits", role="decode", kind="desired") is None
    assert sample("modeldeployment_role_replicas", namespace="obs", name="waits", role="server", kind="desired") == 2


def _serve(env_extra: dict[str, str]) -> tuple[subprocess.Popen, int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELDEPLOYMENT_")}
    env.update({"MODELDEPLOYMENT_KUBE": "off", **env_extra})
    proc = subprocess.Popen([str(Path(sys.executable).parent / "modeldeployment"), "serve", "--port", str(port),
                             "--hooks-port", "0", "--world", str(EXAMPLES / "world")], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).read()
            return proc, port
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.2)


def _post(port: int, path: str, body: dict) -> int:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    try:
        return urllib.request.urlopen(req, timeout=10).status
    except urllib.error.HTTPError as exc:
        return exc.code


def _stop(proc: subprocess.Popen) -> str:
    proc.terminate()
    _, err = proc.communicate(timeout=15)
    return err


def test_json_logs_from_the_app_and_uvicorn_alike():
    proc, port = _serve({"MODELDEPLOYMENT_LOG_JSON": "true", "MODELDEPLOYMENT_LOG_LEVEL": "DEBUG"})
    try:
        assert _post(port, "/hooks/sync", request(parent("qwen-chat"))) == 200
    finally:
        err = _stop(proc)
    lines = [json.loads(line) for line in err.splitlines() if line.strip()]
    assert lines and all({"time", "level", "logger", "message"} <= set(line) for line in lines)
    loggers = {line["logger"] for line in lines}
    assert "uvicorn.error" in loggers and "uvicorn.access" in loggers and "app.hooks" in loggers


def test_the_level_from_settings_silences_info():
    proc, port = _serve({"MODELDEPLOYMENT_LOG_JSON": "false", "MODELDEPLOYMENT_LOG_LEVEL": "WARNING"})
    try:
        assert _post(port, "/hooks/sync", request(parent("qwen-chat"))) == 200
        md = parent("qwen-chat")
        assert _post(port, "/hooks/sync", request(md, world=[])) == 429
    finally:
        err = _stop(proc)
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines and all(" WARNING " in line or " ERROR " in line for line in lines), lines
    assert any("render failed" in line for line in lines)


def test_made_up_parents_cannot_grow_the_metrics_without_bound(monkeypatch):
    """The hooks port answers anyone who can reach it: past the cap, the stalest deployment's
    series go (a flood of forged parents costs bounded memory)."""
    monkeypatch.setattr(metrics, "TRACKED", metrics.Tracked(cap=3))
    status = {"phase": "Ready", "roles": [{"name": "server", "desired": 1, "ready": 1, "quotaReserved": 1}]}
    for i in range(5):
        metrics.observe_sync({"metadata": {"namespace": "flood", "name": f"fake-{i}"}}, status, [], None,
                             "2026-11-30T00:00:00Z")
    names = {s.labels["name"] for s in metrics.PHASE.collect()[0].samples if s.labels["namespace"] == "flood"}
    assert names == {"fake-2", "fake-3", "fake-4"}
    assert list(metrics.TRACKED.synced) == [("flood", "fake-2"), ("flood", "fake-3"), ("flood", "fake-4")]
    assert sample("modeldeployment_last_sync_timestamp_seconds", namespace="flood", name="fake-0") is None
    metrics.TRACKED.expire_after = 0.0  # leave the registry as it was
    metrics.expire()


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


READY = {"phase": vocab.PHASE_READY, "roles": [{"name": "server", "desired": 2, "ready": 2, "quotaReserved": 2}]}


def _deployment_series(namespace: str, name: str) -> dict[str, float | None]:
    return {
        "phase": sample("modeldeployment_phase", namespace=namespace, name=name, phase=vocab.PHASE_READY),
        "replicas": sample("modeldeployment_role_replicas", namespace=namespace, name=name, role="server",
                           kind="desired"),
        "rollout": sample("modeldeployment_rollout_in_progress", namespace=namespace, name=name),
        "last_sync": sample("modeldeployment_last_sync_timestamp_seconds", namespace=namespace, name=name),
        "render_failures": sample("modeldeployment_render_failures_total", namespace=namespace, name=name,
                                  reason="spec"),
    }


def test_a_deployment_this_replica_no_longer_syncs_expires_after_a_few_resync_periods(monkeypatch):
    """docs/operations.md#metrics: with two replicas, the other one may be the one syncing (or
    finalizing) a deployment; the series here go once this replica has not synced it for
    SERIES_EXPIRE_SECONDS, a few resync periods, and a deployment still synced keeps its own."""
    clock = FakeClock()
    monkeypatch.setattr(metrics, "TRACKED", metrics.Tracked(clock))
    assert metrics.SERIES_EXPIRE_SECONDS == 3 * vocab.RESYNC_PERIOD_SECONDS
    moved = {"metadata": {"namespace": "expiry", "name": "moved"}}
    kept = {"metadata": {"namespace": "expiry", "name": "kept"}}
    metrics.observe_render_failure(moved, retryable=False)
    metrics.observe_sync(moved, READY, [], None, "2026-12-04T12:00:00Z")
    metrics.observe_sync(kept, READY, [], None, "2026-12-04T12:00:00Z")
    assert None not in _deployment_series("expiry", "moved").values()

    for _ in range(3):  # kept: a pass each resync period; moved: none here
        clock.now += vocab.RESYNC_PERIOD_SECONDS - 1
        metrics.observe_sync(kept, READY, [], None, "2026-12-04T12:01:00Z")
    metrics.expire()
    assert None not in _deployment_series("expiry", "moved").values()  # 177 s: not yet
    clock.now += 3
    metrics.expire()
    assert set(_deployment_series("expiry", "moved").values()) == {None}  # gone, counters too
    kept_series = _deployment_series("expiry", "kept")
    assert (kept_series["phase"], kept_series["replicas"], kept_series["rollout"]) == (1, 2, 0)
    assert list(metrics.TRACKED.synced) == [("expiry", "kept")]
    # Synced here again later: the series come back from that pass.
    metrics.observe_sync(moved, READY, [], None, "2026-12-04T12:05:00Z")
    assert _deployment_series("expiry", "moved")["phase"] == 1
    clock.now += metrics.SERIES_EXPIRE_SECONDS
    metrics.expire()
    assert set(_deployment_series("expiry", "moved").values()) == set(_deployment_series("expiry", "kept").values()) \
        == {None}


def test_a_finalize_here_removes_the_gauges_at_once_and_keeps_the_last_sync_until_it_expires(monkeypatch):
    """The dashboard keeps the series of the replica with the latest sync: the finalizing replica's
    last sync is the latest, and it has no phase any more, so the deployment leaves the dashboard at
    once, whatever older series the other replica still holds."""
    clock = FakeClock()
    monkeypatch.setattr(metrics, "TRACKED", metrics.Tracked(clock))
    md = {"metadata": {"namespace": "expiry", "name": "finalized"}}
    metrics.observe_render_failure(md, retryable=False)
    metrics.observe_sync(md, READY, [], None, "2026-12-04T12:00:00Z")
    clock.now += 10
    metrics.observe_sync(md, {"phase": vocab.PHASE_DELETING}, [], True, "2026-12-04T12:00:10Z")
    after = _deployment_series("expiry", "finalized")
    assert (after["phase"], after["replicas"], after["rollout"]) == (None, None, None)
    assert sample("modeldeployment_phase", namespace="expiry", name="finalized", phase=vocab.PHASE_DELETING) is None
    assert after["last_sync"] == 1_796_385_610  # 2026-12-04T12:00:10Z
    assert after["render_failures"] == 1  # a total: the last scrapes still see it
    clock.now += metrics.SERIES_EXPIRE_SECONDS
    metrics.expire()
    assert set(_deployment_series("expiry", "finalized").values()) == {None}


def test_a_scrape_expires_what_no_pass_here_renews(client, monkeypatch):
    """A replica that gets no pass at all (Metacontroller's connections all went to the other) still
    drops its stale series: every scrape of /metrics expires them first."""
    clock = FakeClock()
    monkeypatch.setattr(metrics, "TRACKED", metrics.Tracked(clock))
    metrics.observe_sync({"metadata": {"namespace": "expiry", "name": "scraped"}}, READY, [], None,
                         "2026-12-04T12:00:00Z")
    assert 'name="scraped"' in client.get("/metrics").text
    clock.now += metrics.SERIES_EXPIRE_SECONDS
    assert 'name="scraped"' not in client.get("/metrics").text

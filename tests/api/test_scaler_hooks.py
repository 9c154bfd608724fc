"""The scaler's hooks and webhook over HTTP, in process (no API server: writes are logged and skipped)."""

from __future__ import annotations

import json
from typing import Any

from fastapi.testclient import TestClient

from app import vocab
from tests.unit.test_scaler import deployment, review_body, scaler_object


def sync_body(scaler: dict[str, Any], related: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"controller": {}, "parent": scaler, "children": {},
            "related": related if related is not None else
            {vocab.RELATED_MODEL_DEPLOYMENTS: {"team-a/pd-demo": deployment(1, 2)}}}


def test_sync_answers_status_and_no_children(client: TestClient):
    answer = client.post("/hooks/scaler/sync", json=sync_body(scaler_object(2)))
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert set(body) == {"status", "children"} and body["children"] == []
    assert body["status"]["roles"][1] == {"name": "decode", "desired": 4, "declared": 2, "ready": 2}
    assert {c["type"] for c in body["status"]["conditions"]} == {"Active", "QuotaReserved"}


def test_a_refused_step_answers_status_with_a_retry(client: TestClient):
    answer = client.post("/hooks/scaler/sync", json=sync_body(scaler_object(600)))
    assert answer.status_code == 200
    body = answer.json()
    assert body["resyncAfterSeconds"] > 0
    active = next(c for c in body["status"]["conditions"] if c["type"] == "Active")
    assert active["reason"] == vocab.REASON_SCALE_REFUSED


def test_customize_relates_the_deployment(client: TestClient):
    answer = client.post("/hooks/scaler/customize", json={"controller": {}, "parent": scaler_object()})
    assert answer.status_code == 200
    assert answer.json()["relatedResources"][0]["names"] == ["pd-demo"]


def test_malformed_requests_are_4xx_naming_the_field(client: TestClient):
    nameless = scaler_object()
    del nameless["metadata"]["uid"]
    cases = [
        (b"not json", 400, "not JSON"),
        (json.dumps([1]).encode(), 400, "JSON object"),
        (json.dumps(sync_body(nameless)).encode(), 400, "$.parent.metadata.uid"),
        (json.dumps(sync_body({**scaler_object(), "spec": {"replicas": "two"}})).encode(), 422, "deploymentRef"),
        (json.dumps(sync_body(scaler_object(), {vocab.RELATED_MODEL_DEPLOYMENTS: {
            "team-a/pd-demo": {"metadata": {"name": "pd-demo"}, "spec": {"roles": "x"}}}})).encode(), 422,
         "related ModelDeployment pd-demo"),
    ]
    for raw, status, text in cases:
        answer = client.post("/hooks/scaler/sync", content=raw, headers={"content-type": "application/json"})
        assert answer.status_code == status, (raw[:80], answer.text)
        assert text in answer.json()["error"], answer.text


def test_the_webhook_answers_an_admission_review(client: TestClient):
    answer = client.post("/webhooks/scaler/validate", json=review_body(scaler_object(600, roles=(("decode", 2),))))
    assert answer.status_code == 200
    response = answer.json()["response"]
    assert response["allowed"] is False and response["uid"] == "u1"
    assert response["status"]["details"]["causes"][0]["field"] == "spec.replicas"
    assert client.post("/webhooks/scaler/validate", json=review_body(scaler_object(2))).json()["response"]["allowed"]

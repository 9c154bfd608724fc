"""The webhook configurations say what docs/admission.md says: v1 reviews, fail closed, 5 s, ours only."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from app.main import create_app
from app.settings import Settings

WEBHOOK = Path(__file__).resolve().parents[2] / "manifests" / "webhook"
CONFIGS = {"MutatingWebhookConfiguration": "/webhooks/mutate", "ValidatingWebhookConfiguration": "/webhooks/validate"}


def _docs() -> dict[str, dict]:
    """The webhook objects as the base renders them ($(OPERATOR_NAMESPACE) filled)."""
    rendered = subprocess.run(["kubectl", "kustomize", str(WEBHOOK.parent)], check=True, capture_output=True,
                              text=True).stdout
    last = {}  # the last of each kind in the files, as before
    for path in sorted(WEBHOOK.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and "metadata" in doc:
                last[doc["kind"]] = doc["metadata"]["name"]
    return {doc["kind"]: doc for doc in yaml.safe_load_all(rendered)
            if doc and last.get(doc["kind"]) == doc["metadata"]["name"]}


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_webhook_configuration(kind: str) -> None:
    config = _docs()[kind]
    assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == \
        "gpustack-system/modeldeployment-operator-webhook"
    hook = config["webhooks"][0]
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["sideEffects"] == "None"
    assert hook["failurePolicy"] == "Fail"
    assert hook["timeoutSeconds"] == 5
    assert hook["clientConfig"]["service"] == {"name": "modeldeployment-operator", "namespace": "gpustack-system",
                                               "port": 443, "path": CONFIGS[kind]}
    (rule,) = hook["rules"]
    assert rule["apiGroups"] == ["worker.gpustack.ai"] and rule["apiVersions"] == ["v1"]
    assert rule["operations"] == ["CREATE", "UPDATE"] and rule["resources"] == ["modeldeployments"]


def test_the_scaler_webhook_judges_scaler_writes_and_their_scale_subresource() -> None:
    """An HPA's or `kubectl scale`'s write arrives on /scale: without the subresource in the rule,
    a step past a bound would be stored and only fail later, on the deployment."""
    hooks = _docs()["ValidatingWebhookConfiguration"]["webhooks"]
    (scaler,) = [h for h in hooks if h["name"] == "validate.modeldeploymentscalers.worker.gpustack.ai"]
    assert scaler["failurePolicy"] == "Fail" and scaler["sideEffects"] == "None"
    assert scaler["clientConfig"]["service"]["path"] == "/webhooks/scaler/validate"
    (rule,) = scaler["rules"]
    assert rule["resources"] == ["modeldeploymentscalers", "modeldeploymentscalers/scale"]
    assert rule["operations"] == ["CREATE", "UPDATE"]


def test_certificate_serves_the_service_and_feeds_the_injector() -> None:
    docs = _docs()
    cert = docs["Certificate"]
    assert f"{cert['metadata']['namespace']}/{cert['metadata']['name']}" == \
        "gpustack-system/modeldeployment-operator-webhook"
    assert cert["spec"]["secretName"] == "modeldeployment-operator-tls"
    assert "modeldeployment-operator.gpustack-system.svc" in cert["spec"]["dnsNames"]
    assert cert["spec"]["issuerRef"]["name"] == docs["Issuer"]["metadata"]["name"]


def test_the_paths_are_served() -> None:
    from fastapi.testclient import TestClient

    with TestClient(create_app(Settings(kube="off"))) as client:
        for path in CONFIGS.values():
            assert client.post(path, json={}).json()["kind"] == "AdmissionReview"

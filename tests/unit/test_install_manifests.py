"""Install into any namespace: the kustomize base follows a `namespace:` overlay, installs the
webhooks, and the chart keeps copies of the generated CRDs and names no namespace itself.
(The chart is rendered with helm in tests/e2e/test_install.py.)"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "modeldeployment"


def kustomize(path: Path) -> list[dict]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl is needed to render the kustomize bases (it ships on these machines)")
    out = subprocess.run([kubectl, "kustomize", str(path)], check=True, capture_output=True, text=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def test_base_installs_the_webhooks_and_a_disruption_budget():
    kinds = {o["kind"] for o in kustomize(ROOT / "manifests")}
    assert {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "Certificate", "Issuer",
            "PodDisruptionBudget"} <= kinds
    assert "$(" not in json.dumps(kustomize(ROOT / "manifests"))


def test_a_namespace_overlay_moves_every_reference():
    objects = kustomize(ROOT / "examples" / "kustomize" / "namespace")
    assert "gpustack-system" not in json.dumps(objects)
    named = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    assert named["Namespace", "ml-system"]
    cert = named["Certificate", "modeldeployment-operator-webhook"]
    assert cert["spec"]["dnsNames"][1:] == [
        "modeldeployment-operator.ml-system", "modeldeployment-operator.ml-system.svc",
        "modeldeployment-operator.ml-system.svc.cluster.local"]
    assert cert["spec"]["commonName"] == "modeldeployment-operator.ml-system.svc"
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        webhook = named[kind, "modeldeployment-operator"]
        assert webhook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == \
            "ml-system/modeldeployment-operator-webhook"
        assert {w["clientConfig"]["service"]["namespace"] for w in webhook["webhooks"]} == {"ml-system"}
    hooks = named["CompositeController", "modeldeployment"]["spec"]["hooks"]
    assert [hooks[h]["webhook"]["service"]["namespace"] for h in ("customize", "sync", "finalize")] == ["ml-system"] * 3
    for controller in (o for o in objects if o["kind"] == "CompositeController"):  # every controller's hooks
        assert {h["webhook"]["service"]["namespace"] for h in controller["spec"]["hooks"].values()} == {"ml-system"}
    assert named["ClusterRoleBinding", "modeldeployment-operator"]["subjects"][0]["namespace"] == "ml-system"


def test_without_cert_manager_overlay_has_no_cert_manager_object():
    objects = kustomize(ROOT / "examples" / "kustomize" / "without-cert-manager")
    kinds = {o["kind"] for o in objects}
    assert not kinds & {"Certificate", "Issuer"}
    assert {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "Deployment"} <= kinds
    assert "inject-ca-from" not in json.dumps(objects)


def test_gen_certs_names_the_namespace_it_is_given(tmp_path):
    script = ROOT / "manifests" / "webhook" / "gen-certs.sh"
    subprocess.run([str(script), "--namespace", "ml-system", "--out", str(tmp_path)], check=True, capture_output=True)
    san = subprocess.run(["openssl", "x509", "-in", str(tmp_path / "tls.crt"), "-noout", "-ext", "subjectAltName"],
                         check=True, capture_output=True, text=True).stdout
    assert "DNS:modeldeployment-operator.ml-system.svc" in san and "gpustack-system" not in san


def test_kueue_local_queue_namespaces_are_named_as_a_first_step():
    objects = kustomize(ROOT / "manifests" / "kueue")
    namespaces = {o["metadata"]["namespace"] for o in objects if o["kind"] == "LocalQueue"}
    assert namespaces
    assert not [o for o in objects if o["kind"] == "Namespace"]  # the example creates none of its own
    howto = (ROOT / "manifests" / "kueue" / "kustomization.yaml").read_text()
    operations = (ROOT / "docs" / "operations.md").read_text()
    for namespace in namespaces:
        assert f"kubectl create namespace {namespace}" in howto
        assert f"kubectl create namespace {namespace}" in operations


def test_chart_crds_are_copies_of_the_generated_ones():
    generated = sorted(p.name for p in (ROOT / "manifests" / "crds").glob("*.yaml"))
    assert sorted(p.name for p in (CHART / "crds").glob("*.yaml")) == generated
    for name in generated:
        assert (CHART / "crds" / name).read_text() == (ROOT / "manifests" / "crds" / name).read_text(), \
            f"run `modeldeployment crds` (it writes both): {name}"


def test_chart_templates_name_no_namespace():
    for path in (CHART / "templates").iterdir():
        assert "gpustack-system" not in path.read_text(), path.name
    assert "gpustack-system" not in (CHART / "values.yaml").read_text()


def test_monitoring_renders_a_service_monitor_and_the_dashboard_of_defined_metrics():
    from app.web import metrics

    objects = kustomize(ROOT / "manifests" / "monitoring")
    monitor = next(o for o in objects if o["kind"] == "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0] == {"port": "hooks", "path": "/metrics", "interval": "30s"}
    config_map = next(o for o in objects if o["kind"] == "ConfigMap")
    dashboard = json.loads(config_map["data"]["modeldeployment.json"])
    assert (CHART / "dashboards" / "modeldeployment.json").read_text() == \
        (ROOT / "manifests" / "monitoring" / "dashboards" / "modeldeployment.json").read_text()
    defined = set()
    for value in vars(metrics).values():
        name = getattr(value, "_name", None)
        if isinstance(name, str):
            defined |= {name, f"{name}_total", f"{name}_bucket", f"{name}_count", f"{name}_sum"}
    used = set()
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            used |= set(re.findall(r"modeldeployment_[a-z_]+", target["expr"]))
    assert used and used <= defined, used - defined
    assert {"modeldeployment_phase", "modeldeployment_role_replicas", "modeldeployment_admission_wait_seconds_bucket",
            "modeldeployment_rollout_in_progress", "modeldeployment_render_failures_total",
            "modeldeployment_joint_admission_releases_total"} <= used


KUSTOMIZATIONS = sorted(p.parent for p in [*ROOT.glob("manifests/**/kustomization.yaml"),
                                           *ROOT.glob("examples/**/kustomization.yaml")])


@pytest.mark.parametrize("path", KUSTOMIZATIONS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_kustomization_builds_complete_and_without_a_warning(path: Path):
    """No deprecated field (kustomize warns on `vars`), no unresolved `$(VAR)`: each directory,
    the webhook one alone included, renders objects ready to apply."""
    proc = subprocess.run([shutil.which("kubectl") or "kubectl", "kustomize", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr
    assert "$(" not in proc.stdout


def test_the_webhook_directory_alone_renders_what_the_base_does():
    def webhook_objects(objects: list[dict]) -> dict:
        return {(o["kind"], o["metadata"]["name"]): o for o in objects
                if o["kind"] in ("Issuer", "Certificate", "MutatingWebhookConfiguration",
                                 "ValidatingWebhookConfiguration")}

    alone = webhook_objects(kustomize(ROOT / "manifests" / "webhook"))
    assert len(alone) == 6
    assert alone == webhook_objects(kustomize(ROOT / "manifests"))


def test_without_cert_manager_in_another_namespace(tmp_path: Path):
    """The two overlays combined (README's "Another namespace" on the without-cert-manager one): the
    namespace transformer skips the annotations and Certificate that overlay removed."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "namespace": "ml-system",
        "resources": [os.path.relpath(ROOT / "examples" / "kustomize" / "without-cert-manager", overlay)],
        "transformers": [os.path.relpath(ROOT / "manifests" / "namespace-references", overlay)]}))
    objects = kustomize(overlay)
    assert "gpustack-system" not in json.dumps(objects) and "inject-ca-from" not in json.dumps(objects)
    assert not {o["kind"] for o in objects} & {"Certificate", "Issuer"}


def test_the_base_disruption_budget_never_blocks_a_drain():
    """With every replica healthy a drain may evict one: the budget is satisfiable at the base's
    replica count (a `minAvailable` equal to it would block every node drain)."""
    objects = kustomize(ROOT / "manifests")
    replicas = next(o for o in objects if o["kind"] == "Deployment")["spec"]["replicas"]
    budget = next(o for o in objects if o["kind"] == "PodDisruptionBudget")["spec"]
    allowed = budget["maxUnavailable"] if "maxUnavailable" in budget else replicas - budget["minAvailable"]
    assert replicas >= 2 and 1 <= allowed < replicas
    assert budget["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


def test_the_operator_upgrades_surge_first():
    """docs/operations.md#upgrade: a new operator Pod is Ready before an old one stops, so the
    webhooks (which fail closed) keep a Ready endpoint throughout an upgrade."""
    objects = kustomize(ROOT / "manifests")
    deployment = next(o for o in objects if o["kind"] == "Deployment"
                      and o["metadata"]["name"] == "modeldeployment-operator")["spec"]
    assert deployment["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    chart = (ROOT / "charts" / "modeldeployment" / "templates" / "deployment.yaml").read_text()
    assert "maxSurge: 1\n      maxUnavailable: 0\n" in chart

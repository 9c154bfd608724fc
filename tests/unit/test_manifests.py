"""The deployable manifests render with kustomize and carry what a cluster needs."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from app import vocab

ROOT = Path(__file__).resolve().parents[2]


def kustomize(path: str) -> list[dict]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl is needed to render the kustomize bases (it ships on these machines)")
    out = subprocess.run([kubectl, "kustomize", str(ROOT / path)], check=True, capture_output=True, text=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def test_base_renders_and_every_core_object_is_valid():
    objects = kustomize("manifests")
    kinds = sorted(o["kind"] for o in objects)
    assert kinds.count("CustomResourceDefinition") == 7  # ModelDeployment, its scaler and the five supporting kinds
    assert kinds.count("CompositeController") == 2  # the deployment's and the scaler's
    assert {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment", "Service",
            "CompositeController"} <= set(kinds)
    for obj in objects:
        if obj["kind"] in ("CompositeController", "CustomResourceDefinition", "Certificate", "Issuer"):
            continue  # not core kinds: no schema in kubernetes-validate
        kubernetes_validate.validate(obj, "1.33.0", strict=True)


def test_operator_deployment_is_two_replicas_non_root_read_only_with_probes():
    deployment = next(o for o in kustomize("manifests") if o["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["resources"]["requests"] and container["resources"]["limits"]


def test_composite_controller_never_loops():
    cc = next(o for o in kustomize("manifests") if o["kind"] == "CompositeController")
    spec = cc["spec"]
    assert spec["generateSelector"] is True
    strategies = {c["resource"]: c["updateStrategy"]["method"] for c in spec["childResources"]}
    assert strategies.pop("pods") == "OnDelete"
    assert set(strategies.values()) == {"InPlace"}
    assert set(strategies) == {"services", "configmaps", "serviceaccounts", "roles", "rolebindings", "deployments",
                               "endpointslices"}
    for hook in ("customize", "sync", "finalize"):
        assert spec["hooks"][hook]["version"] == "v2"
        assert spec["hooks"][hook]["webhook"]["path"] == f"/hooks/{hook}"


def test_every_parent_gets_a_pass_each_minute_and_our_status_writes_start_none():
    """docs/metacontroller.md#what-starts-a-pass: the resync bounds Metacontroller's back-off after
    failed syncs; a status-only update of a ModelDeployment is not a reason for a pass."""
    controllers = {o["metadata"]["name"]: o["spec"] for o in kustomize("manifests") if o["kind"] == "CompositeController"}
    assert {name: spec["resyncPeriodSeconds"] for name, spec in controllers.items()} == {
        "modeldeployment": vocab.RESYNC_PERIOD_SECONDS, "modeldeploymentscaler": vocab.RESYNC_PERIOD_SECONDS}
    # The chart's copies too: the service expires a deployment's metrics by this period (docs/operations.md#metrics).
    chart = (ROOT / "charts" / "modeldeployment" / "templates" / "compositecontroller.yaml").read_text()
    assert chart.count("resyncPeriodSeconds:") == chart.count(f"resyncPeriodSeconds: {vocab.RESYNC_PERIOD_SECONDS}\n") == 2
    assert controllers["modeldeployment"]["parentResource"]["ignoreStatusChanges"] is True
    # The scaler's hook compares the replicas its last status wrote with what the deployment declares
    # (control/scaler.py, conflict); its passes are few, so its controller keeps the status echo.
    assert "ignoreStatusChanges" not in controllers["modeldeploymentscaler"]["parentResource"]


def test_kueue_objects_render():
    kinds = {o["kind"] for o in kustomize("manifests/kueue")}
    assert {"AdmissionCheck", "ClusterQueue", "LocalQueue", "ResourceFlavor", "Topology"} <= kinds


def _grace_seconds(template_text: str, values: dict) -> int:
    """The operator Pod's terminationGracePeriodSeconds in a chart template: a number, a
    `{{ .Values.<path> }}`, or Kubernetes' default (30 s) when the template sets none."""
    import re

    found = re.search(r"terminationGracePeriodSeconds:\s*(\S.*)", template_text)
    if found is None:
        return 30
    value = found.group(1).strip()
    reference = re.fullmatch(r"\{\{-?\s*\.Values\.([\w.]+)\s*-?\}\}", value)
    if reference is None:
        return int(value)
    for key in reference.group(1).split("."):
        values = values[key]
    return int(values)


def test_a_stopping_replica_finishes_inside_its_grace_period():
    """docs/metacontroller.md#finalize: a stopping replica answers the hook requests in flight (at
    most the hook timeout), then waits MODELDEPLOYMENT_SHUTDOWN_DRAIN_SECONDS for the teardowns it
    carries out after answers; both fit the operator Pod's termination grace period, in the
    manifests and in the chart."""
    from app import durations
    from app.settings import Settings

    objects = kustomize("manifests")
    controller = next(o for o in objects if o["kind"] == "CompositeController"
                      and o["metadata"]["name"] == "modeldeployment")
    hook_timeout = max(durations.seconds(h["webhook"]["timeout"]) for h in controller["spec"]["hooks"].values())
    needed = hook_timeout + Settings().shutdown_drain_seconds
    operator = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "modeldeployment-operator")
    assert operator["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30) > needed
    chart = ROOT / "charts" / "modeldeployment"
    values = yaml.safe_load((chart / "values.yaml").read_text())
    assert _grace_seconds((chart / "templates" / "deployment.yaml").read_text(), values) > needed


"""Install from the Helm chart: the chart renders what the kustomize base does, in any namespace,
and the operator's cluster objects from `helm template` run a deployment on a real control plane.

helm is built from the Go module proxy by tests/e2e/components/build.sh (the `helm` section).
The operator runs as a local process (like tests/e2e/md_operator.py) with the identity of the
chart's ServiceAccount, so the chart's RBAC is what it is allowed to do; the webhook and hook
Service references are rewritten to the process's loopback URLs, nothing else.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import kubernetes_validate
import pytest
import yaml

import cluster as e2e_cluster
from md_operator import NAMESPACE, REPO, Operator, _healthy, apply_world

CHART = REPO / "charts" / "modeldeployment"
OPERATOR_NAMESPACE = "ml-system"
# Labels only the chart sets (Helm's conventions); everything else must equal the kustomize base.
CHART_ONLY_LABELS = {"app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "app.kubernetes.io/version",
                     "helm.sh/chart"}
# kustomize stamps its namespace on kinds it does not know are cluster-scoped; the server ignores it.
CLUSTER_SCOPED = {"CompositeController", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
                  "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "Namespace", "AdmissionCheck"}
# Where a run's metrics samples go (docs/images/dashboard.png is drawn from them).
METRICS_SAMPLES = Path(os.environ.get("MODELDEPLOYMENT_METRICS_SAMPLES",
                                      REPO / ".e2e-work" / "install-metrics-samples.jsonl"))


@pytest.fixture(scope="module")
def helm() -> Path:
    try:
        return e2e_cluster.ensure_built(("helm",)) / "helm"
    except e2e_cluster.ControlPlaneError as exc:
        pytest.fail(f"helm could not be built: {exc}", pytrace=False)


def helm_template(helm: Path, namespace: str, *sets: str, check: bool = True) -> list[dict[str, Any]] | str:
    # A helm built with `go install` has no Kubernetes version stamped in (it assumes v1.20): name one.
    args = [str(helm), "template", "modeldeployment", str(CHART), "--namespace", namespace, "--include-crds",
            "--kube-version", "1.33.0"]
    for value in sets:
        args += ["--set", value]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if not check:
        return proc.stderr if proc.returncode else proc.stdout
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def kustomize(path: Path) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl") or str(e2e_cluster.default_bin_dir() / "kubectl")
    out = subprocess.run([kubectl, "kustomize", str(path)], check=True, capture_output=True, text=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def normalized(objects: list[dict[str, Any]]) -> dict[tuple[str, str, str, str], dict[str, Any]]:
    out = {}
    for obj in objects:
        obj = copy.deepcopy(obj)
        meta = obj["metadata"]
        if obj["kind"] in CLUSTER_SCOPED:
            meta.pop("namespace", None)
        labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in CHART_ONLY_LABELS}
        if labels:
            meta["labels"] = labels
        else:
            meta.pop("labels", None)
        out[(obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])] = obj
    return out


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


# --- the chart renders ------------------------------------------------------------------------------


def test_chart_defaults_render_the_kustomize_base(helm: Path):
    base = normalized(kustomize(REPO / "manifests"))
    chart = normalized(helm_template(helm, "gpustack-system"))
    namespace = ("v1", "Namespace", "", "gpustack-system")
    # The base creates its Namespace; the chart leaves it to `helm install --create-namespace`.
    assert namespace in base and namespace not in chart
    assert sorted(set(base) - {namespace}) == sorted(chart)
    for key in chart:
        assert chart[key] == base[key], key
    with_namespace = normalized(helm_template(helm, "gpustack-system", "createNamespace=true"))
    assert with_namespace[namespace] == base[namespace]


def test_chart_crds_are_the_generated_ones(helm: Path):
    crds = {o["metadata"]["name"]: o for o in by_kind(helm_template(helm, "x"), "CustomResourceDefinition")}
    generated = {p.name.removesuffix(".yaml"): yaml.safe_load(p.read_text())
                 for p in (REPO / "manifests" / "crds").glob("*.yaml")}
    assert crds == generated


def test_chart_in_another_namespace_names_no_other(helm: Path):
    objects = helm_template(helm, OPERATOR_NAMESPACE, "createNamespace=true")
    assert "gpustack-system" not in json.dumps(objects)
    cert = next(c for c in by_kind(objects, "Certificate") if c["metadata"]["name"] == "modeldeployment-operator-webhook")
    assert f"modeldeployment-operator.{OPERATOR_NAMESPACE}.svc" in cert["spec"]["dnsNames"]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        webhook = by_kind(objects, kind)[0]
        assert webhook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == \
            f"{OPERATOR_NAMESPACE}/modeldeployment-operator-webhook"
        assert webhook["webhooks"][0]["clientConfig"]["service"]["namespace"] == OPERATOR_NAMESPACE
    hooks = by_kind(objects, "CompositeController")[0]["spec"]["hooks"]
    assert {hooks[h]["webhook"]["service"]["namespace"] for h in ("customize", "sync", "finalize")} == \
        {OPERATOR_NAMESPACE}
    # The kustomize overlay with one `namespace:` line agrees.
    overlay = normalized(kustomize(REPO / "examples" / "kustomize" / "namespace"))
    assert sorted(overlay) == sorted(normalized(objects))
    assert overlay == normalized(objects)


def test_chart_options(helm: Path):
    refused = helm_template(helm, "ops", "certificate.mode=secret", check=False)
    assert "certificate.caBundle" in refused
    ca = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode()
    objects = helm_template(
        helm, "ops", "certificate.mode=secret", f"certificate.caBundle={ca}", "certificate.secretName=my-tls",
        "replicas=3", "podDisruptionBudget.minAvailable=2", "logging.format=text", "logging.level=DEBUG",
        "settings.gangReleaseAfterSeconds=0", "settings.routerImage=registry.local/router:1",
        "networkPolicy.metricsFrom[0].podSelector.matchLabels.app=prometheus",
        "metrics.serviceMonitor.enabled=true", "metrics.dashboard.enabled=true",
        "kueue.admissionCheck.create=true", "kueue.localQueues[0].name=q", "kueue.localQueues[0].namespace=team-b",
        "image.tag=0.2.0", "image.pullPolicy=Always")
    kinds = {o["kind"] for o in objects}
    assert not kinds & {"Certificate", "Issuer"}
    assert {"NetworkPolicy", "ServiceMonitor", "ConfigMap", "AdmissionCheck", "LocalQueue"} <= kinds
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        webhook = by_kind(objects, kind)[0]
        assert "annotations" not in webhook["metadata"]
        assert webhook["webhooks"][0]["clientConfig"]["caBundle"] == ca
    deployment = by_kind(objects, "Deployment")[0]
    assert deployment["spec"]["replicas"] == 3
    assert by_kind(objects, "PodDisruptionBudget")[0]["spec"]["minAvailable"] == 2
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["MODELDEPLOYMENT_LOG_JSON"] == "false" and env["MODELDEPLOYMENT_LOG_LEVEL"] == "DEBUG"
    assert env["MODELDEPLOYMENT_GANG_RELEASE_AFTER_SECONDS"] == "0"
    assert env["GPUSTACK_MODEL_DEPLOYMENT_ROUTER_IMAGE"] == "registry.local/router:1"
    assert container["image"].endswith(":0.2.0") and container["imagePullPolicy"] == "Always"
    assert deployment["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"] == "my-tls"
    dashboard = json.loads(by_kind(objects, "ConfigMap")[0]["data"]["modeldeployment.json"])
    assert dashboard["panels"]
    assert by_kind(objects, "LocalQueue")[0]["metadata"]["namespace"] == "team-b"
    ingress = by_kind(objects, "NetworkPolicy")[0]["spec"]["ingress"]
    assert [rule["ports"][0]["port"] for rule in ingress] == ["hooks", "https", "hooks"]
    assert ingress[2]["from"] == [{"podSelector": {"matchLabels": {"app": "prometheus"}}}]
    assert not by_kind(helm_template(helm, "ops", "networkPolicy.enabled=false"), "NetworkPolicy")
    for obj in objects:
        if obj["apiVersion"] in ("v1", "apps/v1", "policy/v1", "networking.k8s.io/v1",
                                 "rbac.authorization.k8s.io/v1", "admissionregistration.k8s.io/v1"):
            kubernetes_validate.validate(obj, "1.33.0", strict=True)


def test_chart_dashboard_is_the_manifests_one():
    assert (CHART / "dashboards" / "modeldeployment.json").read_text() == \
        (REPO / "manifests" / "monitoring" / "dashboards" / "modeldeployment.json").read_text()


# --- installed from `helm template` ------------------------------------------------------------------


def _loopback(objects: list[dict[str, Any]], webhook_port: int, hooks_port: int) -> list[dict[str, Any]]:
    """The chart's objects with the webhook and hook Service references swapped for loopback URLs
    (as md_operator._overlay does for the kustomize base); the CA comes from certificate.mode=secret."""
    out = []
    for obj in copy.deepcopy(objects):
        if obj["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            config = obj["webhooks"][0]["clientConfig"]
            service = config.pop("service")
            assert service["namespace"] == OPERATOR_NAMESPACE
            config["url"] = f"https://127.0.0.1:{webhook_port}{service['path']}"
        if obj["kind"] == "CompositeController":
            for hook in ("customize", "sync", "finalize"):
                webhook = obj["spec"]["hooks"][hook]["webhook"]
                service = webhook.pop("service")
                assert service["namespace"] == OPERATOR_NAMESPACE
                webhook["url"] = f"http://127.0.0.1:{hooks_port}{webhook.pop('path')}"
        out.append(obj)
    return out


def _service_account_kubeconfig(cp: e2e_cluster.ControlPlane, path: Path) -> Path:
    """A kubeconfig authenticating as the chart's ServiceAccount (a client certificate with its
    user name and groups), so the operator has exactly the chart's RBAC."""
    user = f"system:serviceaccount:{OPERATOR_NAMESPACE}:modeldeployment-operator"
    cert, key = cp.issue_client_cert(user, ("system:serviceaccounts", f"system:serviceaccounts:{OPERATOR_NAMESPACE}"))
    config = yaml.safe_load(cp.kubeconfig.read_text())
    config["users"] = [{"name": "operator", "user": {
        "client-certificate-data": base64.b64encode(Path(cert).read_bytes()).decode(),
        "client-key-data": base64.b64encode(Path(key).read_bytes()).decode()}}]
    config["contexts"][0]["context"]["user"] = "operator"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


class MetricsSampler:
    """Scrapes the operator's /metrics once a second into a JSON-lines file (the dashboard picture)."""

    def __init__(self, client, url: str, path: Path) -> None:
        import threading

        self.client, self.url, self.path = client, url, path
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("w") as out:
            while not self._stop.is_set():
                try:
                    text = self.client.get(self.url, timeout=2).text
                except Exception:  # noqa: BLE001 - a missed scrape is a gap, as in Prometheus
                    text = None
                if text is not None:
                    out.write(json.dumps({"t": time.time(), "metrics": text}) + "\n")
                    out.flush()
                    self.samples += 1
                self._stop.wait(1.0)

    def __enter__(self) -> "MetricsSampler":
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.fixture(scope="module")
def installed(helm: Path, control_plane: e2e_cluster.ControlPlane) -> Iterator[Operator]:
    """The chart's cluster objects, from `helm template -n ml-system`, applied in the documented
    order; the operator serving them from a local process as the chart's ServiceAccount."""
    cp = control_plane
    assert cp.metacontroller_running, "the e2e suite runs the real Metacontroller"
    webhook_port, hooks_port = e2e_cluster.free_ports(2)
    objects = _loopback(helm_template(helm, OPERATOR_NAMESPACE, "createNamespace=true", "certificate.mode=secret",
                                      f"certificate.caBundle={cp.ca_bundle_b64}", "kueue.admissionCheck.create=true"),
                        webhook_port, hooks_port)
    order = ["Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
             "Service", "Deployment", "PodDisruptionBudget", "NetworkPolicy", "MutatingWebhookConfiguration",
             "ValidatingWebhookConfiguration", "AdmissionCheck", "CompositeController"]
    assert {o["kind"] for o in objects} == set(order)
    first = [o for o in objects if o["kind"] in order[:order.index("MutatingWebhookConfiguration")]]
    cp.kubectl("apply", "--server-side", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": first}))
    cp.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    cp.create_namespace(NAMESPACE)
    cp.apply([o for o in objects if o["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")])
    cert, key = cp.issue_serving_cert(("127.0.0.1", "localhost"))
    kubeconfig = _service_account_kubeconfig(cp, cp.work_dir / "operator-sa.kubeconfig")
    env = {**cp.env, "KUBECONFIG": str(kubeconfig), "MODELDEPLOYMENT_KUBECONFIG": str(kubeconfig),
           "MODELDEPLOYMENT_LOG_JSON": "true", "MODELDEPLOYMENT_LOG_LEVEL": "INFO",
           "MODELDEPLOYMENT_GANG_RELEASE_AFTER_SECONDS": "20", "MODELDEPLOYMENT_ADMISSION_CHECK_KEEPER_SECONDS": "5",
           "PYTHONUNBUFFERED": "1"}
    cp.start_process("operator-helm", [str(Path(sys.executable).parent / "modeldeployment"), "serve",
                                       "--host", "127.0.0.1", "--port", str(webhook_port),
                                       "--tls-cert", str(cert), "--tls-key", str(key),
                                       "--hooks-port", str(hooks_port)], env=env, cwd=cp.work_dir)
    op = Operator(cp, webhook_port, hooks_port)
    client = cp.http_client()
    op.wait("the operator to listen", lambda: _healthy(client, f"https://127.0.0.1:{webhook_port}/readyz"), 60, 0.5)
    apply_world(op)
    op.kubectl("apply", "-k", str(REPO / "manifests" / "kueue"))
    cp.apply([o for o in objects if o["kind"] in ("AdmissionCheck", "CompositeController")])
    yield op
    cp.stop_process("operator-helm")
    for kind in ("compositecontroller", "mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        op.kubectl("delete", kind, "modeldeployment" if kind == "compositecontroller" else "modeldeployment-operator",
                   "--ignore-not-found", check=False)


def _ready_pods(op: Operator, name: str, image: str | None = None) -> int:
    count = 0
    for pod in op.pods(name):
        conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
        if pod.get("status", {}).get("phase") == "Running" and conditions.get("Ready") == "True" \
                and not pod["metadata"].get("deletionTimestamp") \
                and (image is None or pod["spec"]["containers"][0]["image"] == image):
            count += 1
    return count


def test_helm_template_in_ml_system_runs_a_deployment(installed: Operator):
    op = installed
    ns = op.get("namespace", OPERATOR_NAMESPACE)
    assert ns["metadata"]["name"] == OPERATOR_NAMESPACE
    md = {"apiVersion": "worker.gpustack.ai/v1", "kind": "ModelDeployment",
          "metadata": {"name": "helm-installed", "namespace": NAMESPACE},
          "spec": {"model": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}, "engine": {"name": "vLLM", "version": "0.29.0"},
                   "roles": [{"name": "server", "replicas": 2, "instanceType": "gpustack-nvidia-a10g-linux-amd64"}]}}
    metrics = f"http://127.0.0.1:{op.hooks_port}/metrics"
    with MetricsSampler(op.cp.http_client(), metrics, METRICS_SAMPLES) as sampler:
        # Through the webhooks (the mutating one defaults the accelerator count).
        op.kubectl("apply", "-f", "-", input=yaml.safe_dump(md))
        stored = op.md("helm-installed")
        assert stored["spec"]["roles"][0]["resources"]["accelerator"] == 1
        refused = op.kubectl("apply", "-f", "-", check=False, input=yaml.safe_dump(
            {**md, "metadata": {"name": "helm-refused", "namespace": NAMESPACE},
             "spec": {**md["spec"], "roles": [{**md["spec"]["roles"][0], "instanceType": "no-such-type"}]}}))
        assert refused.returncode != 0 and "no-such-type" in refused.stderr
        # Through the CompositeController's hooks: Pods, Kueue's joint admission, Ready.
        op.wait("phase Ready", lambda: op.md("helm-installed").get("status", {}).get("phase") == "Ready", 180)
        assert len(op.pods("helm-installed")) == 2
        # A scale-up and an image rollout, so the metrics have something to show.
        op.kubectl("patch", "md", "helm-installed", "-n", NAMESPACE, "--type=json", "-p", json.dumps(
            [{"op": "replace", "path": "/spec/roles/0/replicas", "value": 3}]))
        op.wait("3 replicas Ready", lambda: _ready_pods(op, "helm-installed") == 3, 180)
        op.kubectl("patch", "md", "helm-installed", "-n", NAMESPACE, "--type=json", "-p", json.dumps(
            [{"op": "add", "path": "/spec/roles/0/image", "value": "registry.local/vllm:edited"}]))
        op.wait("the rollout to finish", lambda: _ready_pods(op, "helm-installed", "registry.local/vllm:edited") == 3
                and len(op.pods("helm-installed")) == 3, 300)
        op.wait("phase Ready", lambda: op.md("helm-installed").get("status", {}).get("phase") == "Ready", 60)
        # The operator's per-deployment metrics, scraped from the running service.
        text = op.cp.http_client().get(metrics).text
        assert f'modeldeployment_phase{{name="helm-installed",namespace="{NAMESPACE}",phase="Ready"}} 1.0' in text
        assert f'modeldeployment_role_replicas{{kind="ready",name="helm-installed",namespace="{NAMESPACE}",role="server"}} 3.0' in text
        # Deleted through the finalize hook: Pods first, then the parent.
        op.kubectl("delete", "md", "helm-installed", "-n", NAMESPACE, "--wait=false")
        op.wait("the deployment to be gone",
                lambda: op.kubectl("get", "md", "helm-installed", "-n", NAMESPACE, check=False).returncode != 0, 180)
        time.sleep(3)
    assert sampler.samples > 10
    # The operator ran with the chart's ServiceAccount RBAC: its log shows no authorization failure.
    log = op.cp.log_paths()["operator-helm"].read_text()
    assert "forbidden" not in log.lower(), log[-3000:]
    # One log format (JSON) for the app and uvicorn alike.
    lines = [line for line in log.splitlines() if line.strip() and not line.startswith("# ")]  # "# argv": the harness
    assert lines and all(json.loads(line).get("level") for line in lines)


def test_rendered_objects_pipe_into_kubectl_apply_dry_run_server(installed: Operator):
    """`modeldeployment render --objects-only | kubectl apply --dry-run=server -f -` (README)."""
    rendered = subprocess.run([str(Path(sys.executable).parent / "modeldeployment"), "render", "-f",
                               str(REPO / "examples" / "deployments" / "qwen-chat.yaml"), "--objects-only", "-q"],
                              capture_output=True, text=True, check=True, cwd=installed.cp.work_dir)
    kinds = {d["kind"] for d in yaml.safe_load_all(rendered.stdout) if d}
    assert kinds >= {"Pod", "Service"}
    result = installed.kubectl("apply", "--dry-run=server", "-f", "-", input=rendered.stdout)
    assert "(server dry run)" in result.stdout

"""Install from the Helm chart: the chart renders what the kustomize base does, in any namespace,
and the operator's cluster objects from `helm template` run a deployment on a real control plane.

helm is built from the Go module proxy by tests/e2e/components/build.sh (the `helm` section), with
the Kubernetes version a release binary carries, so `helm template` runs as documented (no
`--kube-version`). The commands of README.md and docs/operations.md run here as written where they
need no cluster (test_documented_commands_run_as_written).
The operator runs as a local process (like tests/e2e/md_operator.py) with the identity of the
chart's ServiceAccount, so the chart's RBAC is what it is allowed to do; the webhook and hook
Service references are rewritten to the process's loopback URLs, nothing else.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import shlex
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
from dashboard_run import MetricsSampler
from md_operator import NAMESPACE, REPO, Operator, _healthy, apply_world

CHART = REPO / "charts" / "modeldeployment"
OPERATOR_NAMESPACE = "ml-system"
# Labels only the chart sets (Helm's conventions); everything else must equal the kustomize base.
CHART_ONLY_LABELS = {"app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "app.kubernetes.io/version",
                     "helm.sh/chart"}
# kustomize stamps its namespace on kinds it does not know are cluster-scoped; the server ignores it.
CLUSTER_SCOPED = {"CompositeController", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
                  "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "Namespace", "AdmissionCheck"}
# Where this run's metrics samples go (docs/images/dashboard.png comes from tests/e2e/dashboard_run.py).
METRICS_SAMPLES = Path(os.environ.get("MODELDEPLOYMENT_METRICS_SAMPLES",
                                      REPO / ".e2e-work" / "install-metrics-samples.jsonl"))


@pytest.fixture(scope="module")
def helm() -> Path:
    try:
        return e2e_cluster.ensure_built(("helm",)) / "helm"
    except e2e_cluster.ControlPlaneError as exc:
        pytest.fail(f"helm could not be built: {exc}", pytrace=False)


def helm_template(helm: Path, namespace: str, *sets: str, check: bool = True) -> list[dict[str, Any]] | str:
    # No --kube-version: build.sh's helm carries the Kubernetes version a release binary does.
    args = [str(helm), "template", "modeldeployment", str(CHART), "--namespace", namespace, "--include-crds"]
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
    # The kustomize overlay (a `namespace:` line and the base's namespace-references transformer) agrees.
    overlay = normalized(kustomize(REPO / "examples" / "kustomize" / "namespace"))
    assert sorted(overlay) == sorted(normalized(objects))
    assert overlay == normalized(objects)


def test_chart_options(helm: Path):
    refused = helm_template(helm, "ops", "certificate.mode=secret", check=False)
    assert "certificate.caBundle" in refused
    ca = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode()
    objects = helm_template(
        helm, "ops", "certificate.mode=secret", f"certificate.caBundle={ca}", "certificate.secretName=my-tls",
        "replicas=3", "logging.format=text", "logging.level=DEBUG",
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
    deployment = operator_object(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 3
    assert operator_object(objects, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}  # some come from the downward API
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


def test_helm_carries_a_kubernetes_version_the_chart_accepts(helm: Path, tmp_path: Path):
    """build.sh stamps HELM_KUBE_VERSION into helm (its -ldflags), as helm's release build does, so
    `helm template` and `helm lint` without a cluster check the chart's kubeVersion against it."""
    script = e2e_cluster.BUILD_SCRIPT.read_text()
    stamped = next(line.split("=", 1)[1].split()[0] for line in script.splitlines()
                   if line.startswith("HELM_KUBE_VERSION="))
    probe = tmp_path / "probe"
    (probe / "templates").mkdir(parents=True)
    (probe / "Chart.yaml").write_text("apiVersion: v2\nname: probe\nversion: 0.1.0\n")
    (probe / "templates" / "version.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: probe}\n"
        "data: {version: {{ .Capabilities.KubeVersion.Version | quote }}}\n")
    out = subprocess.run([str(helm), "template", str(probe)], capture_output=True, text=True, check=True).stdout
    assert yaml.safe_load(out)["data"]["version"] == stamped
    minimum = yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"]
    assert minimum == ">=1.29.0-0" and tuple(map(int, stamped[1:].split(".")[:2])) >= (1, 29)


def test_helm_lint_is_clean(helm: Path):
    proc = subprocess.run([str(helm), "lint", "--strict", str(CHART)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout and "[WARNING]" not in proc.stdout, proc.stdout


@pytest.mark.parametrize(("value", "named"), [
    ("logging.format=JSON", "/logging/format"),
    ("logging.fromat=json", "fromat"),
    ("replicas=two", "/replicas"),
    ("certificate.mode=vault", "/certificate/mode"),
    ("podDisruptionBudget.minAvailabe=1", "minAvailabe"),
    ("webhook.timeoutSeconds=60", "/webhook/timeoutSeconds"),
    ("settings.gangReleaseAfterSeconds=ten", "/settings/gangReleaseAfterSeconds"),
])
def test_a_bad_value_fails_helm_naming_its_key(helm: Path, value: str, named: str):
    """values.schema.json, applied by helm itself: `helm template` refuses the value and names where it is."""
    refused = helm_template(helm, "ops", value, check=False)
    assert isinstance(refused, str) and "values don't meet the specifications of the schema" in refused, refused
    assert named in refused, refused


def test_helm_install_refuses_a_bad_value_naming_its_key(helm: Path, control_plane: e2e_cluster.ControlPlane):
    """`helm install` (a dry run on the e2e control plane: helm needs a cluster to reach, and it checks
    the values against the schema before anything is sent) refuses a bad value naming it, and takes
    good ones. The control plane has no cert-manager, so the certificate comes as a Secret."""
    ca = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode()

    def install(*sets: str) -> subprocess.CompletedProcess:
        args = [str(helm), "install", "modeldeployment", str(CHART), "-n", "ops", "--dry-run=client"]
        for value in ("certificate.mode=secret", f"certificate.caBundle={ca}", *sets):
            args += ["--set", value]
        return subprocess.run(args, capture_output=True, text=True, env=control_plane.env, timeout=120)

    refused = install("logging.format=JSON")
    assert refused.returncode != 0 and "at '/logging/format': value must be one of 'json', 'text'" in refused.stderr, \
        refused.stderr
    typo = install("logging.fromat=json")
    assert typo.returncode != 0 and "fromat" in typo.stderr, typo.stderr
    accepted = install()
    assert accepted.returncode == 0 and "STATUS: pending-install" in accepted.stdout, accepted.stderr


def operator_object(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """The operator's own object of a kind the activator has one of too (Deployment, PodDisruptionBudget)."""
    return next(o for o in by_kind(objects, kind) if o["metadata"]["name"] == "modeldeployment-operator")


def test_the_disruption_budget_is_one_a_drain_can_satisfy(helm: Path):
    def budget(*sets: str) -> list[dict[str, Any]]:
        """The operator's budget (the activator's, with its own replicas, is judged below)."""
        return [o for o in by_kind(helm_template(helm, "ops", *sets), "PodDisruptionBudget")
                if o["metadata"]["name"] == "modeldeployment-operator"]

    assert not budget("replicas=1")  # a budget over one replica would block every drain
    default = budget()[0]["spec"]
    assert default["maxUnavailable"] == 1 and "minAvailable" not in default
    assert default["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert budget("replicas=3", "podDisruptionBudget.minAvailable=2")[0]["spec"]["minAvailable"] == 2
    assert not budget("podDisruptionBudget.enabled=false")
    refused = helm_template(helm, "ops", "replicas=2", "podDisruptionBudget.minAvailable=2", check=False)
    assert isinstance(refused, str) and "podDisruptionBudget.minAvailable (2) must be below replicas (2)" in refused
    # The activator's budget: one Pod at a time over its (at least two) replicas.
    activator = [o for o in by_kind(helm_template(helm, "ops"), "PodDisruptionBudget")
                 if o["metadata"]["name"] == "modeldeployment-activator"]
    assert len(activator) == 1 and activator[0]["spec"].get("maxUnavailable") == 1, activator


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
            for entry in obj["webhooks"]:  # every webhook of the configuration (each kind it guards)
                config = entry["clientConfig"]
                service = config.pop("service")
                assert service["namespace"] == OPERATOR_NAMESPACE
                config["url"] = f"https://127.0.0.1:{webhook_port}{service['path']}"
        if obj["kind"] == "CompositeController":
            for hook in obj["spec"]["hooks"].values():  # every controller, every hook it declares
                webhook = hook["webhook"]
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
    cp.wait_established()
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
    for obj in objects:  # what the install applied that outlives the process: every controller and webhook
        if obj["kind"] in ("CompositeController", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            op.kubectl("delete", obj["kind"].lower(), obj["metadata"]["name"], "--ignore-not-found", check=False)


def _ready(pod: dict[str, Any], image: str | None = None) -> bool:
    conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
    return pod.get("status", {}).get("phase") == "Running" and conditions.get("Ready") == "True" \
        and not pod["metadata"].get("deletionTimestamp") \
        and (image is None or pod["spec"]["containers"][0]["image"] == image)


def _all_ready(op: Operator, name: str, replicas: int, image: str | None = None) -> bool:
    """One read of the deployment's Pods: exactly `replicas`, each Ready (on `image`)."""
    pods = op.pods(name)
    return len(pods) == replicas and all(_ready(p, image) for p in pods)


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
        op.wait("2 replicas Ready", lambda: _all_ready(op, "helm-installed", 2), 60)
        # A scale-up and an image rollout, so the metrics have something to show.
        op.kubectl("patch", "md", "helm-installed", "-n", NAMESPACE, "--type=json", "-p", json.dumps(
            [{"op": "replace", "path": "/spec/roles/0/replicas", "value": 3}]))
        op.wait("3 replicas Ready", lambda: _all_ready(op, "helm-installed", 3), 180)
        op.kubectl("patch", "md", "helm-installed", "-n", NAMESPACE, "--type=json", "-p", json.dumps(
            [{"op": "add", "path": "/spec/roles/0/image", "value": "registry.local/vllm:edited"}]))
        op.wait("the rollout to finish", lambda: _all_ready(op, "helm-installed", 3, "registry.local/vllm:edited"), 300)
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


# --- every documented command, as written ---------------------------------------------------------

DOCUMENTS = ("README.md", "docs/operations.md", "charts/modeldeployment/README.md", "manifests/webhook/README.md")
# Shell blocks (```sh, indented under a list item too).
SHELL_BLOCK = re.compile(r"^( *)```(?:sh|bash|shell)\n(.*?)^\1```", re.M | re.S)
# Commands this test does not run, each for its reason (each must still exist and be executable).
NOT_RUN = {
    "scripts/serve.sh": "serves until stopped (the same `serve` runs below, from README's hook example)",
    "scripts/test.sh": "the whole suite, this test included",
    "scripts/setup-venv.sh": "made the .venv this test runs in (it installs from the package index)",
}


def documented_commands() -> list[tuple[str, str]]:
    """(document, command line) for every command of every shell block: continuations joined,
    comments dropped."""
    out = []
    for document in DOCUMENTS:
        for match in SHELL_BLOCK.finditer((REPO / document).read_text()):
            indent = len(match.group(1))
            body = "\n".join(line[indent:] for line in match.group(2).splitlines()).replace("\\\n", " ")
            for line in body.splitlines():
                tokens = shlex.split(line, comments=True)
                if tokens:
                    out.append((document, line.strip()))
    return out


def pipeline(line: str) -> list[list[str]]:
    """A command line as its simple commands (split at |, &&, ; and a trailing &), redirections kept
    as tokens."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars="|&;<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    commands: list[list[str]] = [[]]
    for token in lexer:
        if token in ("|", "&&", ";", "&"):
            commands.append([])
        else:
            commands[-1].append(token)
    return [c for c in commands if c]


class DocCommands:
    """Runs or checks one documented command; `run_line` returns what it did, for the report."""

    def __init__(self, helm: Path, work: Path) -> None:
        built = e2e_cluster.default_bin_dir() / "kubectl"
        self.kubectl = str(built) if built.exists() else (shutil.which("kubectl") or "kubectl")
        self.helm = str(helm)
        self.work = work
        self.background: list[subprocess.Popen] = []
        self.env = {**os.environ, "PATH": f"{Path(self.helm).parent}:{os.environ['PATH']}",
                    "KUBECONFIG": str(work / "no-cluster.kubeconfig")}  # nothing here reaches a cluster

    def run(self, argv: list[str], stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(argv, cwd=REPO, env=self.env, input=stdin, capture_output=True, text=True, timeout=120)

    def flags_parse(self, argv: list[str]) -> None:
        """The command line parses: kubectl and helm (cobra) refuse an unknown flag, a flag's bad value
        or an unknown subcommand before they print the help `--help` asks for."""
        proc = self.run([*argv, "--help"])
        assert proc.returncode == 0, f"does not parse: {proc.stderr.strip()}"

    def kustomize_builds(self, directory: str) -> str:
        if directory.startswith("https://github.com/metacontroller/metacontroller/manifests/production?ref="):
            # Offline: the same directory of the same release, from the tarball build.sh builds from.
            version = directory.rsplit("=", 1)[1]
            pinned = re.search(r"^METACONTROLLER_VERSION=(\S+)", e2e_cluster.BUILD_SCRIPT.read_text(), re.M).group(1)
            assert version == pinned, f"the docs install Metacontroller {version}, the suite runs {pinned}"
            tarball = REPO.parent / "shared" / "third_party" / f"metacontroller-{version}.tar.gz"
            assert tarball.exists(), f"{tarball} (build.sh's source of Metacontroller) is missing"
            unpacked = self.work / "metacontroller"
            unpacked.mkdir(exist_ok=True)
            subprocess.run(["tar", "xzf", str(tarball), "-C", str(unpacked), "--strip-components=1"], check=True)
            directory = str(unpacked / "manifests" / "production")
            proc = self.run([self.kubectl, "kustomize", directory])
            assert proc.returncode == 0, proc.stderr  # its own deprecation warnings are upstream's
            return proc.stdout
        proc = self.run([self.kubectl, "kustomize", directory])
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr
        return proc.stdout

    def files_parse(self, path: str) -> None:
        target = REPO / path
        assert target.exists(), f"{path} does not exist"
        for file in sorted(target.glob("*.yaml")) if target.is_dir() else [target]:
            assert [d for d in yaml.safe_load_all(file.read_text()) if d], f"{file} holds no object"

    def kubectl_command(self, argv: list[str], stdin: str | None) -> str:
        self.flags_parse(argv)
        if argv[1] == "kustomize":
            self.kustomize_builds(argv[2])
            return "ran"
        for flag, value in zip(argv, argv[1:]):
            if flag == "-k":
                self.kustomize_builds(value)
            elif flag == "-f" and value == "-":
                assert stdin is not None and [d for d in yaml.safe_load_all(stdin) if d], "nothing piped into -f -"
            elif flag == "-f":
                self.files_parse(value)
        return "checked (needs a cluster): flags, and what -f/-k name builds"

    def helm_command(self, argv: list[str]) -> str:
        argv = [self.helm, *argv[1:]]
        self.flags_parse(argv)
        verb = argv[1]
        if verb == "install":
            # helm install needs a cluster, one with cert-manager for the defaults; `helm template`
            # takes the same arguments and checks the same values and templates without one.
            proc = self.run([self.helm, "template", *argv[2:]])
            assert proc.returncode == 0 and "kind: Deployment" in proc.stdout, proc.stderr
            return "ran as helm template (install needs a cluster with cert-manager)"
        if verb in ("template", "lint"):
            proc = self.run(argv)
            assert proc.returncode == 0, proc.stderr
            if verb == "template":
                assert {d["kind"] for d in yaml.safe_load_all(proc.stdout) if d} >= {"Deployment", "CustomResourceDefinition"}
            return "ran"
        if verb == "upgrade":
            assert (REPO / argv[3] / "Chart.yaml").exists(), argv[3]
        return "checked (needs a cluster): flags"

    def modeldeployment_command(self, argv: list[str]) -> tuple[str, str]:
        program = str(REPO / argv[0]) if argv[0].startswith(".venv/") else argv[0]
        if argv[1] == "crds":  # writes the source tree's CRDs: the same command into a scratch directory
            out = self.work / "crds"
            proc = self.run([program, *argv[1:], "--out", str(out)])
            assert proc.returncode == 0, proc.stderr
            assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in (REPO / "manifests" / "crds").iterdir())
            return "ran with --out <scratch>", ""
        if argv[1] == "serve":
            with open(self.work / "serve.log", "w") as log:
                self.background.append(subprocess.Popen([program, *argv[1:]], cwd=REPO, env=self.env,
                                                        stdout=log, stderr=subprocess.STDOUT))
            return "started", ""
        proc = self.run([program, *argv[1:]])
        assert proc.returncode == 0, proc.stderr
        return "ran", proc.stdout

    def curl(self, argv: list[str]) -> tuple[str, str]:
        url = next(a for a in argv if a.startswith("http://"))
        deadline = time.monotonic() + 60
        while True:  # the `serve … &` before it is starting
            proc = self.run(argv)
            if proc.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        serve_log = self.work / "serve.log"
        assert proc.returncode == 0, (url, proc.stderr, serve_log.read_text()[-2000:] if serve_log.exists() else "")
        # The answer is the operator's (not another server's on that port): a sync response.
        if url.endswith("/hooks/sync"):
            assert proc.stdout.startswith('{"status":{"phase":'), proc.stdout[:200]
        self.stop()  # the `serve … &` it talked to
        return "ran", proc.stdout

    def run_line(self, line: str) -> str:
        commands = pipeline(line)
        piped: str | None = None
        did = []
        for argv in commands:
            if ">" in argv:  # `> file`: the output is captured here instead
                argv = argv[:argv.index(">")]
            program = argv[0]
            if program in NOT_RUN:
                assert os.access(REPO / program, os.X_OK), f"{program} is not an executable file"
                did.append(f"not run: {NOT_RUN[program]}")
                piped = None
            elif program == "kubectl":
                did.append(self.kubectl_command([self.kubectl, *argv[1:]], piped))
                piped = None
            elif program == "helm":
                did.append(self.helm_command(argv))
                piped = None
            elif program.endswith("modeldeployment"):
                what, piped = self.modeldeployment_command(argv)
                did.append(what)
            elif program == "curl":
                what, piped = self.curl(argv)
                did.append(what)
            elif program == "head":
                assert piped, "nothing piped into head"
                did.append("ran")
            elif program == "manifests/webhook/gen-certs.sh":
                # --apply writes to a cluster; the rest (the CA and the pair for the namespace) runs here.
                offline = [a for a in argv if a != "--apply"] + ["--out", str(self.work / "certs")]
                proc = self.run([str(REPO / offline[0]), *offline[1:]])
                assert proc.returncode == 0 and (self.work / "certs" / "tls.crt").exists(), proc.stderr
                did.append("ran without --apply (needs a cluster)")
            else:
                raise AssertionError(f"no rule for `{program}` in: {line}")
        return ", ".join(did)

    def stop(self) -> None:
        for proc in self.background:
            proc.terminate()
            proc.wait(10)
        self.background = []


def test_documented_commands_run_as_written(helm: Path, tmp_path: Path):
    """Every command of README.md's and docs/operations.md's shell blocks (and the chart's and the
    webhook directory's READMEs) runs as written when it needs no cluster: helm template and lint,
    kubectl kustomize, modeldeployment render/validate/crds/serve and curl against that serve;
    helm install's arguments render with helm template (its cluster-side run:
    test_helm_install_refuses_a_bad_value_naming_its_key). A command that needs a cluster is
    checked for its flags (kubectl and helm parse them) and for what its -f/-k name: files that
    parse, kustomizations that build without a warning."""
    commands = documented_commands()
    assert len(commands) > 30
    runner = DocCommands(helm, tmp_path)
    report = []
    try:
        for document, line in commands:
            try:
                report.append(f"{document}: {line} -> {runner.run_line(line)}")
            except AssertionError as exc:
                raise AssertionError(f"{document}: `{line}`: {exc}") from None
    finally:
        runner.stop()
    ran = [r for r in report if r.endswith("ran") or "ran " in r]
    assert len(ran) >= 10, "\n".join(report)
    print("\n".join(report))

"""The security model in the manifests (docs/operations.md#security): a NetworkPolicy admits each port from its one caller, the webhook
certificate comes from a CA chain (a renewal keeps caBundle), hooks and webhooks on their own ports."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"


def docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def by_name(objects: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def operator_container() -> dict:
    (deployment,) = docs(MANIFESTS / "operator" / "deployment.yaml")
    return deployment["spec"]["template"]["spec"]["containers"][0], deployment


def test_the_network_policy_admits_each_port_from_its_one_caller():
    (policy,) = docs(MANIFESTS / "operator" / "networkpolicy.yaml")
    container, deployment = operator_container()
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= \
        deployment["spec"]["template"]["metadata"]["labels"].items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    port_names = {p["name"] for p in container["ports"]}
    rules = {rule["ports"][0]["port"]: rule["from"] for rule in policy["spec"]["ingress"]}
    assert set(rules) == {"hooks", "https"} <= port_names
    assert rules["hooks"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "metacontroller"}}}]
    (webhook_source,) = rules["https"]
    assert set(webhook_source) == {"ipBlock"} and webhook_source["ipBlock"]["except"]
    assert "operator/networkpolicy.yaml" in (MANIFESTS / "kustomization.yaml").read_text()


def test_hooks_and_webhooks_listen_on_separate_ports():
    container, _ = operator_container()
    args = container["args"]
    assert args[args.index("--port") + 1] != args[args.index("--hooks-port") + 1]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert str(ports["https"]) == args[args.index("--port") + 1]
    assert str(ports["hooks"]) == args[args.index("--hooks-port") + 1]


def test_the_serving_certificate_comes_from_a_ca_issuer_so_renewals_keep_the_ca_bundle():
    objects = docs(MANIFESTS / "webhook" / "certificate.yaml")
    issuers, certificates = by_name(objects, "Issuer"), by_name(objects, "Certificate")
    serving = certificates["modeldeployment-operator-webhook"]
    ca_issuer = issuers[serving["spec"]["issuerRef"]["name"]]
    assert "ca" in ca_issuer["spec"] and "selfSigned" not in ca_issuer["spec"]
    (ca,) = [c for c in certificates.values() if c["spec"]["secretName"] == ca_issuer["spec"]["ca"]["secretName"]]
    assert ca["spec"]["isCA"] is True
    assert "selfSigned" in issuers[ca["spec"]["issuerRef"]["name"]]["spec"]
    # The CA outlives many serving renewals; the serving key rotates on each.
    assert int(ca["spec"]["duration"].rstrip("h")) >= 5 * int(serving["spec"]["duration"].rstrip("h"))
    assert serving["spec"]["privateKey"]["rotationPolicy"] == "Always"
    for name in ("mutating.yaml", "validating.yaml"):
        (config,) = docs(MANIFESTS / "webhook" / name)
        assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].endswith(
            "/modeldeployment-operator-webhook")


def test_rbac_reads_the_parent_and_workloads_before_writing():
    role = next(d for d in docs(MANIFESTS / "operator" / "rbac.yaml") if d["kind"] == "ClusterRole")
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
               for v in rule["verbs"]}
    assert ("worker.gpustack.ai", "modeldeployments", "get") in granted
    assert {("kueue.x-k8s.io", "workloads", "get"), ("kueue.x-k8s.io", "workloads", "delete")} <= granted
    # The deadlock release: a merge patch of spec.active, and one list of the holding records.
    assert {("kueue.x-k8s.io", "workloads", "patch"), ("worker.gpustack.ai", "modeldeployments", "list")} <= granted
    assert not any(v in ("update", "deletecollection", "*") for _, _, v in granted)


def test_the_declared_child_maps_are_the_composite_controllers_children():
    """The hooks refuse a request missing one of vocab.DECLARED_CHILD_MAPS: exactly the child
    resources the CompositeController declares (Metacontroller sends each, empty when none)."""
    from app import vocab

    kinds = {"pods": "Pod", "services": "Service", "configmaps": "ConfigMap", "serviceaccounts": "ServiceAccount",
             "roles": "Role", "rolebindings": "RoleBinding", "deployments": "Deployment",
             "endpointslices": "EndpointSlice"}
    (controller,) = docs(MANIFESTS / "metacontroller" / "compositecontroller.yaml")
    declared = {f"{kinds[c['resource']]}.{c['apiVersion']}" for c in controller["spec"]["childResources"]}
    assert declared == set(vocab.DECLARED_CHILD_MAPS)

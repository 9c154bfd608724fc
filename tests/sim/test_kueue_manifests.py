"""manifests/kueue and the operator's RBAC against what the code and the examples need."""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from app import quantity, vocab
from tests.sim.world import ROOT, Sim, example, world_objects

KUEUE = ROOT / "manifests" / "kueue"
EXAMPLE_DEPLOYMENTS = ["qwen-chat", "qwen-cached", "pd-pair", "ascend-sglang", "deepseek-multinode"]


def kueue_objects() -> dict[str, dict[str, dict[str, Any]]]:
    by_kind: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for path in sorted(KUEUE.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            assert doc["apiVersion"] == vocab.KUEUE_API_VERSION, path
            by_kind[doc["kind"]][doc["metadata"]["name"]] = doc
    return by_kind


def instance_types() -> list[dict[str, Any]]:
    return [o for o in world_objects() if o["kind"] == vocab.KIND_INSTANCE_TYPE]


def test_the_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((KUEUE / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == sorted(p.name for p in KUEUE.glob("*.yaml") if p.name != "kustomization.yaml")
    assert "namespace" not in kustomization  # cluster-scoped objects and per-namespace LocalQueues


def test_the_admission_check_is_the_one_the_operator_answers() -> None:
    check = kueue_objects()["AdmissionCheck"][vocab.ADMISSION_CHECK_NAME]
    assert check["spec"] == {"controllerName": vocab.ADMISSION_CHECK_CONTROLLER}


def test_one_flavor_clusterqueue_and_localqueue_per_instance_type() -> None:
    objs = kueue_objects()
    topology = objs["Topology"]["gpustack-rack-host"]
    assert [level["nodeLabel"] for level in topology["spec"]["levels"]] == ["topology.gpustack.ai/rack",
                                                                           "kubernetes.io/hostname"]
    for it in instance_types():
        name = it["metadata"]["name"]
        cq = objs["ClusterQueue"][name]
        checks = [c["name"] for c in cq["spec"]["admissionChecksStrategy"]["admissionChecks"]]
        assert checks == [vocab.ADMISSION_CHECK_NAME]
        local = objs["LocalQueue"][it["status"]["entrance"]]
        assert local["metadata"]["namespace"] == "team-a" and local["spec"]["clusterQueue"] == name
        (group,) = cq["spec"]["resourceGroups"]
        (flavor_quota,) = group["flavors"]
        assert [r["name"] for r in flavor_quota["resources"]] == group["coveredResources"]
        flavor = objs["ResourceFlavor"][flavor_quota["name"]]
        assert flavor["spec"]["topologyName"] in objs["Topology"]
        assert flavor["spec"]["nodeLabels"]
        accelerator = it["spec"].get("acceleratorResource")
        quota = {r["name"]: quantity.parse(str(r["nominalQuota"])) for r in flavor_quota["resources"]}
        if accelerator:
            assert quota[accelerator] == it["status"]["accelerator"]["capacity"]
            units = it["spec"]["unitResources"]
            assert quota["cpu"] >= quantity.parse(units["cpu"]) * quota[accelerator]
            assert quota["memory"] >= quantity.parse(units["ram"]) * quota[accelerator]


def test_every_example_pod_is_covered_by_its_clusterqueue_and_a_replica_fits() -> None:
    """Kueue never reserves a Workload requesting a resource its ClusterQueue does not cover, nor
    one larger than the quota."""
    objs = kueue_objects()
    local_to_cq = {lq["metadata"]["name"]: lq["spec"]["clusterQueue"] for lq in objs["LocalQueue"].values()}
    sim = Sim(check_determinism=False)
    for name in EXAMPLE_DEPLOYMENTS:
        md = example(name)
        sim.apply(md)
        sim.sync(md["metadata"]["name"])
    levels = {level["nodeLabel"] for t in objs["Topology"].values() for level in t["spec"]["levels"]}
    demand: dict[tuple[str, str], dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    for pod in sim.pods.values():
        cq = objs["ClusterQueue"][local_to_cq[pod["metadata"]["labels"][vocab.LABEL_KUEUE_QUEUE_NAME]]]
        covered = set(cq["spec"]["resourceGroups"][0]["coveredResources"])
        group = pod["metadata"]["labels"][vocab.LABEL_KUEUE_POD_GROUP_NAME]
        containers = pod["spec"]["containers"] + pod["spec"].get("initContainers", [])
        for container in containers:
            requests = container.get("resources", {}).get("requests", {})
            assert set(requests) <= covered, (pod["metadata"]["name"], set(requests) - covered)
            for key, value in requests.items():
                demand[(cq["metadata"]["name"], group)][key] += quantity.parse(str(value))
        level = pod["metadata"]["annotations"].get(vocab.ANNOTATION_KUEUE_REQUIRED_TOPOLOGY)
        assert level is None or level in levels
    assert demand
    for (cq_name, _), wanted in demand.items():
        quota = {r["name"]: quantity.parse(str(r["nominalQuota"]))
                 for r in objs["ClusterQueue"][cq_name]["spec"]["resourceGroups"][0]["flavors"][0]["resources"]}
        for key, value in wanted.items():
            assert value <= quota[key], (cq_name, key, value, quota[key])


def test_rbac_is_exactly_what_the_service_calls() -> None:
    """app/kube/client.py: live gets for admission, Workload deletes, our check by server-side apply
    on workloads/status, the AdmissionCheck by apply (create-or-patch), core Events. Nothing else."""
    docs = list(yaml.safe_load_all((ROOT / "manifests" / "operator" / "rbac.yaml").read_text()))
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    granted = {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
               for resource in rule["resources"] for verb in rule["verbs"]}
    expected = {(vocab.GROUP, r, "get") for r in (vocab.PLURAL_INSTANCE_TYPES, vocab.PLURAL_KV_CACHE_POOL_BINDINGS,
                                                  vocab.PLURAL_MODEL_ARTIFACTS)}
    # Pools and backends are listed beside the Binding (one round trip).
    expected |= {(vocab.GROUP, r, "list") for r in (vocab.PLURAL_KV_CACHE_POOLS, vocab.PLURAL_KV_CACHE_BACKENDS)}
    expected |= {
        (vocab.GROUP, vocab.PLURAL_MODEL_DEPLOYMENTS, "get"),  # the parent, before a side effect
        (vocab.KUEUE_GROUP, "workloads", "get"),  # its uid and owners, before the delete
        (vocab.KUEUE_GROUP, "workloads", "delete"),
        # The deadlock release: spec.active on the yielding set's Workloads, and one list of the
        # deployments' holding records at the bound (docs/kueue.md#deadlock-release).
        (vocab.KUEUE_GROUP, "workloads", "patch"),
        (vocab.GROUP, vocab.PLURAL_MODEL_DEPLOYMENTS, "list"),
        (vocab.KUEUE_GROUP, "workloads/status", "patch"),
        (vocab.KUEUE_GROUP, "admissionchecks", "get"),
        (vocab.KUEUE_GROUP, "admissionchecks", "create"),
        (vocab.KUEUE_GROUP, "admissionchecks", "patch"),
        (vocab.KUEUE_GROUP, "admissionchecks/status", "patch"),
        ("", "events", "create"),
        # A ModelDeploymentScaler's server-side apply of its roles' replicas (docs/autoscaling.md#the-write),
        # the scaler confirmed before it, and its webhook's stored-scaler read and one-scaler-per-role list.
        (vocab.GROUP, vocab.PLURAL_MODEL_DEPLOYMENTS, "patch"),
        (vocab.GROUP, vocab.PLURAL_MODEL_DEPLOYMENT_SCALERS, "get"),
        (vocab.GROUP, vocab.PLURAL_MODEL_DEPLOYMENT_SCALERS, "list"),
        # Parking: a scaler's park and wake (its own spec.replicas) and the idleness reader's
        # last-request annotation; the reader lists the serving leaders it scrapes; the endpoint
        # switch lists the activator Service's EndpointSlices (docs/scale-to-zero.md).
        (vocab.GROUP, vocab.PLURAL_MODEL_DEPLOYMENT_SCALERS, "patch"),
        ("", "pods", "list"),
        ("discovery.k8s.io", "endpointslices", "list"),
        # The ready-on-composition follow-ups: one watch of Workloads, a GET of each Pod of an
        # earlier incarnation until it is gone (docs/kueue.md#ready-on-composition).
        (vocab.KUEUE_GROUP, "workloads", "list"),
        (vocab.KUEUE_GROUP, "workloads", "watch"),
        ("", "pods", "get"),
    }
    assert granted == expected


def test_the_client_makes_only_those_calls() -> None:
    source = (ROOT / "app" / "kube" / "client.py").read_text()
    calls = sorted({line.split("self.client.")[1].split("(")[0] for line in source.splitlines()
                    if "self.client." in line and "(" in line.split("self.client.")[1]})
    # The Workload delete goes through lightkube's request builder (it carries a DeleteOptions body).
    assert calls == ["close", "create", "get", "list", "patch", "watch"]
    assert source.count("self.client._client") == 1 and '"delete", res=WorkloadRes' in source
    assert Path(ROOT / "app" / "kube" / "client.py").exists()

"""The activator in the install (docs/scale-to-zero.md#the-activator): the kustomize base renders its
Deployment (the operator's image, its own command, 2 replicas, hardened, a grace period above the
longest hold), its PodDisruptionBudget and the RBAC it needs, and nothing broader."""

from __future__ import annotations

from tests.unit.test_install_manifests import ROOT, kustomize


def _objects() -> dict[tuple[str, str], dict]:
    return {(o["kind"], o["metadata"]["name"]): o for o in kustomize(ROOT / "manifests")}


def test_the_activator_runs_two_hardened_replicas_of_the_operator_image_with_a_budget() -> None:
    objects = _objects()
    activator = objects["Deployment", "modeldeployment-activator"]
    operator = objects["Deployment", "modeldeployment-operator"]
    assert activator["spec"]["replicas"] >= 2
    pod = activator["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == operator["spec"]["template"]["spec"]["containers"][0]["image"]
    assert container["args"][0] == "activator"
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                            "capabilities": {"drop": ["ALL"]}}
    env = {e["name"]: e["value"] for e in container["env"]}
    assert pod["terminationGracePeriodSeconds"] > int(env["MODELDEPLOYMENT_ACTIVATOR_MAX_HOLD_SECONDS"])
    budget = objects["PodDisruptionBudget", "modeldeployment-activator"]
    assert budget["spec"]["maxUnavailable"] == 1


def test_the_activator_writes_only_scalers_and_reads_the_rest() -> None:
    role = _objects()["ClusterRole", "modeldeployment-activator"]
    writes = {(g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
              if set(rule["verbs"]) - {"get", "list", "watch"}}
    assert writes == {("worker.gpustack.ai", "modeldeploymentscalers")}

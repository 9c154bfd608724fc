"""ModelDeploymentScaler: the pass (status, write, Events) and its admission rules, without a cluster."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from app import vocab
from app.admission import scaler as rules
from app.api.scaler import ModelDeploymentScaler, scaler_hook_request, target_of
from app.api.v1 import ModelDeployment
from app.control import scaler as scaling
from app.control.intents import ApplyRoleReplicas, RecordEvent
from app.kube.executor import ParentMismatch, ParentRef
from app.kube.scaler_executor import ScalerExecutor, scaler_write_problem
from tests.conftest import example

NOW = "2026-12-01T00:00:00Z"
SETTINGS = scaling.ScalerSettings()


def deployment(prefill: int = 1, decode: int = 2, *, ready: tuple[int, int] | None = None,
               admitted: tuple[int, int] | None = None, generation: int = 3, decode_size: int = 1) -> dict[str, Any]:
    """pd-demo (examples/deployments/pd-pair.yaml) with the given replicas and observed status."""
    md = copy.deepcopy(example("pd-pair"))
    md["metadata"].update(uid="md-uid", generation=generation)
    md["spec"]["roles"][1]["size"] = decode_size
    md["spec"]["roles"][0]["replicas"] = prefill
    md["spec"]["roles"][1]["replicas"] = decode
    ready = ready if ready is not None else (prefill, decode)
    admitted = admitted if admitted is not None else ready
    md["status"] = {"observedGeneration": generation, "roles": [
        {"name": "prefill", "kind": "Prefill", "desired": prefill, "ready": ready[0], "quotaReserved": admitted[0],
         "admitted": admitted[0]},
        {"name": "decode", "kind": "Decode", "desired": decode, "ready": ready[1], "quotaReserved": admitted[1],
         "admitted": admitted[1]}]}
    return md


def scaler_object(replicas: int = 1, *, roles: tuple[tuple[str, int], ...] = (("prefill", 1), ("decode", 2)),
                  status: dict[str, Any] | None = None, name: str = "pd", target: str = "pd-demo") -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": vocab.API_VERSION, "kind": vocab.KIND_MODEL_DEPLOYMENT_SCALER,
        "metadata": {"name": name, "namespace": "team-a", "uid": f"{name}-uid", "generation": 1},
        "spec": {"deploymentRef": {"name": target}, "roles": [{"name": n, "ratio": r} for n, r in roles],
                 "replicas": replicas}}
    if status is not None:
        obj["status"] = status
    return obj


def scaler(replicas: int = 1, **kwargs: Any) -> ModelDeploymentScaler:
    return ModelDeploymentScaler.model_validate(scaler_object(replicas, **kwargs))


def plan(s: ModelDeploymentScaler, target: dict[str, Any] | None, settings: scaling.ScalerSettings, *,
         now: str) -> scaling.ScalerResult:
    """One pass of the scaler's planner on `s` and its target deployment as the request carries it."""
    return scaling.plan(scaler_hook_request(s, target), settings, now=now)


def conditions(result: scaling.ScalerResult) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in result.status["conditions"]}


def writes(result: scaling.ScalerResult) -> list[ApplyRoleReplicas]:
    return [i for i in result.intents if isinstance(i, ApplyRoleReplicas)]


def events(result: scaling.ScalerResult) -> list[RecordEvent]:
    return [i for i in result.intents if isinstance(i, RecordEvent)]


# --- the pass --------------------------------------------------------------------------------------


def test_a_step_writes_ratio_times_units_on_every_listed_role_and_nothing_else():
    result = plan(scaler(3), deployment(1, 2), SETTINGS, now=NOW)
    (write,) = writes(result)
    assert write == ApplyRoleReplicas("team-a", "pd-demo", "md-uid", (("prefill", 3), ("decode", 6)))
    assert conditions(result)["Active"]["status"] == "True"
    assert [e.reason for e in events(result)] == [vocab.EVENT_SCALED]
    assert all(e.involved_kind == vocab.KIND_MODEL_DEPLOYMENT_SCALER for e in events(result))


def test_status_counts_whole_units_declared_and_ready():
    result = plan(scaler(2), deployment(2, 3, ready=(2, 1)), SETTINGS, now=NOW)
    status = result.status
    assert status["replicas"] == 1  # min(2 // 1, 3 // 2)
    assert status["readyReplicas"] == 0  # min(2 // 1, 1 // 2)
    assert status["roles"] == [{"name": "prefill", "desired": 2, "declared": 2, "ready": 2},
                               {"name": "decode", "desired": 4, "declared": 3, "ready": 1}]
    assert status["roleRatios"] == "prefill×1,decode×2"


def test_the_selector_picks_the_roles_leader_pods_for_hpa():
    status = plan(scaler(1), deployment(), SETTINGS, now=NOW).status
    assert status["selector"] == ("app.kubernetes.io/name=model-deployment,app.kubernetes.io/instance=pd-demo,"
                                  "app.kubernetes.io/component in (decode,prefill),"
                                  "modeldeployment.gpustack.ai/member-index=0")
    single = plan(scaler(1, roles=(("decode", 1),)), deployment(), SETTINGS, now=NOW).status
    assert "app.kubernetes.io/component=decode," in single["selector"]


def test_a_deployment_at_the_desired_replicas_is_left_alone_and_an_idle_pass_is_byte_identical():
    first = plan(scaler(1), deployment(1, 2), SETTINGS, now=NOW)
    assert not writes(first) and not events(first)
    again = plan(scaler(1, status=first.status), deployment(1, 2), SETTINGS, now="2026-12-01T01:00:00Z")
    assert again.status == first.status


def test_no_deployment_no_write_and_says_so():
    result = plan(scaler(2), None, SETTINGS, now=NOW)
    active = conditions(result)["Active"]
    assert (active["status"], active["reason"]) == ("False", vocab.REASON_DEPLOYMENT_NOT_FOUND)
    assert "team-a/pd-demo" in active["message"]
    assert not result.intents
    assert result.status["replicas"] == 0 and result.status["selector"]


def test_a_role_the_deployment_lacks_blocks_the_whole_write():
    result = plan(scaler(2, roles=(("prefill", 1), ("decoder", 2))), deployment(), SETTINGS, now=NOW)
    active = conditions(result)["Active"]
    assert (active["status"], active["reason"]) == ("False", vocab.REASON_ROLE_NOT_FOUND)
    assert "decoder" in active["message"] and "prefill, decode" in active["message"]
    assert not writes(result)


def test_a_step_past_the_pod_bound_is_refused_not_written():
    # Decoders of size 2, a 1:1 ratio; 2,048 Pods at most; 700 units = 700 + 700 × 2 Pods.
    result = plan(scaler(700, roles=(("prefill", 1), ("decode", 1))), deployment(decode_size=2), SETTINGS,
                          now=NOW)
    active = conditions(result)["Active"]
    assert (active["status"], active["reason"]) == ("False", vocab.REASON_SCALE_REFUSED)
    assert "2100 Pods" in active["message"] and "at most 682 units" in active["message"]
    assert not writes(result)
    assert [e.reason for e in events(result)] == [vocab.EVENT_SCALE_REFUSED]
    assert result.resync_after


def test_a_role_past_its_bound_is_refused():
    result = plan(scaler(600, roles=(("decode", 2),)), deployment(), SETTINGS, now=NOW)
    assert "1200 replicas on role decode" in conditions(result)["Active"]["message"]
    assert not writes(result)


def test_a_hand_edit_is_set_back_and_reported_naming_who_made_it():
    synced = plan(scaler(2), deployment(2, 4), SETTINGS, now=NOW).status
    edited = deployment(2, 7)
    edited["metadata"]["managedFields"] = [
        {"manager": vocab.SCALER_FIELD_MANAGER, "operation": "Apply",
         "fieldsV1": {"f:spec": {"f:roles": {'k:{"name":"prefill"}': {"f:replicas": {}}}}}},
        {"manager": "kubectl-edit", "operation": "Update",
         "fieldsV1": {"f:spec": {"f:roles": {'k:{"name":"decode"}': {"f:replicas": {}}}}}},
    ]
    result = plan(scaler(2, status=synced), edited, SETTINGS, now=NOW)
    active = conditions(result)["Active"]
    assert (active["status"], active["reason"]) == ("False", vocab.REASON_CONFLICT)
    assert "roles[decode].replicas is 7 (set by kubectl-edit), not 4" in active["message"]
    assert writes(result)[0].replicas == (("prefill", 2), ("decode", 4))
    assert [e.reason for e in events(result)] == [vocab.EVENT_REPLICAS_CONFLICT]


def test_a_new_step_is_not_mistaken_for_a_hand_edit():
    synced = plan(scaler(1), deployment(1, 2), SETTINGS, now=NOW).status
    result = plan(scaler(3, status=synced), deployment(1, 2), SETTINGS, now=NOW)
    assert conditions(result)["Active"]["reason"] == vocab.REASON_SCALER_SYNCED


def test_fields_another_manager_owns_are_taken_over_even_at_the_same_value():
    adopted = deployment(1, 2)
    adopted["metadata"]["managedFields"] = [{"manager": "kubectl-client-side-apply", "operation": "Update", "fieldsV1": {
        "f:spec": {"f:roles": {'k:{"name":"prefill"}': {"f:replicas": {}}, 'k:{"name":"decode"}': {"f:replicas": {}}}}}}]
    assert writes(plan(scaler(1), adopted, SETTINGS, now=NOW))


def test_quota_pending_counts_the_new_replicas_that_wait():
    # A step 1 -> 2 units: prefill 1 -> 2, decode 2 -> 4; one decoder admitted, the rest queued.
    result = plan(scaler(2), deployment(2, 4, ready=(1, 2), admitted=(1, 3)), SETTINGS, now=NOW)
    quota = conditions(result)[vocab.COND_QUOTA_RESERVED]
    assert (quota["status"], quota["reason"]) == ("False", vocab.REASON_QUOTA_PENDING)
    assert quota["message"].startswith("2 of 3 new replicas wait for quota (prefill 1, decode 1)")


def test_quota_reserved_when_every_replica_is_admitted():
    quota = conditions(plan(scaler(1), deployment(1, 2), SETTINGS, now=NOW))[vocab.COND_QUOTA_RESERVED]
    assert (quota["status"], quota["reason"]) == ("True", vocab.REASON_RESERVED)


def test_status_values_read_back_are_bounded():
    md = deployment(1, 2)
    md["status"]["roles"][0]["ready"] = 10**12
    md["status"]["roles"][1]["ready"] = "many"
    status = plan(scaler(1), md, SETTINGS, now=NOW).status
    assert [r["ready"] for r in status["roles"]] == [1, 0]


def test_customize_relates_only_the_target_deployment():
    assert scaling.customize(scaler()) == {"relatedResources": [{
        "apiVersion": vocab.API_VERSION, "resource": vocab.PLURAL_MODEL_DEPLOYMENTS, "namespace": "team-a",
        "names": ["pd-demo"]}]}


def test_only_the_named_deployment_in_the_scalers_namespace_is_read():
    related = {vocab.RELATED_MODEL_DEPLOYMENTS: {"team-b/pd-demo": deployment(), "team-a/other": deployment()}}
    assert target_of(scaler(), related) is None


# --- the executor's checks (docs/autoscaling.md#trust) ----------------------------------------------


class FakeKube:
    def __init__(self, live: dict[str, Any] | None, refusal: str | None = None) -> None:
        self.live = live
        self.refusal = refusal
        self.applied: list[tuple[Any, ...]] = []
        self.events: list[dict[str, Any]] = []

    async def scaler(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.live

    async def apply_role_replicas(self, namespace: str, name: str, uid: str, replicas: Any) -> str | None:
        self.applied.append((namespace, name, uid, replicas))
        return self.refusal

    async def create_event(self, body: dict[str, Any]) -> None:
        self.events.append(body)


PARENT = ParentRef("team-a", "pd", "pd-uid", kind=vocab.KIND_MODEL_DEPLOYMENT_SCALER)


def test_the_write_runs_only_when_the_live_scaler_asks_for_exactly_it():
    intent = ApplyRoleReplicas("team-a", "pd-demo", "md-uid", (("prefill", 3), ("decode", 6)))
    live = scaler_object(3)
    assert scaler_write_problem(intent, PARENT, live) is None
    assert "not the live scaler's" in scaler_write_problem(intent, PARENT, scaler_object(2))
    other = ApplyRoleReplicas("team-a", "victim", "x", intent.replicas)
    assert "not the one the scaler names" in scaler_write_problem(other, PARENT, live)
    elsewhere = ApplyRoleReplicas("team-b", "pd-demo", "x", intent.replicas)
    assert "namespace" in scaler_write_problem(elsewhere, PARENT, live)


def test_a_forged_pass_writes_nothing():
    result = plan(scaler(3), deployment(), SETTINGS, now=NOW)
    kube = FakeKube(live=None)
    with pytest.raises(ParentMismatch):
        asyncio.run(ScalerExecutor(kube).run(PARENT, result.intents))  # type: ignore[arg-type]
    kube = FakeKube(live={**scaler_object(3), "metadata": {"name": "pd", "namespace": "team-a", "uid": "other"}})
    with pytest.raises(ParentMismatch):
        asyncio.run(ScalerExecutor(kube).run(PARENT, result.intents))  # type: ignore[arg-type]
    assert not kube.applied and not kube.events


def test_the_executor_writes_then_records_the_events_on_the_scaler():
    result = plan(scaler(3), deployment(), SETTINGS, now=NOW)
    kube = FakeKube(live=scaler_object(3))
    assert asyncio.run(ScalerExecutor(kube).run(PARENT, result.intents)) is None  # type: ignore[arg-type]
    assert kube.applied == [("team-a", "pd-demo", "md-uid", (("prefill", 3), ("decode", 6)))]
    assert [e["involvedObject"]["kind"] for e in kube.events] == [vocab.KIND_MODEL_DEPLOYMENT_SCALER]


def test_a_refused_write_is_reported_as_scale_refused():
    result = plan(scaler(3), deployment(), SETTINGS, now=NOW)
    kube = FakeKube(live=scaler_object(3), refusal="admission webhook denied: spec.roles: 3000 Pods")
    refusal = asyncio.run(ScalerExecutor(kube).run(PARENT, result.intents))  # type: ignore[arg-type]
    assert refusal is not None
    reported = scaling.refused(result, f"the API server refused it: {refusal}", NOW)
    active = conditions(reported)["Active"]
    assert (active["status"], active["reason"]) == ("False", vocab.REASON_SCALE_REFUSED)
    assert "3000 Pods" in active["message"]
    assert not writes(reported)


# --- admission ---------------------------------------------------------------------------------------


def subject(replicas: int = 1, *, old: int | None = None, md: dict[str, Any] | None = None,
            others: tuple[dict[str, Any], ...] = (), **kwargs: Any) -> rules.ScalerSubject:
    return rules.ScalerSubject(
        scaler=scaler(replicas, **kwargs),
        old=scaler(old, **kwargs) if old is not None else None,
        deployment=ModelDeployment.model_validate(md) if md is not None else None,
        others=[ModelDeploymentScaler.model_validate(o) for o in others])


def paths(refusals: list[Any]) -> list[str]:
    return [r.path for r in refusals]


def test_a_scaler_for_an_existing_deployment_within_bounds_is_admitted():
    assert rules.judge(subject(2, md=deployment())) == []


def test_a_scaler_before_its_deployment_is_admitted():
    assert rules.judge(subject(2)) == []


def test_frozen_fields_are_refused_naming_each():
    old = rules.ScalerSubject(scaler=scaler(1), old=scaler(1, roles=(("prefill", 1), ("decode", 3)), target="other"))
    refusals = rules.judge(old)
    assert paths(refusals) == ["spec.deploymentRef.name", "spec.roles"]
    assert "decode×3" in refusals[1].problem and "delete this scaler" in refusals[1].remedy


def test_a_role_named_twice_is_refused():
    refusals = rules.judge(subject(1, roles=(("decode", 1), ("decode", 2))))
    assert [r.problem for r in refusals] == ["role 'decode' is listed 2 times"]


def test_a_role_another_scaler_governs_is_refused_naming_it():
    other = scaler_object(1, roles=(("decode", 2),), name="decode-hpa")
    refusals = rules.judge(subject(1, md=deployment(), others=(other, scaler_object(1))))
    assert paths(refusals) == ["spec.roles[1].name"]
    assert "ModelDeploymentScaler team-a/decode-hpa" in refusals[0].problem


def test_a_scaler_of_another_deployment_does_not_conflict():
    other = scaler_object(1, name="x", target="another")
    assert rules.judge(subject(1, md=deployment(), others=(other,))) == []


def test_a_role_the_deployment_lacks_is_refused():
    refusals = rules.judge(subject(1, md=deployment(), roles=(("decoder", 1),)))
    assert paths(refusals) == ["spec.roles[0].name"]
    assert "(its roles: prefill, decode)" in refusals[0].problem


def test_bounds_are_refused_with_the_units_that_fit():
    role = rules.judge(subject(600, roles=(("decode", 2),)))
    assert paths(role) == ["spec.replicas"] and "at most 512 units" in role[0].remedy
    pods = rules.judge(subject(700, md=deployment(decode_size=2), roles=(("prefill", 1), ("decode", 1))))
    assert paths(pods) == ["spec.replicas"] and "2100 Pods" in pods[0].problem and "682 units" in pods[0].remedy


def review_body(obj: dict[str, Any], *, operation: str = "CREATE", old: dict[str, Any] | None = None,
                sub_resource: str = "") -> dict[str, Any]:
    request: dict[str, Any] = {"uid": "u1", "operation": operation, "namespace": "team-a",
                               "name": obj["metadata"]["name"], "object": obj, "oldObject": old,
                               "kind": {"group": "autoscaling" if sub_resource else vocab.GROUP,
                                        "version": "v1", "kind": "Scale" if sub_resource else
                                        vocab.KIND_MODEL_DEPLOYMENT_SCALER}}
    if sub_resource:
        request["subResource"] = sub_resource
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def sources(md: dict[str, Any] | None, scalers: list[dict[str, Any]], stored: dict[str, Any] | None = None):
    async def world(namespace: str, name: str):
        return md, scalers

    async def stored_scaler(namespace: str, name: str):
        return stored

    return world, stored_scaler


def test_a_scale_write_past_a_bound_is_refused_where_it_is_made():
    """HPA and kubectl scale write /scale: the review holds a Scale; the stored scaler gives the roles."""
    scale = {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "pd", "namespace": "team-a"},
             "spec": {"replicas": 700}}
    one_to_one = scaler_object(1, roles=(("prefill", 1), ("decode", 1)))
    world, stored = sources(deployment(decode_size=2), [one_to_one], stored=one_to_one)
    answer = asyncio.run(rules.validate_scaler_review(review_body(scale, operation="UPDATE", old=scale,
                                                                  sub_resource="scale"), world, stored, max_pods=2048))
    response = answer["response"]
    assert response["allowed"] is False and response["status"]["code"] == 403
    assert "2100 Pods" in response["status"]["message"]
    scale["spec"]["replicas"] = 4
    answer = asyncio.run(rules.validate_scaler_review(review_body(scale, operation="UPDATE", old=scale,
                                                                  sub_resource="scale"), world, stored, max_pods=2048))
    assert answer["response"]["allowed"] is True


def test_the_review_fails_closed_when_the_cluster_cannot_be_read():
    from app.kube.client import ClusterUnreachable

    async def world(namespace: str, name: str):
        raise ClusterUnreachable("connection refused")

    answer = asyncio.run(rules.validate_scaler_review(review_body(scaler_object()), world, sources(None, [])[1],
                                                      max_pods=2048))
    assert answer["response"]["status"]["code"] == 503


def test_the_review_reports_every_refusal_at_once():
    obj = scaler_object(600, roles=(("decode", 2), ("decode", 1)))
    world, stored = sources(deployment(), [scaler_object(1, roles=(("decode", 1),), name="other")])
    answer = asyncio.run(rules.validate_scaler_review(review_body(obj), world, stored, max_pods=2048))
    message = answer["response"]["status"]["message"]
    assert message.startswith("4 problems:")
    assert "listed 2 times" in message and "decode-hpa" not in message and "team-a/other" in message


# --- offline `modeldeployment validate` ---------------------------------------------------------------


def _validate(tmp_path, *docs: dict[str, Any]) -> tuple[int, str]:
    import io

    import yaml

    from app.admission.offline import validate_offline
    from tests.conftest import EXAMPLES

    path = tmp_path / "file.yaml"
    path.write_text(yaml.safe_dump_all(list(docs)))
    out, err = io.StringIO(), io.StringIO()
    code = validate_offline(path, EXAMPLES / "world", None, kv_cache_dtype_owned=True, out=out, err=err)
    return code, out.getvalue() + err.getvalue()


def test_validate_accepts_the_example_scaler_alone_and_beside_its_deployment(tmp_path):
    from app.world import load_yaml_objects
    from tests.conftest import EXAMPLES

    (example_scaler,) = load_yaml_objects(EXAMPLES / "autoscaling" / "pd-scaler.yaml")
    assert _validate(tmp_path, example_scaler) == (0, "ModelDeploymentScaler team-a/pd-demo: allowed\n")
    code, text = _validate(tmp_path, example("pd-pair"), example_scaler)
    assert code == 0 and "team-a/pd-demo: allowed" in text and "refused" not in text


def test_validate_judges_a_scaler_against_the_deployment_in_the_same_file(tmp_path):
    bad = scaler_object(2, roles=(("prefill", 1), ("decoder", 1)))
    code, text = _validate(tmp_path, example("pd-pair"), bad)
    assert code == 1
    assert "ModelDeploymentScaler team-a/pd: refused" in text
    assert "spec.roles[1].name: ModelDeployment pd-demo declares no role 'decoder'" in text


def test_validate_reports_a_scaler_that_does_not_match_the_schema(tmp_path):
    broken = scaler_object(-1)
    code, text = _validate(tmp_path, broken)
    assert code == 1 and "spec.replicas" in text


def test_the_autoscaling_examples_target_the_example_scaler_within_its_bounds():
    import kubernetes_validate

    from app.world import load_yaml_objects
    from tests.conftest import EXAMPLES

    folder = EXAMPLES / "autoscaling"
    (example_scaler,) = load_yaml_objects(folder / "pd-scaler.yaml")
    parsed = ModelDeploymentScaler.model_validate(example_scaler)
    (hpa,) = load_yaml_objects(folder / "hpa.yaml")
    (keda,) = load_yaml_objects(folder / "keda-scaledobject.yaml")
    kubernetes_validate.validate(hpa, "1.33.0", strict=True)
    for target in (hpa["spec"]["scaleTargetRef"], keda["spec"]["scaleTargetRef"]):
        assert target == {"apiVersion": vocab.API_VERSION, "kind": vocab.KIND_MODEL_DEPLOYMENT_SCALER,
                          "name": parsed.metadata.name}
    most = max(r.ratio for r in parsed.spec.roles) * max(hpa["spec"]["maxReplicas"], keda["spec"]["maxReplicaCount"])
    assert most <= vocab.MAX_ROLE_REPLICAS and keda["spec"]["minReplicaCount"] >= 1
    query = keda["spec"]["triggers"][0]["metadata"]["query"]
    assert query.startswith("sum(vllm:num_requests_waiting{")


def test_a_schema_refusal_names_the_field_as_users_write_it():
    """The scaler's admission formats pydantic's locations as the ModelDeployment's does
    (`spec.roles[0].ratio`, not `spec.roles.0.ratio`)."""
    obj = scaler_object(1)
    obj["spec"]["roles"][0]["ratio"] = "many"
    scaler_obj, refusals = rules.parse_refusals(obj)
    assert scaler_obj is None
    assert [r.path for r in refusals] == ["spec.roles[0].ratio"]

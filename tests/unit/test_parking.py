"""Parking and waking (docs/scale-to-zero.md): zero replicas, the scaler's scaleToZero rules, the
park and wake decisions, and the deployment's Idle status, without a cluster."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app import durations, vocab
from app.admission import scaler as rules
from app.api.crd import model_deployment_crd
from app.api.scaler import ModelDeploymentScaler
from app.api.v1 import ModelDeployment
from app.control import parking, status
from app.control.intents import SetScalerUnits
from app.kube.executor import ParentRef
from app.kube.scaler_executor import scaler_units_problem
from tests.unit.test_scaler import SETTINGS, deployment, events, plan, scaler_object, subject, writes

NOW = "2026-12-01T01:00:00Z"
TEN_MIN_AGO = "2026-12-01T00:50:00Z"
TWENTY_MIN_AGO = "2026-12-01T00:40:00Z"


def parking_scaler(replicas: int = 1, *, annotations: dict[str, str] | None = None,
                   status_: dict[str, Any] | None = None, **stz: Any) -> ModelDeploymentScaler:
    obj = scaler_object(replicas, status=status_)
    obj["spec"]["scaleToZero"] = {"idleAfter": "15m", **stz}
    obj["metadata"]["annotations"] = annotations or {}
    return ModelDeploymentScaler.model_validate(obj)


# --- durations ------------------------------------------------------------------------------------


@pytest.mark.parametrize("text,seconds", [("90s", 90), ("15m", 900), ("1h30m", 5400), ("2h", 7200)])
def test_a_duration_reads_as_kubectl_writes_it(text: str, seconds: int) -> None:
    assert durations.seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "15", "15 minutes", "1d", "-5m", "1.5h"])
def test_what_is_not_a_duration_reads_as_none(text: str) -> None:
    assert durations.seconds(text) is None


# --- the deployment: zero replicas, Idle, Ready=False ScaledToZero --------------------------------


def test_a_deployment_whose_every_role_is_at_zero_is_parked() -> None:
    assert status.parked(ModelDeployment.model_validate(deployment(0, 0)))
    assert not status.parked(ModelDeployment.model_validate(deployment(1, 0)))


def test_a_parked_deployment_is_idle_and_not_ready_because_scaled_to_zero() -> None:
    md = ModelDeployment.model_validate(deployment(0, 0))
    phase, message = status._phase(md, False, True, {})
    assert phase == vocab.PHASE_IDLE
    ready = status.ready(phase, message)
    assert (ready.type, ready.status, ready.reason) == ("Ready", "False", vocab.REASON_SCALED_TO_ZERO)


def test_ready_is_true_only_when_every_declared_replica_is() -> None:
    assert status.ready(vocab.PHASE_READY, "m").status == "True"
    assert status.ready(vocab.PHASE_STARTING, "m").reason == vocab.REASON_NOT_READY


def test_the_crd_refuses_a_pair_with_one_role_parked_in_cel() -> None:
    roles = model_deployment_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"]["roles"]
    rules_ = [v["rule"] for v in roles["x-kubernetes-validations"]]
    assert any("Prefill" in r and "replicas == 0" in r for r in rules_)
    assert roles["items"]["properties"]["replicas"]["minimum"] == 0


# --- the scaler's admission -------------------------------------------------------------------------


def _stz_subject(replicas: int = 1, md: dict[str, Any] | None = None, roles: Any = None,
                 **stz: Any) -> rules.ScalerSubject:
    obj = scaler_object(replicas, **({"roles": roles} if roles else {}))
    obj["spec"]["scaleToZero"] = {"idleAfter": "15m", **stz}
    return rules.ScalerSubject(scaler=ModelDeploymentScaler.model_validate(obj), old=None,
                               deployment=ModelDeployment.model_validate(md) if md else None, others=[])


def test_a_parking_scaler_within_bounds_is_admitted() -> None:
    assert rules.judge(_stz_subject(md=deployment())) == []


def test_an_idle_after_under_a_minute_is_refused_with_its_path() -> None:
    refusals = rules.judge(_stz_subject(idleAfter="30s"))
    assert [r.path for r in refusals] == ["spec.scaleToZero.idleAfter"] and "60s or more" in refusals[0].remedy


def test_a_wake_timeout_out_of_bounds_is_refused_with_its_path() -> None:
    assert [r.path for r in rules.judge(_stz_subject(wakeTimeout="30s"))] == ["spec.scaleToZero.wakeTimeout"]
    assert [r.path for r in rules.judge(_stz_subject(wakeTimeout="25h"))] == ["spec.scaleToZero.wakeTimeout"]


def test_a_scaler_that_parks_one_role_of_a_pair_is_refused() -> None:
    refusals = rules.pair_split(subject(0, md=deployment(), roles=(("prefill", 1),)))
    assert [r.path for r in refusals] == ["spec.roles[0].name"]
    assert "'decode'" in refusals[0].remedy


def test_a_scaler_that_cannot_park_may_govern_one_role_of_a_pair() -> None:
    assert rules.pair_split(subject(1, md=deployment(), roles=(("prefill", 1),))) == []


def test_scale_to_zero_governs_every_role_of_the_deployment() -> None:
    refusals = rules.parks_part(_stz_subject(md=deployment(), roles=(("prefill", 1), ("decode", 2))))
    assert refusals == []
    obj = scaler_object(1, roles=(("prefill", 1),))
    obj["spec"]["scaleToZero"] = {"idleAfter": "15m"}
    s = rules.ScalerSubject(scaler=ModelDeploymentScaler.model_validate(obj), old=None,
                            deployment=ModelDeployment.model_validate(deployment()), others=[])
    assert [r.path for r in rules.parks_part(s)] == ["spec.scaleToZero"]


# --- the park and wake rules ---------------------------------------------------------------------------


def test_idleness_is_the_latest_of_the_engines_the_activator_and_the_status() -> None:
    s = parking_scaler(annotations={vocab.ANNOTATION_LAST_REQUEST: TWENTY_MIN_AGO,
                                    vocab.ANNOTATION_WAKE_REQUESTED: TEN_MIN_AGO})
    assert parking.last_activity(s, NOW, 1) == TEN_MIN_AGO


def test_a_scaler_that_saw_no_request_counts_from_its_first_pass() -> None:
    assert parking.last_activity(parking_scaler(), NOW, 1) == NOW


def test_a_deployment_still_starting_or_waking_is_not_idle() -> None:
    # Units declared, none Ready (a long model load, a wake queued for quota): each pass counts as
    # activity, so idleAfter counts from the first Ready unit and the pass never parks it.
    s = parking_scaler(2, annotations={vocab.ANNOTATION_LAST_REQUEST: TWENTY_MIN_AGO})
    assert parking.last_activity(s, NOW, 0) == NOW
    assert parking.decide(s, "pd-demo", parking.last_activity(s, NOW, 0), None, NOW).units is None
    starting = plan(s, deployment(2, 4, ready=(0, 0)), SETTINGS, now=NOW)
    assert starting.status["lastRequestTime"] == NOW
    assert not [i for i in starting.intents if isinstance(i, SetScalerUnits)]


def test_idle_for_idle_after_parks() -> None:
    s = parking_scaler(2, annotations={vocab.ANNOTATION_LAST_REQUEST: TWENTY_MIN_AGO})
    decision = parking.decide(s, "pd-demo", parking.last_activity(s, NOW, 1), None, NOW)
    assert decision.units == 0 and decision.reason == vocab.EVENT_PARKED and "idleAfter 15m" in decision.message


def test_a_request_the_activator_holds_keeps_the_deployment_from_parking() -> None:
    s = parking_scaler(2, annotations={vocab.ANNOTATION_LAST_REQUEST: TWENTY_MIN_AGO,
                                       vocab.ANNOTATION_WAKE_REQUESTED: TEN_MIN_AGO})
    assert parking.decide(s, "pd-demo", parking.last_activity(s, NOW, 1), None, NOW).units is None
    assert parking.seconds_until_idle(s, TEN_MIN_AGO, NOW) == 300


def test_a_wake_request_after_the_park_wakes_to_wake_replicas() -> None:
    s = parking_scaler(0, wakeReplicas=3, annotations={vocab.ANNOTATION_WAKE_REQUESTED: TEN_MIN_AGO},
                       status_={"parkedSince": TWENTY_MIN_AGO})
    since = parking.parked_since(s, NOW)
    assert since == TWENTY_MIN_AGO
    decision = parking.decide(s, "pd-demo", TEN_MIN_AGO, since, NOW)
    assert decision.units == 3 and decision.reason == vocab.EVENT_WOKEN


def test_a_wake_request_older_than_the_park_was_answered_already() -> None:
    s = parking_scaler(0, annotations={vocab.ANNOTATION_WAKE_REQUESTED: TWENTY_MIN_AGO},
                       status_={"parkedSince": TEN_MIN_AGO})
    assert not parking.wake_due(s, parking.parked_since(s, NOW))


def test_a_scaler_without_scale_to_zero_never_parks_on_its_own() -> None:
    s = ModelDeploymentScaler.model_validate(scaler_object(2))
    assert parking.decide(s, "pd-demo", TWENTY_MIN_AGO, None, NOW).units is None


def test_the_state_reads_parked_waking_serving() -> None:
    assert parking.state(parking_scaler(0), 0) == parking.STATE_PARKED
    assert parking.state(parking_scaler(1), 0) == parking.STATE_WAKING
    assert parking.state(parking_scaler(1), 1) == parking.STATE_SERVING


# --- the pass ------------------------------------------------------------------------------------------


def test_the_park_pass_sets_the_scalers_own_units_and_leaves_the_roles_to_the_next_pass() -> None:
    s = parking_scaler(1, annotations={vocab.ANNOTATION_LAST_REQUEST: TWENTY_MIN_AGO})
    result = plan(s, deployment(), SETTINGS, now=NOW)
    units = [i for i in result.intents if isinstance(i, SetScalerUnits)]
    assert units == [SetScalerUnits("team-a", "pd", "pd-uid", current=1, units=0)]
    assert not writes(result)
    assert [e.reason for e in events(result)] == [vocab.EVENT_PARKED]
    assert result.status["parkedSince"] == NOW and result.status["lastRequestTime"] == TWENTY_MIN_AGO


def test_a_parked_scaler_sets_every_role_to_zero_and_reports_parked() -> None:
    s = parking_scaler(0, status_={"parkedSince": TEN_MIN_AGO})
    result = plan(s, deployment(1, 2), SETTINGS, now=NOW)
    assert [w.replicas for w in writes(result)] == [(("prefill", 0), ("decode", 0))]
    assert result.status["phase"] == parking.STATE_PARKED and result.status["parkedSince"] == TEN_MIN_AGO
    parked = plan(s, deployment(0, 0), SETTINGS, now=NOW)
    quota = {c["type"]: c for c in parked.status["conditions"]}[vocab.COND_SCALER_QUOTA_RESERVED]
    assert quota["reason"] == vocab.REASON_PARKED


def test_a_serving_scaler_asks_to_be_called_at_the_park_deadline() -> None:
    s = parking_scaler(1, annotations={vocab.ANNOTATION_LAST_REQUEST: TEN_MIN_AGO})
    assert plan(s, deployment(), SETTINGS, now=NOW).resync_after == 300


def test_a_park_or_wake_belongs_to_the_parent_scaler_only() -> None:
    parent = ParentRef("team-a", "pd", "pd-uid", kind=vocab.KIND_MODEL_DEPLOYMENT_SCALER)
    assert scaler_units_problem(SetScalerUnits("team-a", "pd", "pd-uid", 1, 0), parent) is None
    assert scaler_units_problem(SetScalerUnits("team-a", "other", "x", 1, 0), parent) is not None


def test_a_deployment_example_with_a_parked_pair_validates() -> None:
    md = copy.deepcopy(deployment(0, 0))
    assert ModelDeployment.model_validate(md).spec.roles[0].replicas == 0


# --- the examples (examples/scale-to-zero/) ----------------------------------------------------------


def test_the_scale_to_zero_examples_validate_and_target_their_parking_scaler() -> None:
    import kubernetes_validate

    from app.world import load_yaml_objects
    from tests.conftest import EXAMPLES

    folder = EXAMPLES / "scale-to-zero"
    for name, kind in (("hpa-parking.yaml", "HorizontalPodAutoscaler"), ("keda-scale-to-zero.yaml", "ScaledObject")):
        scaler_obj, autoscaler = load_yaml_objects(folder / name)
        parked = ModelDeploymentScaler.model_validate(scaler_obj)
        assert parked.spec.scale_to_zero is not None
        subject_ = rules.ScalerSubject(scaler=parked, old=None,
                                       deployment=ModelDeployment.model_validate(deployment()), others=[])
        assert rules.judge(subject_) == []
        assert autoscaler["kind"] == kind
        assert autoscaler["spec"]["scaleTargetRef"] == {"apiVersion": vocab.API_VERSION,
                                                        "kind": vocab.KIND_MODEL_DEPLOYMENT_SCALER,
                                                        "name": parked.metadata.name}
        if kind == "HorizontalPodAutoscaler":
            kubernetes_validate.validate(autoscaler, "1.33.0", strict=True)
            assert autoscaler["spec"]["minReplicas"] == 1
        else:
            assert autoscaler["spec"]["minReplicaCount"] == 0

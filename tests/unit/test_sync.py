"""The sync hook's render: every role shape of docs/rendering.md, scaling, status."""

from __future__ import annotations

import copy

import orjson
import pytest

from app import vocab
from app.api.v1 import ModelDeployment
from app.control.sync import Refusal, customize
from app.render import names
from tests.conftest import world_objects
from tests.helpers import (
    NOW,
    attempt,
    by_kind,
    condition,
    engine,
    env_of,
    parent,
    pods,
    running,
    services,
    sync,
    workload,
)


def test_minimal_example_renders_four_pods_and_the_role_service():
    result = sync(parent("qwen-chat"))
    got = pods(result)
    assert len(got) == 4
    for ordinal, pod in enumerate(sorted(got, key=lambda p: p["metadata"]["labels"][vocab.LABEL_POD_ORDINAL])):
        labels = pod["metadata"]["labels"]
        assert labels[vocab.LABEL_NAME] == "model-deployment"
        assert labels[vocab.LABEL_INSTANCE] == "qwen-chat"
        assert labels[vocab.LABEL_COMPONENT] == "server"
        assert labels[vocab.LABEL_POD_ORDINAL] == str(ordinal)
        assert labels[vocab.LABEL_MEMBER_INDEX] == "0"
        assert labels[vocab.LABEL_ROLE_KIND] == "server"
        assert labels[vocab.LABEL_KUEUE_QUEUE_NAME] == "gpustack-nvidia-a10g-linux-amd64"
        assert labels[vocab.LABEL_KUEUE_POD_GROUP_NAME] == names.pod_group("team-a", "qwen-chat", "server", ordinal)
        annotations = pod["metadata"]["annotations"]
        assert annotations[vocab.ANNOTATION_KUEUE_GROUP_TOTAL_COUNT] == "1"
        assert annotations[vocab.ANNOTATION_KUEUE_ROLE_HASH] == "server"
        assert annotations[vocab.ANNOTATION_KUEUE_GROUP_SERVING] == "true"
        assert vocab.ANNOTATION_KUEUE_FAST_ADMISSION not in annotations
        assert pod["metadata"]["name"].startswith(f"qwen-chat-server-r{ordinal}-")
        container = engine(pod)
        assert container["image"] == "gpustack/runner:cuda12.9-vllm0.33.0"
        assert container["command"][:3] == ["vllm", "serve", "Qwen/Qwen2.5-14B-Instruct"]
        assert container["resources"]["requests"]["nvidia.com/gpu"] == "2"
        assert container["resources"]["requests"] == container["resources"]["limits"]
        assert not set(env_of(container)) & set(vocab.REPLICA_ENV)
    (service,) = services(result)
    assert service["metadata"]["name"] == "qwen-chat-server"
    assert service["spec"]["ports"][0]["port"] == 8000
    assert service["spec"]["selector"][vocab.LABEL_MEMBER_INDEX] == "0"
    assert result.status["endpoint"] == "http://qwen-chat-server.team-a.svc:8000"
    assert result.status["roleSummary"] == "0S"


def test_size_two_role_renders_members_headless_services_and_the_three_variables():
    md = parent("deepseek-multinode")
    md["spec"]["roles"][0]["replicas"] = 2
    result = sync(md)
    got = {p["metadata"]["name"]: p for p in pods(result)}
    assert sorted(got) == ["ds-wide-server-r0-m0", "ds-wide-server-r0-m1", "ds-wide-server-r1-m0", "ds-wide-server-r1-m1"]
    member = got["ds-wide-server-r1-m1"]
    assert member["spec"]["hostname"] == "ds-wide-server-r1-m1"
    assert member["spec"]["subdomain"] == "ds-wide-server-r1"
    env = env_of(engine(member))
    assert env[vocab.ENV_LEADER_ADDRESS] == "ds-wide-server-r1-m0.ds-wide-server-r1"
    assert env[vocab.ENV_REPLICA_SIZE] == "2"
    assert env[vocab.ENV_MEMBER_INDEX] == {"fieldRef": {"fieldPath": f"metadata.labels['{vocab.LABEL_MEMBER_INDEX}']"}}
    # Every member carries the same container spec but for its leader address (ordinal-wide).
    a, b = engine(got["ds-wide-server-r0-m0"]), engine(got["ds-wide-server-r0-m1"])
    assert a["command"] == b["command"] and a["image"] == b["image"]
    assert member["metadata"]["annotations"][vocab.ANNOTATION_KUEUE_GROUP_TOTAL_COUNT] == "2"
    assert member["metadata"]["annotations"][vocab.ANNOTATION_KUEUE_REQUIRED_TOPOLOGY] == "topology.gpustack.ai/rack"
    assert "readinessProbe" in a and "readinessProbe" not in b
    svc = {s["metadata"]["name"]: s for s in services(result)}
    assert svc["ds-wide-server"]["spec"]["selector"][vocab.LABEL_MEMBER_INDEX] == "0"
    for ordinal in (0, 1):
        headless = svc[f"ds-wide-server-r{ordinal}"]["spec"]
        assert headless["clusterIP"] == "None" and headless["publishNotReadyAddresses"] is True
        assert headless["selector"][vocab.LABEL_POD_ORDINAL] == str(ordinal)
    # SGLang always binds the wildcard host; no degree is composed from size.
    assert engine(member)["command"][:3] == ["python3", "-m", "sglang.launch_server"]
    assert "0.0.0.0" in engine(member)["command"]
    assert engine(member)["command"].count("--tp-size") == 1


def test_shm_is_memory_backed_unless_a_volume_mounts_it():
    pod = pods(sync(parent("qwen-chat")))[0]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in pod["spec"]["volumes"]
    md = parent("qwen-chat")
    md["spec"]["roles"][0]["additionalVolumes"] = [{"mountPath": "/dev/shm", "hostPath": {"path": "/dev/shm"}}]
    pod = pods(sync(md))[0]
    assert not any(v["name"] == "dshm" for v in pod["spec"]["volumes"])
    assert any(m["mountPath"] == "/dev/shm" for m in engine(pod)["volumeMounts"])


def test_pod_fields_follow_the_role():
    md = parent("qwen-chat")
    md["spec"]["roles"][0].update({
        "image": "registry.local/vllm:custom", "imagePullPolicy": "Always",
        "imagePullSecrets": [{"name": "pull"}], "privileged": True, "terminationGracePeriodSeconds": 120,
        "env": [{"name": "HF_TOKEN", "value": "x"}],
        "additionalVolumes": [{"mountPath": "/models", "readOnly": True, "configMap": {"name": "cfg"}, "subPath": "a"}],
        "extraArgs": ["--max-model-len", "8192"],
    })
    pod = pods(sync(md))[0]
    c = engine(pod)
    assert c["image"] == "registry.local/vllm:custom" and c["imagePullPolicy"] == "Always"
    assert pod["spec"]["imagePullSecrets"] == [{"name": "pull"}]
    assert c["securityContext"] == {"privileged": True}
    assert pod["spec"]["terminationGracePeriodSeconds"] == 120
    assert env_of(c)["HF_TOKEN"] == "x"
    assert c["command"][-2:] == ["--max-model-len", "8192"]
    assert {"name": "extra-0", "mountPath": "/models", "readOnly": True, "subPath": "a"} in c["volumeMounts"]
    assert {"name": "extra-0", "configMap": {"name": "cfg"}} in pod["spec"]["volumes"]


def test_a_port_in_extra_args_moves_only_the_container_side():
    md = parent("qwen-chat")
    md["spec"]["roles"][0]["extraArgs"] = ["--port=9000"]
    result = sync(md)
    c = engine(pods(result)[0])
    assert c["ports"][0]["containerPort"] == 9000
    assert c["readinessProbe"]["httpGet"]["port"] == 9000
    assert c["command"].count("--port") == 0  # the user's own --port is the only one
    (service,) = services(result)
    assert service["spec"]["ports"][0] == {"name": "http", "port": 8000, "targetPort": 9000, "protocol": "TCP"}
    assert result.status["endpoint"].endswith(":8000")


def test_declared_port_is_the_serving_port():
    md = parent("qwen-chat")
    md["spec"]["roles"][0]["ports"] = [{"port": 9100}]
    result = sync(md)
    c = engine(pods(result)[0])
    assert c["command"][c["command"].index("--port") + 1] == "9100"
    assert services(result)[0]["spec"]["ports"][0]["port"] == 9100


def test_take_over_command_is_the_whole_argv_and_reports_unmanaged():
    md = parent("qwen-chat")
    md["spec"]["roles"][0]["command"] = ["bash", "-c", "exec vllm serve my-model --port 8000"]
    md["spec"]["roles"][0]["extraArgs"] = ["--ignored"]
    result = sync(md)
    c = engine(pods(result)[0])
    assert c["command"] == ["bash", "-c", "exec vllm serve my-model --port 8000"]
    assert result.status["roles"][0]["unmanaged"] is True


def test_cpu_only_and_slices_render_their_requests():
    md = parent("qwen-chat")
    md["spec"]["roles"][0]["instanceType"] = "gpustack-cpu-linux-amd64"
    md["spec"]["roles"][0]["resources"] = {}
    md["spec"]["roles"][0]["image"] = "cpu-engine:1"
    assert engine(pods(sync(md))[0])["resources"]["requests"] == {"cpu": "4", "memory": "16Gi", "ephemeral-storage": "15Gi"}


def test_scale_up_keeps_survivors_byte_identical_and_scale_down_sheds_the_highest():
    first = sync(parent("qwen-chat"))
    observed = [running(p, f"uid-{i}") for i, p in enumerate(pods(first))]
    bigger = parent("qwen-chat")
    bigger["spec"]["roles"][0]["replicas"] = 6
    groups = [workload("team-a", p["metadata"]["labels"][vocab.LABEL_KUEUE_POD_GROUP_NAME]) for p in observed]
    grown = sync(bigger, children=observed, extra_related=groups)
    by_name = {p["metadata"]["name"]: p for p in pods(grown)}
    assert len(by_name) == 6
    for pod in pods(first):
        assert orjson.dumps(by_name[pod["metadata"]["name"]], option=orjson.OPT_SORT_KEYS) == \
            orjson.dumps(pod, option=orjson.OPT_SORT_KEYS)
    smaller = parent("qwen-chat")
    smaller["spec"]["roles"][0]["replicas"] = 2
    shrunk = sync(smaller, children=observed, extra_related=groups)
    assert sorted(p["metadata"]["labels"][vocab.LABEL_POD_ORDINAL] for p in pods(shrunk)) == ["0", "1"]
    deleted = {i.name for i in shrunk.intents if type(i).__name__ == "DeleteWorkload"}
    assert deleted == {names.pod_group("team-a", "qwen-chat", "server", o) for o in (2, 3)}
    leaving = [i for i in shrunk.intents if getattr(i, "reason", None) == vocab.EVENT_REPLICA_LEAVING]
    assert len(leaving) == 2 and all("30s" in e.message for e in leaving)


def test_a_group_lacking_a_member_is_completed_under_the_generation_it_was_created_with():
    """A size-2 replica whose second member's create failed, or that a lagging view does not list
    yet, found after an edit that changes no Pod (a scale-up, generation 2): the listed member is
    returned exactly as created (spec generation 1) and the missing one joins it under that
    generation, never a mix of two in one group (docs/operations.md#upgrading-the-operator)."""
    md = parent("deepseek-multinode")
    first = sync(md)
    leader = next(p for p in pods(first) if p["metadata"]["name"] == "ds-wide-server-r0-m0")
    observed = copy.deepcopy(leader)
    observed["metadata"]["uid"] = "uid-leader"
    observed["spec"]["schedulingGates"] = [{"name": vocab.KUEUE_SCHEDULING_GATE}]
    observed["status"] = {"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"}]}
    group = workload("team-a", leader["metadata"]["labels"][vocab.LABEL_KUEUE_POD_GROUP_NAME], admitted=False)
    scaled = parent("deepseek-multinode")
    scaled["metadata"]["generation"] = 2
    scaled["spec"]["roles"][0]["replicas"] += 1
    completed = {p["metadata"]["name"]: p for p in pods(sync(scaled, children=[observed], extra_related=[group]))}
    assert orjson.dumps(completed["ds-wide-server-r0-m0"], option=orjson.OPT_SORT_KEYS) == \
        orjson.dumps(leader, option=orjson.OPT_SORT_KEYS)
    generations = {completed[f"ds-wide-server-r0-m{m}"]["metadata"]["annotations"][vocab.ANNOTATION_SPEC_GENERATION]
                   for m in (0, 1)}
    assert generations == {"1"}


def test_a_workload_composed_again_beside_pods_that_ran_is_never_made_ready():
    """A view that still lists a replica's Pods running (they lost Kueue's gate: admitted once) beside
    a Workload of their group that is not admitted, reserving quota: Kueue's new Workload for Pods it
    stopped, or a view behind their stop. Its check is held Pending with the reason, never written
    Ready (docs/kueue.md#joint-admission); the other replicas' admitted Workloads are left alone."""
    first = sync(parent("qwen-chat"))
    observed = [running(p, f"uid-{i}") for i, p in enumerate(pods(first))]
    groups = [workload("team-a", p["metadata"]["labels"][vocab.LABEL_KUEUE_POD_GROUP_NAME]) for p in observed]
    check = {"name": vocab.ADMISSION_CHECK_NAME, "state": "Pending", "message": "", "lastTransitionTime": NOW}
    for wl in groups:
        wl["status"]["admissionChecks"] = [{**check, "state": "Ready"}]
    again = workload("team-a", groups[0]["metadata"]["name"], admitted=False)
    again["status"]["admissionChecks"] = [check]
    result = sync(parent("qwen-chat"), children=observed, extra_related=[again, *groups[1:]])
    writes = [i for i in result.intents if type(i).__name__ == "SetAdmissionCheck"]
    assert all(w.state != vocab.CHECK_STATE_READY for w in writes), writes
    assert [(w.workload, w.state) for w in writes] == [(again["metadata"]["name"], vocab.CHECK_STATE_PENDING)]
    assert "ran under an earlier admission" in writes[0].message


def test_an_eviction_seen_first_on_the_workload_then_on_the_pods_is_one_event():
    """A replica preempted before any view listed its Pods: one pass reads only its evicted Workload,
    a later one its Pods stopped by the eviction. Both name the departure after the incarnation, so
    the second Event create finds the first (docs/kueue.md#events)."""
    first = sync(parent("qwen-chat"))
    observed = [running(p, f"uid-{i}") for i, p in enumerate(pods(first))]
    groups = [workload("team-a", p["metadata"]["labels"][vocab.LABEL_KUEUE_POD_GROUP_NAME]) for p in observed]
    evicted = workload("team-a", groups[0]["metadata"]["name"], reserved=False, admitted=False)
    evicted["metadata"]["uid"] = "wl-evicted"
    evicted["status"]["conditions"].append({"type": "Evicted", "status": "True", "reason": "Preempted",
                                            "lastTransitionTime": NOW})
    evicted["status"]["admissionChecks"] = [{"name": vocab.ADMISSION_CHECK_NAME, "state": "Pending",
                                             "message": vocab.KUEUE_CHECK_RESET_AFTER_EVICTION,
                                             "lastTransitionTime": NOW}]
    related = [evicted, *groups[1:]]

    def told(result):
        return [(i.reason, i.name) for i in result.intents if getattr(i, "reason", None) == vocab.EVENT_REPLICA_EVICTED]

    unlisted = told(sync(parent("qwen-chat"), children=observed[1:], extra_related=related))
    stopped = copy.deepcopy(observed[0])
    stopped["status"]["conditions"].append({"type": vocab.KUEUE_POD_TERMINATION_TARGET, "status": "True",
                                            "reason": f"{vocab.KUEUE_STOP_REASON_EVICTED}DueToPreempted"})
    listed = told(sync(parent("qwen-chat"), children=[stopped, *observed[1:]], extra_related=related))
    assert len(unlisted) == 1 and listed == unlisted


def test_a_departed_replica_kueue_let_go_keeps_the_workload_kueue_made_again():
    """A departed replica's Pods terminating without Kueue's finalizer (its Workload was deleted):
    the Workload the request shows was composed again by Kueue for those Pods, and deleting it would
    only start the loop again (docs/kueue.md#what-kueue-does-with-a-group). One whose Pods Kueue
    still holds is deleted, as before."""
    first = sync(parent("qwen-chat"))
    observed = [running(p, f"uid-{i}") for i, p in enumerate(pods(first))]
    group = observed[0]["metadata"]["labels"][vocab.LABEL_KUEUE_POD_GROUP_NAME]
    groups = [workload("team-a", p["metadata"]["labels"][vocab.LABEL_KUEUE_POD_GROUP_NAME]) for p in observed]
    observed[0]["metadata"]["deletionTimestamp"] = NOW
    observed[0]["metadata"]["finalizers"] = [vocab.FINALIZER_KUEUE_MANAGED]
    held = sync(parent("qwen-chat"), children=observed, extra_related=groups)
    assert [i.name for i in held.intents if type(i).__name__ == "DeleteWorkload"] == [group]
    observed[0]["metadata"]["finalizers"] = []
    released = sync(parent("qwen-chat"), children=observed, extra_related=groups)
    assert [i for i in released.intents if type(i).__name__ == "DeleteWorkload"] == []
    assert observed[0]["metadata"]["name"] not in {p["metadata"]["name"] for p in pods(released)}
    # The departure's Event, under the name the held pass used: whoever deleted the Workload (a
    # user) told nobody, and a pass of ours that did tell creates nothing new.
    told = [i.name for i in held.intents if getattr(i, "reason", None) == vocab.EVENT_REPLICA_RESTARTED]
    assert [i.name for i in released.intents if getattr(i, "reason", None) == vocab.EVENT_REPLICA_RESTARTED] == told
    assert len(told) == 1


def test_status_is_deterministic_and_carries_transition_times():
    md = parent("qwen-chat")
    first = sync(md)
    md["status"] = first.status
    later = copy.deepcopy(md)
    again = sync(later)
    assert again.status == first.status
    # A condition whose status moves gets a new lastTransitionTime; the others keep theirs.
    observed = [running(p, f"uid-{i}") for i, p in enumerate(pods(first))]
    groups = [workload("team-a", p["metadata"]["labels"][vocab.LABEL_KUEUE_POD_GROUP_NAME]) for p in observed]
    from app.control.sync import reconcile, SyncSettings
    from app.api.hooks import hook_request
    from tests.helpers import request
    moved = reconcile(hook_request(request(md, children=observed, extra_related=groups)),
                      SyncSettings(), now="2026-11-29T13:00:00Z")
    quota = next(c for c in moved.status["conditions"] if c["type"] == vocab.COND_QUOTA_RESERVED)
    weights = next(c for c in moved.status["conditions"] if c["type"] == vocab.COND_WEIGHTS_READY)
    assert quota["status"] == "True" and quota["lastTransitionTime"] == "2026-11-29T13:00:00Z"
    assert weights["lastTransitionTime"] == NOW
    assert moved.status["phase"] == vocab.PHASE_READY and moved.status["roleSummary"] == "4S"


def test_render_failure_names_the_role_and_whether_it_resolves():
    world = copy.deepcopy(world_objects())
    for obj in world:
        if obj["metadata"]["name"] == "gpustack-nvidia-a10g-linux-amd64":
            obj["status"]["detail"]["manufacturer"] = "cambricon"
    refusal = attempt(parent("qwen-chat"), world=world)
    assert isinstance(refusal, Refusal)
    assert "no runner backend" in refusal.message and refusal.retryable is False
    (event,) = refusal.events
    assert event.reason == vocab.EVENT_RENDER_FAILED and event.type == "Warning"


def test_runtime_version_skew_is_an_event_naming_taken_and_skipped():
    md = parent("pd-pair")
    result = sync(md)
    skew = [i for i in result.intents if getattr(i, "reason", None) == vocab.EVENT_RUNTIME_VERSION_SKEW]
    assert skew and "12.8" in skew[0].message and "12.9" in skew[0].message
    assert len({e.name for e in skew}) == 1  # both roles on one type say the same thing once


def test_finalize_answers_finalized_only_when_nothing_is_left():
    md = parent("qwen-chat")
    first = sync(md)
    observed = [running(p, f"uid-{i}") for i, p in enumerate(pods(first))]
    pending = sync(md, children=observed, finalizing=True)
    assert pending.finalized is False and pods(pending) == []
    assert result_phase(pending) == vocab.PHASE_DELETING
    done = sync(md, finalizing=True)
    assert done.finalized is True


def test_finalize_waits_for_the_router_pods_and_scales_their_deployment_to_zero_meanwhile():
    """Router Pods belong to the router's ReplicaSet, not to the deployment: a finalize keeps the
    router Deployment at zero replicas until they are gone, so a deployment created again under the
    same name never finds them behind its router Service (docs/metacontroller.md#finalize)."""
    md = parent("pd-pair")
    first = sync(md)
    deployment = copy.deepcopy(by_kind(first, "Deployment")[0])
    deployment["metadata"]["uid"] = "router-deployment-uid"
    deployment["status"] = {"replicas": 1}
    router_pod = {"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": "pd-demo-router-6f68dd7b5-p59sr", "namespace": "team-a",
                               "labels": deployment["spec"]["template"]["metadata"]["labels"]}}
    waiting = sync(md, children=[deployment], extra_related=[router_pod], finalizing=True)
    assert waiting.finalized is False
    held = by_kind(waiting, "Deployment")
    assert [d["metadata"]["name"] for d in held] == ["pd-demo-router"] and held[0]["spec"]["replicas"] == 0
    assert "status" not in held[0] and "uid" not in held[0]["metadata"]
    assert by_kind(waiting, "Service") == []  # only the Deployment is kept, and only at zero
    done = sync(md, children=[deployment], finalizing=True)
    assert done.finalized is True and by_kind(done, "Deployment") == []


def test_customize_selects_the_deployments_router_pods():
    rules = customize(ModelDeployment.model_validate(parent("qwen-chat")))["relatedResources"]
    pods_rule = next(r for r in rules if r["resource"] == "pods")
    assert pods_rule == {"apiVersion": "v1", "resource": "pods", "namespace": "team-a", "labelSelector": {
        "matchLabels": {vocab.LABEL_NAME: vocab.APP_NAME, vocab.LABEL_INSTANCE: "qwen-chat",
                        vocab.LABEL_COMPONENT: vocab.ROUTER_COMPONENT}}}


def test_finalize_tears_down_a_role_whose_instance_type_is_gone():
    """A deleted (or malformed) InstanceType must not wedge the finalizer: the deployment's Pods and
    Workloads go by ordinal alone, without a render."""
    md = parent("qwen-chat")
    first = sync(md)
    observed = [running(p, f"uid-{i}") for i, p in enumerate(pods(first))]
    without_type = [o for o in world_objects() if o["kind"] != "InstanceType"]
    assert isinstance(attempt(md, children=observed, world=without_type), Refusal)  # a live pass refuses to render
    pending = sync(md, children=observed, world=without_type, finalizing=True)
    assert pending.finalized is False and pods(pending) == []
    deletes = sorted(i.name for i in pending.intents if type(i).__name__ == "DeleteWorkload")
    assert deletes == sorted(names.pod_group("team-a", "qwen-chat", "server", o) for o in range(4))
    assert sync(md, world=without_type, finalizing=True).finalized is True


def result_phase(result):
    return result.status["phase"]


def test_artifact_not_resolved_creates_no_pod():
    md = parent("qwen-chat")
    md["spec"]["model"]["artifactRef"] = {"name": "qwen-weights"}
    result = sync(md)
    assert pods(result) == []
    assert condition(result, vocab.COND_WEIGHTS_READY)["reason"] == vocab.REASON_ARTIFACT_NOT_FOUND
    artifact = {"apiVersion": vocab.API_VERSION, "kind": vocab.KIND_MODEL_ARTIFACT,
                "metadata": {"name": "qwen-weights", "namespace": "team-a"},
                "spec": {"source": {"persistentVolumeClaim": {"claimName": "weights", "path": "qwen"}}},
                "status": {"conditions": [{"type": "Resolved", "status": "True"}], "resolved": {"revision": "r1"}}}
    result = sync(md, extra_related=[artifact])
    pod = pods(result)[0]
    c = engine(pod)
    assert c["command"][2] == "/var/lib/gpustack/model/qwen"
    assert c["command"][c["command"].index("--served-model-name") + 1] == "Qwen/Qwen2.5-14B-Instruct"
    assert {"name": "model", "persistentVolumeClaim": {"claimName": "weights", "readOnly": True}} in pod["spec"]["volumes"]
    assert condition(result, vocab.COND_WEIGHTS_READY)["status"] == "True"


def test_customize_selects_types_binding_pools_artifact_and_workloads():
    rules = customize(ModelDeployment.model_validate(parent("pd-pair")))["relatedResources"]
    by_resource = {r["resource"]: r for r in rules}
    assert by_resource["instancetypes"]["names"] == ["gpustack-nvidia-h20-linux-amd64"]
    assert by_resource["kvcachepoolbindings"] == {"apiVersion": vocab.API_VERSION, "resource": "kvcachepoolbindings",
                                                  "namespace": "team-a", "names": ["team-a-dram"]}
    assert by_resource["kvcachepools"]["labelSelector"] == {"matchLabels": {}}
    assert len(by_resource["workloads"]["names"]) == 4 * names.SLOTS  # both slots of each declared replica
    assert by_resource["workloads"]["apiVersion"] == "kueue.x-k8s.io/v1beta2"


def test_router_objects_and_instance_services():
    result = sync(parent("pd-pair"))
    kinds = sorted(c["kind"] for c in result.children if c["kind"] not in ("Pod",))
    assert kinds.count("Deployment") == 1 and "ConfigMap" in kinds and "Role" in kinds
    assert result.status["endpoint"] == "http://pd-demo-router.team-a.svc:8000"
    assert by_kind(result, "Deployment")[0]["spec"]["replicas"] == 1

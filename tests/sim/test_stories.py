"""Hand-written stories of what users do and what the cluster does to them, played in the simulator.

Each story drives Metacontroller, Kueue and the kubelet around `reconcile`; the simulator checks
the invariants of every pass on its own (tests/sim/world.py), the stories check what the user's
text promises for that situation.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app import vocab
from app.control import stalls
from app.render import names
from tests.sim.world import Sim, admitted, deleting, example, fingerprint, gated, reserved

A10G = "gpustack-nvidia-a10g-linux-amd64"
H20 = "gpustack-nvidia-h20-linux-amd64"


def chat(replicas: int = 4, name: str = "qwen-chat") -> dict[str, Any]:
    md = example("qwen-chat")
    md["metadata"]["name"] = name
    md["spec"]["roles"][0]["replicas"] = replicas
    return md


def pd(name: str = "pd-demo", replicas: int = 2, router: bool = False) -> dict[str, Any]:
    md = example("pd-pair")
    md["metadata"]["name"] = name
    if not router:
        del md["spec"]["router"]
    for role in md["spec"]["roles"]:
        role["replicas"] = replicas
    return md


def running(sim: Sim, name: str) -> Sim:
    sim.settle()
    assert sim.status(name)["phase"] == vocab.PHASE_READY, sim.status(name)
    return sim


def pod_names(sim: Sim, name: str) -> set[str]:
    return {p["metadata"]["name"] for p in sim.pods_of(name)}


def live_pods(sim: Sim, name: str, role: str | None = None) -> list[dict[str, Any]]:
    return [p for p in sim.pods_of(name) if not deleting(p)
            and (role is None or p["metadata"]["labels"][vocab.LABEL_COMPONENT] == role)]


def set_image(sim: Sim, name: str, image: str, roles: list[str] | None = None) -> None:
    def mutate(spec: dict[str, Any]) -> None:
        for role in spec["roles"]:
            if roles is None or role["name"] in roles:
                role["image"] = image

    sim.edit(name, mutate)


# --- scale ------------------------------------------------------------------------------------


def test_scale_up_is_immediate_and_leaves_survivors_untouched() -> None:
    sim = Sim()
    sim.apply(chat(4))
    running(sim, "qwen-chat")
    before = {n: sim.created_from[n] for n in pod_names(sim, "qwen-chat")}
    uids = {p["metadata"]["uid"] for p in sim.pods_of("qwen-chat")}

    sim.set_replicas("qwen-chat", "server", 5)
    record = sim.sync("qwen-chat")
    assert record is not None
    # The new ordinal is created on the first pass that sees it.
    assert [n for n in record.created if "-r4-" in n] == record.created and len(record.created) == 1
    assert record.deleted == []
    sim.settle()
    assert sim.status("qwen-chat")["phase"] == vocab.PHASE_READY
    assert {p["metadata"]["uid"] for p in sim.pods_of("qwen-chat")} >= uids
    for n, original in before.items():
        assert sim.created_from[n] == original
    assert not sim.events_by_reason(vocab.EVENT_REPLICA_RESTARTED)
    assert sim.role_status("qwen-chat", "server") | {} == sim.role_status("qwen-chat", "server")
    assert sim.role_status("qwen-chat", "server")["ready"] == 5


def test_scale_down_sheds_highest_ordinals_with_their_workloads() -> None:
    sim = Sim()
    sim.apply(chat(5))
    running(sim, "qwen-chat")
    survivors = {p["metadata"]["uid"] for p in sim.pods_of("qwen-chat")
                 if int(p["metadata"]["labels"][vocab.LABEL_POD_ORDINAL]) < 3}
    groups = [sim.group("qwen-chat", "server", o) for o in (3, 4)]
    assert all(g in sim.workloads for g in groups)

    sim.set_replicas("qwen-chat", "server", 3)
    record = sim.sync("qwen-chat")
    assert record is not None
    assert sorted(i.name for i in record.intents if type(i).__name__ == "DeleteWorkload") == sorted(groups)
    assert all(g not in sim.workloads for g in groups)
    assert len(record.deleted) == 2 and all(("-r3-" in n or "-r4-" in n) for n in record.deleted)
    leaving = sim.events_by_reason(vocab.EVENT_REPLICA_LEAVING)
    assert len(leaving) == 2
    assert {"qwen-chat-server-r3", "qwen-chat-server-r4"} == {e["message"].split()[1] for e in leaving}
    assert all("30s" in e["message"] for e in leaving)
    sim.settle()
    assert {p["metadata"]["uid"] for p in sim.pods_of("qwen-chat")} == survivors
    assert sim.status("qwen-chat")["phase"] == vocab.PHASE_READY
    assert len(sim.events_by_reason(vocab.EVENT_REPLICA_LEAVING)) == 2
    sim.check_departure_events()


def test_scale_down_deletes_a_workload_left_standing_without_pods() -> None:
    """A shed ordinal's Workload is deleted by name even when no Pod of it is left to see (its
    Pods were removed by force, and customize no longer lists it once replicas drop)."""
    sim = Sim()
    sim.apply(chat(3))
    running(sim, "qwen-chat")
    group = sim.group("qwen-chat", "server", 2)
    for pod in sim.replica_pods("qwen-chat", "server", 2):
        sim.force_remove_pod(pod["metadata"]["name"])
    sim.set_replicas("qwen-chat", "server", 2)
    record = sim.sync("qwen-chat")
    assert record is not None
    assert group in [i.name for i in record.intents if type(i).__name__ == "DeleteWorkload"]
    assert group not in sim.workloads
    record = sim.sync("qwen-chat")  # once: the status no longer declares ordinal 2
    assert record is not None and not [i for i in record.intents if type(i).__name__ == "DeleteWorkload"]
    sim.settle()
    assert sim.status("qwen-chat")["phase"] == vocab.PHASE_READY


# --- rollout ----------------------------------------------------------------------------------


def test_image_edit_rolls_one_replica_per_role_at_a_time() -> None:
    sim = Sim(capacity={H20: 8})  # exactly the four groups: a full pool
    sim.apply(pd())
    running(sim, "pd-demo")
    old = {p["metadata"]["uid"] for p in sim.pods_of("pd-demo")}

    set_image(sim, "pd-demo", "example.com/vllm:v2")
    record = sim.sync("pd-demo")
    assert record is not None
    # One replica per role this pass.
    assert sorted(n.rsplit("-", 1)[0] for n in record.deleted) == ["pd-demo-decode-r0", "pd-demo-prefill-r0"]
    # Pipelined (docs/kueue.md#incarnation-slots): the replacements are created in the same pass, in
    # the other pod-group slot, and admitted only once the replaced Pods are gone.
    assert sorted(n.rsplit("-", 1)[0] for n in record.created) == ["pd-demo-decode-r0", "pd-demo-prefill-r0"]
    assert {sim.group("pd-demo", role, 0) for role in ("prefill", "decode")} == \
        {names.pod_group("team-a", "pd-demo", role, 0, 1) for role in ("prefill", "decode")}
    cond = sim.condition("pd-demo", vocab.COND_REPLICAS_UP_TO_DATE)
    assert (cond["status"], cond["reason"]) == ("False", vocab.REASON_ROLLOUT_IN_PROGRESS)
    assert len(sim.events_by_reason(vocab.EVENT_REPLICA_RESTARTED)) == 2

    # Nothing else is turned over until the replacements hold admitted Workloads.
    for _ in range(3):
        sim.sync("pd-demo")
        assert len([p for p in sim.pods_of("pd-demo") if p["metadata"]["uid"] in old and not deleting(p)]) == 2
    sim.settle(rounds=80)
    assert not any(p["metadata"]["uid"] in old for p in sim.pods_of("pd-demo"))
    assert all(p["spec"]["containers"][0]["image"] == "example.com/vllm:v2" for p in sim.pods_of("pd-demo"))
    assert sim.status("pd-demo")["phase"] == vocab.PHASE_READY
    cond = sim.condition("pd-demo", vocab.COND_REPLICAS_UP_TO_DATE)
    assert (cond["status"], cond["reason"]) == ("True", vocab.REASON_UP_TO_DATE)
    assert len(sim.events_by_reason(vocab.EVENT_REPLICA_RESTARTED)) == 4
    sim.check_departure_events()


def ready_replicas(sim: Sim, name: str, role: str, replicas: int) -> int:
    return sum(1 for o in range(replicas) if sim._instance_ready(name, role, o))


def test_a_rollout_under_metacontrollers_call_pattern_keeps_all_but_one_replica_ready() -> None:
    """Metacontroller calls sync many times a second, each on an informer view that lags its last
    answer, and Kueue admits a replacement at once; the kubelet takes its time. Under the admission-only gate every
    replica of a 3-replica role went down within a second (docs/kueue.md#rollout-cadence)."""
    sim = Sim(capacity={A10G: 8})
    sim.apply(chat(3))
    running(sim, "qwen-chat")
    sim.lagging = True
    sim.catch_up()
    set_image(sim, "qwen-chat", "example.com/vllm:v2")
    lowest = 3
    for _ in range(40):
        for call in range(25):  # one second of a rollout
            # The informer catches up with every other object only: views mix old and new.
            sim.catch_up(sim.lagging_pod_names()[call % 2::2])
            sim.sync("qwen-chat")
            sim.kueue()  # a replacement's Workload is admitted within milliseconds
            lowest = min(lowest, ready_replicas(sim, "qwen-chat", "server", 3))
        sim.kubelet()  # the slow part: a replica becomes Ready only now
        sim.check_global()
        sim.advance(1)
    assert lowest >= 2, "more than one serving replica went down at once"
    sim.lagging = False
    sim.settle(rounds=80)
    assert {p["spec"]["containers"][0]["image"] for p in sim.pods_of("qwen-chat")} == {"example.com/vllm:v2"}
    assert sim.status("qwen-chat")["phase"] == vocab.PHASE_READY


def test_a_rollout_fixing_a_broken_render_replaces_every_not_ready_replica_at_once() -> None:
    """Replicas that serve nothing (a crash loop on a bad image) are no reason to wait: a fix rolls
    them all in one pass, while a Ready replica still waits for the others."""
    sim = Sim(capacity={A10G: 8})
    sim.apply(chat(3))
    running(sim, "qwen-chat")
    for ordinal in (1, 2):  # two replicas crash-loop: Running but never Ready
        for pod in sim.replica_pods("qwen-chat", "server", ordinal):
            sim._set_pod_status(pod, "Running", False)
    set_image(sim, "qwen-chat", "example.com/vllm:fixed")
    record = sim.sync("qwen-chat")
    assert record is not None
    turned_over = sorted(int(n.split("-r")[1].split("-")[0]) for n in record.deleted)
    assert turned_over == [1, 2]  # r0 is Ready: it waits until r1 and r2 serve again
    sim.settle(rounds=80)
    assert {p["spec"]["containers"][0]["image"] for p in sim.pods_of("qwen-chat")} == {"example.com/vllm:fixed"}
    assert sim.status("qwen-chat")["phase"] == vocab.PHASE_READY


def test_an_edit_during_a_queued_replacement_supersedes_it() -> None:
    sim = Sim(capacity={A10G: 4})
    sim.apply(chat(2))
    running(sim, "qwen-chat")
    set_image(sim, "qwen-chat", "example.com/vllm:v2")
    sim.sync("qwen-chat")  # r0 turned over
    sim.capacity[A10G] = 2  # someone else takes the freed cards: the replacement queues
    sim.settle(rounds=10)
    r0 = live_pods(sim, "qwen-chat")
    v2 = [p for p in r0 if p["spec"]["containers"][0]["image"] == "example.com/vllm:v2"]
    assert len(v2) == 1 and gated(v2[0])
    v2_fp = fingerprint(v2[0])
    cond = sim.condition("qwen-chat", vocab.COND_QUOTA_RESERVED)
    assert cond["status"] == "False" and "1 of 2" in cond["message"]

    set_image(sim, "qwen-chat", "example.com/vllm:v3")
    superseded = sim.group("qwen-chat", "server", 0)
    record = sim.sync("qwen-chat")
    assert record is not None
    assert record.deleted == [v2[0]["metadata"]["name"]]
    assert superseded in [i.name for i in record.intents if type(i).__name__ == "DeleteWorkload"]
    sim.capacity[A10G] = 4
    sim.settle(rounds=80)
    images = {p["spec"]["containers"][0]["image"] for p in sim.pods_of("qwen-chat")}
    assert images == {"example.com/vllm:v3"}
    assert v2_fp not in sim.admitted_fingerprints
    assert sim.status("qwen-chat")["phase"] == vocab.PHASE_READY


# --- departures -------------------------------------------------------------------------------


def test_kubectl_delete_pod_deletes_the_workload_and_rebuilds_once_the_pod_is_gone() -> None:
    sim = Sim()
    sim.apply(chat(2))
    running(sim, "qwen-chat")
    victim = sim.replica_pods("qwen-chat", "server", 1)[0]["metadata"]["name"]
    group = sim.group("qwen-chat", "server", 1)
    sim.kubectl_delete_pod(victim)
    assert victim in sim.pods  # Kueue's finalizer holds it while its Workload stands

    record = sim.sync("qwen-chat")
    assert record is not None
    assert group in [i.name for i in record.intents if type(i).__name__ == "DeleteWorkload"]
    # Pipelined (docs/kueue.md#incarnation-slots): the replacement is created in the same pass, in
    # the other slot, and not admitted while the victim is still there.
    assert len(record.created) == 1
    assert len(sim.events_by_reason(vocab.EVENT_REPLICA_RESTARTED)) == 1
    assert sim.condition("qwen-chat", vocab.COND_REPLICAS_UP_TO_DATE)["reason"] == vocab.REASON_REPLACEMENT_IN_PROGRESS
    assert victim in sim.pods  # still terminating on its node
    sim.kueue()
    sim.sync("qwen-chat")
    replacement = [p for p in sim.replica_pods("qwen-chat", "server", 1) if not deleting(p)]
    assert len(replacement) == 1 and gated(replacement[0])
    assert sim.group("qwen-chat", "server", 1) != group
    sim.kubelet()  # the kubelet confirms the end; no finalizer is left
    assert victim not in sim.pods
    sim.settle()
    assert sim.status("qwen-chat")["phase"] == vocab.PHASE_READY
    assert len(sim.events_by_reason(vocab.EVENT_REPLICA_RESTARTED)) == 1
    sim.check_departure_events()


def image_of(sim: Sim, name: str, role: str, ordinal: int) -> set[str]:
    return {p["spec"]["containers"][0]["image"] for p in sim.replica_pods(name, role, ordinal) if not deleting(p)}


def test_a_departure_of_the_replica_just_rolled_while_the_next_turns_over_is_rebuilt_and_the_rollout_ends() -> None:
    """The CI short soak on a4f589e (bench/soak.md#bugs-found-on-the-way): ordinal 0 rolled and
    Ready on the new image, the operator turned ordinal 1 over as the availability gate allows, and
    in the same instant a Workload delete took ordinal 0. One turnover and one departure: ordinal 0
    is rebuilt at once (a departure waits for no gate), ordinal 1's turnover goes on, and the
    rollout ends with every replica on the new image."""
    sim = Sim(capacity={A10G: 8})
    sim.apply(chat(2))
    running(sim, "qwen-chat")
    set_image(sim, "qwen-chat", "example.com/vllm:v2")
    for _ in range(40):
        sim.step(1)
        if sim._instance_ready("qwen-chat", "server", 0) and image_of(sim, "qwen-chat", "server", 0) == {"example.com/vllm:v2"}:
            break
    assert image_of(sim, "qwen-chat", "server", 1) != {"example.com/vllm:v2"}, "the rollout went past ordinal 1 unobserved"
    restarted = len(sim.events_by_reason(vocab.EVENT_REPLICA_RESTARTED))

    record = sim.sync("qwen-chat")
    assert record is not None
    assert [n.rsplit("-", 1)[0] for n in record.deleted] == ["qwen-chat-server-r1"]
    sim.delete_workload(sim.group("qwen-chat", "server", 0), "a Workload delete, as the soak's departure")

    sim.settle(rounds=80)
    assert {p["spec"]["containers"][0]["image"] for p in live_pods(sim, "qwen-chat")} == {"example.com/vllm:v2"}
    assert len(live_pods(sim, "qwen-chat")) == 2
    assert sim.status("qwen-chat")["phase"] == vocab.PHASE_READY
    # Ordinal 1's turnover and ordinal 0's departure, each told once: nobody else tells the user
    # that the Workload delete took a serving replica.
    assert len(sim.events_by_reason(vocab.EVENT_REPLICA_RESTARTED)) == restarted + 2
    sim.check_departure_events()


def test_a_replica_kueue_admits_and_never_places_is_named_and_runs_once_kueue_restarts() -> None:
    """The 21-minute soak on e266466 (bench/soak.md#bugs-found-on-the-way): Kueue's topology
    ungater stalled on one Workload name, so ordinal 0's every new incarnation was admitted and
    stayed behind the topology gate. The operator cannot release it; it names the replica, its
    Workload and the way out, once, and the replica runs when Kueue is restarted."""
    sim = Sim(capacity={A10G: 8})
    sim.apply(chat(2))
    running(sim, "qwen-chat")
    group = sim.group("qwen-chat", "server", 0)
    sim.ungate_stalled.update(names.pod_groups("team-a", "qwen-chat", "server", 0))  # both slots' names
    sim.kubectl_delete_pod(sim.replica_pods("qwen-chat", "server", 0)[0]["metadata"]["name"])
    for _ in range(30):  # two and a half minutes: settle() would stop once nothing moves
        sim.step(5)
    assert sim.workload_of("qwen-chat", "server", 0) is not None and admitted(sim.workload_of("qwen-chat", "server", 0))
    status = sim.status("qwen-chat")
    assert status["phase"] == vocab.PHASE_DEGRADED
    assert sim.group("qwen-chat", "server", 0) in status["phaseMessage"] and stalls.WAY_OUT in status["phaseMessage"]
    assert len(sim.events_by_reason(vocab.EVENT_REPLICA_UNGATE_STALLED)) == 1

    sim.ungate_stalled.clear()  # kueue-controller-manager restarted: its ungater starts afresh
    sim.settle()
    status = sim.status("qwen-chat")
    assert status["phase"] == vocab.PHASE_READY and "topology" not in status["phaseMessage"]
    assert len(sim.events_by_reason(vocab.EVENT_REPLICA_UNGATE_STALLED)) == 1


def test_kueue_preemption_records_replica_evicted_once() -> None:
    sim = Sim()
    sim.apply(chat(4))
    running(sim, "qwen-chat")
    group = sim.group("qwen-chat", "server", 2)
    sim.preempt(group)
    record = sim.sync("qwen-chat")
    assert record is not None
    evicted = sim.events_by_reason(vocab.EVENT_REPLICA_EVICTED)
    assert len(evicted) == 1 and "qwen-chat-server-r2" in evicted[0]["message"] and "30s" in evicted[0]["message"]
    assert group in [i.name for i in record.intents if type(i).__name__ == "DeleteWorkload"]
    quota = sim.condition("qwen-chat", vocab.COND_QUOTA_RESERVED)
    assert quota["status"] == "False" and "3 of 4" in quota["message"]
    assert sim.role_status("qwen-chat", "server")["quotaReserved"] == 3
    assert sim.status("qwen-chat")["phase"] == vocab.PHASE_DEGRADED
    assert sim.condition("qwen-chat", vocab.COND_REPLICAS_UP_TO_DATE)["reason"] == vocab.REASON_REPLACEMENT_IN_PROGRESS
    sim.settle()
    assert sim.status("qwen-chat")["phase"] == vocab.PHASE_READY
    assert len(sim.events_by_reason(vocab.EVENT_REPLICA_EVICTED)) == 1
    assert not sim.events_by_reason(vocab.EVENT_REPLICA_RESTARTED)
    sim.check_departure_events()


def test_a_preempted_replica_whose_pods_vanished_first_is_still_reported_and_freed() -> None:
    """Kueue evicts, the Pods are gone (finalizers stripped by hand) before any pass saw them: the
    standing Workload is deleted, ReplicaEvicted is recorded once, the ordinal is refilled."""
    sim = Sim()
    sim.apply(chat(2))
    running(sim, "qwen-chat")
    group = sim.group("qwen-chat", "server", 1)
    sim.preempt(group)
    for pod in sim.replica_pods("qwen-chat", "server", 1):
        sim.force_remove_pod(pod["metadata"]["name"])
    assert sim.replica_pods("qwen-chat", "server", 1) == [] and group in sim.workloads
    record = sim.sync("qwen-chat")
    assert record is not None and record.created == []  # the ordinal waits for its Workload to go
    assert group not in sim.workloads
    assert len(sim.events_by_reason(vocab.EVENT_REPLICA_EVICTED)) == 1
    assert sim.condition("qwen-chat", vocab.COND_QUOTA_RESERVED)["reason"] == vocab.REASON_PREEMPTED_IN_PART
    sim.settle()
    assert sim.status("qwen-chat")["phase"] == vocab.PHASE_READY
    assert len(sim.events_by_reason(vocab.EVENT_REPLICA_EVICTED)) == 1
    sim.check_departure_events()


def test_a_pod_on_a_notready_node_is_never_replaced() -> None:
    sim = Sim()
    sim.apply(chat(2))
    running(sim, "qwen-chat")
    pod = sim.replica_pods("qwen-chat", "server", 0)[0]
    name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
    sim.set_node_ready(sim.node_of(name), False)
    for _ in range(6):
        sim.step(60)
    assert name in sim.pods and not deleting(sim.pods[name])
    assert len(sim.replica_pods("qwen-chat", "server", 0)) == 1
    assert sim.status("qwen-chat")["phase"] == vocab.PHASE_DEGRADED
    assert sim.role_status("qwen-chat", "server")["ready"] == 1
    # The taint manager evicts it: it reads Terminating forever. Its replacement is created in the
    # other slot and never admitted while it is there (docs/kueue.md#incarnation-slots).
    group = sim.group("qwen-chat", "server", 0)
    sim.kubectl_delete_pod(name)
    sim.step(60)
    before = len(sim.passes)
    for _ in range(4):
        sim.step(60)
    assert name in sim.pods
    replacement = [p for p in sim.replica_pods("qwen-chat", "server", 0) if p["metadata"]["name"] != name]
    assert replacement and all(gated(p) and not deleting(p) for p in replacement)
    # Kueue composed its Workload again for the terminating Pod (it holds the slot while the Pod
    # lasts), and the operator, which cannot free it, leaves it instead of deleting it every pass.
    assert group in sim.workloads
    assert not [i for r in sim.passes[before:] for i in r.intents
                if type(i).__name__ == "DeleteWorkload" and i.name == group]
    # Deleting the Node object resolves it.
    sim.delete_node(sim.node_of(name))
    sim.settle()
    assert uid not in {p["metadata"]["uid"] for p in sim.pods.values()}
    assert sim.status("qwen-chat")["phase"] == vocab.PHASE_READY
    sim.check_departure_events()


def test_a_size_two_instance_losing_one_member_is_rebuilt_whole() -> None:
    sim = Sim(capacity={H20: 32})
    md = example("deepseek-multinode")
    md["spec"]["roles"][0]["replicas"] = 2  # a sibling replica that must not move
    sim.apply(md)
    running(sim, "ds-wide")
    m0, m1 = sim.replica_pods("ds-wide", "server", 0)
    assert m0["metadata"]["name"] == "ds-wide-server-r0-m0" and m1["metadata"]["name"] == "ds-wide-server-r0-m1"
    sibling = sim.replica_pods("ds-wide", "server", 1)
    group = sim.group("ds-wide", "server", 0)
    sim.kubectl_delete_pod("ds-wide-server-r0-m1")
    record = sim.sync("ds-wide")
    assert record is not None
    assert record.deleted == ["ds-wide-server-r0-m0"]  # the surviving member goes with it
    assert group in [i.name for i in record.intents if type(i).__name__ == "DeleteWorkload"]
    assert len(sim.events_by_reason(vocab.EVENT_REPLICA_RESTARTED)) == 1
    sim.settle()
    new = sim.replica_pods("ds-wide", "server", 0)
    # The next incarnation is made in slot 1 (docs/kueue.md#incarnation-slots), under the same hostnames.
    assert [p["metadata"]["name"] for p in new] == ["ds-wide-server-r0-s1-m0", "ds-wide-server-r0-s1-m1"]
    assert [p["spec"]["hostname"] for p in new] == ["ds-wide-server-r0-m0", "ds-wide-server-r0-m1"]
    assert {p["metadata"]["uid"] for p in new}.isdisjoint({m0["metadata"]["uid"], m1["metadata"]["uid"]})
    assert sim.replica_pods("ds-wide", "server", 1) == sibling or \
        [p["metadata"]["uid"] for p in sim.replica_pods("ds-wide", "server", 1)] == [p["metadata"]["uid"] for p in sibling]
    assert sim.status("ds-wide")["phase"] == vocab.PHASE_READY
    sim.check_departure_events()


# --- joint admission --------------------------------------------------------------------------


def test_two_roles_on_a_pool_too_small_for_all_stay_all_pending() -> None:
    sim = Sim(capacity={H20: 6}, release_after=600)
    sim.apply(pd())
    for _ in range(60):
        sim.step(30)
        assert not any(admitted(w) for w in sim.workloads.values())
        assert all(gated(p) for p in sim.pods_of("pd-demo"))
    quota = sim.condition("pd-demo", vocab.COND_QUOTA_RESERVED)
    assert quota["status"] == "False"
    assert "of 4 replicas" in quota["message"]
    assert sum(r["quotaReserved"] for r in sim.status("pd-demo")["roles"]) <= 3
    assert any(not on for _, _, _, on in sim.activity)  # it released what it held (deactivated)
    assert any(on for _, _, _, on in sim.activity)  # and queued again after its back-off
    assert not any(state == "Retry" for _, _, _, state in sim.check_writes)  # Kueue would park it for good
    sim.capacity[H20] = 8  # a ClusterQueue change: Kueue requeues what it parked
    for _ in range(200):  # (a back-off under way ends first: at most one bound)
        sim.step(30)
        if sim.status("pd-demo")["phase"] == vocab.PHASE_READY:
            break
    assert sim.status("pd-demo")["phase"] == vocab.PHASE_READY, "\n".join(sim.trace[-40:])


def test_two_deployments_contending_for_one_pool_do_not_deadlock() -> None:
    sim = Sim(capacity={H20: 8}, release_after=600)
    sim.apply(pd("pd-a"))
    sim.apply(pd("pd-b"))
    sim.sync_all()
    sim.kueue_compose()
    # The worst interleaving: each deployment holds half the pool.
    for name in ("pd-a", "pd-b"):
        sim.kueue_reserve(sim.group(name, "prefill", 0))
        sim.kueue_reserve(sim.group(name, "prefill", 1))
    assert sim.used(H20) == 8
    for _ in range(400):
        sim.step(30)
        if any(sim.status(n).get("phase") == vocab.PHASE_READY for n in ("pd-a", "pd-b")):
            break
    phases = {n: sim.status(n)["phase"] for n in ("pd-a", "pd-b")}
    assert vocab.PHASE_READY in phases.values(), (phases, sim.t)
    loser = next(n for n, p in phases.items() if p != vocab.PHASE_READY)
    winner = next(n for n in phases if n != loser)
    assert not any(admitted(sim.workload_of(loser, r, o)) for r in ("prefill", "decode") for o in (0, 1))
    assert any(not on for _, _, _, on in sim.activity)
    assert sim.t < 4 * 3600  # bounded: a few release rounds at most
    # The loser is whole once the pool frees up.
    sim.delete_deployment(winner)
    for _ in range(100):  # its back-off runs out, then it queues again
        sim.step(30)
        if sim.status(loser)["phase"] == vocab.PHASE_READY:
            break
    assert winner not in sim.parents
    assert sim.status(loser)["phase"] == vocab.PHASE_READY


# --- deletion, cache binding ------------------------------------------------------------------


def test_finalize_deletes_every_workload_and_waits_for_pods_and_workloads() -> None:
    sim = Sim()
    sim.apply(chat(3))
    running(sim, "qwen-chat")
    node = sim.node_of(sim.replica_pods("qwen-chat", "server", 0)[0]["metadata"]["name"])
    sim.set_node_ready(node, False)
    sim.delete_deployment("qwen-chat")
    record = sim.sync("qwen-chat")
    assert record is not None and record.result is not None
    assert record.result.finalized is False
    assert sorted(i.name for i in record.intents if type(i).__name__ == "DeleteWorkload") == sorted(
        sim.group("qwen-chat", "server", o) for o in range(3))
    assert not sim.workloads
    assert record.result.status["phase"] == vocab.PHASE_DELETING
    for _ in range(5):
        sim.step(30)
    assert "qwen-chat" in sim.parents  # a Pod on the NotReady node still reads on the API server
    sim.set_node_ready(node, True)
    sim.settle()
    assert "qwen-chat" not in sim.parents
    assert not sim.pods and not sim.workloads
    assert not sim.events_by_reason(vocab.EVENT_REPLICA_LEAVING)


def test_a_binding_that_is_not_ready_holds_new_replicas_but_never_deletes_running_ones() -> None:
    sim = Sim()
    md = example("qwen-cached")
    sim.apply(md)
    running(sim, "qwen-cached")
    uids = {p["metadata"]["uid"] for p in sim.pods_of("qwen-cached")}
    sim.set_binding_phase("team-a-dram", "Provisioning")
    sim.set_replicas("qwen-cached", "server", 3)
    for _ in range(5):
        sim.step(30)
    assert {p["metadata"]["uid"] for p in sim.pods_of("qwen-cached")} == uids
    assert sim.replica_pods("qwen-cached", "server", 2) == []
    domain = sim.condition("qwen-cached", vocab.COND_DOMAIN_REGISTERED)
    assert (domain["status"], domain["reason"]) == ("False", vocab.REASON_BINDING_NOT_READY)
    # A departure is cleaned up, but its replacement is held too.
    sim.preempt(sim.group("qwen-cached", "server", 1))
    for _ in range(5):
        sim.step(30)
    assert sim.replica_pods("qwen-cached", "server", 1) == []
    assert sim.workload_of("qwen-cached", "server", 1) is None
    assert len(live_pods(sim, "qwen-cached")) == 1
    sim.set_binding_phase("team-a-dram", "Ready")
    sim.settle()
    assert sim.status("qwen-cached")["phase"] == vocab.PHASE_READY
    assert sim.role_status("qwen-cached", "server")["ready"] == 3
    assert uids & {p["metadata"]["uid"] for p in sim.pods_of("qwen-cached")}  # r0 kept serving throughout
    sim.check_departure_events()


def test_a_replacement_never_carries_the_departed_pods_name() -> None:
    sim = Sim()
    sim.apply(chat(1))
    running(sim, "qwen-chat")
    names_seen = [sim.replica_pods("qwen-chat", "server", 0)[0]["metadata"]["name"]]
    for _ in range(3):  # departure after departure on an unchanged render
        sim.kubectl_delete_pod(names_seen[-1])
        sim.settle()
        assert sim.status("qwen-chat")["phase"] == vocab.PHASE_READY
        names_seen.append(sim.replica_pods("qwen-chat", "server", 0)[0]["metadata"]["name"])
    assert len(set(names_seen)) == 4, names_seen
    # The same length as the first name (the admission rule on name lengths still holds).
    assert {len(n) for n in names_seen} == {len(names_seen[0])}
    assert sim.status("qwen-chat")["roles"][0]["nextIncarnations"] == [4]


def test_a_scale_up_of_a_ready_deployment_is_not_degraded() -> None:
    sim = Sim()
    sim.apply(chat(2))
    running(sim, "qwen-chat")
    sim.set_replicas("qwen-chat", "server", 3)
    sim.sync("qwen-chat")
    assert sim.status("qwen-chat")["phase"] != vocab.PHASE_DEGRADED


# --- found by the chaos soak (bench/soak.md) ---------------------------------------------------


def test_an_api_server_restart_mid_pass_loses_the_answer_and_the_next_passes_finish_the_job() -> None:
    """The soak's API server restart: a P/D pair's sync pass was writing the admission check of a new
    replica when the API server went away; the write timed out and the hook answered 503, so
    Metacontroller kept the children and the status it had. The passes after it finish the job: the
    check is written again, the set is admitted whole, nothing that ran is deleted."""
    sim = Sim(capacity={H20: 12})
    sim.apply(pd())
    running(sim, "pd-demo")
    uids = {p["metadata"]["uid"] for p in sim.pods_of("pd-demo")}
    sim.set_replicas("pd-demo", "decode", 3)
    sim.sync("pd-demo")  # the new decoder's Pod
    sim.kueue()  # its Workload composed, quota reserved
    record = sim.sync("pd-demo", answer_lost=True)
    assert record is not None and any(type(i).__name__ == "SetAdmissionCheck" for i in record.intents)
    assert {p["metadata"]["uid"] for p in sim.pods_of("pd-demo")} >= uids
    running(sim, "pd-demo")
    assert sim.role_status("pd-demo", "decode")["ready"] == 3
    assert uids <= {p["metadata"]["uid"] for p in sim.pods_of("pd-demo")}
    assert not sim.events_by_reason(vocab.EVENT_REPLICA_RESTARTED)


# --- the scaler (docs/autoscaling.md): its write played into the deployment --------------------------


def scaler_step(sim: Sim, name: str, units: int, ratios: dict[str, int]) -> None:
    """What a ModelDeploymentScaler's pass writes, applied as the server-side apply would: the
    scaler's planner decides from the stored deployment; only the listed roles' replicas change."""
    from app.api.scaler import ModelDeploymentScaler, scaler_hook_request
    from app.control import scaler as scaling
    from app.control.intents import ApplyRoleReplicas

    scaler = ModelDeploymentScaler.model_validate({
        "metadata": {"name": name, "namespace": sim.namespace, "uid": "mds-uid", "generation": 1},
        "spec": {"deploymentRef": {"name": name}, "roles": [{"name": r, "ratio": k} for r, k in ratios.items()],
                 "replicas": units}})
    result = scaling.plan(scaler_hook_request(scaler, copy.deepcopy(sim.parents[name])), scaling.ScalerSettings(),
                          now=sim.now())
    (write,) = [i for i in result.intents if isinstance(i, ApplyRoleReplicas)]

    def mutate(spec: dict[str, Any]) -> None:
        for role, replicas in write.replicas:
            next(r for r in spec["roles"] if r["name"] == role)["replicas"] = replicas

    sim.edit(name, mutate)


def test_a_scale_step_during_a_rollout_keeps_the_rollouts_gates() -> None:
    """A P/D pair mid-rollout grows by a unit: the new ordinals start on the new render, the old ones
    keep turning over one per role at a time, under Metacontroller's lagging views."""
    sim = Sim(capacity={H20: 16})
    sim.apply(pd(replicas=2))
    running(sim, "pd-demo")
    sim.lagging = True
    sim.catch_up()
    set_image(sim, "pd-demo", "example.com/vllm:v2")
    lowest = {"prefill": 2, "decode": 2}
    for second in range(40):
        if second == 3:
            scaler_step(sim, "pd-demo", 3, {"prefill": 1, "decode": 1})
        for call in range(10):
            sim.catch_up(sim.lagging_pod_names()[call % 2::2])
            sim.sync("pd-demo")
            sim.kueue()
            for role in lowest:
                lowest[role] = min(lowest[role], ready_replicas(sim, "pd-demo", role, 2))
        sim.kubelet()
        sim.check_global()
        sim.advance(1)
    assert min(lowest.values()) >= 1, f"more than one Ready replica of a role lost at once: {lowest}"
    sim.lagging = False
    sim.settle(rounds=120)
    assert {p["spec"]["containers"][0]["image"] for p in sim.pods_of("pd-demo")} == {"example.com/vllm:v2"}
    assert [r["ready"] for r in sim.status("pd-demo")["roles"]] == [3, 3]
    assert sim.status("pd-demo")["phase"] == vocab.PHASE_READY


def test_a_scale_step_the_pool_cannot_fit_queues_every_new_replica_and_keeps_the_survivors() -> None:
    # 2 + 2 replicas of 2 cards hold 8 of 12 cards; a step to 4 units needs 8 more: none may run.
    sim = Sim(capacity={H20: 12}, release_after=600)
    sim.apply(pd(replicas=2))
    running(sim, "pd-demo")
    survivors = {p["metadata"]["uid"] for p in sim.pods_of("pd-demo")}
    scaler_step(sim, "pd-demo", 4, {"prefill": 1, "decode": 1})
    for _ in range(30):
        sim.step(10)
        new = [p for p in sim.pods_of("pd-demo") if p["metadata"]["uid"] not in survivors]
        assert new and all(gated(p) for p in new), "a new replica of the step was admitted"
        assert survivors <= {p["metadata"]["uid"] for p in sim.pods_of("pd-demo") if not deleting(p)}
    scaler_step(sim, "pd-demo", 2, {"prefill": 1, "decode": 1})
    sim.settle(rounds=80)
    assert {p["metadata"]["uid"] for p in sim.pods_of("pd-demo")} == survivors
    assert sim.status("pd-demo")["phase"] == vocab.PHASE_READY


def test_a_replica_kueue_evicts_for_not_getting_ready_in_time_is_rebuilt_and_its_siblings_stay() -> None:
    """The soak's node faults (bench/soak.md, bug 3): Kueue's failed-node replacement re-assigned the
    Workloads on a NotReady node while their Pods stayed where they were, and the next replica Kueue
    placed by that accounting stayed Pending for ever. The simulator places no Pods on nodes; this is
    the operator's half: when Kueue evicts a replica that never got Ready (waitForPodsReady's
    PodsReadyTimeout), the operator rebuilds it as after any eviction and the serving ones stay."""
    sim = Sim(capacity={H20: 12})
    sim.apply(pd())
    running(sim, "pd-demo")
    uids = {p["metadata"]["uid"] for p in sim.pods_of("pd-demo")}
    sim.set_replicas("pd-demo", "prefill", 3)
    for _ in range(3):  # the new replica's Pod, its Workload, the checks: admitted and ungated
        sim.sync("pd-demo")
        sim.kueue()
    group = sim.group("pd-demo", "prefill", 2)
    assert admitted(sim.workloads[group])
    stuck = {p["metadata"]["uid"] for p in sim.replica_pods("pd-demo", "prefill", 2)}
    sim.evict(group, "PodsReadyTimeout", "Exceeded the PodsReady timeout team-a/" + group)
    running(sim, "pd-demo")
    assert sim.role_status("pd-demo", "prefill")["ready"] == 3
    now = {p["metadata"]["uid"] for p in sim.pods_of("pd-demo")}
    assert uids <= now and not stuck & now
    sim.check_departure_events()


def test_a_replica_kueue_placed_elsewhere_after_a_node_failure_is_rebuilt() -> None:
    """The soak's placement drift (bench/soak.md, bug 3): a node failed and came back; Kueue had
    re-placed the replica's Workload on another node, while its Pod, which cannot move, kept running
    where it was. The operator replaces that replica under the rollout's gates (its siblings Ready),
    so Kueue's accounting matches what runs again; its siblings are not touched."""
    sim = Sim()
    sim.apply(chat(3))
    running(sim, "qwen-chat")
    victim = sim.replica_pods("qwen-chat", "server", 1)[0]
    siblings = {p["metadata"]["uid"] for o in (0, 2) for p in sim.replica_pods("qwen-chat", "server", o)}
    elsewhere = next(n for n in sim.nodes if n != victim["spec"]["nodeName"])
    sim.workload_of("qwen-chat", "server", 1)["status"]["admission"] = {"podSetAssignments": [{
        "name": "server", "count": 1, "topologyAssignment": {"levels": [vocab.LABEL_HOSTNAME], "slices": [
            {"domainCount": 1, "podCounts": {"universal": 1}, "valuesPerLevel": [{"universal": elsewhere}]}]}}]}
    drifted = sim.group("qwen-chat", "server", 1)
    record = sim.sync("qwen-chat")
    assert record is not None and [n for n in record.deleted] == [victim["metadata"]["name"]]
    assert drifted in [i.name for i in record.intents if type(i).__name__ == "DeleteWorkload"]
    restarted = sim.events_by_reason(vocab.EVENT_REPLICA_RESTARTED)
    assert len(restarted) == 1 and "no longer places it" in restarted[0]["message"]
    running(sim, "qwen-chat")
    assert siblings <= {p["metadata"]["uid"] for p in sim.pods_of("qwen-chat")}
    assert victim["metadata"]["uid"] not in {p["metadata"]["uid"] for p in sim.pods_of("qwen-chat")}
    sim.check_departure_events()

"""The pipelined turnover (docs/kueue.md#incarnation-slots): a replacement is created in the pass
that gives its predecessor up, in the ordinal's other pod-group slot, and admitted only once no Pod
of the predecessor is left. The simulator's invariants (tests/sim/world.py) also fail any Ready
written while an earlier incarnation's Pod is still there."""

from __future__ import annotations

from app import vocab
from app.control import gang
from app.render import names
from tests.sim.test_stories import chat, pd, running, set_image
from tests.sim.world import Sim, admitted, deleting, gated, incarnation, labels

A10G = "gpustack-nvidia-a10g-linux-amd64"


def test_slot_names_alternate_per_incarnation_and_keep_the_hostname() -> None:
    first, second = names.pod_groups("team-a", "qwen", "server", 0)
    assert first == names.pod_group("team-a", "qwen", "server", 0)  # slot 0: the name before slots
    assert second == f"{first}-s1" and len(second) <= names.LABEL_MAX
    assert [names.slot_of(k) for k in range(4)] == [0, 1, 0, 1]
    assert names.member_pod_in_slot("ds", "server", 2, 1, 0) == names.member_pod("ds", "server", 2, 1) == "ds-server-r2-m1"
    assert names.member_pod_in_slot("ds", "server", 2, 1, 1) == "ds-server-r2-s1-m1"


def test_a_turnover_creates_the_replacement_at_once_and_admits_it_once_the_old_pod_is_gone() -> None:
    sim = Sim(capacity={A10G: 8})
    sim.apply(chat(2))
    running(sim, "qwen-chat")
    old = sim.replica_pods("qwen-chat", "server", 0)[0]
    old_group = sim.group("qwen-chat", "server", 0)
    set_image(sim, "qwen-chat", "example.com/vllm:v2")
    record = sim.sync("qwen-chat")
    assert record is not None and old["metadata"]["name"] in record.deleted
    created = [n for n in record.created if n.startswith("qwen-chat-server-r0-")]
    assert len(created) == 1
    new = sim.pods[created[0]]
    assert incarnation(new) == 1
    assert labels(new)[vocab.LABEL_KUEUE_POD_GROUP_NAME] == names.pod_group("team-a", "qwen-chat", "server", 0, 1) != old_group

    # The old Pod stops slowly (its kubelet has not confirmed yet): the new group is composed and
    # holds quota, and our check keeps it Pending.
    sim.pods[old["metadata"]["name"]]["metadata"].setdefault("finalizers", []).append("example.com/slow")
    for _ in range(3):
        sim.kueue()
        sim.sync("qwen-chat")
    workload = sim.workloads[names.pod_group("team-a", "qwen-chat", "server", 0, 1)]
    assert not admitted(workload) and gated(sim.pods[created[0]])
    check = next(c for c in workload["status"]["admissionChecks"] if c["name"] == vocab.ADMISSION_CHECK_NAME)
    # Kueue's own Pending holds it; a wait of seconds writes no reason on the Workload.
    assert check["state"] == "Pending" and "still stopping" not in (check.get("message") or "")
    sim.advance(gang.STOPPING_REASON_AFTER_SECONDS + 1)
    sim.sync("qwen-chat")
    workload = sim.workloads[names.pod_group("team-a", "qwen-chat", "server", 0, 1)]
    assert not admitted(workload) and gated(sim.pods[created[0]])
    check = next(c for c in workload["status"]["admissionChecks"] if c["name"] == vocab.ADMISSION_CHECK_NAME)
    assert check["state"] == "Pending" and "still stopping" in check["message"]

    pod = sim.pods[old["metadata"]["name"]]
    pod["metadata"]["finalizers"] = [f for f in pod["metadata"]["finalizers"] if f != "example.com/slow"]
    sim.kubelet()
    sim.settle()
    assert old["metadata"]["name"] not in sim.pods
    assert sim.status("qwen-chat")["phase"] == vocab.PHASE_READY
    assert {p["spec"]["containers"][0]["image"] for p in sim.pods_of("qwen-chat")} == {"example.com/vllm:v2"}
    sim.check_departure_events()


def test_a_replacement_waits_for_its_slot_while_an_older_incarnation_still_holds_it() -> None:
    sim = Sim(capacity={A10G: 8})
    sim.apply(chat(1))
    running(sim, "qwen-chat")
    first = sim.replica_pods("qwen-chat", "server", 0)[0]["metadata"]["name"]
    sim.pods[first]["metadata"].setdefault("finalizers", []).append("example.com/slow")  # incarnation 0 lingers
    set_image(sim, "qwen-chat", "example.com/vllm:v2")
    sim.sync("qwen-chat")  # incarnation 1, slot 1, queued behind the lingering Pod
    sim.kueue()
    set_image(sim, "qwen-chat", "example.com/vllm:v3")  # supersedes incarnation 1 before it runs
    record = sim.sync("qwen-chat")
    assert record is not None
    # Incarnation 2 belongs in slot 0, which incarnation 0's Pod still holds: nothing is created yet.
    assert not [n for n in record.created if n.startswith("qwen-chat-server-r0-")]
    assert deleting(sim.pods[first])
    pod = sim.pods[first]
    pod["metadata"]["finalizers"] = [f for f in pod["metadata"]["finalizers"] if f != "example.com/slow"]
    sim.kubelet()
    sim.settle()
    assert sim.status("qwen-chat")["phase"] == vocab.PHASE_READY
    assert {p["spec"]["containers"][0]["image"] for p in sim.pods_of("qwen-chat")} == {"example.com/vllm:v3"}


def _replace_first_replica(sim: Sim) -> tuple[str, str]:
    """A two-replica chat deployment running, then a new image: the pass that turns replica 0 over.
    Returns the old Pod's name and the replacement's group."""
    sim.apply(chat(2))
    running(sim, "qwen-chat")
    old = sim.replica_pods("qwen-chat", "server", 0)[0]["metadata"]["name"]
    set_image(sim, "qwen-chat", "example.com/vllm:v2")
    record = sim.sync("qwen-chat")
    assert record is not None and old in record.deleted
    return old, names.pod_group("team-a", "qwen-chat", "server", 0, 1)


def test_a_single_role_replacement_is_admitted_on_composition_without_another_pass() -> None:
    """docs/kueue.md#ready-on-composition: the turnover's pass leaves a follow-up; once the old Pod
    is gone and Kueue composes the new group, the follow-up writes Ready and Kueue admits it, with
    no pass of ours between (the simulator holds that write to every invariant of a pass's)."""
    sim = Sim(capacity={A10G: 8})
    old, group = _replace_first_replica(sim)
    assert set(sim.follow_ups) == {group}
    assert sim.follow_ups[group][1].stopping_pods == (old,)
    writes = sim.follow_up_writes  # the first replicas were admitted on composition too
    sim.pods[old]["metadata"].setdefault("finalizers", []).append("example.com/slow")
    sim.kubelet()
    sim.kueue()
    # Composed while the old Pod stops: the follow-up waits for it.
    assert group in sim.workloads and not admitted(sim.workloads[group]) and sim.follow_up_writes == writes
    pod = sim.pods[old]
    pod["metadata"]["finalizers"] = [f for f in pod["metadata"]["finalizers"] if f != "example.com/slow"]
    sim.kubelet()
    passes = len(sim.passes)
    sim.kueue()
    assert len(sim.passes) == passes and sim.follow_up_writes == writes + 1
    assert admitted(sim.workloads[group]) and group not in sim.follow_ups
    sim.settle()
    assert sim.status("qwen-chat")["phase"] == vocab.PHASE_READY


def test_a_follow_up_is_dropped_when_the_deployment_moved_on() -> None:
    """An edit between the pass and the composition: the follow-up writes nothing, the next pass
    supersedes the queued replacement, and only the newest render is admitted."""
    sim = Sim(capacity={A10G: 8})
    _old, group = _replace_first_replica(sim)
    writes = sim.follow_up_writes
    set_image(sim, "qwen-chat", "example.com/vllm:v3")  # the spec's generation moves
    sim.kubelet()
    sim.kueue()
    assert sim.follow_up_writes == writes and group not in sim.follow_ups and not admitted(sim.workloads[group])
    sim.settle()
    assert sim.status("qwen-chat")["phase"] == vocab.PHASE_READY
    assert {p["spec"]["containers"][0]["image"] for p in sim.pods_of("qwen-chat")} == {"example.com/vllm:v3"}


def test_a_set_of_roles_leaves_no_follow_up() -> None:
    """Multi-role sets are decided by passes only: their Ready needs every group's reservation."""
    sim = Sim(capacity={A10G: 16})
    sim.apply(pd())
    running(sim, "pd-demo")
    assert sim.follow_ups == {} and sim.follow_up_writes == 0

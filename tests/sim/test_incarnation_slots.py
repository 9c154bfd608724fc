"""The pipelined turnover (docs/kueue.md#incarnation-slots): a replacement is created in the pass
that gives its predecessor up, in the ordinal's other pod-group slot, and admitted only once no Pod
of the predecessor is left. The simulator's invariants (tests/sim/world.py) also fail any Ready
written while an earlier incarnation's Pod is still there."""

from __future__ import annotations

from app import vocab
from app.control import gang
from app.render import names
from tests.sim.test_stories import chat, running, set_image
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

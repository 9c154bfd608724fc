"""Two operator versions answering one deployment's passes (docs/operations.md#upgrading-the-operator).

Version A renders with the defaults; version B is the same build with the upgrade-rehearsal
setting (MODELDEPLOYMENT_RENDER_REHEARSAL=1): every Pod renders differently and under a newer
render revision. Metacontroller's calls land on A or B at random (a Service in front of both), on
lagging informer views, and the simulator checks every pass's invariants as always. The
properties: an upgrade turns each replica over exactly once, to B's render; no ordinal gets two
Pods created for one incarnation; a rollback to A turns nothing over, and A's next spec edit turns
each of B's replicas over once.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from app import vocab
from app.control.sync import SyncSettings
from app.model.context import RenderOptions
from tests.sim.world import Sim, deleting, example

A10G = "gpustack-nvidia-a10g-linux-amd64"
A = SyncSettings(options=RenderOptions())
B = SyncSettings(options=RenderOptions(render_rehearsal=1))


def chat(replicas: int) -> dict[str, Any]:
    md = example("qwen-chat")
    md["spec"]["roles"][0]["replicas"] = replicas
    return md


def revisions(sim: Sim) -> Counter[str]:
    return Counter(p["metadata"]["labels"].get(vocab.LABEL_RENDER_REVISION, "") for p in sim.pods_of("qwen-chat")
                   if not deleting(p))


def created_since(sim: Sim, first_pass: int) -> dict[str, tuple[int, str]]:
    """Pod name -> (ordinal, incarnation) of every Pod the answers since `first_pass` created. A pass
    on a view that has not seen a new Pod yet returns it again under the same name (Metacontroller's
    create then fails with AlreadyExists): one Pod, listed once here."""
    out: dict[str, tuple[int, str]] = {}
    for record in sim.passes[first_pass:]:
        desired = {c["metadata"]["name"]: c for c in (record.result.children if record.result else [])}
        for name in record.created:
            meta = desired[name]["metadata"]
            out[name] = (int(meta["labels"][vocab.LABEL_POD_ORDINAL]),
                         meta["annotations"].get(vocab.ANNOTATION_INCARNATION, "0"))
    return out


def alternate(sim: Sim, rng: random.Random, versions: list[SyncSettings], seconds: int) -> None:
    """`seconds` of passes, each answered by a version picked at random, on lagging views."""
    sim.lagging = True
    for _ in range(seconds):
        for call in range(4):
            sim.settings = rng.choice(versions)
            sim.catch_up(sim.lagging_pod_names()[call % 2::2])
            sim.sync("qwen-chat")
            sim.kueue()
        sim.kubelet()
        sim.check_global()
        sim.advance(1)
    sim.lagging = False


def settle_with(sim: Sim, settings: SyncSettings) -> None:
    sim.settings = settings
    sim.settle(rounds=80)
    assert sim.status("qwen-chat")["phase"] == vocab.PHASE_READY, sim.status("qwen-chat")


@pytest.mark.parametrize("seed", range(4))
def test_an_upgrade_with_both_versions_answering_turns_each_replica_over_once(seed: int) -> None:
    rng = random.Random(seed)
    sim = Sim(capacity={A10G: 8}, check_determinism=False)
    sim.apply(chat(3))
    settle_with(sim, A)
    assert revisions(sim) == Counter({"1": 3})
    first = len(sim.passes)
    restarts_before = len(sim.events_by_reason(vocab.EVENT_REPLICA_RESTARTED))

    alternate(sim, rng, [A, B], 90)  # the operator's rolling upgrade: both versions answer
    settle_with(sim, B)  # A is gone
    assert revisions(sim) == Counter({"2": 3})
    # Exactly one turnover per replica: three ReplicaRestarted, one new Pod per ordinal, and no two
    # Pods created for one (ordinal, incarnation).
    assert len(sim.events_by_reason(vocab.EVENT_REPLICA_RESTARTED)) - restarts_before == 3
    made = created_since(sim, first)
    assert sorted(ordinal for ordinal, _ in made.values()) == [0, 1, 2], made
    assert len(set(made.values())) == len(made) == 3, made

def test_a_rollback_keeps_the_newer_replicas_until_the_spec_changes() -> None:
    rng = random.Random(7)
    sim = Sim(capacity={A10G: 8}, check_determinism=False)
    sim.apply(chat(2))
    settle_with(sim, A)
    alternate(sim, rng, [A, B], 60)
    settle_with(sim, B)
    assert revisions(sim) == Counter({"2": 2})
    names = {p["metadata"]["name"] for p in sim.pods_of("qwen-chat")}

    # Rolled back: only A answers. It defers to B's record until it ages out, then takes it over,
    # and keeps B's replicas as they are.
    sim.settings = A
    for _ in range(60):
        sim.step(5)
    assert {p["metadata"]["name"] for p in sim.pods_of("qwen-chat")} == names
    assert sim.status("qwen-chat")["newestRender"]["revision"] == 1

    # A spec edit: A renders the new spec and turns each of B's replicas over once.
    restarts = len(sim.events_by_reason(vocab.EVENT_REPLICA_RESTARTED))
    sim.edit("qwen-chat", lambda spec: spec["roles"][0].setdefault("env", []).append({"name": "X", "value": "1"}))
    settle_with(sim, A)
    assert revisions(sim) == Counter({"1": 2})
    assert len(sim.events_by_reason(vocab.EVENT_REPLICA_RESTARTED)) - restarts == 2

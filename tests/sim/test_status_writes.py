"""Status writes per pass (docs/status.md#replica-stages): a deployment that stays where it is
writes nothing new, pass after pass, hours of simulated time apart, though some of its replicas
are not Ready. Played in the simulator (Metacontroller, Kueue and the kubelet around `reconcile`)."""

from __future__ import annotations

import json

from app import vocab
from tests.sim.world import Sim, example

A10G = "gpustack-nvidia-a10g-linux-amd64"


def test_a_deployment_stuck_in_one_stage_writes_no_new_status_over_many_passes():
    md = example("qwen-chat")  # four replicas of two A10G cards
    sim = Sim(capacity={A10G: 4})  # room for two of them: the other two wait for quota
    sim.apply(md)
    sim.settle()
    name = md["metadata"]["name"]
    settled = json.dumps(sim.status(name), sort_keys=True)
    role = sim.role_status(name, "server")
    assert role["ready"] == 2
    assert [(e["stage"], e["reason"]) for e in role["notReady"]] == [
        (vocab.STAGE_QUEUED, vocab.STAGE_REASON_QUOTA_PENDING)] * 2
    writes = 0
    for _ in range(100):
        sim.step(120.0)  # every pass a resync two minutes on: 200 minutes in all
        now = json.dumps(sim.status(name), sort_keys=True)
        writes += now != settled
        settled = now
    assert writes == 0, f"{writes} status writes in 100 passes of a deployment that did not move"


def test_a_rollout_writes_a_bounded_number_of_statuses_and_ends_on_the_settled_one():
    """docs/status.md#settling: a 5-replica rollout, the system stepping one second at a time (a pass
    per step, as on the real stack), writes at the moments that must be written (a condition's
    status, the next incarnation, the phase) and holds the progress between them for the window."""
    from bench.status_writes import EDITED_IMAGE, StagedSim, count_writes

    md = example("qwen-chat")
    md["spec"]["roles"][0]["replicas"] = 5
    sim = StagedSim(capacity={A10G: 12})
    sim.apply(md)
    sim.settle(rounds=400, seconds=1.0)
    name = md["metadata"]["name"]
    assert sim.status(name)["phase"] == vocab.PHASE_READY
    first = len(sim.passes)
    before = {k: v for k, v in sim.status(name).items() if k != "observedGeneration"}
    sim.edit(name, lambda spec: spec["roles"][0].update(image=EDITED_IMAGE))
    sim.settle(rounds=800, seconds=1.0)
    counted = count_writes(sim, first, before)
    assert counted["passes"] >= 20, counted  # every stage of every turnover was seen by a pass
    assert counted["writes"] <= 3 * 5, counted  # at most three per turnover (31 before the window)
    role = sim.role_status(name, "server")
    assert sim.status(name)["phase"] == vocab.PHASE_READY and role["ready"] == role["admitted"] == 5
    assert "notReady" not in role
    held = [r for r in sim.passes[first:] if r.result is not None and r.result.resync_after is not None]
    assert held, "a held status asks Metacontroller to come back when its window ends"

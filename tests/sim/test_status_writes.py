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

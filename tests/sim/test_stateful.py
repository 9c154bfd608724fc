"""Property-based sequences: random interleavings of user edits, Kueue, Pod deletions, node
failures and hook passes. The simulator checks every pass's invariants as it goes
(tests/sim/world.py); the machine checks the store after every step, and at the end lets the
system settle on a healthy cluster and requires every deployment to converge.
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, event, settings
from hypothesis.utils.conventions import not_set
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from app import vocab
from tests.sim.world import Sim, admitted, deleting, example, fingerprint, gated, reserved

A10G = "gpustack-nvidia-a10g-linux-amd64"
H20 = "gpustack-nvidia-h20-linux-amd64"
ROLES = {"pd": ["prefill", "decode"], "wide": ["server"]}


def pd_pair() -> dict[str, Any]:
    """Two roles admitted as a set, cached (the binding can go away), no router (fast to render)."""
    md = example("pd-pair")
    md["metadata"]["name"] = "pd"
    del md["spec"]["router"]
    return md


def wide_chat() -> dict[str, Any]:
    """One role of two-Pod instances: fate-sharing members, fixed member names."""
    md = example("qwen-chat")
    md["metadata"]["name"] = "wide"
    role = md["spec"]["roles"][0]
    role.update(replicas=2, size=2)
    role["resources"]["accelerator"] = 2
    return md


class ModelDeploymentMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # Tight pools: pd needs 2 cards per group (4 groups at 2 replicas), wide 4 per instance.
        self.sim = Sim(capacity={H20: 10, A10G: 12}, release_after=300, nodes_per_queue=3)
        self.revision = 0

    @initialize(running=st.booleans(), lag=st.booleans(), views_lag=st.booleans())
    def create(self, running: bool, lag: bool, views_lag: bool) -> None:
        # Half the runs keep a deleted Workload Terminating until Kueue's next round.
        self.sim.workload_finalizer_lag = lag
        # Half the runs call the hooks with Metacontroller's informer views, which lag the store.
        self.sim.lagging = views_lag
        self.sim.apply(pd_pair())
        self.sim.apply(wide_chat())
        if running:
            # Most sequences start from a serving deployment, where departures and rollouts matter.
            self.sim.settle()

    # --- users ---------------------------------------------------------------------------------

    def _exists(self, dep: str) -> bool:
        md = self.sim.parents.get(dep)
        return md is not None and not md["metadata"].get("deletionTimestamp")

    @rule(dep=st.sampled_from(sorted(ROLES)), role=st.integers(0, 1), replicas=st.integers(1, 3))
    def scale(self, dep: str, role: int, replicas: int) -> None:
        if not self._exists(dep):
            return
        before = self.sim.render_facts(dep)
        self.sim.set_replicas(dep, ROLES[dep][role % len(ROLES[dep])], replicas)
        # What a replica renders never depends on how many there are: survivors are untouched.
        assert self.sim.render_facts(dep) == before

    @rule(dep=st.sampled_from(sorted(ROLES)), role=st.integers(0, 1),
          field=st.sampled_from(["image", "extraArgs", "env"]))
    def edit_render(self, dep: str, role: int, field: str) -> None:
        if not self._exists(dep):
            return
        self.revision += 1
        name = ROLES[dep][role % len(ROLES[dep])]
        revision = self.revision

        def mutate(spec: dict[str, Any]) -> None:
            target = next(r for r in spec["roles"] if r["name"] == name)
            if field == "image":
                target["image"] = f"example.com/engine:r{revision}"
            elif field == "extraArgs":
                target["extraArgs"] = [*target.get("extraArgs", [])[:2], "--max-num-seqs", str(revision)]
            else:
                target["env"] = [{"name": "EXPERIMENT", "value": str(revision)}]

        self.sim.edit(dep, mutate)

    @precondition(lambda self: self._exists("wide"))
    @rule()
    def delete_wide(self) -> None:
        self.sim.delete_deployment("wide")

    @rule(ready=st.booleans())
    def binding(self, ready: bool) -> None:
        self.sim.set_binding_phase("team-a-dram", "Ready" if ready else "Provisioning")

    # --- Metacontroller ------------------------------------------------------------------------

    @rule(dep=st.sampled_from(sorted(ROLES)))
    def sync(self, dep: str) -> None:
        self.sim.sync(dep)

    @rule(dep=st.sampled_from(sorted(ROLES)))
    def sync_answer_lost(self, dep: str) -> None:
        """The hook acted (Workload deletes, events, checks) but Metacontroller timed out."""
        self.sim.sync(dep, answer_lost=True)

    @rule(dep=st.sampled_from(sorted(ROLES)), data=st.data(), calls=st.integers(2, 6))
    def sync_burst(self, dep: str, data: st.DataObject, calls: int) -> None:
        """Metacontroller's real call pattern: many passes in a row, each on whatever part of the
        store the informer has caught up with (any subset, in any order), Kueue acting between."""
        for _ in range(calls):
            lagging = self.sim.lagging_pod_names()
            if lagging:
                self.sim.catch_up(data.draw(st.lists(st.sampled_from(lagging), unique=True), label="caught up"))
            self.sim.sync(dep)
            if data.draw(st.booleans(), label="kueue acts"):
                self.sim.kueue()

    @rule(data=st.data())
    def informer_catch_up(self, data: st.DataObject) -> None:
        lagging = self.sim.lagging_pod_names()
        if lagging:
            self.sim.catch_up(data.draw(st.lists(st.sampled_from(lagging), unique=True), label="caught up"))

    @rule()
    def sync_all(self) -> None:
        self.sim.sync_all()

    @rule(seconds=st.sampled_from([1, 5, 30]))
    def tick(self, seconds: int) -> None:
        """Every component takes a turn: hooks, Kueue, kubelet."""
        self.sim.step(seconds)

    # --- Kueue ---------------------------------------------------------------------------------

    @rule()
    def kueue_compose(self) -> None:
        self.sim.kueue_compose()

    @rule(data=st.data())
    def kueue_reserve_one(self, data: st.DataObject) -> None:
        queued = self.sim.queued()
        if queued:
            self.sim.kueue_reserve(data.draw(st.sampled_from(queued), label="reserve"))

    @rule()
    def kueue_reserve_all(self) -> None:
        self.sim.kueue_reserve_all()

    @rule()
    def kueue_checks(self) -> None:
        self.sim.kueue_checks()

    @rule(data=st.data())
    def preempt(self, data: st.DataObject) -> None:
        holding = sorted(n for n, w in self.sim.workloads.items() if reserved(w))
        if holding:
            self.sim.preempt(data.draw(st.sampled_from(holding), label="preempt"))

    # --- Pods and nodes ------------------------------------------------------------------------

    @rule(data=st.data())
    def delete_pod(self, data: st.DataObject) -> None:
        pods = sorted(n for n, p in self.sim.pods.items() if not deleting(p))
        if pods:
            self.sim.kubectl_delete_pod(data.draw(st.sampled_from(pods), label="pod"))

    @rule(data=st.data())
    def force_remove_pod(self, data: st.DataObject) -> None:
        pods = sorted(self.sim.pods)
        if pods:
            self.sim.force_remove_pod(data.draw(st.sampled_from(pods), label="pod"))

    @rule(data=st.data())
    def fail_pod(self, data: st.DataObject) -> None:
        pods = sorted(n for n, p in self.sim.pods.items() if p["spec"].get("nodeName") and not deleting(p))
        if pods:
            self.sim.fail_pod(data.draw(st.sampled_from(pods), label="pod"))

    @rule()
    def kubelet(self) -> None:
        self.sim.kubelet()

    @rule(data=st.data(), ready=st.booleans())
    def node_readiness(self, data: st.DataObject, ready: bool) -> None:
        node = data.draw(st.sampled_from(sorted(self.sim.nodes)), label="node")
        self.sim.set_node_ready(node, ready)

    @rule(data=st.data())
    def replace_node(self, data: st.DataObject) -> None:
        """A machine is replaced: its Node object goes, a fresh one joins the pool."""
        node = data.draw(st.sampled_from(sorted(self.sim.nodes)), label="node")
        queue = self.sim.nodes[node]["queue"]
        self.sim.delete_node(node)
        self.revision += 1
        self.sim.nodes[f"{queue}-node-x{self.revision}"] = {"ready": True, "queue": queue}

    @rule(seconds=st.sampled_from([5, 30, 200, 400]))
    def advance(self, seconds: int) -> None:
        self.sim.advance(seconds)

    # --- checks --------------------------------------------------------------------------------

    @invariant()
    def store_invariants(self) -> None:
        self.sim.check_global()

    def teardown(self) -> None:
        """On a healthy cluster with room for everything, every deployment converges."""
        sim = self.sim
        for node in sim.nodes:
            sim.nodes[node]["ready"] = True
        sim.set_binding_phase("team-a-dram", "Ready")
        sim.capacity = {H20: 40, A10G: 40}
        for _ in range(80):
            before = sim.state_key()
            sim.step(60)
            done = all(
                md.get("status", {}).get("phase") == vocab.PHASE_READY
                and md.get("status", {}).get("observedGeneration") == md["metadata"]["generation"]
                for md in sim.parents.values()
            )
            if done and sim.state_key() == before and not sim.called_back():
                break
        for name, md in sim.parents.items():
            assert not md["metadata"].get("deletionTimestamp"), f"{name}: deletion never finalized\n" + "\n".join(sim.trace[-40:])
            status = md["status"]
            assert status["phase"] == vocab.PHASE_READY, f"{name} did not converge: {status}\n" + "\n".join(sim.trace[-60:])
            cond = sim.condition(name, vocab.COND_REPLICAS_UP_TO_DATE)
            assert cond["status"] == "True", cond
            quota = sim.condition(name, vocab.COND_QUOTA_RESERVED)
            assert quota["status"] == "True", quota
            facts = sim.render_facts(name)
            for role in md["spec"]["roles"]:
                size = int(role.get("size", 1))
                for ordinal in range(int(role["replicas"])):
                    pods = sim.replica_pods(name, role["name"], ordinal)
                    assert len(pods) == size and all(not deleting(p) and not gated(p) for p in pods), pods
                    assert {fingerprint(p) for p in pods} == {facts[role["name"]][0]}
                    assert admitted(sim.workload_of(name, role["name"], ordinal))
                extra = [p for p in sim.pods_of(name) if p["metadata"]["labels"][vocab.LABEL_COMPONENT] == role["name"]
                         and int(p["metadata"]["labels"][vocab.LABEL_POD_ORDINAL]) >= int(role["replicas"])]
                assert not extra, extra
        # Nothing leaks: every Workload belongs to a declared replica of a deployment that exists.
        declared = {sim.group(name, r["name"], o) for name, md in sim.parents.items()
                    for r in md["spec"]["roles"] for o in range(int(r["replicas"]))}
        assert set(sim.workloads) <= declared, set(sim.workloads) - declared
        sim.check_departure_events()
        for reason in (vocab.EVENT_REPLICA_EVICTED, vocab.EVENT_REPLICA_LEAVING, vocab.EVENT_REPLICA_RESTARTED):
            event(f"{reason} recorded: {min(len(sim.events_by_reason(reason)), 3)}+")
        event(f"Retry written: {any(state == 'Retry' for _, _, _, state in sim.check_writes)}")
        event(f"incarnations: {min(len(sim.all_incarnations) // 5 * 5, 30)}+")


# Modest and reproducible by default (a 2-core CI machine: the same 50 histories every run); a
# deeper, random hunt: MODELDEPLOYMENT_SIM_RANDOM=1 MODELDEPLOYMENT_SIM_EXAMPLES=500
# MODELDEPLOYMENT_SIM_STEPS=80 .venv/bin/pytest tests/sim/test_stateful.py --hypothesis-show-statistics
RANDOM_HUNT = os.environ.get("MODELDEPLOYMENT_SIM_RANDOM", "0") == "1"
ModelDeploymentMachine.TestCase.settings = settings(
    derandomize=not RANDOM_HUNT,
    database=None if not RANDOM_HUNT else not_set,
    max_examples=int(os.environ.get("MODELDEPLOYMENT_SIM_EXAMPLES", "50")),
    stateful_step_count=int(os.environ.get("MODELDEPLOYMENT_SIM_STEPS", "30")),
    deadline=None,
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestModelDeployment = ModelDeploymentMachine.TestCase

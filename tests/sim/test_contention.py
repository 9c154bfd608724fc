"""Several joint sets contending for one pool that fits one of them, forced to collide: they start
holding in the same second, so every one of them reaches the same release bound in the same pass
second (docs/kueue.md#deadlock-release). The simulator's Kueue parks what it finds inadmissible and
requeues it only on its triggers (tests/sim/world.py), as Kueue v0.19 does.

What must hold, whatever the split of the pool: exactly one set yields at a time (the others keep
what they hold), the pool is never left empty while a set waits for longer than a back-off, and
the sets are served in turn: each one admitted within two bounds of the pool freeing.
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app import vocab
from tests.sim.world import Sim, admitted, deleting, example, reserved

H20 = "gpustack-nvidia-h20-linux-amd64"
BOUND = 60.0  # the release bound (MODELDEPLOYMENT_GANG_RELEASE_AFTER_SECONDS)
STEP = 5.0
GROUPS = [("prefill", 0), ("prefill", 1), ("decode", 0), ("decode", 1)]  # 2 cards each: 8 per set


def pd(name: str) -> dict[str, Any]:
    md = example("pd-pair")
    md["metadata"]["name"] = name
    del md["spec"]["router"]
    return md


@st.composite
def splits(draw: st.DrawFn) -> tuple[int, ...]:
    """How many of its 4 groups each of 2-4 contenders holds when they collide: every one holds part,
    none the whole, and together no more than the pool (8 cards, 4 groups)."""
    n = draw(st.integers(2, 4))
    held = [1] * n
    for _ in range(draw(st.integers(0, 4 - n))):
        i = draw(st.integers(0, n - 1))
        if held[i] < 3:
            held[i] += 1
    return tuple(held)


def ready(sim: Sim, name: str) -> bool:
    return name in sim.parents and sim.status(name).get("phase") == vocab.PHASE_READY


def serving(sim: Sim) -> list[str]:
    return [n for n in sorted(sim.parents) if not deleting(sim.parents[n]) and ready(sim, n)]


class Watch:
    """Steps the system and checks, at every step: no Retry is ever written (Kueue would park the
    Workload for good), at most one set sharing the pool backs off at a time from yielding in the
    same second as another, and the pool is never empty for longer than a back-off while a set waits."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.idle_since: float | None = None

    def step(self) -> None:
        sim = self.sim
        sim.step(STEP)
        assert not any(state == "Retry" for _, _, _, state in sim.check_writes), "Retry written"
        yields: dict[float, set[str]] = {}
        for t, deployment, _, on in sim.activity:
            if not on:
                yields.setdefault(t, set()).add(deployment)
        both = {t: d for t, d in yields.items() if len(d) > 1}
        assert not both, f"more than one set yielded at once: {both}\n" + "\n".join(sim.trace[-60:])
        waiting = [n for n in sim.parents if not deleting(sim.parents[n]) and not ready(sim, n)]
        empty = not any(reserved(w) for w in sim.workloads.values())
        if waiting and empty:
            self.idle_since = sim.t if self.idle_since is None else self.idle_since
            assert sim.t - self.idle_since <= BOUND + 2 * STEP, (
                f"the pool stayed empty for {sim.t - self.idle_since}s while {waiting} wait\n" + "\n".join(sim.trace[-60:]))
        else:
            self.idle_since = None

    def until(self, done: Any, seconds: float, what: str) -> float:
        start = self.sim.t
        while not done():
            assert self.sim.t - start <= seconds, f"{what}: not within {seconds}s\n" + "\n".join(self.sim.trace[-80:])
            self.step()
        return self.sim.t - start


def collide(held: tuple[int, ...]) -> tuple[Sim, Watch, list[str]]:
    sim = Sim(capacity={H20: 8}, release_after=BOUND)
    names_ = [f"contend-{i}" for i in range(len(held))]
    for name in names_:
        sim.apply(pd(name))  # the same second: the same creation time, only the UIDs differ
    sim.sync_all()
    sim.kueue_compose()
    for name, count in zip(names_, held):
        for role, ordinal in GROUPS[:count]:
            assert sim.kueue_reserve(sim.group(name, role, ordinal))
    for name in names_:  # the rest of every set is parked: no room
        for role, ordinal in GROUPS:
            sim.kueue_reserve(sim.group(name, role, ordinal))
    return sim, Watch(sim), names_


def serve_in_turn(held: tuple[int, ...]) -> None:
    sim, watch, contenders = collide(held)
    # Rounds until the first set is whole: each round one set yields, and a round lasts one bound.
    watch.until(lambda: bool(serving(sim)), 2 * BOUND * len(held) + 4 * STEP, "the first set admitted")
    served: list[str] = []
    while True:
        (winner,) = serving(sim)
        assert all(admitted(sim.workload_of(winner, r, o)) for r, o in GROUPS)
        served.append(winner)
        sim.delete_deployment(winner)
        watch.until(lambda: winner not in sim.parents, 10 * STEP, f"{winner} deleted")
        if len(served) == len(contenders):
            break
        # The pool is free: the next set is whole within two bounds (one back-off at most, then one
        # release of another holder's part).
        watch.until(lambda: bool(serving(sim)), 2 * BOUND + 2 * STEP, f"the set after {winner} admitted")
    assert sorted(served) == contenders


@settings(max_examples=int(os.environ.get("MODELDEPLOYMENT_SIM_CONTENTION_EXAMPLES", "12")), derandomize=True,
          database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(held=splits())
def test_contenders_colliding_at_their_bound_are_served_in_turn(held: tuple[int, ...]) -> None:
    serve_in_turn(held)


def test_two_three_and_four_contenders_each_holding_one_group() -> None:
    for n in (2, 3, 4):
        serve_in_turn((1,) * n)


def test_three_of_four_against_one_the_smaller_share_yields() -> None:
    """The end-to-end failure that named the problem: one set held 3 of 4 groups, the other 1,
    both at their bound in the same second; the one holding the smaller share yields, the other
    completes at once."""
    sim, watch, (a, b) = collide((3, 1))
    watch.until(lambda: bool(serving(sim)), BOUND + 4 * STEP, "the first set admitted")
    assert serving(sim) == [a]
    assert {d for _, d, _, on in sim.activity if not on} == {b}

"""Ready on composition (docs/kueue.md#ready-on-composition): the follow-up a pass leaves for a
single-role group it creates, carried out on the copies of its Workload the watch hands it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app import vocab
from app.control import composition
from app.control.intents import ReadyOnComposition, SetAdmissionCheck
from app.kube import composition as follower_module
from app.kube.composition import CompositionFollower
from app.kube.executor import Executor, ParentRef
from app.render import names
from tests.helpers import parent, pods, sync

GROUP = names.pod_group("team-a", "qwen", "server", 0, 1)
INTENT = ReadyOnComposition(namespace="team-a", deployment="qwen", deployment_uid="uid-1", generation=2,
                            revision=1, workload=GROUP, stopping_pods=("qwen-server-r0-old",), message=composition.SINGLE_ROLE_READY)


def copy_of(rv: str, state: str | None = "Pending", *conditions: str, deleting: bool = False) -> dict[str, Any]:
    wl: dict[str, Any] = {"metadata": {"name": GROUP, "namespace": "team-a", "resourceVersion": rv},
                          "spec": {}, "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]}}
    if state is not None:
        wl["status"]["admissionChecks"] = [{"name": vocab.ADMISSION_CHECK_NAME, "state": state}]
    if deleting:
        wl["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    return wl


class FakeKube:
    def __init__(self, pods: set[str], generation: int = 2, members: dict[str, dict[str, Any]] | None = None) -> None:
        self.pods = set(pods)
        self.generation = generation
        self.copies: list[dict[str, Any]] = []  # what a read of the Workload returns, in turn
        self.pod_reads = 0
        self.members = dict(members or {})  # the group's stored Pods, by name

    async def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.members.get(name)

    async def pod_exists(self, namespace: str, name: str) -> bool:
        self.pod_reads += 1
        exists = name in self.pods
        self.pods.discard(name)  # the next read finds it gone
        return exists

    async def model_deployment(self, namespace: str, name: str) -> dict[str, Any] | None:
        return {"metadata": {"name": name, "namespace": namespace, "uid": "uid-1", "generation": self.generation}}

    async def workload(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.copies.pop(0) if self.copies else None


class Writes:
    def __init__(self, answers: list[bool] | None = None) -> None:
        self.made: list[SetAdmissionCheck] = []
        self.answers = list(answers or [])

    async def __call__(self, intent: SetAdmissionCheck) -> bool:
        self.made.append(intent)
        return self.answers.pop(0) if self.answers else True


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(follower_module, "STOPPING_RECHECK_SECONDS", 0.0)


def follower(kube: FakeKube, writes: Writes) -> CompositionFollower:
    f = CompositionFollower(kube, writes, lambda: "2026-12-01T00:00:00Z")  # type: ignore[arg-type]
    f.watching = asyncio.get_running_loop().create_future()  # type: ignore[assignment]  # no watch in a unit test
    return f


async def settled(f: CompositionFollower) -> None:
    while f.busy:
        await asyncio.wait(list(f.busy.values()))


def test_ready_is_written_once_the_old_pods_are_gone_on_the_newest_copy() -> None:
    async def story() -> tuple[Writes, CompositionFollower, FakeKube]:
        kube, writes = FakeKube({"qwen-server-r0-old"}), Writes()
        f = follower(kube, writes)
        f.expect(INTENT)
        kube.copies = [copy_of("11")]  # read again after the old Pod was found still there
        f.seen(copy_of("10"))
        await settled(f)
        return writes, f, kube

    writes, f, kube = asyncio.run(story())
    assert [(w.workload, w.state, w.message, w.resource_version) for w in writes.made] == [
        (GROUP, vocab.CHECK_STATE_READY, composition.SINGLE_ROLE_READY, "11")]
    assert f.waiting == {} and kube.pod_reads == 2


def test_a_copy_without_our_check_waits_for_the_next_one() -> None:
    async def story() -> tuple[Writes, CompositionFollower]:
        kube, writes = FakeKube(set()), Writes()
        f = follower(kube, writes)
        f.expect(INTENT)
        f.seen(copy_of("10", None))
        await settled(f)
        assert writes.made == [] and ("team-a", GROUP) in f.waiting
        f.seen(copy_of("11"))
        await settled(f)
        return writes, f

    writes, f = asyncio.run(story())
    assert [w.resource_version for w in writes.made] == ["11"] and f.waiting == {}


def test_a_copy_that_arrives_while_the_follow_up_runs_is_read_again() -> None:
    async def story() -> Writes:
        kube, writes = FakeKube(set()), Writes()
        f = follower(kube, writes)
        f.expect(INTENT)
        f.seen(copy_of("10", None))  # Kueue has not listed our check yet: the follow-up waits...
        f.seen(copy_of("11"))  # ...and this copy comes while it runs
        kube.copies = [copy_of("11")]
        await settled(f)
        return writes

    assert [w.resource_version for w in asyncio.run(story()).made] == ["11"]


def on_one_copy(kube: FakeKube, intent: ReadyOnComposition) -> tuple[Writes, CompositionFollower]:
    """The follow-up for `intent`, handed one copy of its Workload with our check Pending."""
    async def story() -> tuple[Writes, CompositionFollower]:
        writes = Writes()
        f = follower(kube, writes)
        f.expect(intent)
        f.seen(copy_of("10"))
        await settled(f)
        return writes, f

    return asyncio.run(story())


def test_a_deployment_edited_since_the_pass_drops_the_follow_up() -> None:
    writes, f = on_one_copy(FakeKube(set(), generation=3), INTENT)
    assert writes.made == [] and f.waiting == {}


def member(name: str, fingerprint: str, *, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "annotations": {vocab.ANNOTATION_FINGERPRINT: fingerprint}}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    return {"metadata": meta}


WIDE = ReadyOnComposition(namespace="team-a", deployment="qwen", deployment_uid="uid-1", generation=2, revision=1,
                          workload=GROUP, stopping_pods=(), message=composition.SINGLE_ROLE_READY,
                          members=("qwen-server-r0-s1-m0", "qwen-server-r0-s1-m1"), fingerprint="fp-new")


@pytest.mark.parametrize("stored, written", [
    ({"qwen-server-r0-s1-m0": member("qwen-server-r0-s1-m0", "fp-new"),
      "qwen-server-r0-s1-m1": member("qwen-server-r0-s1-m1", "fp-new")}, True),
    # The pass's view had not listed an older render's Pods under these names: Kueue composed them.
    ({"qwen-server-r0-s1-m0": member("qwen-server-r0-s1-m0", "fp-old"),
      "qwen-server-r0-s1-m1": member("qwen-server-r0-s1-m1", "fp-old")}, False),
    ({"qwen-server-r0-s1-m0": member("qwen-server-r0-s1-m0", "fp-new"),
      "qwen-server-r0-s1-m1": member("qwen-server-r0-s1-m1", "fp-old")}, False),
    ({"qwen-server-r0-s1-m0": member("qwen-server-r0-s1-m0", "fp-new")}, False),
    ({"qwen-server-r0-s1-m0": member("qwen-server-r0-s1-m0", "fp-new"),
      "qwen-server-r0-s1-m1": member("qwen-server-r0-s1-m1", "fp-new", deleting=True)}, False),
])
def test_a_multi_pod_group_is_written_only_when_its_members_are_on_the_passs_render(
        stored: dict[str, dict[str, Any]], written: bool) -> None:
    writes, f = on_one_copy(FakeKube(set(), members=stored), WIDE)
    assert [w.workload for w in writes.made] == ([GROUP] if written else []) and f.waiting == {}


@pytest.mark.parametrize("example_name, size", [("deepseek-multinode", 2), ("qwen-chat", 1)])
def test_a_pass_hands_a_multi_pod_groups_members_and_render_to_its_follow_up(example_name: str, size: int) -> None:
    result = sync(parent(example_name))
    follow_ups = [i for i in result.intents if isinstance(i, ReadyOnComposition)]
    assert follow_ups
    created = pods(result)
    for intent in follow_ups:
        group = [p for p in created if p["metadata"]["labels"][vocab.LABEL_KUEUE_POD_GROUP_NAME] == intent.workload]
        assert len(group) == size
        assert {p["metadata"]["annotations"][vocab.ANNOTATION_FINGERPRINT] for p in group} == {intent.fingerprint}
        # A one-Pod group's name carries its render: nothing to read.
        assert intent.members == (tuple(p["metadata"]["name"] for p in group) if size > 1 else ())


def test_a_stale_copy_is_read_again_and_written_on_the_fresh_one() -> None:
    async def story() -> Writes:
        kube, writes = FakeKube(set()), Writes([False, True])
        f = follower(kube, writes)
        f.expect(INTENT)
        kube.copies = [copy_of("12")]
        f.seen(copy_of("10"))
        await settled(f)
        return writes

    assert [w.resource_version for w in asyncio.run(story()).made] == ["10", "12"]


def test_a_workload_no_follow_up_waits_for_is_left_alone() -> None:
    async def story() -> Writes:
        writes = Writes()
        f = follower(FakeKube(set()), writes)
        f.seen(copy_of("10"))
        await settled(f)
        return writes

    assert asyncio.run(story()).made == []


@pytest.mark.parametrize("workload, step", [
    (copy_of("1"), composition.Composed.WRITE),
    (copy_of("1", None), composition.Composed.WAIT),
    (copy_of("1", "Ready"), composition.Composed.DONE),
    (copy_of("1", "Retry"), composition.Composed.DONE),
    (copy_of("1", "Pending", "QuotaReserved"), composition.Composed.WRITE),  # reserved, waiting for our check
    (copy_of("1", "Pending", "Admitted"), composition.Composed.DONE),
    (copy_of("1", deleting=True), composition.Composed.DONE),
    ({**copy_of("1"), "spec": {"active": False}}, composition.Composed.DONE),
])
def test_the_follow_ups_step_on_one_copy(workload: dict[str, Any], step: composition.Composed) -> None:
    assert composition.composed_step(workload) is step


@pytest.mark.parametrize("live, unchanged", [
    ({"metadata": {"uid": "uid-1", "generation": 2}}, True),
    ({"metadata": {"uid": "uid-1", "generation": 3}}, False),
    ({"metadata": {"uid": "uid-2", "generation": 2}}, False),
    ({"metadata": {"uid": "uid-1", "generation": 2, "deletionTimestamp": "2026-12-01T00:00:00Z"}}, False),
    (None, False),
    # A newer operator answers it (its record is fresh): the follow-up of an older one stands down.
    ({"metadata": {"uid": "uid-1", "generation": 2},
      "status": {"newestRender": {"revision": 2, "renewedAt": "2026-12-01T00:00:00Z"}}}, False),
    ({"metadata": {"uid": "uid-1", "generation": 2},
      "status": {"newestRender": {"revision": 1, "renewedAt": "2026-12-01T00:00:00Z"}}}, True),
    ({"metadata": {"uid": "uid-1", "generation": 2},
      "status": {"newestRender": {"revision": 2, "renewedAt": "2026-11-30T00:00:00Z"}}}, True),  # aged out
])
def test_the_deployment_must_be_the_one_the_pass_decided_on(live: dict[str, Any] | None, unchanged: bool) -> None:
    assert composition.deployment_unchanged(INTENT, live, "2026-12-01T00:00:10Z") is unchanged


def test_the_executor_hands_a_follow_up_of_its_parent_to_the_follower_and_drops_anothers() -> None:
    class Kube:
        async def model_deployment(self, namespace: str, name: str) -> dict[str, Any]:
            return {"metadata": {"name": name, "namespace": namespace, "uid": "uid-1"},
                    "spec": {"roles": [{"name": "server"}]}}

    async def story() -> Executor:
        executor = Executor(Kube())  # type: ignore[arg-type]
        executor.composition.watching = asyncio.get_running_loop().create_future()  # type: ignore[assignment]
        other = ReadyOnComposition(**{**INTENT.__dict__, "deployment_uid": "uid-9"})
        await executor.run(ParentRef("team-a", "qwen", "uid-1"), [INTENT, other])
        return executor

    executor = asyncio.run(story())
    assert [intent for intent, _ in executor.composition.waiting.values()] == [INTENT]


class WatchingKube(FakeKube):
    """A Workload watch fed by the test: each start records the version it resumes from."""

    def __init__(self) -> None:
        super().__init__(set())
        self.events: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
        self.starts: list[str | None] = []

    async def watch_workloads(self, resume_from: str | None = None) -> Any:
        self.starts.append(resume_from)
        while True:
            yield await self.events.get()


def test_the_watch_stops_when_nothing_waits_and_resumes_from_the_last_version_seen() -> None:
    async def story() -> tuple[WatchingKube, Writes, CompositionFollower]:
        kube, writes = WatchingKube(), Writes()
        f = CompositionFollower(kube, writes, lambda: "2026-12-01T00:00:00Z")  # type: ignore[arg-type]
        f.expect(INTENT)
        await kube.events.put(("MODIFIED", copy_of("10")))  # the awaited copy: Ready is written
        await settled_and_drained(f, kube)
        await kube.events.put(("MODIFIED", {**copy_of("11"), "metadata": {
            "name": "another", "namespace": "team-a", "resourceVersion": "11"}}))  # nobody awaits it: stop
        await settled_and_drained(f, kube)
        assert f.watching is None
        f.expect(INTENT)  # a later pass's follow-up starts the watch again, after version 11
        await kube.events.put(("MODIFIED", copy_of("12")))
        await settled_and_drained(f, kube)
        await f.close()
        return kube, writes, f

    kube, writes, f = asyncio.run(story())
    assert kube.starts == [None, "11"]
    assert [w.resource_version for w in writes.made] == ["10", "12"]


async def settled_and_drained(f: CompositionFollower, kube: WatchingKube) -> None:
    while not kube.events.empty():
        await asyncio.sleep(0)
    for _ in range(5):
        await asyncio.sleep(0)
    await settled(f)


def test_the_stopping_pods_are_read_side_by_side() -> None:
    class SlowKube(FakeKube):
        def __init__(self) -> None:
            super().__init__({"qwen-server-r0-a", "qwen-server-r0-b"})
            self.in_flight = self.most_in_flight = 0

        async def pod_exists(self, namespace: str, name: str) -> bool:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            await asyncio.sleep(0)
            self.in_flight -= 1
            return await super().pod_exists(namespace, name)

    async def story() -> tuple[SlowKube, Writes]:
        kube, writes = SlowKube(), Writes()
        f = follower(kube, writes)
        f.expect(ReadyOnComposition(**{**INTENT.__dict__, "stopping_pods": ("qwen-server-r0-a", "qwen-server-r0-b")}))
        kube.copies = [copy_of("11")]
        f.seen(copy_of("10"))
        await settled(f)
        return kube, writes

    kube, writes = asyncio.run(story())
    assert kube.most_in_flight == 2 and kube.pod_reads == 4  # both at once; again once both were found
    assert [w.resource_version for w in writes.made] == ["11"]


def test_follow_ups_expire_in_the_order_of_their_deadlines_and_a_renewed_one_waits_anew() -> None:
    async def story() -> CompositionFollower:
        clock = [0.0]
        f = CompositionFollower(FakeKube(set()), Writes(), lambda: "2026-12-01T00:00:00Z",  # type: ignore[arg-type]
                                clock=lambda: clock[0])
        f.watching = asyncio.get_running_loop().create_future()  # type: ignore[assignment]  # no watch here
        first = ReadyOnComposition(**{**INTENT.__dict__, "workload": "group-a"})
        second = ReadyOnComposition(**{**INTENT.__dict__, "workload": "group-b"})
        f.expect(first)
        clock[0] = 10.0
        f.expect(second)
        clock[0] = 20.0
        f.expect(first)  # a later pass's copy: group-a now waits until 140 s, after group-b
        clock[0] = follower_module.FOLLOW_SECONDS + 15.0
        assert not f.idle()
        return f

    f = asyncio.run(story())
    assert list(f.waiting) == [("team-a", "group-a")]


def test_a_stopped_watch_closes_its_stream_at_once() -> None:
    class ClosingKube(WatchingKube):
        def __init__(self) -> None:
            super().__init__()
            self.closed = 0

        async def watch_workloads(self, resume_from: str | None = None) -> Any:
            try:
                while True:
                    yield await self.events.get()
            finally:
                self.closed += 1

    async def story() -> ClosingKube:
        kube = ClosingKube()
        f = CompositionFollower(kube, Writes(), lambda: "2026-12-01T00:00:00Z")  # type: ignore[arg-type]
        f.expect(INTENT)
        await kube.events.put(("MODIFIED", copy_of("10")))
        await settled_and_drained(f, kube)
        watch = f.watching
        assert watch is not None
        closed_when_stopped: list[int] = []
        watch.add_done_callback(lambda _: closed_when_stopped.append(kube.closed))
        await kube.events.put(("MODIFIED", {**copy_of("11"), "metadata": {
            "name": "another", "namespace": "team-a", "resourceVersion": "11"}}))
        await settled_and_drained(f, kube)
        assert f.watching is None and watch.done()
        assert closed_when_stopped == [1]  # as it stopped, not later from the collector's finalizer
        return kube

    asyncio.run(story())

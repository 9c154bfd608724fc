"""Ready on composition (docs/kueue.md#ready-on-composition): the follow-ups a pass leaves for the
single-role groups whose Pods it creates.

Kueue composes a group's Workload only after the pass that creates its Pods has answered, so the
check would wait for the next pass, behind every parent in Metacontroller's queue. Instead one
watch of Workloads (cluster-wide, running only while a follow-up waits: it stops at the first
change nobody awaits and resumes from the last version it saw) hands each awaited Workload to its
follow-up, which writes our check `Ready` once the planner's remaining condition holds: none of
the Pods of the ordinal's earlier incarnations that the pass listed is left (read side by side,
again each STOPPING_RECHECK_SECONDS until all are gone), a multi-Pod group's members are stored on
the pass's render, and the deployment is still the object and generation the pass decided on,
answered by no newer operator (else the next pass decides).
The write is the executor's, with the Workload copy's resourceVersion; a follow-up that cannot
finish within FOLLOW_SECONDS is dropped, and the passes decide as they always do.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Awaitable, Callable

from app import vocab
from app.api.objects import KubeObject
from app.control import composition as follow_up
from app.control.intents import ReadyOnComposition, SetAdmissionCheck
from app.kube.client import Kube

log = logging.getLogger(__name__)

# How long a follow-up waits for its Workload and the stopping Pods; then the passes decide alone.
FOLLOW_SECONDS = 120.0
# How often a follow-up looks again at Pods still stopping once its Workload is composed.
STOPPING_RECHECK_SECONDS = 1.0
# A watch that fails is started again after this long.
WATCH_RETRY_SECONDS = 5.0
# Follow-ups waiting at once, at most (the oldest are dropped beyond it).
MAX_FOLLOW_UPS = 16384

Key = tuple[str, str]
WriteCheck = Callable[[SetAdmissionCheck], Awaitable[bool]]


def _key(workload: KubeObject) -> Key:
    meta = workload.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class CompositionFollower:
    def __init__(self, kube: Kube | None, write: WriteCheck, now: Callable[[], str],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.kube = kube
        self.write = write
        self.now = now
        self.clock = clock
        # (namespace, Workload name) -> the follow-up and when it is dropped, in the order of those
        # times (every follow-up waits FOLLOW_SECONDS, and a replaced one moves to the end).
        self.waiting: dict[Key, tuple[ReadyOnComposition, float]] = {}
        # Follow-ups being carried out, and those a copy arrived for meanwhile (read again after).
        self.busy: dict[Key, asyncio.Task[None]] = {}
        self.again: set[Key] = set()
        self.watching: asyncio.Task[None] | None = None
        # The last Workload version the watch saw: a watch started again resumes there, so a
        # restart neither lists every Workload again nor misses a change made while it was off.
        self.resume_from: str | None = None

    def expect(self, intent: ReadyOnComposition) -> None:
        """Wait for the intent's Workload (a later pass's copy of the same follow-up replaces it)."""
        if self.kube is None:
            return
        now = self._expire()
        key = (intent.namespace, intent.workload)
        self.waiting.pop(key, None)
        while len(self.waiting) >= MAX_FOLLOW_UPS:
            del self.waiting[next(iter(self.waiting))]
        self.waiting[key] = (intent, now + FOLLOW_SECONDS)
        if self.watching is None or self.watching.done():
            self.watching = asyncio.get_running_loop().create_task(self._watch())

    async def close(self) -> None:
        tasks = [t for t in (self.watching, *self.busy.values()) if t is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    def _expire(self) -> float:
        """Drops the follow-ups past their time (the first in `waiting`); returns the clock's reading."""
        now = self.clock()
        while self.waiting:
            key, (_, until) = next(iter(self.waiting.items()))
            if until > now:
                break
            del self.waiting[key]
        return now

    def idle(self) -> bool:
        """Nothing awaits a Workload: the watch may stop (expect() starts it again)."""
        self._expire()
        return not self.waiting and not self.busy

    async def _watch(self) -> None:
        assert self.kube is not None
        while True:
            try:
                # aclosing: the stream closes when the watch stops, not when the collector finds it.
                async with contextlib.aclosing(self.kube.watch_workloads(self.resume_from)) as changes:
                    async for kind, workload in changes:
                        version = (workload.get("metadata") or {}).get("resourceVersion")
                        self.resume_from = str(version) if version else self.resume_from
                        if kind != "DELETED":
                            self.seen(workload)
                        if self.idle():
                            self.watching = None  # at once: a follow-up expected from now on starts a watch
                            return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the passes decide meanwhile; watch again
                log.warning("the Workload watch of the ready-on-composition follow-ups stopped: %s: %s (again in "
                            "%gs)", type(exc).__name__, exc, WATCH_RETRY_SECONDS)
                await asyncio.sleep(WATCH_RETRY_SECONDS)

    def seen(self, workload: KubeObject) -> None:
        """A copy of a Workload from the watch: carries out its follow-up, if one waits for it."""
        key = _key(workload)
        if key not in self.waiting:
            return
        if key in self.busy:
            self.again.add(key)
            return
        task = asyncio.get_running_loop().create_task(self._carry_out(key, workload))
        self.busy[key] = task
        task.add_done_callback(lambda done: self.busy.pop(key, None))

    async def _carry_out(self, key: Key, workload: KubeObject | None) -> None:
        assert self.kube is not None
        try:
            await self._follow(key, workload)
            while key in self.again and key in self.waiting:
                self.again.discard(key)
                await self._follow(key, await self.kube.workload(*key))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the next copy from the watch, or the next pass, decides
            log.info("Workload %s/%s: the ready-on-composition follow-up failed: %s: %s", *key, type(exc).__name__, exc)
        finally:
            self.again.discard(key)

    async def _follow(self, key: Key, workload: KubeObject | None) -> None:
        assert self.kube is not None
        gone: set[str] = set()
        while workload is not None:
            entry = self.waiting.get(key)
            if entry is None:
                return
            intent, until = entry
            step = follow_up.composed_step(workload)
            if step is follow_up.Composed.WAIT:
                return  # the watch brings the Workload again once Kueue lists our check
            if self.clock() >= until or step is follow_up.Composed.DONE:
                self._drop(key, intent)
                return
            stopping = [name for name in intent.stopping_pods if name not in gone]
            left = await asyncio.gather(*(self.kube.pod_exists(intent.namespace, name) for name in stopping))
            gone.update(name for name, exists in zip(stopping, left) if not exists)
            if any(left):
                await asyncio.sleep(STOPPING_RECHECK_SECONDS)
            elif not follow_up.members_on_render(intent, list(await asyncio.gather(
                    *(self.kube.pod(intent.namespace, name) for name in intent.members)))):
                self._drop(key, intent)  # Pods of another render under the names the pass asked for
                return
            elif not follow_up.deployment_unchanged(
                    intent, await self.kube.model_deployment(intent.namespace, intent.deployment), self.now()):
                self._drop(key, intent)
                return
            elif await self.write(SetAdmissionCheck(
                    namespace=intent.namespace, workload=intent.workload,
                    resource_version=str((workload.get("metadata") or {}).get("resourceVersion") or ""),
                    state=vocab.CHECK_STATE_READY, message=intent.message, last_transition_time=self.now())):
                self._drop(key, intent)
                log.info("Workload %s/%s: our check Ready on composition", *key)
                return
            # Pods still stopping, or the copy moved under the write: read it again.
            workload = await self.kube.workload(*key)

    def _drop(self, key: Key, intent: ReadyOnComposition) -> None:
        if self.waiting.get(key, (None, 0.0))[0] == intent:
            del self.waiting[key]

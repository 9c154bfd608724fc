"""Two operator versions answering one deployment's passes (docs/operations.md#upgrading-the-operator).

During a rolling upgrade of the operator, Metacontroller's calls land on old and new replicas
alternately. Two rules keep them from undoing each other's work:

- the planner never turns over a replica made by a newer render revision from the spec as it is
  now (judge_render, below): the older version counts it as up to date;
- while deferring, every child other than a Pod (the router's objects, the Services, the endpoint
  switch) is answered as the newer version last applied it (as_newer_applied, below), so the two
  versions never alternate a router's render and roll its Pods back and forth;
- the newest render revision that answered a pass records itself in `status.newestRender`,
  renewed whenever a pass of it writes a changed status (it is at work: turning over, creating);
  a version with an older revision that reads a record younger than NEWEST_RENDER_LEASE_SECONDS
  holds new replicas (creates nothing, turns nothing over: the render's hold), so a replica the
  newer version turned over is rebuilt by the newer version only. An older record (the newer
  version is gone, an operator rollback, or has had nothing to do for that long) is taken over.

Pure: the previous record, this operator's revision and `now` in, the record to write out.
"""

from __future__ import annotations

import json
from enum import Enum
from typing import Any

from app import timestamps, vocab
from app.api.objects import KubeObject, ObservedGroups
from app.control import observed as obs
from app.render.revision import pod_revision, pod_spec_generation
from app.world import map_keys


def _age(stamp: Any, now: str) -> float | None:
    then, at = timestamps.parse(stamp if isinstance(stamp, str) else None), timestamps.parse(now)
    return None if then is None or at is None else (at - then).total_seconds()


def _revision(previous: Any) -> int | None:
    revision = previous.get("revision") if isinstance(previous, dict) else None
    return revision if isinstance(revision, int) and not isinstance(revision, bool) else None


def defers_to(previous: Any, own: int, now: str) -> int | None:
    """The newer render revision this operator defers to (None: it is the newest, or the newer one's
    record aged out)."""
    revision = _revision(previous)
    age = _age(previous.get("renewedAt"), now) if isinstance(previous, dict) else None
    if revision is None or age is None or revision <= own or age >= vocab.NEWEST_RENDER_LEASE_SECONDS:
        return None
    return revision


def hold(newer: int, own: int) -> str:
    """The render's hold while deferring."""
    return (f"a newer operator (render revision {newer}) answers this deployment's passes; this one (render "
            f"revision {own}) creates and turns over no replica until that one has been idle for "
            f"{vocab.NEWEST_RENDER_LEASE_SECONDS}s")


def record(previous: Any, own: int, now: str, *, changed: bool) -> dict[str, Any]:
    """status.newestRender as this pass writes it. `changed`: the rest of the status this pass writes
    differs from the last one. A deferring pass carries the newer record as it was; the newest
    version stamps `now` only into a status written anyway, so an idle pass writes nothing new."""
    if defers_to(previous, own, now) is not None:
        return {"revision": previous["revision"], "renewedAt": previous["renewedAt"]}
    if _revision(previous) == own and not changed and _age(previous.get("renewedAt"), now) is not None:
        return {"revision": own, "renewedAt": previous["renewedAt"]}
    return {"revision": own, "renewedAt": now}


class Standing(str, Enum):
    """How an instance's Pods compare with this operator's render of the role."""

    CURRENT = "current"  # this render made them
    NEWER = "newer"  # a newer render revision made them from the spec as it is now
    OBSOLETE = "obsolete"  # an older render, or another spec


def judge_render(inst: obs.ObservedInstance | None, *, fingerprint: str, revision: int,
                 generation: int | None) -> Standing:
    """docs/operations.md#upgrading-the-operator: Pods of another fingerprint are obsolete unless every
    one was made by a newer render revision than `revision` from the deployment's current
    `generation`. A newer revision's Pods made from an older spec are obsolete: the spec changed
    since, and this version's render of the new spec replaces them (the newer version then turns
    that over once, to its own render of the same spec, and keeps it)."""
    pods = inst.pods if inst is not None else []
    if pods and inst is not None and inst.fingerprints() == {fingerprint}:
        return Standing.CURRENT
    if pods and all(pod_revision(p) > revision and pod_spec_generation(p) == generation for p in pods):
        return Standing.NEWER
    return Standing.OBSOLETE


def _applied_record(observed: KubeObject | None) -> KubeObject | None:
    """What Metacontroller last applied of an observed child (its last-applied record), None when
    the child has none or it does not parse."""
    if observed is None:
        return None
    annotations = (observed.get("metadata") or {}).get("annotations") or {}
    text = annotations.get(vocab.ANNOTATION_LAST_APPLIED)
    if not isinstance(text, str):
        return None
    try:
        record = json.loads(text)
    except ValueError:
        return None
    return record if isinstance(record, dict) and record.get("kind") == observed.get("kind") else None


def as_newer_applied(children: list[KubeObject], observed: ObservedGroups) -> list[KubeObject]:
    """A deferring pass's children: each one other than a Pod that exists is answered as
    Metacontroller last applied it, which was the newer version's answer (applying it again changes
    nothing); Pods are the planner's (it keeps the newer version's as they are), and a child that
    does not exist yet is this version's render."""
    out = []
    for child in children:
        group, name = map_keys(child)
        seen = (observed.get(group) or {}).get(name) if child.get("kind") != vocab.KIND_POD else None
        out.append(_applied_record(seen) or child)
    return out

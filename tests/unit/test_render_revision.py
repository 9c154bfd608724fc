"""The render revision (docs/operations.md#upgrading-the-operator): every change to the Pods the
operator renders for an unchanged deployment bumps `RENDER_REVISION`, or two operator versions
running at once during an upgrade would not know which of them is newer.

The reference: every Pod `modeldeployment render --objects-only` prints for the golden inputs
(the examples and tests/golden/inputs, the defaults' render, the clock pinned), hashed. The golden
records the hash beside the revision it was taken under. A commit that only edits an input (an
example, the example world) changes the hash without changing what the operator renders for a
deployment already running: it records the new hash under the same revision, and says so."""

from __future__ import annotations

import copy
import hashlib
import json

import yaml

import pytest

from app import vocab
from app.control import observed as obs
from app.control.rollout import Situation, Standing, classify, judge_render
from app.control.skew import defers_to, record
from app.render.revision import RENDER_REVISION, effective_revision, pod_revision, pod_spec_generation
from tests.helpers import NOW, by_kind, parent, sync
from tests.unit.test_golden import INPUTS, render

# (RENDER_REVISION, sha256 of the reference Pods) as last recorded.
GOLDEN = (1, "3d9067663a25e4e9383550219beb68f3cfb22de95b939212d4ce570baf434eab")


def reference_digest() -> str:
    pods = []
    for path in INPUTS:
        printed = render(path, "objects")
        assert printed.code == 0, (path, printed.stderr)
        pods += [o for o in yaml.safe_load_all(printed.stdout) if o and o.get("kind") == "Pod"]
    assert len(pods) > 20
    return hashlib.sha256(json.dumps(pods, sort_keys=True).encode()).hexdigest()


def test_a_changed_pod_render_bumps_the_render_revision():
    digest = reference_digest()
    revision, recorded = GOLDEN
    if digest == recorded:
        assert RENDER_REVISION == revision, f"record the bump: GOLDEN = ({RENDER_REVISION}, {digest!r})"
        return
    assert RENDER_REVISION != revision, (
        f"the rendered Pods changed under RENDER_REVISION {revision}: bump it to {revision + 1} in "
        f"app/render/revision.py and record GOLDEN = ({revision + 1}, {digest!r}) here (only an input of "
        f"the reference edited, the operator's render unchanged: record ({revision}, {digest!r}))")
    raise AssertionError(f"RENDER_REVISION was bumped: record GOLDEN = ({RENDER_REVISION}, {digest!r})")


def pod(fingerprint: str, revision: str | None, generation: str | None, member: int = 0) -> dict:
    labels = {vocab.LABEL_MEMBER_INDEX: str(member)}
    if revision is not None:
        labels[vocab.LABEL_RENDER_REVISION] = revision
    annotations = {vocab.ANNOTATION_FINGERPRINT: fingerprint}
    if generation is not None:
        annotations[vocab.ANNOTATION_SPEC_GENERATION] = generation
    return {"metadata": {"name": f"p{member}", "labels": labels, "annotations": annotations}, "spec": {},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}


def test_the_revision_and_generation_a_pod_records_are_read_strictly():
    assert pod_revision(pod("f", "3", None)) == 3
    assert pod_revision(pod("f", None, None)) == 0  # made before revisions were recorded: the oldest
    assert pod_revision(pod("f", "x", None)) == 0 and pod_revision(pod("f", "-2", None)) == 0
    assert pod_spec_generation(pod("f", "1", "7")) == 7
    assert pod_spec_generation(pod("f", "1", None)) is None and pod_spec_generation(pod("f", "1", "7a")) is None
    assert effective_revision(0) == RENDER_REVISION and effective_revision(2) == RENDER_REVISION + 2


@pytest.mark.parametrize("case, pods, expected", [
    ("this render made it", [pod("mine", "1", "4")], Standing.CURRENT),
    ("this render, even from an older generation", [pod("mine", "1", "3")], Standing.CURRENT),
    ("an older revision made it", [pod("other", "0", "4")], Standing.OBSOLETE),
    ("made before revisions were recorded", [pod("other", None, None)], Standing.OBSOLETE),
    ("the same revision, another render (a spec edit)", [pod("other", "1", "3")], Standing.OBSOLETE),
    ("a newer revision from the current spec", [pod("other", "2", "4")], Standing.NEWER),
    ("a newer revision from an older spec", [pod("other", "2", "3")], Standing.OBSOLETE),
    ("a newer revision, generation unmarked", [pod("other", "2", None)], Standing.OBSOLETE),
    ("members of mixed revisions", [pod("other", "2", "4"), pod("old", "0", "4", 1)], Standing.OBSOLETE),
    ("every member newer", [pod("other", "2", "4"), pod("other", "2", "4", 1)], Standing.NEWER),
])
def test_judge_render_keeps_only_what_a_newer_revision_made_from_the_current_spec(case, pods, expected):
    inst = obs.ObservedInstance(0, pods)
    assert judge_render(inst, fingerprint="mine", revision=1, generation=4) is expected, case


def test_a_newer_replica_is_never_a_turnover_candidate_nor_superseded():
    admitted = {"metadata": {"name": "wl", "uid": "u"},
                "status": {"conditions": [{"type": t, "status": "True"} for t in ("QuotaReserved", "Admitted")]}}
    reserved = {"metadata": {"name": "wl", "uid": "u"}, "status": {"conditions": [{"type": "QuotaReserved",
                                                                                   "status": "True"}]}}
    newer = obs.ObservedInstance(0, [pod("theirs", "2", "4")])
    common = dict(declared=True, inst=newer, fingerprint="mine", size=1, held=False, revision=1, generation=4)
    assert classify(**common, workload=admitted) == Situation.NEWER
    assert classify(**common, workload=reserved) == Situation.NEWER  # queued: not superseded either
    assert classify(**{**common, "generation": 5}, workload=admitted) == Situation.OBSOLETE
    assert classify(**{**common, "generation": 5}, workload=reserved) == Situation.SUPERSEDED
    # A group of a newer revision lacking a member is incomplete: it is never completed with our Pods
    # (tests/unit/test_rollout.py covers the rule; here the classification).
    assert classify(**{**common, "size": 2}, workload=reserved) == Situation.INCOMPLETE


T0, T1, T3 = "2026-12-01T00:00:00Z", "2026-12-01T00:01:00Z", "2026-12-01T00:03:00Z"


@pytest.mark.parametrize("case, previous, own, now, changed, written, deferring", [
    ("first pass", None, 1, T0, False, {"revision": 1, "renewedAt": T0}, None),
    ("malformed record", {"revision": "2"}, 1, T0, False, {"revision": 1, "renewedAt": T0}, None),
    ("a newer version takes over at once", {"revision": 1, "renewedAt": T1}, 2, T1, False,
     {"revision": 2, "renewedAt": T1}, None),
    ("the same version idle writes the same record", {"revision": 1, "renewedAt": T0}, 1, T1, False,
     {"revision": 1, "renewedAt": T0}, None),
    ("... and renews it in a status written anyway", {"revision": 1, "renewedAt": T0}, 1, T1, True,
     {"revision": 1, "renewedAt": T1}, None),
    ("an older version defers to a fresh record", {"revision": 2, "renewedAt": T0}, 1, T1, True,
     {"revision": 2, "renewedAt": T0}, 2),
    ("... and takes over a record that aged out (a rollback)", {"revision": 2, "renewedAt": T0}, 1, T3, False,
     {"revision": 1, "renewedAt": T3}, None),
])
def test_the_newest_render_record(case, previous, own, now, changed, written, deferring):
    assert defers_to(previous, own, now) == deferring, case
    assert record(previous, own, now, changed=changed) == written, case
    assert vocab.NEWEST_RENDER_LEASE_SECONDS == 180  # T3 is exactly one lease after T0


def test_a_deferring_pass_answers_the_router_and_services_as_the_newer_version_applied_them():
    """While a newer version answers the other passes, the router's Deployment (and every other child
    but the Pods) is answered as Metacontroller last applied it, so two versions that render the router
    differently never roll its Pods back and forth; a child not created yet is this version's render."""
    md = parent("pd-pair")
    own = sync(md)
    theirs = copy.deepcopy(by_kind(own, "Deployment")[0])
    theirs["spec"]["template"]["metadata"].setdefault("annotations", {})["rendered-by"] = "the newer version"
    live = copy.deepcopy(theirs)
    live["metadata"].setdefault("annotations", {})[vocab.ANNOTATION_LAST_APPLIED] = json.dumps(theirs)
    live["metadata"]["uid"], live["status"] = "router-deployment-uid", {"replicas": 1}

    md["status"] = {"newestRender": {"revision": RENDER_REVISION + 1, "renewedAt": NOW}}
    deferring = sync(md, children=[live])
    assert by_kind(deferring, "Deployment") == [theirs]
    assert by_kind(deferring, "Service") == by_kind(own, "Service")  # none live: rendered here

    md["status"] = {"newestRender": {"revision": RENDER_REVISION, "renewedAt": NOW}}
    newest = sync(md, children=[live])
    assert by_kind(newest, "Deployment") == by_kind(own, "Deployment")

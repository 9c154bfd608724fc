"""The render revision: which render of the operator made a replica's Pods (docs/operations.md#upgrading-the-operator).

RENDER_REVISION is bumped by hand, by one, in every change that alters the Pod rendered for an
unchanged deployment in an unchanged world (tests/unit/test_render_revision.py holds a golden
render and fails when it changes under the same revision). Each Pod carries the revision it was
created under; during an operator upgrade old and new replicas answer passes alternately, and the
planner never turns over a replica made by a newer revision than its own, so the two versions
cannot undo each other's turnovers.
"""

from __future__ import annotations

from app import vocab
from app.api.objects import KubeObject

RENDER_REVISION = 1


def effective_revision(rehearsal: int) -> int:
    """The revision this operator stamps: RENDER_REVISION, plus the upgrade-rehearsal setting
    (docs/operations.md#rehearsing-an-upgrade), which makes one build render like a newer release."""
    return RENDER_REVISION + rehearsal


def pod_revision(pod: KubeObject) -> int:
    """The revision a Pod was created under: 0 for a Pod from before revisions were recorded (an
    unreadable value counts as 0 too: the oldest, so never protected from a turnover)."""
    value = ((pod.get("metadata") or {}).get("labels") or {}).get(vocab.LABEL_RENDER_REVISION, "")
    return int(value) if isinstance(value, str) and value.isdigit() and len(value) <= 9 else 0


def pod_spec_generation(pod: KubeObject) -> int | None:
    """The deployment's metadata.generation the Pod was rendered from (None when unmarked)."""
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(vocab.ANNOTATION_SPEC_GENERATION, "")
    return int(value) if isinstance(value, str) and value.isdigit() and len(value) <= 18 else None

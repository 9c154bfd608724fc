"""Carries out the planner's intents, idempotently. The one place with side effects.

Without an API server (local runs, tests) every intent is logged and skipped, and the hooks
still answer. A Workload delete that fails raises, so the hook answers 5xx and Metacontroller
retries the whole pass; Events and admission-check writes are retried on the next sync.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Iterable

from lightkube.core.exceptions import ApiError

from app import vocab
from app.control.intents import DeleteWorkload, Intent, RecordEvent, SetAdmissionCheck
from app.kube.client import Kube

log = logging.getLogger(__name__)


def utc_now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def event_body(intent: RecordEvent, now: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": intent.name, "namespace": intent.namespace},
        "involvedObject": {"apiVersion": vocab.API_VERSION, "kind": vocab.KIND_MODEL_DEPLOYMENT,
                           "name": intent.deployment, "namespace": intent.namespace, "uid": intent.deployment_uid},
        "reason": intent.reason,
        "message": intent.message[:1024],
        "type": intent.type,
        "source": {"component": vocab.EVENT_SOURCE_COMPONENT},
        "reportingComponent": vocab.EVENT_SOURCE_COMPONENT,
        "reportingInstance": vocab.EVENT_SOURCE_COMPONENT,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


def workload_check_body(intent: SetAdmissionCheck) -> dict:
    metadata = {"name": intent.workload, "namespace": intent.namespace}
    if intent.resource_version:
        metadata["resourceVersion"] = intent.resource_version
    return {
        "apiVersion": vocab.KUEUE_API_VERSION,
        "kind": vocab.KIND_WORKLOAD,
        "metadata": metadata,
        "status": {"admissionChecks": [{
            "name": vocab.ADMISSION_CHECK_NAME,
            "state": intent.state,
            "message": intent.message,
            "lastTransitionTime": intent.last_transition_time,
        }]},
    }


def admission_check_bodies(now: str) -> tuple[dict, dict]:
    spec = {"apiVersion": vocab.KUEUE_API_VERSION, "kind": "AdmissionCheck",
            "metadata": {"name": vocab.ADMISSION_CHECK_NAME},
            "spec": {"controllerName": vocab.ADMISSION_CHECK_CONTROLLER}}
    status = {"apiVersion": vocab.KUEUE_API_VERSION, "kind": "AdmissionCheck",
              "metadata": {"name": vocab.ADMISSION_CHECK_NAME},
              "status": {"conditions": [{"type": "Active", "status": "True", "reason": "Active",
                                         "message": "the ModelDeployment joint admission controller is running",
                                         "lastTransitionTime": now}]}}
    return spec, status


class Executor:
    def __init__(self, kube: Kube | None) -> None:
        self.kube = kube

    async def run(self, intents: Iterable[Intent]) -> None:
        for intent in intents:
            if self.kube is None:
                log.info("no API server: skipped %s", intent)
                continue
            if isinstance(intent, DeleteWorkload):
                await self.kube.delete_workload(intent.namespace, intent.name)
                log.info("deleted Workload %s/%s (%s)", intent.namespace, intent.name, intent.why)
            elif isinstance(intent, RecordEvent):
                try:
                    await self.kube.create_event(event_body(intent, utc_now()))
                except (ApiError, OSError) as exc:
                    log.warning("could not record event %s: %s", intent.name, exc)
            elif isinstance(intent, SetAdmissionCheck):
                try:
                    await self.kube.apply_workload_check(intent.namespace, intent.workload, workload_check_body(intent))
                except ApiError as exc:
                    # A stale resourceVersion: the Workload moved; the next sync decides again.
                    log.info("admission check on %s/%s not written: %s", intent.namespace, intent.workload, exc)

    async def keep_admission_check_active(self) -> None:
        """Asserts the AdmissionCheck exists and is Active; the status is written only when it is not,
        so lastTransitionTime moves only on a transition."""
        if self.kube is None:
            return
        spec, status = admission_check_bodies(utc_now())
        current = await self.kube.admission_check()
        conditions = ((current or {}).get("status") or {}).get("conditions") or []
        active = any(c.get("type") == "Active" and c.get("status") == "True" for c in conditions)
        await self.kube.apply_admission_check(spec, None if active else status)

"""Admission webhooks (AdmissionReview v1) for ModelDeployment."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/webhooks", tags=["admission"])

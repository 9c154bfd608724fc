"""One status condition as the planner decides it, before `lastTransitionTime` is carried over."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ConditionValue:
    type: str
    status: str
    reason: str
    message: str

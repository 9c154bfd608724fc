"""Metacontroller composite-controller hook protocol, version v2 (SPEC §12).

Requests are parsed leniently (Metacontroller may add fields); responses carry exactly the keys
the protocol defines, since v2 parses them strictly.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class HookRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    controller: dict[str, Any] = Field(default_factory=dict)
    parent: dict[str, Any]
    # {"Pod.v1": {"namespace/name": object}, ...}
    children: dict[str, dict[str, Any] | None] = Field(default_factory=dict)
    related: dict[str, dict[str, Any] | None] = Field(default_factory=dict)
    finalizing: bool = False


class CustomizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    controller: dict[str, Any] = Field(default_factory=dict)
    parent: dict[str, Any]


def sync_response(status: dict[str, Any], children: list[dict[str, Any]], resync_after: float | None,
                  finalized: bool | None = None) -> dict[str, Any]:
    """Never built with a missing `children` or `status`: a 200 without them deletes or wipes."""
    body: dict[str, Any] = {"status": status, "children": children}
    if resync_after:
        body["resyncAfterSeconds"] = resync_after
    if finalized is not None:
        body["finalized"] = finalized
    return body

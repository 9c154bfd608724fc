"""Whether a deployment serves, read from its status (docs/scale-to-zero.md#the-endpoint-switch):
every role kind has a Ready replica, and its router (if any) a Ready Pod, so a prefill/decode pair
serves only when both roles do. One rule for the sync hook's endpoint switch and the activator."""

from __future__ import annotations

from typing import Any

from app import vocab


def serving(status: dict[str, Any] | None) -> bool:
    status = status or {}
    roles = [r for r in status.get("roles") or [] if isinstance(r, dict)]
    if not roles:
        return False
    ready_by_kind: dict[str, int] = {}
    for role in roles:
        kind = str(role.get("kind", vocab.ROLE_KIND_SERVER))
        ready = role.get("ready")
        ready_by_kind[kind] = ready_by_kind.get(kind, 0) + (ready if isinstance(ready, int) else 0)
    if not all(count > 0 for count in ready_by_kind.values()):
        return False
    router = status.get("router")
    return not isinstance(router, dict) or (isinstance(router.get("ready"), int) and router["ready"] > 0)

"""The one error a render raises: a role that cannot be built (docs/metacontroller.md#errors-and-retries).

`retryable` says whether waiting can fix it (an InstanceType not yet observed, a pool that has not
published its hardware) or only a spec or InstanceType edit can. The sync pass turns it into a
Refusal: a RenderFailed Event and a 429 whose Retry-After follows `retryable`.
"""

from __future__ import annotations


class RenderError(Exception):
    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable

"""Go-style durations ("90s", "15m", "1h30m"), the spelling of spec.scaleToZero's fields
(docs/scale-to-zero.md#the-scaler-fields). One reader for the scaler's planner, its admission and
the activator."""

from __future__ import annotations

import re

_PART = re.compile(r"([0-9]+)(s|m|h)")
_WHOLE = re.compile(r"^([0-9]+(s|m|h))+$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600}


def seconds(text: str) -> int | None:
    """The duration in seconds, or None when `text` is not one (e.g. "15 minutes", "1d", "")."""
    if not _WHOLE.match(text):
        return None
    return sum(int(count) * _UNIT_SECONDS[unit] for count, unit in _PART.findall(text))

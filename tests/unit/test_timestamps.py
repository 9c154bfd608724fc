"""The one RFC 3339 reader (app/timestamps.py)."""

from __future__ import annotations

import pytest

from app import timestamps


@pytest.mark.parametrize(("stamp", "seconds"), [
    ("2026-12-01T17:56:13Z", 1796147773.0),  # lastTransitionTime, deletionTimestamp: whole seconds
    ("2026-12-01T17:56:13.957158Z", 1796147773.957158),  # a Lease's renewTime: microseconds
    ("2026-12-01T17:56:13+00:00", 1796147773.0),
])
def test_a_stamp_reads_as_epoch_seconds(stamp: str, seconds: float) -> None:
    assert timestamps.epoch_seconds(stamp) == pytest.approx(seconds)


@pytest.mark.parametrize("stamp", [None, "", "yesterday", "2026-13-01T00:00:00Z"])
def test_what_is_not_a_stamp_parses_to_none_and_refuses_as_seconds(stamp: str | None) -> None:
    assert timestamps.parse(stamp) is None
    with pytest.raises(ValueError, match="not an RFC 3339 timestamp"):
        timestamps.epoch_seconds(stamp or "")

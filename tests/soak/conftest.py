"""The short chaos soak runs with the end-to-end suite: marked ``e2e``, skipped with
``MODELDEPLOYMENT_E2E=0`` (as tests/e2e/conftest.py does for its own tests)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def e2e_enabled() -> bool:
    return os.environ.get("MODELDEPLOYMENT_E2E", "1").strip().lower() not in ("0", "false", "no", "off")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="MODELDEPLOYMENT_E2E=0")
    for item in items:
        try:
            Path(str(item.path)).resolve().relative_to(HERE)
        except ValueError:
            continue
        item.add_marker(pytest.mark.e2e)
        if not e2e_enabled():
            item.add_marker(skip)

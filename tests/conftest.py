"""Shared fixtures: the example world and deployments."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from app.world import World, load_yaml_objects

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def example(name: str) -> dict[str, Any]:
    return load_yaml_objects(EXAMPLES / "deployments" / f"{name}.yaml")[0]


def world_objects() -> list[dict[str, Any]]:
    return load_yaml_objects(EXAMPLES / "world")


@pytest.fixture
def world() -> World:
    return World.of(world_objects())


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    """The service in process on the example world, with no API server (a module may override it)."""
    with TestClient(create_app(Settings(world_dir=EXAMPLES / "world", kube="off"))) as test_client:
        yield test_client

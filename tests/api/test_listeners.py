"""Each listener's paths (app/web/guard.py): the API description on both, everything else split."""

from __future__ import annotations

from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from app.web.guard import HOOK_PATHS, WEBHOOK_PATHS, Listener
from tests.conftest import EXAMPLES


def test_the_api_description_answers_on_both_listeners_and_the_split_holds_for_the_rest() -> None:
    app = create_app(Settings(world_dir=EXAMPLES / "world", kube="off"))
    with TestClient(Listener(app, HOOK_PATHS)) as hooks, TestClient(Listener(app, WEBHOOK_PATHS)) as webhooks:
        for listener in (hooks, webhooks):
            schema = listener.get("/openapi.json")
            assert schema.status_code == 200 and "/hooks/sync" in schema.json()["paths"]
            docs = listener.get("/docs")
            assert docs.status_code == 200 and "/openapi.json" in docs.text
        assert hooks.post("/webhooks/validate", json={}).status_code == 404
        assert webhooks.post("/hooks/sync", json={}).status_code == 404
        assert hooks.get("/openapi.json/../webhooks/validate").status_code == 404
        assert webhooks.get("/docsx").status_code == 404

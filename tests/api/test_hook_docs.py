"""The hook bodies in /openapi.json, and the curl-able example sync request (examples/hooks)."""

from __future__ import annotations

import json
import re


from app import vocab
from app.api.hook_docs import SyncRequest
from app.world import load_yaml_objects, related_map
from tests.conftest import EXAMPLES

EXAMPLE = EXAMPLES / "hooks" / "sync-request.json"


def test_openapi_describes_every_hook_body(client):
    schema = client.get("/openapi.json").json()
    components = schema["components"]["schemas"]
    for path, request, response in (("/hooks/sync", "SyncRequest", "SyncResponse"),
                                    ("/hooks/finalize", "SyncRequest", "SyncResponse"),
                                    ("/hooks/customize", "CustomizeRequest", "CustomizeResponse")):
        post = schema["paths"][path]["post"]
        assert post["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(f"/{request}")
        assert post["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith(f"/{response}")
        assert "500" in post["responses"]
    assert components["SyncRequest"]["properties"]["parent"]["$ref"].endswith("/ModelDeployment")
    assert "429" in schema["paths"]["/hooks/sync"]["post"]["responses"]
    refs = set(re.findall(r'"#/components/schemas/([^"]+)"', json.dumps(schema)))
    assert refs <= set(components)


def test_example_sync_request_is_current_and_answers_200(client):
    body = json.loads(EXAMPLE.read_text())
    SyncRequest.model_validate(body)
    assert body["related"] == related_map(load_yaml_objects(EXAMPLES / "world"))
    assert set(body["children"]) == set(vocab.DECLARED_CHILD_MAPS)
    answer = client.post("/hooks/sync", content=EXAMPLE.read_bytes(), headers={"content-type": "application/json"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"]["phase"] == vocab.PHASE_STARTING
    assert len([c for c in answer.json()["children"] if c["kind"] == "Pod"]) == 4

"""The one door of hook requests (app/api/hooks.py, app/api/scaler.py) and the one Event builder."""

from __future__ import annotations

import orjson
import pytest

from app import vocab
from app.api.hooks import BadHookRequest, parse_customize, parse_sync
from app.api.scaler import parse_scaler_sync
from app.api.v1 import ModelDeployment
from app.control.intents import parent_event, warning_event
from tests.helpers import parent, request
from tests.unit.test_scaler import scaler_object


def raw(body: object) -> bytes:
    return orjson.dumps(body)


def test_a_sync_request_is_checked_and_its_parent_parsed_once():
    parsed = parse_sync(raw(request(parent("qwen-chat"))))
    assert isinstance(parsed.deployment, ModelDeployment) and parsed.deployment.metadata.name == "qwen-chat"
    assert parsed.parent["metadata"]["name"] == "qwen-chat" and not parsed.finalizing
    assert set(vocab.DECLARED_CHILD_MAPS) <= set(parsed.children)


def test_the_finalize_hook_marks_the_request_finalizing():
    assert parse_sync(raw(request(parent("qwen-chat"))), finalizing=True).finalizing


@pytest.mark.parametrize(("body", "status", "says"), [
    (b"{not json", 400, "not JSON"),
    (b"[]", 400, "a hook request is a JSON object"),
    (None, 400, "$.children['Pod.v1']: missing"),
    ("replicas", 422, "spec.roles[0].replicas"),
])
def test_every_bad_request_is_one_bad_hook_request_naming_the_field(body, status, says):
    if body is None:
        body = request(parent("qwen-chat"))
        del body["children"][vocab.CHILD_PODS]
        body = raw(body)
    elif body == "replicas":
        md = parent("qwen-chat")
        md["spec"]["roles"][0]["replicas"] = "many"
        body = raw(request(md))
    with pytest.raises(BadHookRequest) as refused:
        parse_sync(body)
    assert refused.value.status_code == status and says in str(refused.value)
    assert refused.value.kind == ("invalid_parent" if status == 422 else "bad_request")


def test_customize_reads_the_parent_through_the_same_checks():
    assert parse_customize(raw({"parent": parent("qwen-chat")})).metadata.name == "qwen-chat"
    with pytest.raises(BadHookRequest, match=r"\$.parent.metadata.uid"):
        md = parent("qwen-chat")
        del md["metadata"]["uid"]
        parse_customize(raw({"parent": md}))


def test_the_scaler_door_finds_and_parses_its_target_or_names_it():
    scaler = scaler_object()
    target = parent("pd-pair")
    key = f"{scaler['metadata']['namespace']}/{scaler['spec']['deploymentRef']['name']}"
    target["metadata"].update(name=scaler["spec"]["deploymentRef"]["name"], namespace=scaler["metadata"]["namespace"])
    found = parse_scaler_sync(raw({"parent": scaler, "related": {vocab.RELATED_MODEL_DEPLOYMENTS: {key: target}}}))
    assert found.deployment is not None and found.target is not None
    assert parse_scaler_sync(raw({"parent": scaler, "related": {}})).deployment is None
    target["spec"]["roles"][0]["replicas"] = "many"
    with pytest.raises(BadHookRequest) as refused:
        parse_scaler_sync(raw({"parent": scaler, "related": {vocab.RELATED_MODEL_DEPLOYMENTS: {key: target}}}))
    assert refused.value.status_code == 422 and "related ModelDeployment" in str(refused.value)


def test_one_occurrence_is_one_event_and_a_warning_by_default():
    md = ModelDeployment.model_validate(parent("qwen-chat"))
    first = warning_event(md.metadata, vocab.EVENT_RENDER_FAILED, "roles[server]: broken")
    again = warning_event(md.metadata, vocab.EVENT_RENDER_FAILED, "roles[server]: broken")
    other = warning_event(md.metadata, vocab.EVENT_RENDER_FAILED, "roles[server]: broken otherwise")
    assert first == again and first.name != other.name and first.type == vocab.EVENT_TYPE_WARNING
    normal = parent_event(md.metadata, vocab.EVENT_REPLICA_RESTARTED, "same words", type_=vocab.EVENT_TYPE_NORMAL,
                          occurrence=(vocab.EVENT_NAME_REPLICA_DEPARTURE, "uid/server/0/a"))
    later = parent_event(md.metadata, vocab.EVENT_REPLICA_RESTARTED, "same words", type_=vocab.EVENT_TYPE_NORMAL,
                         occurrence=(vocab.EVENT_NAME_REPLICA_DEPARTURE, "uid/server/0/b"))
    assert normal.name != later.name and normal.involved_kind == vocab.KIND_MODEL_DEPLOYMENT

"""The TenantKeyIgnored Event says, per key, what the webhook does with it (docs/operations.md,
"Security"): an owned key (or a mount at the client configuration) is refused on the next update;
a tenant-bearing variable the engine does not own is admitted, and the render keeps dropping it."""

from __future__ import annotations

import pytest

from app import vocab
from app.admission.validate import validate
from app.control.sync import admitted_tenant_env
from app.world import World
from tests.conftest import world_objects
from tests.helpers import parent, sync


def cached(engine: str, env: list[dict] | None = None, args: list[str] | None = None) -> dict:
    md = parent("qwen-cached")
    if engine == "SGLang":
        md["spec"]["engine"] = {"name": "SGLang", "version": "0.5.23"}
    role = md["spec"]["roles"][0]
    role["env"] = env or []
    role["extraArgs"] = args or []
    return md


def event(md: dict):
    (found,) = [i for i in sync(md).intents if getattr(i, "reason", None) == vocab.EVENT_TENANT_KEY_IGNORED]
    return found


def admitted_by_the_webhook(md: dict) -> bool:
    verdict = validate(md, None, World.of(world_objects()))
    return not verdict.refusals


@pytest.mark.parametrize("engine,name,admitted", [
    ("vLLM", vocab.ENV_MOONCAKE_TENANT_ID, True),
    ("vLLM", vocab.ENV_MOONCAKE_CONFIG_PATH, False),
    ("SGLang", vocab.ENV_MOONCAKE_TENANT_ID, False),
    ("SGLang", vocab.ENV_MOONCAKE_CONFIG_PATH, True),
    ("SGLang", vocab.ENV_SGLANG_HICACHE_MOONCAKE_CONFIG_PATH, False),
])
def test_admitted_tenant_env_is_what_the_webhook_really_admits(engine, name, admitted):
    md = cached(engine, env=[{"name": name, "value": "x"}])
    assert (admitted_tenant_env(engine, [name]) == [name]) is admitted
    assert admitted_by_the_webhook(md) is admitted


def test_vllm_tenant_id_is_said_to_be_admitted_and_dropped_on_every_render():
    message = event(cached("vLLM", env=[{"name": vocab.ENV_MOONCAKE_TENANT_ID, "value": "other"}])).message
    assert "the webhook admits env[0] MOONCAKE_TENANT_ID (not an operator-owned variable on vLLM)" in message
    assert "drops it from every render for as long as the role carries it" in message
    assert "refuses" not in message


def test_an_owned_key_is_said_to_be_refused_on_the_next_update():
    message = event(cached("SGLang", env=[{"name": vocab.ENV_MOONCAKE_TENANT_ID, "value": "other"}])).message
    assert "the webhook refuses env[0] MOONCAKE_TENANT_ID on the deployment's next update" in message
    assert "admits" not in message


def test_a_mixed_role_names_each_keys_fate():
    md = cached("vLLM", env=[{"name": vocab.ENV_MOONCAKE_CONFIG_PATH, "value": "/x"},
                             {"name": vocab.ENV_MOONCAKE_TENANT_ID, "value": "other"}],
                args=["--kv-transfer-config", "{}"])
    message = event(md).message
    assert "the webhook refuses extraArgs[0] --kv-transfer-config; env[0] MOONCAKE_CONFIG_PATH" in message
    assert "the webhook admits env[1] MOONCAKE_TENANT_ID" in message


def test_sglang_config_path_is_said_to_be_admitted():
    message = event(cached("SGLang", env=[{"name": vocab.ENV_MOONCAKE_CONFIG_PATH, "value": "/x"}])).message
    assert "the webhook admits env[0] MOONCAKE_CONFIG_PATH (not an operator-owned variable on SGLang)" in message

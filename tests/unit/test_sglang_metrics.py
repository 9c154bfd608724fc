"""SGLang serves its Prometheus /metrics only with --enable-metrics; every SGLang role renders it
(docs/engines.md#sglang-metrics): the idleness reader parks on those counters
(docs/scale-to-zero.md#idle-after), llm-d's endpoint picker and queue-length autoscalers read them."""

from __future__ import annotations

import pytest

from app import vocab
from app.engines import sglang
from tests.helpers import engine, parent, pods, sync


def sglang_md(kinds: tuple[str, ...], router: str | None = None, extra: list[str] | None = None) -> dict:
    md = parent("qwen-chat")
    md["spec"]["engine"] = {"name": "SGLang", "version": "0.5.23"}
    if router:
        md["spec"]["router"] = {"name": router}
    base = md["spec"]["roles"][0]
    md["spec"]["roles"] = [{**base, "name": kind.lower(), "kind": kind, "replicas": 1,
                            **({"extraArgs": extra} if extra is not None else {})} for kind in kinds]
    return md


@pytest.mark.parametrize(("kinds", "router"), [(("Server",), None), (("Prefill", "Decode"), "llm-d-router"),
                                               (("Prefill", "Decode"), "sglang-gateway")])
def test_every_sglang_role_serves_its_metrics(kinds, router):
    for pod in pods(sync(sglang_md(kinds, router))):
        if pod["metadata"]["labels"].get(vocab.LABEL_COMPONENT) == "router":
            continue
        assert engine(pod)["command"].count("--enable-metrics") == 1, pod["metadata"]["name"]


def test_a_users_own_enable_metrics_is_the_one_that_stands():
    (pod,) = pods(sync(sglang_md(("Server",), extra=["--enable-metrics", "--enable-metrics-for-all-schedulers"])))
    command = engine(pod)["command"]
    assert command.count("--enable-metrics") == 1
    assert command[-2:] == ["--enable-metrics", "--enable-metrics-for-all-schedulers"]


def test_the_flag_is_sglangs_own_switch_with_no_negative_form():
    flags = sglang.SGLANG.flags
    assert vocab.SGLANG_METRICS_FLAG in flags.options and vocab.SGLANG_METRICS_FLAG in flags.no_value
    assert not any("metrics" in n for n in flags.negative)

"""SGLang's Mooncake store per role (docs/engines.md#sglang-and-the-store): what SGLang 0.5.23
needs on its command line to create the store, and the combinations its argument checks refuse."""

from __future__ import annotations

import itertools

import pytest

from app import vocab
from app.engines import argv as engine_argv
from tests.helpers import engine, parent, pods, sync

OFFLOAD = "--disaggregation-decode-enable-offload-kvcache"
HICACHE = "--enable-hierarchical-cache"
RETRACTION = "--disaggregation-decode-retraction-backup"


def sglang(*, router: str | None, kinds: tuple[str, ...], cache: bool) -> dict:
    md = parent("qwen-cached")
    md["spec"]["engine"] = {"name": "SGLang", "version": "0.5.23"}
    if not cache:
        md["spec"].pop("kvCache")
    if router:
        md["spec"]["router"] = {"name": router}
    base = md["spec"]["roles"][0]
    md["spec"]["roles"] = [{**base, "name": kind.lower(), "kind": kind, "replicas": 1} for kind in kinds]
    return md


def argv_of(result, kind: str) -> list[str]:
    pod = next(p for p in pods(result) if p["metadata"]["labels"][vocab.LABEL_ROLE_KIND] == kind.lower())
    return engine(pod)["command"]


def value(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


@pytest.mark.parametrize("router", ["sglang-gateway", "llm-d-router"])
def test_a_routed_decoder_offloads_to_the_store(router):
    argv = argv_of(sync(sglang(router=router, kinds=("Prefill", "Decode"), cache=True)), "Decode")
    assert value(argv, "--disaggregation-mode") == "decode"
    assert OFFLOAD in argv
    assert value(argv, RETRACTION) == "cpu_tensor"
    assert value(argv, "--hicache-storage-backend") == "mooncake"
    assert HICACHE not in argv  # a decode server has no radix cache to put it on


@pytest.mark.parametrize("router", ["sglang-gateway", "llm-d-router"])
def test_a_routed_prefiller_runs_the_hierarchical_cache(router):
    argv = argv_of(sync(sglang(router=router, kinds=("Prefill", "Decode"), cache=True)), "Prefill")
    assert value(argv, "--disaggregation-mode") == "prefill"
    assert HICACHE in argv and OFFLOAD not in argv and RETRACTION not in argv
    assert value(argv, "--hicache-storage-backend") == "mooncake"


def test_a_decode_role_without_a_router_is_served_aggregated_with_the_hierarchical_cache():
    argv = argv_of(sync(sglang(router=None, kinds=("Prefill", "Decode"), cache=True)), "Decode")
    assert "--disaggregation-mode" not in argv
    assert HICACHE in argv and OFFLOAD not in argv and RETRACTION not in argv


def test_without_a_cache_no_role_gets_a_store_flag():
    result = sync(sglang(router="sglang-gateway", kinds=("Prefill", "Decode"), cache=False))
    for kind in ("Prefill", "Decode"):
        argv = argv_of(result, kind)
        assert not {OFFLOAD, HICACHE, RETRACTION, "--hicache-storage-backend"} & set(argv)


SHAPES = [(None, ("Server",)), ("sglang-gateway", ("Server",)), ("llm-d-router", ("Server",)),
          (None, ("Prefill", "Decode")), ("sglang-gateway", ("Prefill", "Decode")),
          ("llm-d-router", ("Prefill", "Decode"))]


@pytest.mark.parametrize("router,kinds,cache", [(r, k, c) for (r, k), c in itertools.product(SHAPES, (True, False))])
def test_every_rendered_line_passes_sglangs_own_checks(router, kinds, cache):
    """The checks SGLang 0.5.23 runs on its arguments (srt/arg_groups/kv_cache_hook.py,
    pd_disaggregation_hook.py): the offload only on a decode server with a storage backend and
    without the host_pool backup; no hierarchical cache on a decode server (its radix cache is
    off); every flag one the parser has. And a cached role always gets one path to the store."""
    result = sync(sglang(router=router, kinds=kinds, cache=cache))
    for kind in kinds:
        argv = argv_of(result, kind)
        parsed = engine_argv.parse_argv("SGLang", argv[3:])
        assert not parsed.unknown and not parsed.ambiguous
        decode_server = value(argv, "--disaggregation-mode") == "decode"
        if OFFLOAD in argv:
            assert decode_server and value(argv, "--hicache-storage-backend") == "mooncake"
            assert value(argv, RETRACTION) != "host_pool"
        if decode_server:
            assert HICACHE not in argv
        store_path = HICACHE in argv or OFFLOAD in argv
        assert store_path == cache, (kind, argv)

"""The runner image formula and each of its failure messages (docs/rendering.md#runner-image)."""

import copy

import pytest

from app.api.cluster import InstanceType
from app.api.v1 import ModelDeployment
from app.render.errors import RenderError
from app.render.image import lowest_runtime, role_image
from tests.conftest import example, world_objects


def _type(name):
    return next(o for o in world_objects() if o["metadata"]["name"] == name)


def _md(engine="vLLM", version="0.29.0", image=None):
    md = copy.deepcopy(example("qwen-chat"))
    md["spec"]["engine"] = {"name": engine, **({"version": version} if version is not None else {})}
    if image:
        md["spec"]["roles"][0]["image"] = image
    return ModelDeployment.model_validate(md)


def _it(name="gpustack-nvidia-a10g-linux-amd64", **detail):
    raw = copy.deepcopy(_type(name))
    raw["status"]["detail"].update(detail)
    return InstanceType.model_validate(raw)


@pytest.mark.parametrize(
    "manufacturer,family,runtime,engine,version,expected",
    [
        ("nvidia", "Ampere", "12.9", "vLLM", "0.29.0", "gpustack/runner:cuda12.9-vllm0.29.0"),
        ("ascend", "910B", "9.0", "SGLang", "0.5.18", "gpustack/runner:cann9.0-910b-sglang0.5.18"),
        ("ascend", "310P", "8.2", "vLLM", "0.9.1", "gpustack/runner:cann8.2-310p-vllm0.9.1"),
        ("ascend", "910C", "8.3", "vLLM", "0.11", "gpustack/runner:cann8.3-a3-vllm0.11"),
        ("ascend", "950", "9.1", "vLLM", "1.0", "gpustack/runner:cann9.1-950-vllm1.0"),
        ("amd", "MI300", "6.4", "vLLM", "0.29.0", "gpustack/runner:rocm6.4-vllm0.29.0"),
        ("metax", "C500", "2.33", "SGLang", "0.5.18", "gpustack/runner:maca2.33-sglang0.5.18"),
        ("mthreads", "S4000", "4.1", "vLLM", "0.9", "gpustack/runner:musa4.1-vllm0.9"),
        ("iluvatar", "BI", "4.2", "vLLM", "0.9", "gpustack/runner:corex4.2-vllm0.9"),
        ("hygon", "K100", "25.04", "vLLM", "0.9", "gpustack/runner:dtk25.04-vllm0.9"),
        ("thead", "PPU", "1.5", "vLLM", "0.9", "gpustack/runner:hggc1.5-vllm0.9"),
    ],
)
def test_image_vectors(manufacturer, family, runtime, engine, version, expected):
    it = _it(manufacturer=manufacturer, family=family, runtimeVersion=runtime, runtimeVersions=[runtime])
    md = _md(engine, version)
    assert role_image(md, md.spec.roles[0], it).image == expected


def test_a_stated_image_always_wins():
    md = _md(image="registry.local/my-vllm:1")
    assert role_image(md, md.spec.roles[0], None).image == "registry.local/my-vllm:1"


def test_lowest_runtime_is_taken_numerically_and_the_rest_reported():
    it = _it(runtimeVersion="12.10", runtimeVersions=["12.10", "12.9", "13.0"])
    assert lowest_runtime(it) == ("12.9", ("12.10", "13.0"))
    md = _md()
    choice = role_image(md, md.spec.roles[0], it)
    assert choice.image == "gpustack/runner:cuda12.9-vllm0.29.0"
    assert choice.skipped_runtime_versions == ("12.10", "13.0")


@pytest.mark.parametrize(
    "detail,version,fragment,later",
    [
        ({}, None, "spec.engine.version is empty", False),
        ({"manufacturer": None}, "0.29.0", "has not observed its hardware yet", True),
        ({"manufacturer": "cambricon"}, "0.29.0", "has no runner backend", False),
        ({"manufacturer": "ascend", "family": "910"}, "0.29.0", "publishes no runner variant", False),
        ({"manufacturer": "ascend", "family": "310B"}, "0.29.0", "publishes no runner variant", False),
        ({"runtimeVersion": None, "runtimeVersions": []}, "0.29.0", "reports no runtime version yet", True),
    ],
)
def test_each_failure_says_whether_it_resolves(detail, version, fragment, later):
    md = _md(version=version)
    with pytest.raises(RenderError) as err:
        role_image(md, md.spec.roles[0], _it(**detail))
    assert fragment in str(err.value)
    assert err.value.retryable is later

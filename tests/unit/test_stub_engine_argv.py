"""The stub engine and routers of the real-node e2e tests (tests/e2e/stub) run what our render renders.

The stub is built with tests/e2e/stub/build.sh (go build, seconds when cached) and started with
exactly the rendered command, args and env of each Pod shape the examples render (Server, KV-cache
client, size-2 leader and follower, a prefill/decode pair behind llm-d-router), on loopback. What
only Kubernetes provides is supplied the way a Pod gets it: each "Pod" gets its own 127.0.0.x
address (STUB_LISTEN_HOST: the Pod IP, so every rendered port stays as rendered), downward-API
values are filled in, the leader's DNS name becomes the leader's address, the router's ConfigMap
documents are written where the Pod mounts them, and a small fake API server lists the Pods.
"""

from __future__ import annotations

import contextlib
import http.server
import io
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from app import vocab
from app.cli import main as cli_main
from app.engines import router_flags as rf

ROOT = Path(__file__).resolve().parents[2]
STUB = ROOT / "tests" / "e2e" / "stub"
EXAMPLES = ROOT / "examples" / "deployments"
LOAD_SECONDS = 1.0
PROGRAMS = ("vllm", "sglang", "python3", "python", "envoy", "epp", "pd-sidecar", "vllm-router")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """build.sh's output directory; a bin/ of program names linked to the stub, as in the images."""
    if shutil.which("go") is None:
        pytest.fail("go is not installed: the stub engine (tests/e2e/stub) cannot be built; install Go, as "
                    "tests/e2e/components/build.sh needs it too", pytrace=False)
    out = tmp_path_factory.mktemp("stub")
    subprocess.run([str(STUB / "build.sh"), str(out)], check=True, timeout=900)
    bin_dir = out / "bin"
    bin_dir.mkdir()
    for name in PROGRAMS:
        (bin_dir / name).symlink_to(out / "current" / "stub")
    return out


def render(path: Path) -> list[dict[str, Any]]:
    """The objects the offline render (`modeldeployment render`) prints for a deployments file."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert cli_main(["render", "-q", "--objects-only", "-f", str(path)]) == 0
    return [o for o in yaml.safe_load_all(buffer.getvalue()) if o]


def pods(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == "Pod"]


def pod_env(pod: dict[str, Any], container: dict[str, Any], ip: str) -> dict[str, str]:
    """The container's env as the kubelet gives it: values, and downward-API fields filled in."""
    env: dict[str, str] = {}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
            continue
        path = e["valueFrom"]["fieldRef"]["fieldPath"]
        if path.startswith("metadata.labels['"):
            env[e["name"]] = pod["metadata"]["labels"][path[len("metadata.labels['"):-2]]
        elif path == "status.podIP":
            env[e["name"]] = ip
        elif path == "metadata.namespace":
            env[e["name"]] = pod["metadata"].get("namespace", "default")
        elif path == "metadata.name":
            env[e["name"]] = pod["metadata"]["name"]
        else:
            raise AssertionError(f"unexpected downward-API field {path}")
    return env


class Program:
    """One stub program started with a rendered argv; stopped (SIGTERM, then SIGKILL) at the end."""

    def __init__(self, built: Path, argv: list[str], env: dict[str, str], ip: str):
        self.ip = ip
        full = {"PATH": str(built / "bin"), "HOSTNAME": "", "STUB_LISTEN_HOST": ip,
                "STUB_LOAD_SECONDS": str(LOAD_SECONDS), **env}
        self.proc = subprocess.Popen(argv, env=full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.stdout.read() if self.proc.stdout else ""


@pytest.fixture
def started(built: Path) -> Iterator[Any]:
    programs: list[Program] = []

    def start(argv: list[str], env: dict[str, str], ip: str) -> Program:
        program = Program(built, argv, env, ip)
        programs.append(program)
        return program

    yield start
    for p in programs:
        p.stop()


def get(url: str, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None,
        timeout: float = 10) -> tuple[int, dict[str, str], bytes]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def wait_status(url: str, status: int, program: Program, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        if program.proc.poll() is not None:
            raise AssertionError(f"{url}: the program exited {program.proc.returncode}: {program.stop()}")
        try:
            last = get(url, timeout=2)[0]
            if last == status:
                return
        except OSError as exc:
            last = exc
        time.sleep(0.1)
    raise AssertionError(f"{url}: wanted {status}, last {last}")


def free_on(ip: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((ip, port))
            return True
        except OSError:
            return False


# Each test's "Pods" get their own loopback addresses; pick a /24 whose rendered ports are free.
def loopback_net(ports: tuple[int, ...]) -> str:
    for third in range(77, 250):
        if all(free_on(f"127.0.{third}.{last}", p) for last in range(2, 8) for p in ports):
            return f"127.0.{third}"
    raise AssertionError("no loopback /24 with the rendered ports free")


def engine_container(pod: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in pod["spec"]["containers"] if c["name"] == "engine")


def http_port(container: dict[str, Any]) -> int:
    return next(p["containerPort"] for p in container["ports"] if p["name"] in ("http", "engine"))


def check_serving(base: str, engine: str, program: Program, model: str) -> dict[str, Any]:
    """/health after the load delay, chat (whole and streamed), completions, metrics, /stub/info."""
    wait_status(base + "/health", 200, program)
    status, headers, body = get(base + "/v1/chat/completions",
                                {"model": model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4})
    assert status == 200, body
    answer = json.loads(body)
    assert answer["object"] == "chat.completion" and answer["choices"][0]["message"]["content"]
    assert headers["X-Stub-Pod"] and headers["X-Stub-Role"]
    status, headers, body = get(base + "/v1/chat/completions",
                                {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": True})
    events = [line[len("data: "):] for line in body.decode().splitlines() if line.startswith("data: ")]
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    assert events[-1] == "[DONE]" and json.loads(events[1])["choices"][0]["delta"]["content"]
    status, _, body = get(base + "/v1/completions", {"model": model, "prompt": "hi", "max_tokens": 2})
    assert status == 200 and json.loads(body)["object"] == "text_completion"
    assert get(base + "/v1/models")[0] == 200
    status, _, body = get(base + "/metrics")
    if engine == "vLLM":
        text = body.decode()
        for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:request_success_total",
                     "vllm:prompt_tokens_total", "vllm:generation_tokens_total"):
            assert f'{name}{{' in text and f'model_name="{model}"' in text, name
        assert 'vllm:request_success_total{engine="0",finished_reason="stop",model_name="%s"} 3.0' % model in text
    else:
        # SGLang serves /metrics only with --enable-metrics, which our render adds to every role.
        text = body.decode()
        assert status == 200
        for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:num_requests_total"):
            assert f'{name}{{' in text and f'model_name="{model}"' in text, name
        assert 'sglang:num_requests_total{engine_type="unified",is_streaming="false",model_name="%s"} 3.0' % model \
            in text
    info = json.loads(get(base + "/stub/info")[2])
    assert info["argv"][0] in PROGRAMS and info["completions"] == 3
    return info


EXAMPLE_SHAPES = [
    ("qwen-chat.yaml", "vLLM", "server"),  # a Server role
    ("qwen-cached.yaml", "vLLM", "server"),  # the KV-cache client (MOONCAKE_CONFIG_PATH)
    ("ascend-sglang.yaml", "SGLang", "server"),
]


@pytest.mark.parametrize(("example", "engine", "role"), EXAMPLE_SHAPES)
def test_rendered_engine_serves(started: Any, tmp_path: Path, example: str, engine: str, role: str) -> None:
    pod = pods(render(EXAMPLES / example))[0]
    container = engine_container(pod)
    net = loopback_net((http_port(container),))
    ip = f"{net}.2"
    env = pod_env(pod, container, ip)
    if "MOONCAKE_CONFIG_PATH" in env:
        # The downward-API volume: the Pod annotation projected as a file.
        config = tmp_path / "mooncake.json"
        config.write_text(pod["metadata"]["annotations"][vocab.ANNOTATION_KVCACHE_CLIENT_CONFIG])
        env["MOONCAKE_CONFIG_PATH"] = str(config)
    program = started(container["command"], env, ip)
    base = f"http://{ip}:{http_port(container)}"
    wait_status(base + "/health", 503, program)  # loading
    model = yaml.safe_load((EXAMPLES / example).read_text())["spec"]["model"]["name"]
    info = check_serving(base, engine, program, model)
    assert info["engine"] == engine and info["role"] == role and info["argv"] == container["command"]
    assert info["env"]["STUB_LISTEN_HOST"] == ip and info["pod_ip"] == ip
    if "MOONCAKE_CONFIG_PATH" in env:
        assert info["kv_cache_client"]["config"]["protocol"]


def test_size_two_follower_registers_with_its_leader(started: Any) -> None:
    leader_pod, follower_pod = pods(render(EXAMPLES / "deepseek-multinode.yaml"))[:2]
    container = engine_container(leader_pod)
    port = http_port(container)
    net = loopback_net((port,))
    leader_ip, follower_ip = f"{net}.2", f"{net}.3"
    leader_env = pod_env(leader_pod, container, leader_ip)
    assert leader_env["GPUSTACK_MEMBER_INDEX"] == "0" and leader_env["GPUSTACK_REPLICA_SIZE"] == "2"
    # The rendered leader address is a DNS name of the headless Service: here, the leader's address.
    leader_env["GPUSTACK_REPLICA_LEADER_ADDRESS"] = leader_ip
    leader = started(container["command"], leader_env, leader_ip)
    base = f"http://{leader_ip}:{port}"
    time.sleep(LOAD_SECONDS + 0.5)
    status, _, body = get(base + "/health")
    assert status == 503 and b"waiting for followers: 0 of 1" in body
    follower_container = engine_container(follower_pod)
    follower_env = pod_env(follower_pod, follower_container, follower_ip)
    assert follower_env["GPUSTACK_MEMBER_INDEX"] == "1"
    follower_env["GPUSTACK_REPLICA_LEADER_ADDRESS"] = leader_ip
    follower = started(follower_container["command"], follower_env, follower_ip)
    check_serving(base, "SGLang", leader, "deepseek-ai/DeepSeek-V3")
    wait_status(f"http://{follower_ip}:{port}/health", 200, follower)
    leader_info = json.loads(get(base + "/stub/info")[2])
    assert leader_info["member_index"] == 0 and leader_info["group_size"] == 2
    assert [f["member"] for f in leader_info["followers"]] == [1]
    follower_info = json.loads(get(f"http://{follower_ip}:{port}/stub/info")[2])
    assert follower_info["leader_connected"] and follower_info["leader"]["resolved"] == [leader_ip]


@pytest.mark.parametrize(("argv", "flag"), [
    (["vllm", "serve", "m", "--port", "8000", "--no-such-flag", "1"], "--no-such-flag"),
    (["vllm", "serve", "m", "--kv-transfer-config.kv_rolez", "x", "--bogus_option"], "--bogus_option"),
    (["vllm", "serve", "m", "--max"], "--max"),  # ambiguous: a prefix of several options
    (["python3", "-m", "sglang.launch_server", "--model-path", "m", "--tensor-parallel-sizes", "2"],
     "--tensor-parallel-sizes"),
    (["vllm", "serve", "m", "--kv-transfer-config", "{not json"], "--kv-transfer-config"),
    (["envoy", "--config-path", "/x", "--no-such-flag"], "--no-such-flag"),
    (["epp", "--endpoint-selector=a=b", "--endpoint-picker-bogus=1"], "--endpoint-picker-bogus"),
])
def test_unknown_flag_is_refused_by_name(built: Path, argv: list[str], flag: str) -> None:
    result = subprocess.run(argv, env={"PATH": str(built / "bin")}, capture_output=True, text=True, timeout=10)
    assert result.returncode == 2 and flag in result.stderr, result.stderr


def test_rendered_flags_are_all_known(built: Path) -> None:
    """Every engine command line of every example parses (a refusal would exit at once)."""
    for example in sorted(EXAMPLES.glob("*.yaml")):
        for pod in pods(render(example)):
            for c in pod["spec"]["containers"]:
                env = {"PATH": str(built / "bin"), "STUB_LISTEN_HOST": "127.0.0.1", "STUB_LISTEN_PORT": "-1"}
                proc = subprocess.Popen(c["command"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                try:
                    _, err = proc.communicate(timeout=1)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.communicate()
                    continue
                # Only listening on port -1 may fail; a refused command line may not.
                assert "error:" not in err and "cannot listen" in err, (example.name, err)


def test_router_flag_tables_match_the_operator() -> None:
    """routers.json's names are app/engines/router_flags.py's (one source), with dashes."""
    doc = json.loads((STUB / "cmd" / "stub" / "routers.json").read_text())
    names = {k: {f[2:] for f in v["flags"]} for k, v in doc.items() if not k.startswith("_")}
    assert names["epp"] == set(rf.LLMD_EPP_FLAGS)
    assert names["pd-sidecar"] == set(rf.LLMD_SIDECAR_FLAGS)
    assert names["vllm-router"] == set(rf.VLLM_ROUTER_FLAGS | rf.VLLM_ROUTER_OWNED_FLAGS)


def test_every_rendered_image_is_packed(built: Path) -> None:
    """images.txt names every image the examples render (engines, sidecar, router containers)."""
    packed: dict[str, Path] = {}
    for line in (built / "images.txt").read_text().splitlines():
        tar, *refs = line.split()
        assert Path(tar).is_file()
        packed.update({r: Path(tar) for r in refs})
    for example in sorted(EXAMPLES.glob("*.yaml")):
        for obj in render(example):
            spec = obj["spec"]["template"]["spec"] if obj["kind"] == "Deployment" else obj.get("spec", {})
            for c in spec.get("initContainers", []) + spec.get("containers", []):
                image = c["image"]
                full = image if "." in image.split("/")[0] else "docker.io/" + image
                assert full in packed, (example.name, image)


class FakeAPI(http.server.ThreadingHTTPServer):
    """GET /api/v1/namespaces/<ns>/pods: the given Pods, all Ready (the EPP's discovery)."""

    def __init__(self, ip: str, items: list[dict[str, Any]]):
        items_json = json.dumps({"kind": "PodList", "items": items}).encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(items_json)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__((ip, 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


def test_llmd_pair_routes_prefill_then_decode(started: Any, tmp_path: Path) -> None:
    """pd-pair (vLLM behind llm-d-router): prefill engine, decode engine behind its routing sidecar,
    Envoy and the Endpoint Picker, all as rendered; one request through the router's listener."""
    objects = render(EXAMPLES / "pd-pair.yaml")
    prefill_pod = next(p for p in pods(objects) if p["metadata"]["labels"]["modeldeployment.gpustack.ai/role-kind"] == "prefill")
    decode_pod = next(p for p in pods(objects) if p["metadata"]["labels"]["modeldeployment.gpustack.ai/role-kind"] == "decode")
    router = next(o for o in objects if o["kind"] == "Deployment")
    config_map = next(o for o in objects if o["kind"] == "ConfigMap")
    net = loopback_net((8000, 8200, 8998, 9002, 9003, 9090, 19001))
    prefill_ip, decode_ip, router_ip = f"{net}.2", f"{net}.3", f"{net}.4"

    engine = engine_container(prefill_pod)
    prefill = started(engine["command"], pod_env(prefill_pod, engine, prefill_ip) | {"MOONCAKE_CONFIG_PATH": ""}, prefill_ip)
    engine = engine_container(decode_pod)
    decode = started(engine["command"], pod_env(decode_pod, engine, decode_ip) | {"MOONCAKE_CONFIG_PATH": ""}, decode_ip)
    sidecar = decode_pod["spec"]["initContainers"][0]
    assert sidecar["name"] == "routing-proxy" and "command" not in sidecar
    started(["/app/pd-sidecar".rsplit("/", 1)[1], *sidecar["args"]], {}, decode_ip)  # the image's entrypoint

    # The router Pod: its ConfigMap where the Pod mounts it, a fake API server listing the engine Pods.
    for name, text in config_map["data"].items():
        (tmp_path / name).write_text(text)
    items = [{"metadata": {"name": p["metadata"]["name"], "labels": p["metadata"]["labels"]},
              "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]}}
             for p, ip in ((prefill_pod, prefill_ip), (decode_pod, decode_ip))]
    api = FakeAPI(router_ip, items)
    try:
        containers = {c["name"]: c for c in router["spec"]["template"]["spec"]["containers"]}
        fix = lambda argv: [a.replace("/etc/gpustack/router", str(tmp_path)) for a in argv]  # noqa: E731 (the mount)
        epp_env = {"NAMESPACE": "team-a", "POD_NAME": "router-0",
                   "STUB_KUBE_API": f"http://{router_ip}:{api.server_address[1]}"}
        started(["epp", *fix(containers["epp"]["args"])], epp_env, router_ip)
        envoy = started(fix(containers["envoy"]["command"]), {}, router_ip)
        wait_status(f"http://{prefill_ip}:8000/health", 200, prefill)
        wait_status(f"http://{decode_ip}:8000/v1/models", 200, decode)  # the decoder's probe, through the sidecar
        wait_status(f"http://{router_ip}:19001/ready", 200, envoy)

        # disaggregationThresholdTokens is 512: a long prompt is disaggregated, a short one is not.
        long_prompt = "word " * 600
        for stream in (False, True):
            status, headers, body = get(f"http://{router_ip}:8000/v1/chat/completions", {
                "model": "Qwen/Qwen3-32B", "messages": [{"role": "user", "content": long_prompt}], "stream": stream})
            assert status == 200, body
            assert headers["X-Stub-Prefill-Pod"] and headers["X-Stub-Decode-Pod"] and headers["X-Stub-Router-Pod"]
            if stream:
                assert body.decode().rstrip().endswith("data: [DONE]")
        status, headers, _ = get(f"http://{router_ip}:8000/v1/completions",
                                 {"model": "Qwen/Qwen3-32B", "prompt": "short", "max_tokens": 2})
        assert status == 200 and "X-Stub-Prefill-Pod" not in headers

        prefill_info = json.loads(get(f"http://{prefill_ip}:8000/stub/info")[2])
        decode_info = json.loads(get(f"http://{decode_ip}:8000/stub/info")[2])  # through the sidecar
        assert prefill_info["role"] == "prefill" and prefill_info["prefill_steps"] == 2
        assert decode_info["role"] == "decode" and decode_info["decode_steps"] == 3
        # The decoder pulled the prefiller's KV: it names the prefill Pod (the stub's hostname).
        prefilled = {k: v for k, v in decode_info["prefilled_by"].items() if not k.startswith("(none")}
        assert sum(prefilled.values()) == 2
    finally:
        api.shutdown()

"""A self-contained Kubernetes control plane on loopback for end-to-end tests.

Runs real upstream binaries (built by ``tests/e2e/components/build.sh``):
etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok (fake
nodes and Pod lifecycles), Kueue and Metacontroller.
Everything listens on 127.0.0.1 only; no container runtime is needed.

With ``real_node=True`` a real node joins the kwok pool (``realnode.py``:
kubelet, containerd, kube-proxy, CoreDNS in a network namespace of its own);
the API server then listens on the host end of that namespace's veth pair
instead of 127.0.0.1 (every other component stays on loopback).

Only the standard library, httpx and PyYAML are used; certificates are made with
the ``openssl`` command line tool.

Typical use::

    cp = ControlPlane()            # finds binaries in the component cache
    cp.start()
    try:
        cp.kubectl("get", "nodes")
    finally:
        cp.stop()
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import ctypes
import dataclasses
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import httpx
import yaml

import realnode as e2e_realnode

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = Path(__file__).resolve().parent / "components" / "build.sh"

KUBERNETES_VERSION = "v1.36.3"
ETCD_VERSION = "v3.6.8"
KWOK_VERSION = "v0.8.0"
KUEUE_VERSION = "v0.19.0"
METACONTROLLER_VERSION = "v4.17.2"

#: Label put on every fake node; kwok manages exactly the nodes carrying it.
KWOK_NODE_LABEL = "kwok.x-k8s.io/node"
KWOK_NODE_LABEL_VALUE = "fake"
INSTANCE_TYPE_LABEL = "gpustack.ai/instance-type"
RACK_LABEL = "topology.gpustack.ai/rack"

#: Kueue integrations enabled by default ("pod" is what the operator uses).
DEFAULT_KUEUE_FRAMEWORKS = ("pod", "batch/job")
#: Kueue CRDs whose conversion webhook Kueue serves at /convert
#: (config/components/crd/kustomization.yaml in the Kueue module).
KUEUE_CONVERSION_CRDS = (
    "localqueues.kueue.x-k8s.io",
    "clusterqueues.kueue.x-k8s.io",
    "cohorts.kueue.x-k8s.io",
    "workloads.kueue.x-k8s.io",
    "multikueueclusters.kueue.x-k8s.io",
)
#: Kueue hard-codes this path for its metrics serving certificate when its
#: internal certificate management is off; the files must exist or it exits.
KUEUE_METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")


class ControlPlaneError(RuntimeError):
    """Raised when a component fails to build, start or become ready."""


class KubectlError(subprocess.CalledProcessError):
    """A failed kubectl call; ``str()`` includes its stderr and stdout."""

    def __str__(self) -> str:  # pragma: no cover - formatting only
        return (
            f"kubectl {' '.join(map(str, self.cmd[1:]))!s} exited {self.returncode}\n"
            f"stderr: {self.stderr}\nstdout: {self.stdout}"
        )


# --------------------------------------------------------------------------
# Nodes
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class NodePool:
    """A group of identical fake (kwok) nodes.

    ``name_prefix``-0 .. ``name_prefix``-(count-1) are created; node ``i`` gets
    the rack label ``rack-<i // nodes_per_rack>`` prefixed by ``rack_prefix``.
    """

    name_prefix: str
    count: int
    instance_type: str | None = None
    gpu_resource: str | None = None
    gpus: int = 0
    arch: str = "amd64"
    cpu: str = "128"
    memory: str = "1Ti"
    pods: str = "110"
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    taints: Sequence[Mapping[str, str]] = ()
    rack_prefix: str | None = None
    nodes_per_rack: int = 2

    def node_names(self) -> list[str]:
        return [f"{self.name_prefix}-{i}" for i in range(self.count)]

    def manifests(self) -> list[dict[str, Any]]:
        out = []
        for i, name in enumerate(self.node_names()):
            labels = {
                KWOK_NODE_LABEL: KWOK_NODE_LABEL_VALUE,
                "type": "kwok",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": self.arch,
                RACK_LABEL: f"{self.rack_prefix or self.name_prefix}-rack-{i // max(1, self.nodes_per_rack)}",
            }
            if self.instance_type:
                labels[INSTANCE_TYPE_LABEL] = self.instance_type
                labels["node.kubernetes.io/instance-type"] = self.instance_type
            labels.update(self.labels)
            # Pods request ephemeral storage; a node reporting none fits no Pod (nor Kueue TAS).
            capacity = {"cpu": self.cpu, "memory": self.memory, "pods": self.pods, "ephemeral-storage": "2Ti"}
            if self.gpu_resource and self.gpus:
                capacity[self.gpu_resource] = str(self.gpus)
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": name,
                        "labels": labels,
                        "annotations": {
                            "node.alpha.kubernetes.io/ttl": "0",
                            "kwok.x-k8s.io/node": "fake",
                        },
                    },
                    "spec": {"taints": [dict(t) for t in self.taints]} if self.taints else {},
                    "status": {
                        "allocatable": dict(capacity),
                        "capacity": dict(capacity),
                    },
                }
            )
        return out


DEFAULT_NODE_POOLS: tuple[NodePool, ...] = (
    NodePool("a10g", 4, "gpustack-nvidia-a10g-linux-amd64", "nvidia.com/gpu", 8),
    NodePool("h20", 2, "gpustack-nvidia-h20-linux-amd64", "nvidia.com/gpu", 8),
    NodePool("ascend910b", 2, "gpustack-ascend-910b-linux-arm64", "huawei.com/Ascend910", 8, arch="arm64"),
    NodePool("cpu", 2, "gpustack-cpu-linux-amd64"),
)


# --------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------


def cache_dir() -> Path:
    """Root of the component cache (same rule as build.sh)."""
    env = os.environ.get("MODELDEPLOYMENT_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "modeldeployment"


def default_bin_dir() -> Path:
    return cache_dir() / "components" / "bin"


def free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1."""
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def wait_until(
    predicate: Callable[[], Any],
    timeout: float = 60.0,
    interval: float = 0.25,
    message: str = "condition",
) -> Any:
    """Poll ``predicate`` until it returns something truthy; return that value.

    Exceptions raised by the predicate count as "not yet" (the last one is
    reported if the timeout expires), except :class:`ControlPlaneError`, which
    is raised at once.
    """
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except ControlPlaneError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported on timeout
            last_exc = exc
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_exc!r})" if last_exc else ""
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {message}{detail}")
        time.sleep(interval)


def _tail(path: Path, lines: int = 40) -> str:
    try:
        data = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(data[-lines:])


def _set_pdeathsig() -> None:
    """Child pre-exec: die with SIGKILL if the test process dies."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _openssl(*args: str, cwd: Path | None = None) -> None:
    proc = subprocess.run(
        ["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise ControlPlaneError(f"openssl {' '.join(args)} failed: {proc.stderr}")


# --------------------------------------------------------------------------
# Certificates
# --------------------------------------------------------------------------


class CertificateAuthority:
    """A throw-away CA (ECDSA P-256) made with the openssl CLI."""

    def __init__(self, directory: Path, name: str = "modeldeployment-e2e-ca") -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.cert = self.dir / "ca.crt"
        self.key = self.dir / "ca.key"
        _openssl(
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", str(self.key), "-out", str(self.cert), "-days", "3650",
            "-subj", f"/CN={name}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        )

    @property
    def pem(self) -> bytes:
        return self.cert.read_bytes()

    def issue(
        self,
        name: str,
        common_name: str,
        organizations: Sequence[str] = (),
        hosts: Sequence[str] = (),
        server: bool = True,
        client: bool = False,
        days: int = 365,
    ) -> tuple[Path, Path]:
        """Issue a leaf certificate; returns ``(cert_path, key_path)``."""
        crt = self.dir / f"{name}.crt"
        key = self.dir / f"{name}.key"
        csr = self.dir / f"{name}.csr"
        ext = self.dir / f"{name}.ext"
        subj = "".join(f"/O={o}" for o in organizations) + f"/CN={common_name}"
        _openssl(
            "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", subj,
        )
        usages = [u for u, on in (("serverAuth", server), ("clientAuth", client)) if on]
        lines = [
            "basicConstraints=critical,CA:FALSE",
            "keyUsage=critical,digitalSignature,keyEncipherment",
            f"extendedKeyUsage={','.join(usages)}",
        ]
        if hosts:
            sans = []
            for h in hosts:
                kind = "IP" if _is_ip(h) else "DNS"
                sans.append(f"{kind}:{h}")
            lines.append("subjectAltName=" + ",".join(sans))
        ext.write_text("\n".join(lines) + "\n")
        _openssl(
            "x509", "-req", "-in", str(csr), "-CA", str(self.cert), "-CAkey", str(self.key),
            "-set_serial", str(int.from_bytes(os.urandom(8), "big")),
            "-out", str(crt), "-days", str(days), "-extfile", str(ext),
        )
        csr.unlink(missing_ok=True)
        ext.unlink(missing_ok=True)
        key.chmod(0o600)
        return crt, key


def _is_ip(host: str) -> bool:
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
        return True
    except OSError:
        return False


# --------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------


class Component:
    """One running binary: its own process group, output in ``log``."""

    def __init__(self, name: str, argv: Sequence[str], log: Path, env: Mapping[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        self.name = name
        self.argv = [str(a) for a in argv]
        self.log = log
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self.stopped = False  # stopped on purpose: not a crash

    def start(self) -> None:
        self.stopped = False
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            out.write(f"# {' '.join(self.argv)}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(  # noqa: S603 - our own argv
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
                preexec_fn=_set_pdeathsig,
            )

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check_alive(self) -> None:
        if self.proc is not None and not self.stopped and self.proc.poll() is not None:
            raise ControlPlaneError(
                f"{self.name} exited with code {self.proc.returncode}; log {self.log}:\n{_tail(self.log)}"
            )

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None:
            return
        self.stopped = True
        pgid = self.proc.pid  # start_new_session: pgid == pid
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        # Kill whatever is left in the group (children included).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)


# --------------------------------------------------------------------------
# The control plane
# --------------------------------------------------------------------------


class ControlPlane:
    """etcd + kube-apiserver + controller-manager + scheduler + kwok + Kueue
    + Metacontroller, all on 127.0.0.1.

    Parameters
    ----------
    bin_dir:
        Directory with the component binaries (default: the build cache's
        ``components/bin``; run ``tests/e2e/components/build.sh`` to fill it).
    work_dir:
        Where certificates, configs, etcd data and logs go (default: a fresh
        directory under ``<repo>/.e2e-work/``).
    nodes:
        Fake node pools (default :data:`DEFAULT_NODE_POOLS`).
    kueue / metacontroller:
        Start these (both by default; a missing binary fails the start with the reason).
    kueue_frameworks / kueue_feature_gates / kueue_config_overrides:
        Tuning of Kueue's Configuration file.
    kueue_as_shipped:
        Run Kueue's controllers at the concurrency its release manifests set
        (``controller.groupKindConcurrency``; the bench's scale runs), not one reconcile at a time.
    kwok_stage_crds:
        Serve kwok's Stages from the cluster (``stages.kwok.x-k8s.io`` CRD,
        kwok ``--enable-crds=Stage``) so tests can add their own; otherwise
        they are fixed in kwok's config file.
    real_node:
        Add a real node (``realnode.RealNode``: kubelet, containerd, kube-proxy,
        CoreDNS) beside the kwok pools; :attr:`real_node` is it. A machine that
        cannot run it fails ``start()`` with :class:`realnode.RealNodeUnavailable`.
    """

    def __init__(
        self,
        bin_dir: Path | str | None = None,
        work_dir: Path | str | None = None,
        nodes: Iterable[NodePool] = DEFAULT_NODE_POOLS,
        kueue: bool = True,
        metacontroller: bool = True,
        kueue_frameworks: Sequence[str] = DEFAULT_KUEUE_FRAMEWORKS,
        kueue_feature_gates: Mapping[str, bool] | None = None,
        kueue_config_overrides: Mapping[str, Any] | None = None,
        kueue_as_shipped: bool = False,
        service_cluster_ip_range: str = "10.96.0.0/16",
        pod_cidr: str = "10.244.0.0/16",
        kwok_stage_crds: bool = True,
        startup_timeout: float = 120.0,
        real_node: bool = False,
    ) -> None:
        self.bin_dir = Path(bin_dir) if bin_dir else default_bin_dir()
        self.components_dir = self.bin_dir.parent
        if work_dir is None:
            base = REPO_ROOT / ".e2e-work"
            base.mkdir(parents=True, exist_ok=True)
            work_dir = tempfile.mkdtemp(prefix=time.strftime("cp-%Y%m%d-%H%M%S-"), dir=base)
        self.work_dir = Path(work_dir).resolve()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.logs_dir = self.work_dir / "logs"
        self.logs_dir.mkdir(exist_ok=True)
        self.pki_dir = self.work_dir / "pki"
        self.node_pools = tuple(nodes)
        self.want_kueue = kueue
        self.want_metacontroller = metacontroller
        self.kueue_frameworks = tuple(kueue_frameworks)
        self.kueue_feature_gates = {"VisibilityOnDemand": False, **(kueue_feature_gates or {})}
        self.kueue_config_overrides = dict(kueue_config_overrides or {})
        self.kueue_as_shipped = kueue_as_shipped
        self.service_cluster_ip_range = service_cluster_ip_range
        self.pod_cidr = pod_cidr
        self.kwok_stage_crds = kwok_stage_crds
        self.startup_timeout = startup_timeout
        #: The real node (kubelet + containerd, realnode.py) when ``real_node=True``, else None.
        self.real_node: e2e_realnode.RealNode | None = e2e_realnode.RealNode(self) if real_node else None

        # kubectl built with the control plane (same version) if present, else PATH's.
        own_kubectl = self.bin_dir / "kubectl"
        self.kubectl_path = str(own_kubectl) if os.access(own_kubectl, os.X_OK) else (
            shutil.which("kubectl") or "kubectl")
        self.components: dict[str, Component] = {}
        self.ports: dict[str, int] = {}
        self.ca: CertificateAuthority | None = None
        self.kubeconfig: Path = self.work_dir / "kubeconfig"
        self.server: str = ""
        self.kueue_running = False
        self.metacontroller_running = False
        self._started = False
        self._stopped = False
        self._issued = 0
        #: Seconds spent in each start-up step (for diagnosing slow starts).
        self.timings: dict[str, float] = {}

    # ---- public helpers --------------------------------------------------

    @property
    def ca_bundle(self) -> bytes:
        """PEM of the cluster CA (signs the API server's and our serving certs)."""
        assert self.ca is not None, "start() first"
        return self.ca.pem

    @property
    def ca_bundle_b64(self) -> str:
        """``ca_bundle`` base64-encoded, as webhook ``clientConfig.caBundle`` wants it."""
        return base64.b64encode(self.ca_bundle).decode()

    @property
    def ca_cert_path(self) -> Path:
        assert self.ca is not None, "start() first"
        return self.ca.cert

    def webhook_client_config(self, port: int, path: str, host: str = "127.0.0.1") -> dict[str, Any]:
        """``clientConfig`` for a webhook served by a local process over TLS
        (with a certificate from :meth:`issue_serving_cert`)."""
        return {"url": f"https://{host}:{port}{path}", "caBundle": self.ca_bundle_b64}

    def issue_serving_cert(self, hosts: Sequence[str] = ("127.0.0.1", "localhost")) -> tuple[Path, Path]:
        """A serving certificate for ``hosts`` signed by the cluster CA;
        returns ``(cert_path, key_path)``."""
        assert self.ca is not None, "start() first"
        self._issued += 1
        return self.ca.issue(f"serving-{self._issued}", hosts[0] if hosts else "serving",
                             hosts=list(hosts), server=True)

    def issue_client_cert(self, user: str, groups: Sequence[str] = ()) -> tuple[Path, Path]:
        """A client certificate (CN=user, O=groups) trusted by the API server."""
        assert self.ca is not None, "start() first"
        self._issued += 1
        return self.ca.issue(f"client-{self._issued}", user, organizations=groups,
                             server=False, client=True)

    def kubectl(
        self,
        *args: str,
        input: str | bytes | None = None,  # noqa: A002 - mirrors subprocess
        check: bool = True,
        timeout: float = 60.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``kubectl --kubeconfig=<ours> *args``; text output.

        Raises :class:`KubectlError` (with stderr) on failure when ``check``.
        """
        cmd = [self.kubectl_path, f"--kubeconfig={self.kubeconfig}", *map(str, args)]
        if isinstance(input, bytes):
            input = input.decode()
        proc = subprocess.run(cmd, input=input, capture_output=True, text=True,
                              timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise KubectlError(proc.returncode, cmd, proc.stdout, proc.stderr)
        return proc

    def kubectl_json(self, *args: str, timeout: float = 60.0) -> Any:
        """``kubectl ... -o json`` parsed."""
        return json.loads(self.kubectl(*args, "-o", "json", timeout=timeout).stdout)

    def wait_established(self, *crds: str, timeout: float = 60.0) -> None:
        """Until every named CRD (every CRD, when none is named) is Established. Not ``kubectl wait``:
        it fails at once ("accessor error: <nil>") on a CRD whose status has no conditions yet, which
        a loaded API server shows for a moment after the create."""
        def established() -> bool:
            got = self.kubectl_json("get", *([f"crd/{c}" for c in crds] or ["crd"]))
            items = got.get("items", [got]) if got.get("kind") == "List" else [got]
            return (len(items) == len(crds) or not crds) and all(
                any(c.get("type") == "Established" and c.get("status") == "True"
                    for c in (i.get("status") or {}).get("conditions") or []) for i in items)

        wait_until(established, timeout=timeout, interval=0.25, message=f"CRDs {', '.join(crds) or '(all)'} Established")

    def apply(self, objects: str | Mapping[str, Any] | Sequence[Mapping[str, Any]],
              server_side: bool = False) -> subprocess.CompletedProcess[str]:
        """``kubectl apply`` YAML text or one/many objects."""
        text = objects if isinstance(objects, str) else _to_json(objects)
        args = ["apply", "-f", "-"]
        if server_side:
            args += ["--server-side", "--force-conflicts"]
        return self.kubectl(*args, input=text)

    def create_namespace(self, name: str, labels: Mapping[str, str] | None = None,
                         timeout: float = 30.0) -> None:
        """Create a namespace and wait for its ``default`` ServiceAccount
        (Pods are refused until the controller-manager made it)."""
        self.apply({"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": name, "labels": dict(labels or {})}})
        wait_until(lambda: self.kubectl("get", "serviceaccount", "default", "-n", name,
                                        check=False).returncode == 0,
                   timeout=timeout, message=f"serviceaccount default in {name}")

    def http_client(self, **kwargs: Any) -> httpx.Client:
        """An httpx client authenticated as cluster admin against :attr:`server`."""
        return httpx.Client(base_url=self.server, verify=self._ssl_context(), **kwargs)

    def lightkube_client(self) -> Any:
        """A ``lightkube.Client`` for this cluster (admin)."""
        import lightkube  # local import: optional for users of this module
        from lightkube.config.kubeconfig import KubeConfig

        return lightkube.Client(config=KubeConfig.from_file(str(self.kubeconfig)))

    @property
    def env(self) -> dict[str, str]:
        """Environment for a process that should talk to this cluster."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        return env

    @property
    def node_names(self) -> list[str]:
        return [n for pool in self.node_pools for n in pool.node_names()]

    def start_process(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None,
                      cwd: Path | None = None) -> Component:
        """Start an extra process (e.g. the operator under test) that is
        stopped with the control plane and logs to ``logs_dir/<name>.log``."""
        if name in self.components:
            raise ValueError(f"component {name} already exists")
        comp = Component(name, argv, self.logs_dir / f"{name}.log", env=env or self.env, cwd=cwd)
        comp.start()
        self.components[name] = comp
        return comp

    def stop_component(self, name: str) -> None:
        """Stop one component but keep it registered, so that `start_component` brings it back
        with the same argv (a restart, or an outage of a chosen length)."""
        self.components[name].stop()

    def start_component(self, name: str) -> None:
        comp = self.components[name]
        if not comp.alive():
            comp.start()

    def stop_process(self, name: str) -> None:
        comp = self.components.pop(name, None)
        if comp is not None:
            comp.stop()

    def node_exec(self, argv: Sequence[str], input: str | None = None,  # noqa: A002
                  timeout: float = 30.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside the real node's network namespace, where ClusterIPs, Pod IPs and
        the cluster DNS Service are reachable (``RealNode.exec``; needs ``real_node=True``)."""
        if self.real_node is None:
            raise ControlPlaneError("node_exec needs ControlPlane(real_node=True)")
        return self.real_node.exec(argv, input=input, timeout=timeout, check=check)

    def log_paths(self) -> dict[str, Path]:
        return {name: c.log for name, c in self.components.items()}

    def check_alive(self) -> None:
        """Raise :class:`ControlPlaneError` if any component has exited."""
        for comp in self.components.values():
            comp.check_alive()

    # ---- lifecycle ---------------------------------------------------------

    def __enter__(self) -> "ControlPlane":
        self.start()
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        self.stop(keep_work_dir=exc_type is not None)

    def start(self) -> "ControlPlane":
        if self._started:
            return self
        self._started = True
        self._check_binaries()
        if self.real_node is not None:
            self.real_node.preflight()  # one line saying why this machine cannot run it
        # Last resort if the caller never calls stop(): no process is left
        # behind (children also get PDEATHSIG), and the logs are kept.
        atexit.register(self.stop, keep_work_dir=True)
        t0 = time.monotonic()
        steps: list[tuple[str, Callable[[], None]]] = []
        if self.real_node is not None:
            # First: the API server listens on the veth's host end, its certificate names it.
            steps.append(("real-node-network", lambda: self._real_node_step(self.real_node.setup_network)))
        steps += [
            ("pki", self._make_pki),
            ("etcd", self._start_etcd),
            ("kube-apiserver", self._start_apiserver),
            ("kubeconfig", self._write_kubeconfig),
            ("kube-apiserver-ready", self._wait_apiserver),
            ("kube-controller-manager", self._start_controller_manager),
            ("kube-scheduler", self._start_scheduler),
            ("kwok", self._start_kwok),
            ("nodes", self._create_nodes),
            ("controllers-ready", self._wait_controllers),
        ]
        if self.real_node is not None:
            steps.append(("real-node", lambda: self._real_node_step(self.real_node.start)))
        if self.want_kueue:
            steps.append(("kueue", self._start_kueue))
        if self.want_metacontroller:
            steps.append(("metacontroller", self._start_metacontroller))
        try:
            for name, step in steps:
                ts = time.monotonic()
                step()
                self.timings[name] = round(time.monotonic() - ts, 2)
        except BaseException:
            self.stop(keep_work_dir=True)
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def stop(self, keep_work_dir: bool | None = None) -> None:
        """Stop every component (process groups, SIGTERM then SIGKILL).

        The work directory (logs included) is deleted unless ``keep_work_dir``
        is true or ``MODELDEPLOYMENT_E2E_KEEP=1``; when kept, log paths are
        printed to stderr.
        """
        if self._stopped:
            return
        self._stopped = True
        atexit.unregister(self.stop)
        # The real node first, while the API server still answers: its Pods are deleted through
        # the kubelet before anything is killed (realnode.py, RealNode.stop).
        if self.real_node is not None:
            problems = self.real_node.stop()
            self.real_node_stop_problems = problems
            if problems:
                keep_work_dir = True
                print("\n[e2e] real node teardown: " + "; ".join(problems), file=sys.stderr)
        # Reverse start order: clients first, etcd last.
        for name in reversed(list(self.components)):
            self.components[name].stop()
        if keep_work_dir is None:
            keep_work_dir = False
        if os.environ.get("MODELDEPLOYMENT_E2E_KEEP") == "1":
            keep_work_dir = True
        if keep_work_dir:
            print(f"\n[e2e] control plane work dir kept: {self.work_dir}", file=sys.stderr)
            for name, comp in self.components.items():
                print(f"[e2e]   {name:24s} log: {comp.log}", file=sys.stderr)
        else:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    # ---- internals -----------------------------------------------------------

    def _real_node_step(self, step: Callable[[], None]) -> None:
        assert self.real_node is not None
        try:
            step()
        except ControlPlaneError:
            raise
        except Exception as exc:  # a failed command of the node's set-up: say which
            raise ControlPlaneError(f"the real node could not start: {exc}") from exc
        self.timings.update({f"real-node-{k}": v for k, v in self.real_node.timings.items()})

    def _bin(self, name: str) -> Path:
        return self.bin_dir / name

    def _check_binaries(self) -> None:
        needed = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"]
        if self.want_kueue:
            needed.append("kueue")
        if self.want_metacontroller:
            needed.append("metacontroller")
        missing = [n for n in needed if not os.access(self._bin(n), os.X_OK)]
        if missing:
            raise ControlPlaneError(
                f"missing binaries in {self.bin_dir}: {', '.join(missing)}; "
                f"run {BUILD_SCRIPT.relative_to(REPO_ROOT)}"
            )
        if not shutil.which(self.kubectl_path):
            raise ControlPlaneError("kubectl not found on PATH")


    def _ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca.cert))  # type: ignore[union-attr]
        ctx.load_cert_chain(str(self.admin_cert), str(self.admin_key))
        return ctx

    def _add(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None) -> Component:
        comp = Component(name, argv, self.logs_dir / f"{name}.log", env=env)
        self.components[name] = comp
        comp.start()
        return comp

    def _wait(self, comp: Component, predicate: Callable[[], Any], what: str,
              timeout: float | None = None) -> Any:
        def check() -> Any:
            comp.check_alive()
            return predicate()

        try:
            return wait_until(check, timeout=timeout or self.startup_timeout, message=what)
        except TimeoutError as exc:
            raise ControlPlaneError(f"{exc}; log {comp.log}:\n{_tail(comp.log)}") from exc

    def _make_pki(self) -> None:
        self.ca = CertificateAuthority(self.pki_dir)
        self.apiserver_cert, self.apiserver_key = self.ca.issue(
            "kube-apiserver", "kube-apiserver",
            hosts=["127.0.0.1", "localhost", "kubernetes", "kubernetes.default",
                   "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
                   _first_ip(self.service_cluster_ip_range),
                   *([self.real_node.host_ip] if self.real_node is not None else [])],
        )
        self.admin_cert, self.admin_key = self.ca.issue(
            "admin", "kubernetes-admin", organizations=["system:masters"], server=False, client=True
        )
        # Front-proxy client identity (aggregated API servers, e.g. Kueue's visibility API).
        self.front_proxy_cert, self.front_proxy_key = self.ca.issue(
            "front-proxy-client", "front-proxy-client", server=False, client=True
        )
        self.sa_key = self.pki_dir / "sa.key"
        self.sa_pub = self.pki_dir / "sa.pub"
        _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(self.sa_key))
        _openssl("pkey", "-in", str(self.sa_key), "-pubout", "-out", str(self.sa_pub))

    def _start_etcd(self) -> None:
        client, peer = free_ports(2)
        self.ports.update(etcd=client, etcd_peer=peer)
        data = self.work_dir / "etcd"
        comp = self._add("etcd", [
            self._bin("etcd"),
            "--name=e2e",
            f"--data-dir={data}",
            f"--listen-client-urls=http://127.0.0.1:{client}",
            f"--advertise-client-urls=http://127.0.0.1:{client}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=e2e=http://127.0.0.1:{peer}",
            "--initial-cluster-state=new",
            "--unsafe-no-fsync",
            "--quota-backend-bytes=4294967296",
            "--log-level=warn",
        ])
        self.etcd_url = f"http://127.0.0.1:{client}"

        def healthy() -> bool:
            r = httpx.get(f"{self.etcd_url}/health", timeout=2)
            return r.status_code == 200 and r.json().get("health") == "true"

        self._wait(comp, healthy, "etcd /health")

    def _start_apiserver(self) -> None:
        (port,) = free_ports(1)
        self.ports["apiserver"] = port
        # With a real node the API server listens on the host end of the node's veth pair (a
        # local address: every host process reaches it as before; the kubelet, CoreDNS and Pods
        # in the node's namespace reach it too), and the `kubernetes` Service's endpoint is that
        # address. Without one, loopback and no endpoint (127.0.0.0/8 is refused as an endpoint).
        address = self.real_node.host_ip if self.real_node is not None else "127.0.0.1"
        self.server = f"https://{address}:{port}"
        reconciler = "lease" if self.real_node is not None else "none"
        self._add("kube-apiserver", [
            self._bin("kube-apiserver"),
            f"--etcd-servers={self.etcd_url}",
            f"--bind-address={address}",
            f"--advertise-address={address}",
            f"--secure-port={port}",
            f"--cert-dir={self.work_dir / 'apiserver-certs'}",
            f"--tls-cert-file={self.apiserver_cert}",
            f"--tls-private-key-file={self.apiserver_key}",
            f"--client-ca-file={self.ca.cert}",  # type: ignore[union-attr]
            f"--service-account-key-file={self.sa_pub}",
            f"--service-account-signing-key-file={self.sa_key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-cluster-ip-range={self.service_cluster_ip_range}",
            "--authorization-mode=Node,RBAC",
            f"--requestheader-client-ca-file={self.ca.cert}",  # type: ignore[union-attr]
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={self.front_proxy_cert}",
            f"--proxy-client-key-file={self.front_proxy_key}",
            "--allow-privileged=true",
            f"--endpoint-reconciler-type={reconciler}",
            # exec/logs/port-forward dial the kubelet by the node's address, not its name
            # (nothing resolves node names here).
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            "--profiling=false",
            "--v=1",
        ])

    def _write_kubeconfig(self) -> None:
        b64 = lambda p: base64.b64encode(Path(p).read_bytes()).decode()  # noqa: E731
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "e2e", "cluster": {
                "server": self.server, "certificate-authority-data": b64(self.ca.cert)}}],  # type: ignore[union-attr]
            "users": [{"name": "admin", "user": {
                "client-certificate-data": b64(self.admin_cert),
                "client-key-data": b64(self.admin_key)}}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "admin"}}],
            "current-context": "e2e",
            "preferences": {},
        }
        self.kubeconfig.write_text(yaml.safe_dump(cfg))
        self.kubeconfig.chmod(0o600)

    def _wait_apiserver(self) -> None:
        comp = self.components["kube-apiserver"]
        ctx = self._ssl_context()

        def ready() -> bool:
            r = httpx.get(f"{self.server}/readyz", verify=ctx, timeout=5)
            return r.status_code == 200

        self._wait(comp, ready, "kube-apiserver /readyz")

    def _start_controller_manager(self) -> None:
        (port,) = free_ports(1)
        self.ports["kube-controller-manager"] = port
        self._add("kube-controller-manager", [
            self._bin("kube-controller-manager"),
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={self.work_dir / 'kcm-certs'}",
            "--leader-elect=false",
            f"--service-account-private-key-file={self.sa_key}",
            f"--root-ca-file={self.ca.cert}",  # type: ignore[union-attr]
            f"--cluster-signing-cert-file={self.ca.cert}",  # type: ignore[union-attr]
            f"--cluster-signing-key-file={self.ca.key}",  # type: ignore[union-attr]
            f"--service-cluster-ip-range={self.service_cluster_ip_range}",
            "--use-service-account-credentials=false",
            "--controllers=*,-nodeipam,-cloud-node-lifecycle-controller,-service-lb-controller,-node-route-controller",
            # HPAs are re-evaluated every second (default 15 s) so HPA tests act quickly;
            # scale-down stabilization stays per HPA (behavior), see metrics_server.py.
            "--horizontal-pod-autoscaler-sync-period=1s",
            "--profiling=false",
            "--v=1",
        ])

    def _start_scheduler(self) -> None:
        (port,) = free_ports(1)
        self.ports["kube-scheduler"] = port
        self._add("kube-scheduler", [
            self._bin("kube-scheduler"),
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            "--leader-elect=false",
            "--profiling=false",
            "--v=1",
        ])

    def _kwok_dir(self) -> Path:
        d = self.components_dir / f"kwok-{KWOK_VERSION}"
        # bin/kwok is a symlink into the versioned dir.
        return d if d.is_dir() else self._bin("kwok").resolve().parent

    def _kwok_stages(self) -> list[dict[str, Any]]:
        stage_dir = self._kwok_dir() / "stages"
        docs: list[dict[str, Any]] = []
        for path in sorted(stage_dir.glob("*.yaml")):
            docs.extend(load_yaml_docs(path))
        if not docs:
            raise ControlPlaneError(f"no kwok stages in {stage_dir}; re-run build.sh kwok")
        return docs

    def _start_kwok(self) -> None:
        cfg = {
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "kind": "KwokConfiguration",
            "metadata": {"name": "e2e"},
            "options": {
                "cidr": self.pod_cidr,
                "nodeIP": "10.200.0.1",
                "manageAllNodes": False,
                "manageNodesWithLabelSelector": f"{KWOK_NODE_LABEL}={KWOK_NODE_LABEL_VALUE}",
                "nodeLeaseDurationSeconds": 40,
                # Set explicitly: defaults are not applied to a config file's options.
                "nodeLeaseParallelism": 4,
                "podPlayStageParallelism": 4,
                "nodePlayStageParallelism": 4,
                "podsOnNodeSyncParallelism": 1,
            },
        }
        path = self.work_dir / "kwok.yaml"
        stages = self._kwok_stages()
        extra: list[str] = []
        if self.kwok_stage_crds:
            # Stages live in the cluster (kwok.x-k8s.io/v1alpha1 Stage), so a
            # test can add its own (e.g. make some Pods fail or turn NotReady).
            crd = self._kwok_dir() / "crds" / "kwok.x-k8s.io_stages.yaml"
            self.kubectl("create", "-f", "-", input=_to_json(load_yaml_docs(crd)))
            self.wait_established("stages.kwok.x-k8s.io")
            self.kubectl("create", "-f", "-", input=_to_json(stages))
            path.write_text(yaml.safe_dump(cfg))
            extra.append("--enable-crds=Stage")
        else:
            path.write_text(yaml.safe_dump_all([cfg, *stages]))
        self._add("kwok", [
            self._bin("kwok"),
            f"--config={path}",
            f"--kubeconfig={self.kubeconfig}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-label-selector={KWOK_NODE_LABEL}={KWOK_NODE_LABEL_VALUE}",
            *extra,
        ])

    def _create_nodes(self) -> None:
        nodes = [m for pool in self.node_pools for m in pool.manifests()]
        if nodes:
            self.apply(nodes)
            names = {n["metadata"]["name"] for n in nodes}

            def all_ready() -> bool:
                items = self.kubectl_json("get", "nodes", "-l", f"{KWOK_NODE_LABEL}={KWOK_NODE_LABEL_VALUE}")["items"]
                ready = {
                    n["metadata"]["name"]
                    for n in items
                    if any(c["type"] == "Ready" and c["status"] == "True"
                           for c in n.get("status", {}).get("conditions", []))
                }
                return names <= ready

            self._wait(self.components["kwok"], all_ready, f"{len(names)} kwok nodes Ready")

    def _wait_controllers(self) -> None:
        for name in ("kube-controller-manager", "kube-scheduler"):
            comp = self.components[name]
            url = f"https://127.0.0.1:{self.ports[name]}/healthz"
            self._wait(comp, lambda url=url: httpx.get(url, verify=False, timeout=2).status_code == 200,
                       f"{name} /healthz")
        # The ServiceAccount controller must have run before Pods can be created.
        self._wait(self.components["kube-controller-manager"],
                   lambda: self.kubectl("get", "serviceaccount", "default", "-n", "default",
                                        check=False).returncode == 0,
                   "serviceaccount default/default")

    # ---- Kueue -----------------------------------------------------------------

    def _kueue_dir(self) -> Path:
        d = self.components_dir / f"kueue-{KUEUE_VERSION}"
        return d if d.is_dir() else self._bin("kueue").resolve().parent

    @staticmethod
    def _kueue_shipped_config(kdir: Path) -> dict[str, Any]:
        """The Configuration Kueue's release manifests deploy (its config/components/manager/
        controller_manager_config.yaml, copied by tests/e2e/components/build.sh)."""
        path = kdir / "controller_manager_config.yaml"
        try:
            shipped = yaml.safe_load(path.read_text())
        except OSError as exc:
            raise ControlPlaneError(f"Kueue's shipped configuration is missing ({exc}): rebuild Kueue with "
                                    "FORCE_REBUILD=1 tests/e2e/components/build.sh kueue") from exc
        missing = [key for key in ("clientConnection", "controller") if not isinstance(shipped.get(key), dict)]
        if missing:
            raise ControlPlaneError(f"{path} has no {', '.join(missing)}: is it Kueue's own configuration?")
        return shipped

    def _start_kueue(self) -> None:
        kdir = self._kueue_dir()
        webhook_port, probe_port = free_ports(2)
        self.ports.update(kueue_webhook=webhook_port, kueue_probe=probe_port)
        convert_url = f"https://127.0.0.1:{webhook_port}/convert"

        # 1. CRDs, with the conversion webhook pointed at our Kueue by URL.
        crds = []
        for path in sorted((kdir / "crds").glob("*.yaml")):
            for doc in load_yaml_docs(path):
                if doc["metadata"]["name"] in KUEUE_CONVERSION_CRDS:
                    doc["spec"]["conversion"] = {
                        "strategy": "Webhook",
                        "webhook": {
                            "clientConfig": {"url": convert_url, "caBundle": self.ca_bundle_b64},
                            "conversionReviewVersions": ["v1"],
                        },
                    }
                crds.append(doc)
        ts = time.monotonic()
        # A fresh cluster: plain create is much cheaper than (server-side) apply
        # for the 1.4 MB Workload CRD.
        self.kubectl("create", "-f", "-", input=_to_json(crds))
        self.timings["kueue-crds-apply"] = round(time.monotonic() - ts, 2)
        self.wait_established(*[c["metadata"]["name"] for c in crds])
        self.timings["kueue-crds-established"] = round(time.monotonic() - ts, 2)
        self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kueue-system"}})

        # 2. Certificates: webhook serving cert; metrics cert at Kueue's fixed path.
        cert_dir = self.work_dir / "kueue-certs"
        cert_dir.mkdir(exist_ok=True)
        crt, key = self.ca.issue("kueue-webhook", "127.0.0.1",  # type: ignore[union-attr]
                                 hosts=["127.0.0.1", "localhost"])
        shutil.copy(crt, cert_dir / "tls.crt")
        shutil.copy(key, cert_dir / "tls.key")
        self._ensure_kueue_metrics_cert(crt, key)

        # 3. Configuration.
        shipped = self._kueue_shipped_config(kdir)
        config: dict[str, Any] = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": "kueue-system",
            "health": {"healthProbeBindAddress": f"127.0.0.1:{probe_port}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "manageJobsWithoutQueueName": False,
            "managedJobsNamespaceSelector": {"matchExpressions": [{
                "key": "kubernetes.io/metadata.name", "operator": "NotIn",
                "values": ["kube-system", "kueue-system"]}]},
            "integrations": {"frameworks": list(self.kueue_frameworks)},
            # Client limits as Kueue ships them (its release manifests and Helm chart).
            "clientConnection": shipped["clientConnection"],
            "featureGates": dict(self.kueue_feature_gates),
        }
        if self.kueue_as_shipped:
            # Its controller concurrency too (Pod: 5, Workload: 10); without it every Kueue controller
            # runs one reconcile at a time. Off for the e2e suite: with it, its contention and
            # examples stories saw a Pod group that fit the quota never fit for topology-aware
            # scheduling (tests/e2e/README.md, "Kueue's controller concurrency").
            config["controller"] = shipped["controller"]
        _deep_update(config, self.kueue_config_overrides)
        cfg_path = self.work_dir / "kueue-config.yaml"
        cfg_path.write_text(yaml.safe_dump(config))

        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig), NAMESPACE="kueue-system",
                   POD_NAMESPACE="kueue-system")
        ts = time.monotonic()
        comp = self._add("kueue", [self._bin("kueue"), f"--config={cfg_path}", "--zap-log-level=2"], env=env)
        self._wait(comp, lambda: httpx.get(f"http://127.0.0.1:{probe_port}/readyz", timeout=2).status_code == 200,
                   "kueue /readyz")
        self.timings["kueue-ready"] = round(time.monotonic() - ts, 2)

        # 4. Admission webhooks, by URL (Kueue's config/components/webhook/manifests.yaml).
        self.apply(self._kueue_webhook_configs(kdir / "webhook" / "manifests.yaml", webhook_port))
        self.kueue_running = True

    def _ensure_kueue_metrics_cert(self, crt: Path, key: Path) -> None:
        d = KUEUE_METRICS_CERT_DIR
        if (d / "tls.crt").is_file() and (d / "tls.key").is_file():
            return
        try:
            d.mkdir(parents=True, exist_ok=True)
            shutil.copy(crt, d / "tls.crt")
            shutil.copy(key, d / "tls.key")
        except OSError as exc:
            raise ControlPlaneError(
                f"Kueue (internal cert management off) needs {d}/tls.crt and tls.key; "
                f"could not create them: {exc}"
            ) from exc

    def _kueue_webhook_configs(self, manifests: Path, port: int) -> list[dict[str, Any]]:
        excluded = {"matchExpressions": [{
            "key": "kubernetes.io/metadata.name", "operator": "NotIn",
            "values": ["kube-system", "kueue-system"]}]}
        out = []
        for doc in load_yaml_docs(manifests):
            if doc.get("kind") not in ("MutatingWebhookConfiguration",
                                                  "ValidatingWebhookConfiguration"):
                continue
            doc["metadata"] = {"name": "kueue-" + doc["metadata"]["name"]}
            for wh in doc.get("webhooks", []):
                svc = wh["clientConfig"].get("service") or {}
                wh["clientConfig"] = {"url": f"https://127.0.0.1:{port}{svc.get('path', '/')}",
                                      "caBundle": self.ca_bundle_b64}
                groups = {g for r in wh.get("rules", []) for g in r.get("apiGroups", [])}
                if "kueue.x-k8s.io" not in groups:
                    # As config/components/webhook/kustomization.yaml does for
                    # every workload (non-Kueue-API) webhook.
                    wh["namespaceSelector"] = excluded
            out.append(doc)
        return out

    # ---- Metacontroller ----------------------------------------------------------

    def _start_metacontroller(self) -> None:
        mdir = self._bin("metacontroller").resolve().parent
        crds = sorted((mdir / "crds").glob("*.yaml"))
        if not crds:
            raise ControlPlaneError(f"no Metacontroller CRDs in {mdir / 'crds'}")
        for path in crds:
            self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
        self.wait_established("compositecontrollers.metacontroller.k8s.io",
                              "decoratorcontrollers.metacontroller.k8s.io")
        probe, metrics = free_ports(2)
        self.ports.update(metacontroller_probe=probe)
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig))
        comp = self._add("metacontroller", [
            self._bin("metacontroller"),
            "--discovery-interval=2s",
            "--cache-flush-interval=30m",
            f"--metrics-address=127.0.0.1:{metrics}",
            f"--health-probe-bind-address=127.0.0.1:{probe}",
            "--pprof-address=0",
            "--zap-log-level=4",
            "--client-go-qps=100",
            "--client-go-burst=200",
        ], env=env)
        self._wait(comp, lambda: httpx.get(f"http://127.0.0.1:{probe}/readyz", timeout=2).status_code == 200,
                   "metacontroller /readyz")
        self.metacontroller_running = True


def _first_ip(cidr: str) -> str:
    base = cidr.split("/")[0].split(".")
    base[-1] = str(int(base[-1]) + 1)
    return ".".join(base)


def _deep_update(dst: dict[str, Any], src: Mapping[str, Any]) -> None:
    for k, v in src.items():
        if isinstance(v, Mapping) and isinstance(dst.get(k), dict):
            _deep_update(dst[k], v)
        else:
            dst[k] = v


def _to_json(objects: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> str:
    """One object, or a v1 List of many, as JSON (kubectl reads it; much
    faster than PyYAML for big CRDs)."""
    if isinstance(objects, Mapping):
        return json.dumps(objects)
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})


_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml_docs(path: Path) -> list[dict[str, Any]]:
    """All non-empty documents of a YAML file (libyaml-backed when available)."""
    with open(path, "rb") as f:
        return [d for d in yaml.load_all(f, Loader=_SafeLoader) if d]


def ensure_built(components: Sequence[str] = (), timeout: float = 3600.0) -> Path:
    """Run build.sh (seconds when everything is cached) and return the bin dir.

    Its output goes to ``<cache>/components/build-last.log``.
    """
    log = cache_dir() / "components" / "build-last.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        proc = subprocess.run(["bash", str(BUILD_SCRIPT), *components], stdout=out,
                              stderr=subprocess.STDOUT, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise ControlPlaneError(f"{BUILD_SCRIPT} failed ({proc.returncode}); log {log}:\n{_tail(log, 60)}")
    return default_bin_dir()

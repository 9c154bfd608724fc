"""A real node for the e2e control plane: kubelet + containerd + runc, kube-proxy and CoreDNS.

``ControlPlane(real_node=True)`` (cluster.py) owns one :class:`RealNode`. Pods bound to it really
run: containerd starts them with runc, the CNI bridge gives them addresses, kube-proxy (iptables)
programs Services, CoreDNS answers cluster names, the kubelet calls the probes.

Layout (tests/e2e/README.md, "The real node"):

- a network namespace of our own (``/run/netns/mde2e-<id>``) joined to the host by a veth pair
  whose two ends get a random /30 out of 10.250.0.0/16: the host end (``host_ip``) is where the
  API server listens when a real node is on, the namespace end (``node_ip``) is the node's
  address. containerd, the kubelet, kube-proxy and CoreDNS run inside the namespace
  (``nsenter --net``: they keep the host's mount namespace, so every path is a plain host path);
  the CNI bridge, the Pods, every iptables rule kube-proxy and the bridge plugin write, all live
  in it and vanish with it. Nothing listens outside loopback, that namespace and its veth.
- containerd with its own config, root, state, runc root and socket under ``<work>/node``; the
  pause image and the stub engine images (build.sh) imported into its ``k8s.io`` namespace.
- a cgroup root of our own (``/mde2e-<id>`` in every v1 hierarchy), so two nodes on one machine
  never share ``kubepods``.
- the node: ``real-node-0``, tainted ``gpustack.ai/real-node=true:NoSchedule`` (kwok stories never
  land on it), labelled with its own InstanceType and rack, ``nvidia.com/gpu`` advertised by a
  status patch (the documented way to advertise an extended resource; the kubelet keeps a
  capacity it does not manage itself).

Teardown (:meth:`RealNode.stop`): cordon, delete the node's Pods while the kubelet still runs and
wait until they are gone or finished (the kubelet stops their containers and sandboxes, unmounts
volumes, releases addresses); stop CoreDNS, kube-proxy and the kubelet by PID; kill and delete
whatever task and container is left through containerd, then stop it, then any shim of ours;
unmount what is still mounted under ``<work>/node`` and the sandboxes' network namespaces; delete
our network namespace (the veth pair, the bridge and every iptables rule with it); kill what is
left in our cgroups and remove them. Stopping the kubelet before its Pods are gone would leave
shims and mounts behind.

Clients that must reach ClusterIPs run inside the namespace: :meth:`RealNode.exec` (any argv),
:meth:`RealNode.http_get` and :meth:`RealNode.dns_lookup` (Python snippets run by this interpreter
inside the namespace). The node IP and the node's Pod IPs (its own /24, routed through the veth) are
reachable from the host too, as an in-cluster operator reaches them.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import yaml

if TYPE_CHECKING:  # pragma: no cover
    from cluster import ControlPlane

#: The node's name, InstanceType and rack (its own values: kwok pools never match them).
REAL_NODE_NAME = "real-node-0"
REAL_NODE_INSTANCE_TYPE = "gpustack-nvidia-realnode-linux-amd64"
REAL_NODE_RACK = "realnode-rack-0"
#: Taint on the real node; only Pods tolerating it (the real pool's ResourceFlavor adds the
#: toleration) land there, and nothing meant for kwok does.
REAL_NODE_TAINT_KEY = "gpustack.ai/real-node"
REAL_NODE_LABEL = "gpustack.ai/real-node"
#: Each real node's Pods get addresses from a random free /24 of this range (the CNI bridge,
#: host-local IPAM; ``RealNode.pod_cidr``), apart from kwok's fake 10.244.0.0/16 so a real Pod IP is
#: never mistaken for a fake one. The host routes that /24 to the node (so the operator on the host
#: reaches Pod IPs, as an in-cluster operator does); its own /24 per node keeps two nodes on one
#: machine from claiming the same route.
REAL_NODE_POD_RANGE = "10.245.0.0/16"
#: The veth /30 is drawn from here (random, checked against the host's addresses).
VETH_RANGE = "10.250.0.0/16"
CLUSTER_DOMAIN = "cluster.local"
DNS_SERVICE_IP_OFFSET = 10          # 10.96.0.10 for the default Service range
PAUSE_IMAGE_FILE = "image"          # build.sh: components/pause-<v>/image holds the reference
CNI_BIN_DIR = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
NEEDED_COMMANDS = ("containerd", "containerd-shim-runc-v2", "ctr", "runc", "iptables", "nsenter", "ip",
                   "mount", "umount")
NEEDED_BINARIES = ("kubelet", "kube-proxy", "coredns", "pause")
SETUP_HINT = "scripts/setup-node.sh installs containerd, runc, CNI plugins, iptables (apt, as root)"


def normalize_image(ref: str) -> str:
    """The name containerd's CRI looks an image up by (docker's normalization): a Pod's
    ``vllm/vllm-openai:v1`` is ``docker.io/vllm/vllm-openai:v1``, ``busybox`` is
    ``docker.io/library/busybox:latest``. An image stored under another spelling is not found."""
    name, digest = (ref.split("@", 1) + [""])[:2]
    first = name.split("/", 1)[0]
    if "/" not in name:
        name = f"docker.io/library/{name}"
    elif not ("." in first or ":" in first or first == "localhost"):
        name = f"docker.io/{name}"
    if not digest and ":" not in name.rsplit("/", 1)[1]:
        name += ":latest"
    return f"{name}@{digest}" if digest else name


class RealNodeUnavailable(RuntimeError):
    """This machine cannot run the real node; the message is one line saying why."""


def _run(argv: Sequence[str], check: bool = True, timeout: float = 60.0,
         input: str | None = None) -> subprocess.CompletedProcess[str]:  # noqa: A002
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout,
                          input=input, check=False)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, argv))} exited {proc.returncode}: "
                           f"{proc.stderr.strip() or proc.stdout.strip()}")
    return proc


# Run inside the node's network namespace by RealNode.dns_lookup: one DNS query over UDP (A
# records), standard library only; prints the addresses as JSON.
_DNS_SNIPPET = r"""
import json, random, socket, struct, sys
name, server = sys.argv[1], sys.argv[2]
qid = random.randrange(65536)
q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(p)]) + p.encode() for p in name.rstrip(".").split(".")) + b"\0"
q += struct.pack(">HH", 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(3)
s.sendto(q, (server, 53))
data, _ = s.recvfrom(4096)
rcode = data[3] & 0xF
an = struct.unpack(">H", data[6:8])[0]
i = 12
while data[i]:
    i += data[i] + 1
i += 5
out = []
for _ in range(an):
    if data[i] & 0xC0 == 0xC0:
        i += 2
    else:
        while data[i]:
            i += data[i] + 1
        i += 1
    rtype, _, _, rdlen = struct.unpack(">HHIH", data[i:i + 10])
    i += 10
    if rtype == 1:
        out.append(socket.inet_ntoa(data[i:i + rdlen]))
    i += rdlen
print(json.dumps({"rcode": rcode, "addresses": out}))
"""

_HTTP_SNIPPET = r"""
import json, sys, urllib.request, urllib.error
try:
    with urllib.request.urlopen(sys.argv[1], timeout=float(sys.argv[2])) as r:
        print(json.dumps({"status": r.status, "body": r.read().decode(errors="replace")}))
except urllib.error.HTTPError as e:
    print(json.dumps({"status": e.code, "body": e.read().decode(errors="replace")}))
"""


class RealNode:
    """One real node of a :class:`cluster.ControlPlane` (see the module docstring).

    Life cycle, driven by the control plane: :meth:`preflight` (before anything starts),
    :meth:`setup_network` (before the API server: it listens on :attr:`host_ip`), :meth:`start`
    (once the controllers are up), :meth:`stop` (first thing in ``ControlPlane.stop``).
    """

    def __init__(self, cp: "ControlPlane", name: str = REAL_NODE_NAME, gpus: int = 8,
                 gpu_resource: str = "nvidia.com/gpu", instance_type: str = REAL_NODE_INSTANCE_TYPE,
                 rack: str = REAL_NODE_RACK, pod_cidr: str | None = None) -> None:
        self.cp = cp
        self.name = name
        self.gpus = gpus
        self.gpu_resource = gpu_resource
        self.instance_type = instance_type
        self.rack = rack
        self.pod_cidr = pod_cidr or ""    # chosen with the network when not given
        self._pod_cidr_given = pod_cidr
        self.id = os.urandom(3).hex()
        self.netns = f"mde2e-{self.id}"
        self.netns_path = Path("/run/netns") / self.netns
        self.veth_host = f"mdh-{self.id}"
        self.veth_node = f"mdn-{self.id}"
        self.cgroup_root = f"/mde2e-{self.id}"
        self.dir = cp.work_dir / "node"
        self.sock = self.dir / "containerd.sock"
        self.host_ip = ""
        self.node_ip = ""
        services = ipaddress.ip_network(cp.service_cluster_ip_range)
        self.dns_ip = str(services.network_address + DNS_SERVICE_IP_OFFSET)
        self.images: list[str] = []          # references imported into containerd
        self.timings: dict[str, float] = {}
        self._network_up = False
        self._cgroups_made: list[Path] = []
        self._container_ids: set[str] = set()  # seen at teardown (CNI cache files carry them)
        self._started = False

    # ---- helpers for tests ---------------------------------------------------------

    def exec(self, argv: Sequence[str], input: str | None = None, timeout: float = 30.0,  # noqa: A002
             check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside the node's network namespace (host mount namespace and files):
        ClusterIPs, Pod IPs and the cluster DNS Service are reachable from there."""
        return _run(["nsenter", f"--net={self.netns_path}", "--", *argv], check=check, timeout=timeout,
                    input=input)

    def python(self, code: str, *args: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run a Python snippet (this interpreter) inside the node's network namespace."""
        return self.exec([sys.executable, "-c", code, *args], timeout=timeout)

    def http_get(self, url: str, timeout: float = 5.0) -> tuple[int, str]:
        """``GET url`` from inside the namespace; ``(status, body)``. A connection failure raises."""
        out = json.loads(self.python(_HTTP_SNIPPET, url, str(timeout), timeout=timeout + 10).stdout)
        return out["status"], out["body"]

    def dns_lookup(self, name: str, server: str | None = None) -> list[str]:
        """A records of ``name`` asked of the cluster DNS Service (through kube-proxy) from inside
        the namespace; an empty list when the name does not exist."""
        out = json.loads(self.python(_DNS_SNIPPET, name, server or self.dns_ip).stdout)
        return list(out["addresses"])

    # ---- preflight -------------------------------------------------------------------

    def preflight(self) -> None:
        """Raise :class:`RealNodeUnavailable` (one line) when this machine cannot run the node."""
        if os.geteuid() != 0:
            raise RealNodeUnavailable("the real node needs root (network namespace, mounts, cgroups); "
                                      f"running as uid {os.geteuid()}")
        missing = [c for c in NEEDED_COMMANDS if not shutil.which(c)]
        missing += [f"{CNI_BIN_DIR}/{p}" for p in ("bridge", "host-local", "loopback")
                    if not os.access(CNI_BIN_DIR / p, os.X_OK)]
        if missing:
            raise RealNodeUnavailable(f"the real node needs {', '.join(missing)}; {SETUP_HINT}")
        absent = [b for b in NEEDED_BINARIES if not os.access(self.cp.bin_dir / b, os.X_OK)]
        if absent:
            raise RealNodeUnavailable(f"the real node needs {', '.join(absent)} in {self.cp.bin_dir}; "
                                      "run tests/e2e/components/build.sh")
        if not Path("/sys/fs/cgroup/memory").is_dir() and not Path("/sys/fs/cgroup/cgroup.controllers").exists():
            raise RealNodeUnavailable("the real node needs a cgroup filesystem at /sys/fs/cgroup")

    # ---- network -------------------------------------------------------------------

    def setup_network(self) -> None:
        """Our namespace, the veth pair and its /30; routing inside the namespace."""
        taken = {ipaddress.ip_interface(a).network for a in self._host_addresses()}
        pool = ipaddress.ip_network(VETH_RANGE)
        rng = random.Random(os.urandom(8))
        for _ in range(200):
            net = ipaddress.ip_network(f"{pool.network_address + 4 * rng.randrange(pool.num_addresses // 4)}/30")
            if not any(net.overlaps(t) for t in taken):
                break
        else:  # pragma: no cover - 16k blocks
            raise RealNodeUnavailable(f"no free /30 in {VETH_RANGE} for the node's veth pair")
        self.host_ip, self.node_ip = str(net.network_address + 1), str(net.network_address + 2)
        self._network_up = True  # from here on, stop() cleans up
        _run(["ip", "netns", "add", self.netns])
        _run(["ip", "link", "add", self.veth_host, "type", "veth", "peer", "name", self.veth_node])
        _run(["ip", "link", "set", self.veth_node, "netns", self.netns])
        _run(["ip", "addr", "add", f"{self.host_ip}/30", "dev", self.veth_host])
        _run(["ip", "link", "set", self.veth_host, "up"])
        ns = ["ip", "-n", self.netns]
        _run([*ns, "link", "set", "lo", "up"])
        _run([*ns, "link", "set", self.veth_node, "name", "eth0"])
        _run([*ns, "addr", "add", f"{self.node_ip}/30", "dev", "eth0"])
        _run([*ns, "link", "set", "eth0", "up"])
        _run([*ns, "route", "add", "default", "via", self.host_ip])
        # Inside our namespace only: Pods' traffic is routed through it (forwarding), and bridged
        # Pod-to-Pod traffic passes iptables so a Service's DNAT is undone on the reply
        # (br_netfilter; per network namespace since Linux 5.3).
        for key, value in (("net.ipv4.ip_forward", "1"), ("net.bridge.bridge-nf-call-iptables", "1")):
            proc = self.exec(["sysctl", "-w", f"{key}={value}"], check=False)
            if proc.returncode != 0 and key == "net.ipv4.ip_forward":
                raise RuntimeError(f"sysctl {key} in {self.netns}: {proc.stderr.strip()}")
        self._route_pods()

    def _route_pods(self) -> None:
        """The node's Pod /24, routed from the host through the veth: the operator and the tests on
        the host reach Pod IPs the way an in-cluster client does (the idleness reader scrapes the
        engines). The route is on our veth, so it goes when the namespace (and the veth) goes. A /24
        some route of the host already covers (another node on this machine) is never taken; two
        nodes choosing at once are kept apart by ``ip route add`` refusing a second equal route."""
        candidates = [self._pod_cidr_given] if self._pod_cidr_given else None
        rng = random.Random(os.urandom(8))
        pool = ipaddress.ip_network(REAL_NODE_POD_RANGE)
        for _ in range(1 if candidates else 50):
            cidr = candidates[0] if candidates else str(list(pool.subnets(new_prefix=24))[rng.randrange(256)])
            net = ipaddress.ip_network(cidr)
            if not candidates and any(net.overlaps(r) for r in self._host_routes()):
                continue
            added = _run(["ip", "route", "add", cidr, "via", self.node_ip, "dev", self.veth_host], check=False)
            if added.returncode == 0:
                self.pod_cidr = cidr
                return
            if candidates:
                raise RuntimeError(f"route {cidr} via {self.node_ip}: {added.stderr.strip()}")
        raise RealNodeUnavailable(f"no free /24 in {REAL_NODE_POD_RANGE} for the node's Pods")

    @staticmethod
    def _host_routes() -> list[ipaddress.IPv4Network]:
        out = _run(["ip", "-4", "route", "show"]).stdout
        nets = []
        for line in out.splitlines():
            dest = line.split()[0] if line.split() else ""
            if dest and dest != "default":
                try:
                    nets.append(ipaddress.ip_network(dest, strict=False))
                except ValueError:
                    continue
        return nets

    @staticmethod
    def _host_addresses() -> list[str]:
        out = _run(["ip", "-4", "-o", "addr", "show"]).stdout
        return re.findall(r"inet (\S+)", out)

    # ---- start ------------------------------------------------------------------------

    def start(self) -> None:
        self._started = True
        for sub in ("containerd/root", "containerd/state", "runc", "cni/net.d", "cni/ipam", "kubelet",
                    "pod-logs", "coredns"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        steps = (("cgroups", self._make_cgroups), ("containerd", self._start_containerd),
                 ("images", self._import_images), ("kubelet", self._start_kubelet),
                 ("gpus", self._advertise_gpus), ("kube-proxy", self._start_kube_proxy),
                 ("coredns", self._start_coredns))
        for name, step in steps:
            t0 = time.monotonic()
            step()
            self.timings[name] = round(time.monotonic() - t0, 2)

    def _ns(self, argv: Sequence[str | Path]) -> list[str]:
        return ["nsenter", f"--net={self.netns_path}", "--", *map(str, argv)]

    def _make_cgroups(self) -> None:
        """Our cgroup root in every v1 hierarchy (the kubelet refuses a root that does not exist);
        cpuset needs its cpus and mems filled before anything can join a child."""
        base = Path("/sys/fs/cgroup")
        if (base / "cgroup.controllers").exists():  # cgroup v2: one tree
            dirs = [base / self.cgroup_root.lstrip("/")]
        else:
            dirs = [h / self.cgroup_root.lstrip("/") for h in sorted(base.iterdir())
                    if h.is_dir() and not h.is_symlink() and (h / "cgroup.procs").exists()]
        for d in dirs:
            d.mkdir(exist_ok=True)
            self._cgroups_made.append(d)
            if d.parent.name == "cpuset":
                for f in ("cpuset.cpus", "cpuset.mems"):
                    (d / f).write_text((d.parent / f).read_text())

    def _ctr(self, *args: str, timeout: float = 120.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        return _run(["ctr", f"--address={self.sock}", "--namespace=k8s.io", *args], timeout=timeout, check=check)

    def _pause_image(self) -> tuple[str, Path]:
        d = (self.cp.bin_dir / "pause").resolve().parent
        return (d / PAUSE_IMAGE_FILE).read_text().strip(), d / "pause.tar"

    def _start_containerd(self) -> None:
        pause_ref, _ = self._pause_image()
        d = self.dir
        (d / "cni/net.d/10-e2e.conflist").write_text(json.dumps({
            "cniVersion": "0.4.0",
            "name": "e2e",
            "plugins": [{
                "type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": True,
                "hairpinMode": True,
                "ipam": {"type": "host-local", "ranges": [[{"subnet": self.pod_cidr}]],
                         "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(d / "cni/ipam")},
            }, {"type": "portmap", "capabilities": {"portMappings": True}}],
        }, indent=1))
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        config = f"""# containerd for the e2e real node (tests/e2e/realnode.py); its own paths, never the system's.
version = 2
root = "{d / 'containerd/root'}"
state = "{d / 'containerd/state'}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
                    "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{self.sock}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{d / 'containerd/opt'}"

[{cri}]
  sandbox_image = "{pause_ref}"
  # Required on these VMs: the capability bounding set lacks CAP_SYS_RESOURCE, and without this
  # every sandbox fails with "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  enable_selinux = false
  disable_apparmor = true
  stream_server_address = "127.0.0.1"

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  Root = "{d / 'runc'}"

[{cri}.cni]
  bin_dir = "{CNI_BIN_DIR}"
  conf_dir = "{d / 'cni/net.d'}"
  max_conf_num = 1
"""
        cfg = d / "containerd.toml"
        cfg.write_text(config)
        comp = self.cp._add("containerd", self._ns(["containerd", f"--config={cfg}", "--log-level=info"]))
        self.cp._wait(comp, lambda: self.sock.exists() and self._ctr("version", timeout=10, check=False).returncode == 0,
                      "containerd to answer on its socket", timeout=60)

    def _import_images(self) -> None:
        """The pause image, then the stub images (components/stub-images, written by
        tests/e2e/stub/build.sh; see :meth:`_stub_entries`)."""
        pause_ref, pause_tar = self._pause_image()
        self._ctr("images", "import", str(pause_tar))
        self.images.append(pause_ref)
        stub_dir = self.cp.components_dir / "stub-images"
        if not stub_dir.is_dir():
            return
        entries, wanted = self._stub_entries(stub_dir)
        have = set(self._ctr("images", "ls", "-q").stdout.split())

        def tag(source: str, ref: str) -> None:
            # Under the normalized name: the kubelet asks the CRI for the Pod's spelling, and the
            # CRI normalizes it before looking it up.
            ref = normalize_image(ref)
            if ref not in have:
                self._ctr("images", "tag", "--force", source, ref)
                have.add(ref)
            if ref not in self.images:
                self.images.append(ref)

        for tar, refs in entries:
            out = self._ctr("images", "import", str(tar), timeout=300).stdout
            # ctr prints "unpacking <name> (sha256:…)...done" per image it imported.
            names = re.findall(r"unpacking (\S+) \(sha256:", out)
            if not names:
                raise RuntimeError(f"ctr images import {tar} named no image: {out.strip()}")
            have.update(names)
            for name in names:
                tag(name, name)
            for ref in refs:
                tag(names[0], ref)
        missing = [r for r in wanted if normalize_image(r) not in have]
        if missing:
            raise RuntimeError(f"{stub_dir}: listed images {', '.join(missing)} were brought by no tarball")

    @staticmethod
    def _stub_entries(stub_dir: Path) -> tuple[list[tuple[Path, list[str]]], list[str]]:
        """What to import: the list file (``images.txt``, else ``images.list`` or ``images``), one
        line per tarball, ``<tarball> <reference>...`` (the path absolute or relative to the
        directory; the image the tarball brings is also tagged with each reference), or a bare
        ``<reference>`` that must exist once the tarballs are in; blank lines and ``#`` comments
        ignored. Without a list file, every ``*.tar``/``*.tar.gz`` under the directory, named by
        its own metadata."""
        is_tar = re.compile(r"\.tar(\.gz)?$")
        listing = next((stub_dir / n for n in ("images.txt", "images.list", "images")
                        if (stub_dir / n).is_file()), None)
        if listing is None:
            return [(p, []) for p in sorted(stub_dir.rglob("*")) if p.is_file() and is_tar.search(p.name)], []
        entries: list[tuple[Path, list[str]]] = []
        wanted: list[str] = []
        for line in listing.read_text().splitlines():
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            if is_tar.search(words[0]):
                tar = Path(words[0]) if Path(words[0]).is_absolute() else stub_dir / words[0]
                if not tar.is_file():
                    raise RuntimeError(f"{listing} names {tar}, which does not exist")
                entries.append((tar, words[1:]))
            else:
                wanted.extend(words)
        return entries, wanted

    def _kubeconfig(self, name: str, cert: Path, key: Path) -> Path:
        b64 = lambda p: base64.b64encode(Path(p).read_bytes()).decode()  # noqa: E731
        path = self.dir / f"{name}.kubeconfig"
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "e2e", "cluster": {"server": self.cp.server,
                                                     "certificate-authority-data": b64(self.cp.ca_cert_path)}}],
            "users": [{"name": name, "user": {"client-certificate-data": b64(cert), "client-key-data": b64(key)}}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": name}}],
            "current-context": "e2e",
        }))
        path.chmod(0o600)
        return path

    def _start_kubelet(self) -> None:
        d = self.dir
        # The kubelet's own identity (Node authorizer, NodeRestriction), as kubeadm gives it.
        cert, key = self.cp.issue_client_cert(f"system:node:{self.name}", ("system:nodes",))
        kubeconfig = self._kubeconfig("kubelet", cert, key)
        (d / "resolv.conf").write_text("# the node's resolv.conf: no upstream resolver (no network)\n")
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # This machine: cgroup v1 (refused by default since 1.35), the cgroupfs driver (no
            # systemd), no swap accounting to insist on.
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.cgroup_root,
            "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{self.sock}",
            "address": self.node_ip,
            "port": 10250,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": 10248,
            # Reached only from the API server on the veth; exec/logs/port-forward need no more.
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False},
                               "x509": {"clientCAFile": str(self.cp.ca_cert_path)}},
            "authorization": {"mode": "AlwaysAllow"},
            "clusterDNS": [self.dns_ip],
            "clusterDomain": CLUSTER_DOMAIN,
            "resolvConf": str(d / "resolv.conf"),
            "podLogsDir": str(d / "pod-logs"),
            "registerWithTaints": [{"key": REAL_NODE_TAINT_KEY, "value": "true", "effect": "NoSchedule"}],
            # A shared 2-core test machine: evict only when truly out of room, and never
            # garbage-collect images (ours cannot be pulled again).
            "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%",
                             "nodefs.inodesFree": "1%", "imagefs.available": "1%"},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
            "nodeStatusUpdateFrequency": "2s",
            "syncFrequency": "10s",
            "maxPods": 110,
            "shutdownGracePeriod": "0s",
        }
        cfg = d / "kubelet-config.yaml"
        cfg.write_text(yaml.safe_dump(config))
        labels = {
            "kubernetes.io/hostname": self.name,
            "node.kubernetes.io/instance-type": self.instance_type,
            "gpustack.ai/instance-type": self.instance_type,
            "topology.gpustack.ai/rack": self.rack,
            REAL_NODE_LABEL: "true",
            "type": "real",
        }
        comp = self.cp._add("kubelet", self._ns([
            self.cp.bin_dir / "kubelet",
            f"--config={cfg}",
            f"--kubeconfig={kubeconfig}",
            f"--root-dir={d / 'kubelet'}",
            f"--cert-dir={d / 'kubelet/pki'}",
            f"--hostname-override={self.name}",
            f"--node-ip={self.node_ip}",
            "--node-labels=" + ",".join(f"{k}={v}" for k, v in labels.items()),
            "--v=2",
        ]))
        self.cp._wait(comp, self._node_ready, f"node {self.name} Ready", timeout=120)

    def _node(self) -> dict[str, Any]:
        return self.cp.kubectl_json("get", "node", self.name)

    def _node_ready(self) -> bool:
        proc = self.cp.kubectl("get", "node", self.name, "-o",
                               "jsonpath={.status.conditions[?(@.type=='Ready')].status}", check=False)
        return proc.returncode == 0 and proc.stdout.strip() == "True"

    def _advertise_gpus(self) -> None:
        """``nvidia.com/gpu`` in capacity and allocatable by a status patch: the kubelet copies a
        capacity it does not manage into allocatable on each status update and never removes it
        (only device-plugin resources it knows of are reconciled)."""
        if not self.gpus:
            return
        key = self.gpu_resource.replace("~", "~0").replace("/", "~1")
        ops = [{"op": "add", "path": f"/status/{f}/{key}", "value": str(self.gpus)}
               for f in ("capacity", "allocatable")]
        self.cp.kubectl("patch", "node", self.name, "--subresource=status", "--type=json", "-p", json.dumps(ops))
        self.cp._wait(self.cp.components["kubelet"],
                      lambda: self._node()["status"].get("allocatable", {}).get(self.gpu_resource) == str(self.gpus),
                      f"{self.gpu_resource} allocatable on {self.name}", timeout=30)

    def _admin_kubeconfig(self) -> Path:
        return self.cp.kubeconfig

    def _start_kube_proxy(self) -> None:
        d = self.dir
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "mode": "iptables",
            "clientConnection": {"kubeconfig": str(self._admin_kubeconfig())},
            "hostnameOverride": self.name,
            "clusterCIDR": self.pod_cidr,
            "bindAddress": self.node_ip,
            "healthzBindAddress": f"{self.node_ip}:10256",
            "metricsBindAddress": "127.0.0.1:10249",
            # Inside a network namespace the conntrack table size is the host's, read-only:
            # leave every conntrack sysctl as it is.
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s",
                          "tcpCloseWaitTimeout": "0s"},
            "iptables": {"syncPeriod": "5s", "minSyncPeriod": "0s"},
            "nodePortAddresses": [f"{self.node_ip}/32"],
        }
        cfg = d / "kube-proxy-config.yaml"
        cfg.write_text(yaml.safe_dump(config))
        comp = self.cp._add("kube-proxy", self._ns([self.cp.bin_dir / "kube-proxy", f"--config={cfg}", "--v=2"]))
        import httpx  # the control plane's own dependency

        self.cp._wait(comp, lambda: httpx.get(f"http://{self.node_ip}:10256/healthz", timeout=2).status_code == 200,
                      "kube-proxy /healthz", timeout=60)

    def _start_coredns(self) -> None:
        """CoreDNS on the node IP (port 53), behind the ``kube-system/kube-dns`` Service at the
        cluster DNS address, with a hand-made EndpointSlice (CoreDNS is a process, not a Pod)."""
        d = self.dir
        corefile = d / "coredns/Corefile"
        corefile.write_text(f""".:53 {{
    bind {self.node_ip}
    errors
    health {self.node_ip}:8080
    ready {self.node_ip}:8181
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {self._admin_kubeconfig()}
        pods insecure
        ttl 5
    }}
    cache 5
}}
""")
        svc_labels = {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}
        ports = [{"name": "dns", "port": 53, "protocol": "UDP"}, {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]
        self.cp.apply([
            {"apiVersion": "v1", "kind": "Service",
             "metadata": {"name": "kube-dns", "namespace": "kube-system", "labels": svc_labels},
             "spec": {"clusterIP": self.dns_ip, "ports": [{**p, "targetPort": 53} for p in ports]}},
            {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
             "metadata": {"name": "kube-dns-realnode", "namespace": "kube-system",
                          "labels": {"kubernetes.io/service-name": "kube-dns",
                                     "endpointslice.kubernetes.io/managed-by": "e2e.modeldeployment"}},
             "addressType": "IPv4",
             "endpoints": [{"addresses": [self.node_ip], "conditions": {"ready": True}, "nodeName": self.name}],
             "ports": ports},
        ])
        comp = self.cp._add("coredns", self._ns([self.cp.bin_dir / "coredns", "-conf", corefile]))
        import httpx

        self.cp._wait(comp, lambda: httpx.get(f"http://{self.node_ip}:8181/ready", timeout=2).status_code == 200,
                      "coredns /ready", timeout=60)
        want = str(ipaddress.ip_network(self.cp.service_cluster_ip_range).network_address + 1)
        # The whole chain once: kube-proxy's rules for the DNS Service, CoreDNS reading Services.
        self.cp._wait(comp, lambda: self.dns_lookup(f"kubernetes.default.svc.{CLUSTER_DOMAIN}") == [want],
                      "kubernetes.default resolving through the DNS Service", timeout=60)

    # ---- stop -------------------------------------------------------------------------

    def stop(self) -> list[str]:
        """Tear everything down (module docstring); returns what could not be cleaned (empty when
        nothing is left behind). Never raises: every step is tried."""
        problems: list[str] = []
        t0 = time.monotonic()

        def attempt(what: str, fn: Any) -> None:
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - report and carry on
                problems.append(f"{what}: {exc}")

        comps = self.cp.components
        apiserver = comps.get("kube-apiserver")
        if self._started and apiserver is not None and apiserver.alive() and "kubelet" in comps \
                and comps["kubelet"].alive():
            attempt("drain the node's Pods", self._drain)
        sandboxes = self._sandbox_netns()
        # The kubelet has nothing left to run; stopped now it cannot start a sandbox again while
        # containerd removes what is left.
        for name in ("coredns", "kube-proxy", "kubelet"):
            if name in comps:
                comps[name].stop()
        if "containerd" in comps and comps["containerd"].alive():
            attempt("remove containers", self._remove_containers)
        if "containerd" in comps:
            comps["containerd"].stop()
        attempt("stop shims", self._kill_shims)
        attempt("unmount", lambda: self._unmount(sandboxes))
        if self._network_up:
            attempt("delete the network namespace", self._delete_netns)
        attempt("remove cgroups", self._remove_cgroups)
        attempt("remove host files", self._remove_host_files)
        self.timings["stop"] = round(time.monotonic() - t0, 2)
        return problems

    def _drain(self) -> None:
        self.cp.kubectl("patch", "node", self.name, "--type=merge", "-p", '{"spec":{"unschedulable":true}}',
                        check=False)
        selector = f"spec.nodeName={self.name}"
        self.cp.kubectl("delete", "pods", "--all-namespaces", "--field-selector", selector,
                        "--grace-period=2", "--wait=false", check=False, timeout=60)
        # Gone, or finished: a Pod that keeps a finalizer (Kueue's on the Pods it manages) stays
        # in the API after the kubelet stopped it, and its phase says so.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            items = self.cp.kubectl_json("get", "pods", "--all-namespaces", "--field-selector", selector)["items"]
            running = [p for p in items if p.get("status", {}).get("phase") not in ("Succeeded", "Failed")]
            if not running:
                return
            time.sleep(0.5)
        raise RuntimeError(f"Pods still on {self.name} after 60 s: "
                           + ", ".join(f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in running))

    def _remove_containers(self) -> None:
        for line in self._ctr("tasks", "ls", timeout=30).stdout.splitlines()[1:]:
            task = line.split()[0]
            self._ctr("tasks", "kill", "--signal=SIGKILL", task, timeout=30, check=False)
            self._ctr("tasks", "delete", "--force", task, timeout=30, check=False)
        ids = self._ctr("containers", "ls", "-q", timeout=30).stdout.split()
        if ids:
            self._ctr("containers", "delete", *ids, timeout=60, check=False)

    def _sandbox_netns(self) -> list[Path]:
        """The Pods' network namespace files (containerd bind-mounts them under /var/run/netns)."""
        found = []
        if "containerd" in self.cp.components and self.cp.components["containerd"].alive():
            try:
                for cid in self._ctr("containers", "ls", "-q", timeout=30).stdout.split():
                    self._container_ids.add(cid)
                    info = json.loads(self._ctr("containers", "info", cid, timeout=30).stdout)
                    for ns in ((info.get("Spec") or {}).get("linux") or {}).get("namespaces") or []:
                        if ns.get("type") == "network" and ns.get("path"):
                            # /var/run is a link to /run; mountinfo shows the real path.
                            found.append(Path(os.path.realpath(ns["path"])))
            except Exception:  # noqa: BLE001 - best effort; the mount scan below still runs
                pass
        return found

    def _kill_shims(self) -> None:
        """containerd-shim-runc-v2 daemonizes (its own session): find ours by our socket path."""
        ours = str(self.sock).encode()
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                cmdline = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if b"containerd-shim" in cmdline and ours in cmdline:
                try:
                    os.kill(int(proc.name), 9)
                except ProcessLookupError:
                    pass

    def _unmount(self, sandboxes: list[Path]) -> None:
        prefix = str(self.dir) + "/"
        mounts = []
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].replace("\\040", " ")
            if point.startswith(prefix) or Path(point) in sandboxes:
                mounts.append(point)
        for point in sorted(set(mounts), key=len, reverse=True):  # deepest first
            if _run(["umount", point], check=False).returncode != 0:
                _run(["umount", "-l", point], check=False)
        for p in sandboxes:
            try:
                p.unlink()
            except OSError:
                pass
        left = [ln.split()[4] for ln in Path("/proc/self/mountinfo").read_text().splitlines()
                if ln.split()[4].startswith(prefix)]
        if left:
            raise RuntimeError(f"still mounted: {left}")

    def _delete_netns(self) -> None:
        _run(["ip", "netns", "delete", self.netns], check=False)
        # Deleting the namespace destroys its end of the veth pair, and the pair with it; a host
        # end survives only if the namespace was never made.
        if _run(["ip", "link", "show", self.veth_host], check=False).returncode == 0:
            _run(["ip", "link", "delete", self.veth_host], check=False)
        if self.netns_path.exists():
            raise RuntimeError(f"{self.netns_path} still exists")

    def _remove_cgroups(self) -> None:
        """Every process still in our cgroups (a container whose shim was killed lives on,
        reparented) is killed by PID, then the directories go, deepest first."""
        for root in self._cgroups_made:
            for procs in root.rglob("cgroup.procs") if root.exists() else ():
                for pid in procs.read_text().split():
                    try:
                        os.kill(int(pid), 9)
                    except (ProcessLookupError, ValueError):
                        pass
        left = []
        for root in self._cgroups_made:
            if not root.exists():
                continue
            for d in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
                for _ in range(20):
                    try:
                        d.rmdir()
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        time.sleep(0.1)
            try:
                root.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                left.append(str(root))
        if left:
            raise RuntimeError(f"cgroups not removed (processes left?): {left}")

    def _remove_host_files(self) -> None:
        """Two host paths the kubelet and libcni hard-code, cleaned of this node's entries only
        (a normal teardown leaves none; a killed kubelet leaves both): the container log links
        in /var/log/containers (they point into our pod-logs) and the CNI result cache in
        /var/lib/cni/results (named after our sandboxes' ids)."""
        logs = Path("/var/log/containers")
        prefix = str(self.dir) + "/"
        for link in logs.iterdir() if logs.is_dir() else ():
            if link.is_symlink() and os.readlink(link).startswith(prefix):
                link.unlink(missing_ok=True)
        results = Path("/var/lib/cni/results")
        for f in results.iterdir() if results.is_dir() and self._container_ids else ():
            if any(f"-{cid}-" in f.name for cid in self._container_ids):
                f.unlink(missing_ok=True)

    # ---- diagnostics ------------------------------------------------------------------

    def leftovers(self) -> list[str]:
        """What of this node still exists on the machine (empty after a clean stop)."""
        out = []
        if self.netns_path.exists():
            out.append(f"netns {self.netns_path}")
        if _run(["ip", "link", "show", self.veth_host], check=False).returncode == 0:
            out.append(f"veth {self.veth_host}")
        if self.pod_cidr and _run(["ip", "-4", "route", "show", self.pod_cidr, "dev", self.veth_host],
                                  check=False).stdout.strip():
            out.append(f"route {self.pod_cidr}")
        prefix = str(self.dir) + "/"
        out += [f"mount {ln.split()[4]}" for ln in Path("/proc/self/mountinfo").read_text().splitlines()
                if ln.split()[4].startswith(prefix)]
        out += [f"cgroup {d}" for d in self._cgroups_made if d.exists()]
        logs = Path("/var/log/containers")
        out += [f"log link {link}" for link in (logs.iterdir() if logs.is_dir() else ())
                if link.is_symlink() and os.readlink(link).startswith(prefix)]
        results = Path("/var/lib/cni/results")
        out += [f"CNI cache {f}" for f in (results.iterdir() if results.is_dir() else ())
                if any(f"-{cid}-" in f.name for cid in self._container_ids)]
        # Ours: every process with the node's directory in its command line (containerd, the
        # kubelet, kube-proxy, CoreDNS by their configs, shims by the socket), and any process
        # left in its cgroups (reported above).
        ours = str(self.dir).encode()
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                try:
                    cmdline = (proc / "cmdline").read_bytes()
                except OSError:
                    continue
                if ours in cmdline:
                    shown = cmdline.replace(b"\0", b" ")[:120].decode(errors="replace")
                    out.append(f"process {proc.name}: {shown}")
        return out


# ---- the real pool: an InstanceType and Kueue queues whose Pods land on the real node ----------


class RealPool:
    """Kueue objects (and the InstanceType) that send Pods to the real node, through Kueue as a
    GPU pool would: a ResourceFlavor selecting the node's instance-type label and adding the
    toleration of its taint to every Pod it admits, a ClusterQueue over it (every namespace;
    quotas the 2-core node can hold), and a LocalQueue per namespace (:meth:`local_queue`).

    ``instance_type_object()`` is the matching ``worker.gpustack.ai/v1`` InstanceType with its
    status, small enough per unit (250m CPU, 256Mi per GPU) that a role of a few Pods fits; the
    operator's CRDs must be installed before it is applied (md_operator.start_operator does).
    """

    def __init__(self, cp: "ControlPlane", node: RealNode, admission_checks: Sequence[str] = (),
                 topology: str | None = None) -> None:
        self.cp = cp
        self.node = node
        self.instance_type = node.instance_type
        self.flavor = node.instance_type
        self.cluster_queue = node.instance_type
        self.local_queue_name = node.instance_type
        self.admission_checks = tuple(admission_checks)
        #: A Kueue Topology name for the flavor (e.g. manifests/kueue's "gpustack-rack-host", once
        #: applied); the node carries its levels' labels (rack, hostname).
        self.topology = topology

    def kueue_objects(self) -> list[dict[str, Any]]:
        cq_spec: dict[str, Any] = {
            "namespaceSelector": {},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [{
                "coveredResources": ["cpu", "memory", "ephemeral-storage", self.node.gpu_resource],
                "flavors": [{"name": self.flavor, "resources": [
                    {"name": "cpu", "nominalQuota": "2"},
                    {"name": "memory", "nominalQuota": "8Gi"},
                    {"name": "ephemeral-storage", "nominalQuota": "40Gi"},
                    {"name": self.node.gpu_resource, "nominalQuota": str(self.node.gpus)},
                ]}],
            }],
        }
        if self.admission_checks:
            cq_spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in self.admission_checks]}
        return [
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
             "metadata": {"name": self.flavor},
             "spec": {"nodeLabels": {"gpustack.ai/instance-type": self.instance_type},
                      # Kueue adds these to the Pods it admits with this flavor.
                      "tolerations": [{"key": REAL_NODE_TAINT_KEY, "operator": "Equal", "value": "true",
                                       "effect": "NoSchedule"}],
                      **({"topologyName": self.topology} if self.topology else {})}},
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
             "metadata": {"name": self.cluster_queue}, "spec": cq_spec},
        ]

    def apply(self) -> "RealPool":
        self.cp.apply(self.kueue_objects())
        return self

    def local_queue(self, namespace: str) -> str:
        """Create (idempotently) the LocalQueue in ``namespace``; its name, for the Pods'
        ``kueue.x-k8s.io/queue-name`` label."""
        self.cp.apply({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                       "metadata": {"name": self.local_queue_name, "namespace": namespace},
                       "spec": {"clusterQueue": self.cluster_queue}})
        return self.local_queue_name

    def instance_type_object(self) -> dict[str, Any]:
        gpus = self.node.gpus
        return {
            "apiVersion": "worker.gpustack.ai/v1", "kind": "InstanceType",
            "metadata": {"name": self.instance_type},
            "spec": {"displayName": "Real node (no GPU; nvidia.com/gpu advertised)", "acceleratable": True,
                     "acceleratorGroup": "nvidia-realnode", "os": "linux", "arch": "amd64",
                     "unitResources": {"cpu": "250m", "ram": "256Mi"}, "localStorage": "1Gi",
                     "acceleratorResource": self.node.gpu_resource},
            "status": {"entrance": self.local_queue_name, "phase": "Active",
                       "detail": {"manufacturer": "nvidia", "product": "RealNode", "family": "Stub",
                                  "memory": "24Gi", "runtimeVersion": "12.9", "runtimeVersions": ["12.9"]},
                       "accelerator": {"capacity": gpus, "remaining": gpus, "onceMaxRequest": gpus}},
        }

    def apply_instance_type(self) -> dict[str, Any]:
        """Apply :meth:`instance_type_object`, its status through the status subresource (as an
        inventory controller fills it); the operator's CRDs must exist."""
        obj = self.instance_type_object()
        status = obj.pop("status")
        self.cp.apply(obj)
        self.cp.kubectl("patch", "instancetypes.worker.gpustack.ai", self.instance_type, "--subresource=status",
                        "--type=merge", "-p", json.dumps({"status": status}))
        return {**obj, "status": status}

    def pod(self, name: str, namespace: str, image: str, gpus: int = 0, **spec: Any) -> dict[str, Any]:
        """A plain Pod in this pool's LocalQueue (create the queue first): Kueue admits it with the
        flavor (node selector + toleration) and the scheduler binds it to the real node."""
        requests = {"cpu": "50m", "memory": "32Mi"}
        if gpus:
            requests[self.node.gpu_resource] = str(gpus)
        container = {"name": "main", "image": image, "imagePullPolicy": "Never",
                     "resources": {"requests": requests, "limits": dict(requests)}}
        container.update(spec.pop("container", {}))
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace,
                             "labels": {"kueue.x-k8s.io/queue-name": self.local_queue_name}},
                "spec": {"containers": [container], "terminationGracePeriodSeconds": 2, **spec}}

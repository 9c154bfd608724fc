"""A bounded HTTP/1.1 load generator on loopback, and the server process it drives.

The client is a few keep-alive connections on raw asyncio streams, each sending one prebuilt
request after the other: next to nothing per request, so on a 2-core machine the server (one
process, one core) is what is measured, not the client. Every run is bounded by a request count
and a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from bench import ROOT


@dataclass
class LoadResult:
    requests: int
    seconds: float
    latencies: list[float]
    statuses: dict[int, int]
    response_bytes: int

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


def http_request(path: str, body: bytes, host: str = "127.0.0.1") -> bytes:
    head = (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: keep-alive\r\n\r\n").encode()
    return head + body


async def _one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, raw: bytes) -> tuple[int, int]:
    writer.write(raw)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    length = 0
    chunked = False
    for line in lines[1:]:
        key, _, value = line.partition(":")
        if key.lower() == "content-length":
            length = int(value.strip())
        elif key.lower() == "transfer-encoding" and "chunked" in value.lower():
            chunked = True
    if chunked:
        size = 0
        while True:
            n = int((await reader.readuntil(b"\r\n")).strip(), 16)
            await reader.readexactly(n + 2)
            size += n
            if n == 0:
                return status, size
    await reader.readexactly(length)
    return status, length


async def drive(port: int, raw: bytes, *, connections: int, requests: int, seconds: float,
                warmup: int = 0) -> LoadResult:
    """Sends `raw` over `connections` keep-alive connections: `requests` in all or until `seconds`."""
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    sizes: list[int] = []
    remaining = requests
    deadline = 0.0

    async def worker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal remaining
        while remaining > 0 and time.perf_counter() < deadline:
            remaining -= 1
            started = time.perf_counter()
            status, size = await _one(reader, writer, raw)
            latencies.append(time.perf_counter() - started)
            statuses[status] = statuses.get(status, 0) + 1
            sizes.append(size)

    streams = [await asyncio.open_connection("127.0.0.1", port, limit=1 << 24) for _ in range(connections)]
    try:
        for _ in range(warmup):
            await _one(*streams[0], raw)
        deadline = time.perf_counter() + seconds
        started = time.perf_counter()
        await asyncio.gather(*(worker(r, w) for r, w in streams))
        elapsed = time.perf_counter() - started
    finally:
        for _, writer in streams:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
    return LoadResult(len(latencies), elapsed, latencies, statuses, sizes[0] if sizes else 0)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_healthy(port: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"benchmark server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                if sock.recv(64).startswith(b"HTTP/1.1 200"):
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError("benchmark server did not become healthy")


@contextlib.contextmanager
def server(trivial_bytes: int, log: Path, world_dir: str | None = None, kube: str = "off",
           extra_args: tuple[str, ...] = ()) -> Iterator[int]:
    """The benchmark server process on a free loopback port; stopped (by its own pid) on exit.

    `kube`: "off" (no API server) or "auto" (the kubeconfig in $KUBECONFIG).
    """
    port = free_port()
    argv = [sys.executable, "-m", "bench.server", "--port", str(port), "--trivial-bytes", str(trivial_bytes),
            "--kube", kube, *extra_args]
    if world_dir:
        argv += ["--world", world_dir]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MODELDEPLOYMENT_KUBE": kube}
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            _wait_healthy(port, proc)
            yield port
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

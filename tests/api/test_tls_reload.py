"""The webhook listener reloads a rotated certificate without a restart (docs/operations.md#what-each-port-trusts).

A real uvicorn on loopback, started the way `modeldeployment serve` starts it, serves certificate
A; the files are swapped for B the way the kubelet updates a Secret volume (a new file renamed over
the old); the next TLS handshake must present B, and the hooks listener must not serve webhooks.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from app.main import create_app
from app.settings import Settings
from app.web.serving import listeners, serve
from tests.conftest import EXAMPLES


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_pair(directory: Path, name: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", f"/CN={name}",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return cert, key


def served_certificate(port: int) -> bytes:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            return tls.getpeercert(binary_form=True)


def der(cert: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(cert.read_text())


def rotate(source: Path, target: Path) -> None:
    staged = target.with_suffix(".new")
    staged.write_bytes(source.read_bytes())
    os.replace(staged, target)


@pytest.mark.skipif(subprocess.run(["which", "openssl"], capture_output=True).returncode != 0, reason="needs openssl")
def test_a_rotated_certificate_is_served_without_a_restart(tmp_path):
    cert_a, key_a = make_pair(tmp_path, "a")
    cert_b, key_b = make_pair(tmp_path, "b")
    live_cert, live_key = tmp_path / "tls.crt", tmp_path / "tls.key"
    rotate(cert_a, live_cert)
    rotate(key_a, live_key)
    settings = Settings(world_dir=EXAMPLES / "world", kube="off", tls_cert_file=live_cert, tls_key_file=live_key,
                        tls_reload_seconds=0.1)
    port, hooks_port = free_port(), free_port()
    listening = listeners(create_app(settings), settings, host="127.0.0.1", port=port, hooks_port=hooks_port,
                          log_level="warning")
    thread = threading.Thread(target=lambda: asyncio.run(serve(listening, settings)), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                first = served_certificate(port)
                break
            except OSError:
                assert time.monotonic() < deadline, "the webhook listener did not start"
                time.sleep(0.1)
        assert first == der(cert_a)

        # The key first, then the certificate (a half-done rotation must not break the listener).
        rotate(key_b, live_key)
        time.sleep(0.3)
        assert served_certificate(port) == der(cert_a)
        rotate(cert_b, live_cert)
        deadline = time.monotonic() + 10
        while served_certificate(port) != der(cert_b):
            assert time.monotonic() < deadline, "the rotated certificate was not served"
            time.sleep(0.1)
        assert listening.reloader is not None and listening.reloader.reloads == 1

        # Each port serves only its own paths.
        with httpx.Client(verify=False) as client:
            assert client.post(f"https://127.0.0.1:{port}/webhooks/validate", json={}).status_code == 200
            assert client.post(f"https://127.0.0.1:{port}/hooks/sync", json={}).status_code == 404
            assert client.post(f"http://127.0.0.1:{hooks_port}/webhooks/validate", json={}).status_code == 404
            assert client.post(f"http://127.0.0.1:{hooks_port}/hooks/sync", json={}).status_code == 400
    finally:
        listening.stop()
        thread.join(timeout=10)
    assert not thread.is_alive()

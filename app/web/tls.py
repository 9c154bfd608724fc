"""The webhook listener's certificate, reloaded when its files change (no restart).

cert-manager renews the serving certificate into the mounted Secret; the kubelet swaps the files
(an atomic symlink flip of `..data`). `CertificateReloader` keeps the listener's own SSLContext
and loads the new pair into it: every TLS handshake after the load serves the new certificate,
connections already open keep theirs. A pair that does not load (a half-written rotation, a key
that does not match) is logged and retried on the next look; the old pair keeps serving.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from pathlib import Path

log = logging.getLogger(__name__)


def _signature(*paths: Path) -> tuple[tuple[int, int, int], ...]:
    """(inode, size, mtime) of each file, following symlinks (a Secret volume flips `..data`)."""
    out = []
    for path in paths:
        st = os.stat(path)
        out.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


class CertificateReloader:
    def __init__(self, context: ssl.SSLContext, cert_file: Path, key_file: Path) -> None:
        self.context = context
        self.cert_file = cert_file
        self.key_file = key_file
        self.loaded = _signature(cert_file, key_file)
        self.reloads = 0

    def check(self) -> bool:
        """Loads the pair into the context when the files changed; True when a new pair was loaded."""
        try:
            current = _signature(self.cert_file, self.key_file)
        except OSError as exc:
            log.warning("the serving certificate files cannot be read (%s); the loaded pair keeps serving", exc)
            return False
        if current == self.loaded:
            return False
        try:
            # Tried on a scratch context first: a pair that fails half-way must not leave the live
            # context with a new certificate and the old key.
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(str(self.cert_file), str(self.key_file))
            self.context.load_cert_chain(str(self.cert_file), str(self.key_file))
        except (ssl.SSLError, OSError) as exc:
            log.warning("the renewed serving certificate did not load (%s); the previous one keeps serving", exc)
            return False
        self.loaded = current
        self.reloads += 1
        log.info("serving certificate reloaded from %s", self.cert_file)
        return True

    async def watch(self, interval_seconds: float) -> None:
        while True:
            await asyncio.sleep(interval_seconds)
            self.check()

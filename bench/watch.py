"""One watch of one collection for the bench's observers (bench/lws.TurnoverWatch,
bench/status_fields.StatusFieldWatch): a thread that hands each ADDED, MODIFIED and DELETED event to
`handle(kind, object, monotonic time)` and, when the loaded API server drops the stream, watches
again from the last resourceVersion it saw, so no event is lost nor seen twice.

An ERROR event (the API server no longer has that version: 410 Gone) ends the watch with `error`
set: the events in between are gone, and an observer that counted them would be wrong.

`stop()` wakes the watch's thread by shutting its connection down and lets that thread close it.
Closing it from another thread is not safe: the reader may be inside OpenSSL, which reads the socket
by its number, and a number closed under it goes to the next connection this process opens. The
reader then takes that connection's bytes: the driver's runs saw a poll of the API server fail on
"wrong version number", and the hooks' front read an answer without its first bytes."""
from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Any, Callable

import orjson

Handler = Callable[[str, dict[str, Any], float], None]

RECONNECT_PAUSE_SECONDS = 0.5
WATCH_TIMEOUT_SECONDS = 3600


class Watch:
    def __init__(self, client_factory: Callable[[], Any], path: str, handle: Handler,
                 lock: threading.Lock | None = None) -> None:
        self.client_factory = client_factory
        self.path = path
        self.handle = handle
        self.lock = lock or threading.Lock()
        self.version = ""
        self.reconnects = 0
        self.last_drop = ""  # why the stream last ended before stop(): the watch went on after it
        self.error = ""  # why the watch ended for good before stop(): events after it are missing
        self._stop = threading.Event()
        self._response: Any = None
        self._thread: threading.Thread | None = None

    def start(self, version: str, client: Any = None) -> None:
        """Watch from `version` (a list's resourceVersion) in a thread of its own."""
        self.version = version
        self._thread = threading.Thread(target=self._run, args=(client or self.client_factory(),), daemon=True)
        self._thread.start()

    def _run(self, client: Any) -> None:
        while not self._stop.is_set():
            try:
                if self._stream(client):
                    return
            except Exception as exc:  # noqa: BLE001 - closed by stop(), or the API server dropped it
                if self._stop.is_set():
                    return
                self.last_drop = f"{type(exc).__name__}: {exc}"
            # The stream ended (a dropped connection, the server's timeout): on from the last version.
            self.reconnects += 1
            time.sleep(RECONNECT_PAUSE_SECONDS)
            try:
                client.close()
            except Exception:  # noqa: BLE001
                pass
            client = self.client_factory()

    def _stream(self, client: Any) -> bool:
        """One watch request; True when the watch is over for good (stopped, or an ERROR event)."""
        params = {"watch": "1", "resourceVersion": self.version, "allowWatchBookmarks": "true",
                  "timeoutSeconds": str(WATCH_TIMEOUT_SECONDS)}
        with client.stream("GET", self.path, params=params, timeout=None) as response:
            self._response = response
            if self._stop.is_set():  # stopped while this request was being made
                return True
            if response.status_code != 200:
                response.read()
                if response.status_code == 410:
                    self.error = f"watch {self.path} from version {self.version}: 410 Gone"
                    return True
                raise RuntimeError(f"watch {self.path} answered {response.status_code}: {response.text[:200]}")
            for line in response.iter_lines():
                if self._stop.is_set():
                    return True
                if not line:
                    continue
                event = orjson.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    self.error = f"watch {self.path} ended: {obj.get('message', obj)}"
                    return True
                version = (obj.get("metadata") or {}).get("resourceVersion")
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    with self.lock:
                        self.handle(kind, obj, time.monotonic())
                if version:
                    self.version = version
        return self._stop.is_set()

    def stop(self) -> None:
        self._stop.set()
        shutdown(self._response)
        if self._thread is not None:
            self._thread.join(timeout=10)


def shutdown(response: Any) -> None:
    """Wakes whoever reads `response` (an httpx streaming response) with an end of stream, without
    giving up its socket's number: the reader's own thread closes it (module docstring)."""
    stream = (getattr(response, "extensions", None) or {}).get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):  # already closed by its thread: nothing to wake
            socket.socket.shutdown(sock, socket.SHUT_RDWR)

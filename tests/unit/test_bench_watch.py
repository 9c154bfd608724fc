"""bench/watch.py: a dropped stream is watched again from the last version seen; an ERROR event ends it."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import httpx
import orjson
import pytest

from bench import watch as bench_watch


def _event(kind: str, name: str, version: str) -> bytes:
    return orjson.dumps({"type": kind, "object": {"metadata": {"name": name, "resourceVersion": version}}})


class _Response:
    def __init__(self, lines: list[bytes], fail: bool, status_code: int = 200) -> None:
        self.lines, self.fail, self.status_code, self.text = lines, fail, status_code, ""

    def __enter__(self) -> "_Response":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def read(self) -> bytes:
        return b""

    def close(self) -> None:
        return None

    def iter_lines(self):  # type: ignore[no-untyped-def]
        for line in self.lines:
            yield line.decode()
        if self.fail:
            raise OSError("TLS read error")


class _Client:
    """Answers each watch request with the next scripted response and records its resourceVersion."""

    def __init__(self, script: list[_Response], asked: list[str], done: threading.Event) -> None:
        self.script, self.asked, self.done = script, asked, done

    def stream(self, method: str, path: str, params: dict[str, str], timeout: Any) -> _Response:
        self.asked.append(params["resourceVersion"])
        if not self.script:
            self.done.set()
            return _Response([], fail=True)
        return self.script.pop(0)

    def close(self) -> None:
        return None


def _run(script: list[_Response], monkeypatch: Any) -> tuple[bench_watch.Watch, list[tuple[str, str]], list[str]]:
    monkeypatch.setattr(bench_watch, "RECONNECT_PAUSE_SECONDS", 0.0)
    seen: list[tuple[str, str]] = []
    asked: list[str] = []
    done = threading.Event()
    client = _Client(script, asked, done)
    watch = bench_watch.Watch(lambda: client, "/api/v1/namespaces/n/pods",
                              lambda kind, obj, now: seen.append((kind, obj["metadata"]["name"])))
    watch.start("10", client)
    done.wait(5)
    watch.stop()
    return watch, seen, asked


def test_a_dropped_stream_is_watched_again_from_the_last_version_seen(monkeypatch):
    script = [_Response([_event("ADDED", "a", "11"), b"", _event("MODIFIED", "a", "12")], fail=True),
              _Response([_event("BOOKMARK", "", "15")], fail=True),
              _Response([_event("DELETED", "a", "16")], fail=True)]
    watch, seen, asked = _run(script, monkeypatch)
    assert seen == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    assert asked[:4] == ["10", "12", "15", "16"]
    assert watch.error == ""
    assert watch.reconnects >= 3
    assert watch.last_drop == "OSError: TLS read error"


def test_an_error_event_ends_the_watch_and_says_why(monkeypatch):
    gone = orjson.dumps({"type": "ERROR", "object": {"code": 410, "message": "too old resource version: 10"}})
    monkeypatch.setattr(bench_watch, "RECONNECT_PAUSE_SECONDS", 0.0)
    seen: list[str] = []
    asked: list[str] = []
    client = _Client([_Response([_event("ADDED", "a", "11"), gone], fail=False)], asked, threading.Event())
    watch = bench_watch.Watch(lambda: client, "/p", lambda kind, obj, now: seen.append(kind))
    watch.start("10", client)
    assert watch._thread is not None
    watch._thread.join(5)
    assert not watch._thread.is_alive()
    assert seen == ["ADDED"]
    assert asked == ["10"]
    assert "too old resource version" in watch.error


def test_stop_wakes_the_reader_and_leaves_closing_the_connection_to_the_watchs_own_thread(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A real connection: one event, then nothing (a quiet collection). stop() must wake the reader
    # blocked on it, and the socket must be closed by the watch's thread, never under it.
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    served = threading.Event()

    def serve() -> None:
        conn, _ = server.accept()
        conn.recv(65536)
        line = _event("ADDED", "a", "1") + b"\n"
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                     + f"{len(line):x}\r\n".encode() + line + b"\r\n")
        served.wait(30)
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    seen: list[str] = []
    port = server.getsockname()[1]
    watch = bench_watch.Watch(lambda: httpx.Client(base_url=f"http://127.0.0.1:{port}"), "/pods",
                              lambda kind, obj, now: seen.append(obj["metadata"]["name"]))
    closed_by: list[str] = []
    watch.start("0")
    deadline = time.monotonic() + 10
    while not seen:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    sock = watch._response.extensions["network_stream"].get_extra_info("socket")
    real_close = socket.socket.close

    def close(self: socket.socket) -> None:
        if self is sock:
            closed_by.append(threading.current_thread().name)
        real_close(self)

    monkeypatch.setattr(socket.socket, "close", close)
    began = time.monotonic()
    watch.stop()
    served.set()
    server.close()
    assert watch._thread is not None and not watch._thread.is_alive()
    assert time.monotonic() - began < 5  # woken, not left to the join's timeout
    assert closed_by and threading.main_thread().name not in closed_by

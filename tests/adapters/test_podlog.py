"""The bounded log read: the newest bytes up to the limit, never past the deadline."""

from __future__ import annotations

import http.server
import threading
import time

import pytest

from watchdog.adapters.kube import KubeClient, KubeError, KubeSettings
from watchdog.adapters.podlog import read_bounded
from watchdog.core.evidence import log_tail


class Drip:
    """A response handing out ``chunk`` bytes per read1 (``pause`` seconds each), ``total`` bytes in all."""

    def __init__(self, total: int, chunk: int = 1000, pause: float = 0.0) -> None:
        self.left, self.chunk, self.pause, self.asked = total, chunk, pause, 0

    def shutdown(self) -> None:  # what the deadline guard calls on a urllib3 response
        self.pause = 0.0

    def read1(self, amt: int) -> bytes:
        self.asked += 1
        time.sleep(self.pause)
        n = min(amt, self.chunk, self.left)
        self.left -= n
        return b"x" * n


def test_reads_to_the_end_and_holds_at_most_the_limit() -> None:
    assert read_bounded(Drip(2500), time.monotonic() + 5, 10_000) == b"x" * 2500
    long = Drip(1_000_000, chunk=100_000)
    assert len(read_bounded(long, time.monotonic() + 5, 40_000)) == 40_000
    assert long.asked == 63  # 16 KiB at a time to the end: the newest bytes are at the end


class Lines:
    """A response body of numbered lines, served in small reads."""

    def __init__(self, count: int, width: int = 100) -> None:
        self.body = b"".join(f"line {i:03d} ".encode().ljust(width - 1, b".") + b"\n" for i in range(count))

    def read1(self, amt: int) -> bytes:
        chunk, self.body = self.body[:min(amt, 700)], self.body[min(amt, 700):]
        return chunk


def test_the_newest_lines_are_kept_not_the_oldest() -> None:
    raw = read_bounded(Lines(100), time.monotonic() + 5, 1024 + 1)
    text, cut = log_tail(raw, 1024)
    assert cut and text.splitlines()[-1].startswith("line 099") and text.splitlines()[0].startswith("line 090")
    assert len(text.encode()) <= 1024
    raw = read_bounded(Lines(500, width=200), time.monotonic() + 5, 1024 + 1)  # 100 KB: far past the cap
    assert log_tail(raw, 1024)[0].splitlines()[-1].startswith("line 499")


def test_a_dripping_log_is_cut_at_the_deadline() -> None:
    started = time.monotonic()
    data = read_bounded(Drip(10**9, chunk=10, pause=0.05), started + 0.3, 10**6)
    assert time.monotonic() - started < 0.5 and 0 < len(data) <= 80


def test_a_log_that_falls_silent_is_cut_at_the_deadline_with_what_arrived() -> None:
    silent = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "1000000")
            self.end_headers()
            for i in range(5):  # a line every 0.1 s for 0.45 s ...
                self.wfile.write(f"line {i}\n".encode())
                self.wfile.flush()
                time.sleep(0.1)
            silent.wait(10)  # ... then nothing: a read started at 0.45 s would wait its own 0.5 s timeout

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        kube = KubeClient.from_settings(KubeSettings(host=f"http://127.0.0.1:{server.server_address[1]}",
                                                     request_timeout_s=0.5))
        started = time.monotonic()
        assert kube.read_pod_log("ml", "p-0", "vllm", 200, 4096) == b"".join(f"line {i}\n".encode() for i in range(5))
        assert time.monotonic() - started < 0.75  # the request timeout, not up to twice it
    finally:
        silent.set()
        server.shutdown()


def serve(status: int, body: bytes) -> tuple[http.server.ThreadingHTTPServer, list[str]]:
    """A loopback server answering every GET with ``status`` and ``body`` (ignoring limitBytes, as a hostile or
    broken one might); the paths asked."""
    paths: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            paths.append(self.path)
            self.send_response(status)
            self.send_header("Content-Type", "text/plain" if status == 200 else "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    return server, paths


def test_read_pod_log_asks_for_the_tail_and_keeps_no_more_than_the_limit() -> None:
    server, paths = serve(200, b"y" * 100_000)
    try:
        kube = KubeClient.from_settings(KubeSettings(host=f"http://127.0.0.1:{server.server_address[1]}",
                                                     request_timeout_s=5))
        assert kube.read_pod_log("ml", "p-0", "vllm", 200, 4096) == b"y" * 4096  # the newest 4096 of what came
        assert kube.api_requests == 1
    finally:
        server.shutdown()
    [path] = paths
    assert path.startswith("/api/v1/namespaces/ml/pods/p-0/log?")
    # no limitBytes: the API server would keep the OLDEST bytes of the tail
    assert sorted(path.split("?", 1)[1].split("&")) == ["container=vllm", "tailLines=200"]


def test_read_pod_log_refused_is_a_one_line_kube_error() -> None:
    server, _ = serve(403, b'{"kind":"Status","message":"pods \\"p-0\\" is forbidden: cannot get pods/log"}')
    try:
        kube = KubeClient.from_settings(KubeSettings(host=f"http://127.0.0.1:{server.server_address[1]}",
                                                     request_timeout_s=5))
        with pytest.raises(KubeError) as err:
            kube.read_pod_log("ml", "p-0", "vllm", 200, 4096)
    finally:
        server.shutdown()
    assert err.value.status == 403
    assert str(err.value) == ('read log of pod ml/p-0: HTTP 403 Forbidden: pods "p-0" is forbidden: cannot get '
                              "pods/log")

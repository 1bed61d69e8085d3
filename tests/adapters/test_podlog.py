"""The bounded log read: at most the byte limit, never past the deadline."""

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

    def read1(self, amt: int) -> bytes:
        self.asked += 1
        time.sleep(self.pause)
        n = min(amt, self.chunk, self.left)
        self.left -= n
        return b"x" * n


def test_reads_to_the_end_or_the_limit() -> None:
    assert read_bounded(Drip(2500), 10_000, time.monotonic() + 5) == b"x" * 2500
    capped = Drip(10**9, chunk=100_000)
    assert len(read_bounded(capped, 40_000, time.monotonic() + 5)) == 40_000
    assert capped.asked == 3  # 16 KiB at a time, never past the limit


class Lines:
    """A response body of numbered lines, served in small reads."""

    def __init__(self, count: int, width: int = 100) -> None:
        self.body = b"".join(f"line {i:03d} ".encode().ljust(width - 1, b".") + b"\n" for i in range(count))

    def read1(self, amt: int) -> bytes:
        chunk, self.body = self.body[:min(amt, 700)], self.body[min(amt, 700):]
        return chunk


def test_the_newest_lines_are_kept_not_the_oldest() -> None:
    raw = read_bounded(Lines(100), 1 << 20, time.monotonic() + 5, keep=4 * 1024)
    text, cut = log_tail(raw, 1024)
    assert cut and text.splitlines()[-1].startswith("line 099") and text.splitlines()[0].startswith("line 090")
    assert len(text.encode()) <= 1024


def test_a_dripping_log_is_cut_at_the_deadline() -> None:
    started = time.monotonic()
    data = read_bounded(Drip(10**9, chunk=10, pause=0.05), 10**6, started + 0.3)
    assert time.monotonic() - started < 0.5 and 0 < len(data) <= 80


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
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, paths


def test_read_pod_log_asks_for_the_tail_and_reads_no_more_than_the_limit() -> None:
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

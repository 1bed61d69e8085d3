"""The watchdog's own HTTP server under abuse (idle, dripping, oversized and too many connections), its shutdown,
prometheus_client's exposition on /metrics, and IPv6 / dual-stack listening. Real sockets on loopback only."""

from __future__ import annotations

import contextlib
import errno
import gzip
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import builders
import pytest
from served_kit import ipv6_loopback

from watchdog import __version__
from watchdog.adapters.kube import KubeClient, KubeSettings
from watchdog.config.loader import ConfigError, load_config
from watchdog.controller import http
from watchdog.controller.cycle import Watchdog
from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import FAST_SETTINGS, write_config

PARTIAL = b"GET /healthz HTTP/1.1\r\nHost: x\r\n"  # a request head that never ends


@pytest.fixture
def watchdog(emulator: EmulatorServer, tmp_path: Path) -> Iterator[Watchdog]:
    config = load_config(str(write_config(tmp_path / "config.yaml", **FAST_SETTINGS)), env={})
    wd = builders.watchdog(config, KubeClient.from_settings(KubeSettings(host=emulator.base_url)))
    yield wd
    wd.close()


@pytest.fixture
def server(watchdog: Watchdog) -> Iterator[Any]:
    """The server with its default limits (what `run` serves with), on 127.0.0.1."""
    served = http.start_http("127.0.0.1:0", watchdog, 1.0)
    yield served
    served.shutdown()
    served.server_close()


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def port_of(server: Any) -> int:
    return int(server.server_address[1])


def open_connections(port: int, count: int, host: str = "127.0.0.1") -> list[socket.socket]:
    """``count`` connections; every other one has sent half a request head."""
    socks = []
    for i in range(count):
        s = socket.create_connection((host, port), timeout=10)
        if i % 2:
            s.sendall(PARTIAL)
        socks.append(s)
    return socks


def closed_by_server(sock: socket.socket, within_s: float) -> bool:
    """True if the server ends the connection within ``within_s`` (EOF or reset; an error answer is read past)."""
    sock.settimeout(within_s)
    try:
        while sock.recv(65536):
            pass
        return True
    except ConnectionError:
        return True
    except TimeoutError:
        return False


# -- bounded ---------------------------------------------------------------------------------------------------
def test_300_idle_and_dripping_connections_cost_no_thread_and_the_probe_still_answers(server: Any) -> None:
    base = f"http://127.0.0.1:{port_of(server)}"
    threads_before = threading.active_count()
    socks = open_connections(port_of(server), 300)
    try:
        for round_ in range(3):  # drip: a byte per connection per round, the heads never end
            for s in socks[1::2]:
                with contextlib.suppress(OSError):  # already cut (over the connection limit)
                    s.send(b"X")
            assert threading.active_count() <= threads_before + 1, f"round {round_}: a thread per connection"
            time.sleep(0.2)
        status, _, body = get(base + "/healthz")
        assert status == 200 and json.loads(body)["ok"] is True
        assert threading.active_count() <= threads_before + 1
        assert server.cut >= 300 - http.HttpLimits().max_connections  # the oldest unfinished ones made room
    finally:
        for s in socks:
            s.close()


def test_a_dripping_client_is_cut_after_the_read_timeout(server: Any) -> None:
    limit = http.HttpLimits().read_timeout_s
    sock = socket.create_connection(("127.0.0.1", port_of(server)), timeout=5)
    started, cut = time.monotonic(), False
    with sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        while time.monotonic() - started < limit + 5:  # a header byte every 0.2 s: never idle, never done
            try:
                sock.send(b"X")
            except OSError:
                cut = True
                break
            if closed_by_server(sock, 0.2):
                cut = True
                break
    assert cut, f"still open after {limit + 5:.0f} s of dripping"
    assert time.monotonic() - started >= limit - 0.5


def test_a_request_head_too_large_is_refused_and_the_server_goes_on(server: Any) -> None:
    with socket.create_connection(("127.0.0.1", port_of(server)), timeout=5) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\n" + b"X-Pad: " + b"a" * (http.HttpLimits().max_head_bytes + 1000))
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except ConnectionError:
            pass  # reset: the rest of the head was unread
    assert answer == b"" or answer.startswith(b"HTTP/1.0 431 ")
    assert server.cut >= 1
    assert get(f"http://127.0.0.1:{port_of(server)}/readyz")[0] == 503


def test_over_the_connection_limit_the_oldest_unfinished_connection_makes_room(watchdog: Watchdog) -> None:
    served = http.start_http("127.0.0.1:0", watchdog, 1.0, http.HttpLimits(max_connections=4))
    try:
        socks = open_connections(port_of(served), 4)
        time.sleep(0.2)  # all four admitted
        assert get(f"http://127.0.0.1:{port_of(served)}/healthz")[0] == 200
        assert closed_by_server(socks[0], 5) and served.cut >= 1
        for s in socks:
            s.close()
    finally:
        served.shutdown()
        served.server_close()


def test_shutdown_is_fast_and_leaves_no_thread_whatever_is_connected(watchdog: Watchdog) -> None:
    threads_before = {t.ident for t in threading.enumerate()}
    served = http.start_http("127.0.0.1:0", watchdog, 1.0)
    socks = open_connections(port_of(served), 200)
    try:
        time.sleep(0.3)
        started = time.monotonic()
        served.shutdown()
        served.server_close()
        took = time.monotonic() - started
        left = [t.name for t in threading.enumerate() if t.ident not in threads_before]
        assert left == [] and took < 5.0, (left, took)
        assert closed_by_server(socks[-1], 5)  # cut, not left hanging
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port_of(served)), timeout=2).close()
    finally:
        for s in socks:
            s.close()


# -- /metrics through prometheus_client's WSGI app --------------------------------------------------------------
def test_metrics_negotiates_gzip_and_openmetrics_through_prometheus_client(watchdog: Watchdog, server: Any) -> None:
    watchdog.run_cycle()
    base = f"http://127.0.0.1:{port_of(server)}"
    status, headers, body = get(base + "/metrics", {"Accept-Encoding": "gzip"})
    assert status == 200 and headers.get("Content-Encoding") == "gzip"
    assert "vllm_watchdog_pods_watched 0.0" in gzip.decompress(body).decode().splitlines()
    status, headers, body = get(base + "/metrics", {"Accept": "application/openmetrics-text; version=1.0.0"})
    assert status == 200 and headers["Content-Type"].startswith("application/openmetrics-text")
    assert body.decode().endswith("# EOF\n")
    assert get(base + "/healthz?x=1")[0] == 200
    with socket.create_connection(("127.0.0.1", port_of(server)), timeout=5) as sock:
        sock.sendall(b"NONSENSE\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.0 400 ")


# -- IPv6 and dual-stack ----------------------------------------------------------------------------------------
needs_ipv6 = pytest.mark.skipif(not ipv6_loopback(), reason="this kernel has no IPv6 loopback (::1)")


@needs_ipv6
def test_an_ipv6_listen_address_from_the_config_serves_on_ipv6(watchdog: Watchdog) -> None:
    address = load_config(None, env={"WATCHDOG_LISTEN_ADDRESS": "[::1]:0"}).listen_address
    served = http.start_http(address, watchdog, 1.0)
    try:
        assert served.display_address == f"[::1]:{port_of(served)}"
        assert get(f"http://[::1]:{port_of(served)}/healthz")[0] == 200
    finally:
        served.shutdown()
        served.server_close()


@needs_ipv6
@pytest.mark.skipif(not socket.has_dualstack_ipv6(), reason="this kernel cannot turn IPV6_V6ONLY off")
def test_the_ipv6_wildcard_is_one_dual_stack_socket_serving_ipv4_too(monkeypatch: pytest.MonkeyPatch,
                                                                    watchdog: Watchdog) -> None:
    """``[::]`` is one IPv6 socket with IPV6_V6ONLY off. To stay on loopback it is bound to ::ffff:127.0.0.1 instead
    of :: -- an address the kernel lets only a dual-stack socket bind -- and an IPv4 client is served through it."""
    real = socket.create_server
    asked: list[tuple[Any, ...]] = []

    def on_loopback(address: tuple[str, int], **kwargs: Any) -> socket.socket:
        asked.append((address, kwargs))
        return real(("::ffff:127.0.0.1" if address[0] == "::" else address[0], address[1]), **kwargs)

    monkeypatch.setattr(http.socket, "create_server", on_loopback)
    served = http.start_http("[::]:0", watchdog, 1.0)
    try:
        assert asked == [(("::", 0), {"family": socket.AF_INET6, "dualstack_ipv6": True})]
        assert served.socket.family == socket.AF_INET6
        assert served.socket.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 0
        assert get(f"http://127.0.0.1:{port_of(served)}/healthz")[0] == 200  # IPv4 client, IPv6 socket
    finally:
        served.shutdown()
        served.server_close()


def test_without_ipv6_the_wildcard_falls_back_to_ipv4(monkeypatch: pytest.MonkeyPatch,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    real = socket.create_server

    def no_ipv6(address: tuple[str, int], **kwargs: Any) -> socket.socket:
        if kwargs.get("family") == socket.AF_INET6:
            raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")
        assert address[0] == "0.0.0.0"
        return real(("127.0.0.1", address[1]), **kwargs)  # loopback stands in for 0.0.0.0

    monkeypatch.setattr(http.socket, "create_server", no_ipv6)
    with http.listen_socket("[::]:0") as sock:
        assert sock.family == socket.AF_INET
    assert "no IPv6 on this host" in caplog.text and "0.0.0.0" in caplog.text


@pytest.mark.parametrize("address", ["[::]:8080", "0.0.0.0:8080", "[::1]:0", "127.0.0.1:9000", "localhost:8080"])
def test_listen_addresses_accepted(address: str) -> None:
    assert load_config(None, env={"WATCHDOG_LISTEN_ADDRESS": address}).listen_address == address


@pytest.mark.parametrize("address", ["::8080", ":::8080", "[::]", "[::]:65536", "0.0.0.0", ":8080", "[zz]:80",
                                     "h:80/x", "u@h:80"])
def test_listen_addresses_refused(address: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(None, env={"WATCHDOG_LISTEN_ADDRESS": address})
    assert any("must be IP:port" in p for p in refused.value.problems)


# -- /healthz, /readyz, /status ---------------------------------------------------------------------------------
def test_an_api_outage_keeps_liveness_and_takes_readiness_with_the_reason(tmp_path: Path) -> None:
    """Cycles that start and fail (the API server is down) keep /healthz at 200 — a restart would only lose the
    warm-up — while /readyz says why it is not ready: never completed, then the last error."""
    from watchdog.controller.service import safe_cycle

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    config = load_config(str(write_config(tmp_path / "config.yaml", **FAST_SETTINGS)), env={})
    wd = builders.watchdog(config, KubeClient.from_settings(KubeSettings(host=f"http://127.0.0.1:{closed}",
                                                                request_timeout_s=2)))
    served = http.start_http("127.0.0.1:0", wd, 1.0)
    base = f"http://127.0.0.1:{port_of(served)}"
    try:
        served.app.started = time.monotonic() - 10  # the process started long ago ...
        assert get(base + "/healthz")[0] == 503  # ... and no cycle ever started: the loop is dead
        safe_cycle(wd)  # ... now one starts, and fails on the API
        status, _, body = get(base + "/healthz")
        assert status == 200 and json.loads(body)["seconds_since_cycle_start"] < 3
        status, _, body = get(base + "/readyz")
        ready = json.loads(body)
        assert status == 503 and ready["why"] == "no cycle has completed yet"
        assert ready["last_error"].startswith("list namespaces ") and "Connection refused" in ready["last_error"]
        assert ready["seconds_since_error"] >= 0
        doc = json.loads(get(base + "/status")[2])
        assert doc["pods"] is None and doc["cycle"]["last_error"] == ready["last_error"]
        assert doc["cycle"]["completed_s_ago"] is None and doc["cycle"]["started_s_ago"] < 3
    finally:
        served.shutdown()
        served.server_close()
        wd.close()


def test_readyz_fails_once_no_cycle_completed_for_3_intervals(watchdog: Watchdog, server: Any) -> None:
    base = f"http://127.0.0.1:{port_of(server)}"
    watchdog.run_cycle()
    assert get(base + "/readyz")[0] == 200
    watchdog.last_success = time.monotonic() - 4.2  # interval 1 s: the limit is 3 s
    watchdog.last_started = time.monotonic()  # a cycle is running (stuck, or slow): alive, not ready
    status, _, body = get(base + "/readyz")
    assert status == 503 and json.loads(body)["why"] == "the last cycle completed 4 s ago (limit 3 s)"
    assert get(base + "/healthz")[0] == 200


def test_status_serves_the_last_snapshot_as_json_get_only(watchdog: Watchdog, server: Any) -> None:
    base = f"http://127.0.0.1:{port_of(server)}"
    watchdog.run_cycle()
    status, headers, body = get(base + "/status")
    doc = json.loads(body)
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert (doc["pods"], doc["pods_watched"], doc["leader"]) == ([], 0, True)
    assert doc["cycle"]["last_error"] is None and 0 <= doc["snapshot_age_s"] < 3
    assert doc["policy"]["budget"]["cluster"] == {"max": 2, "used": 0, "left": 2}
    assert doc["version"] == __version__
    request = urllib.request.Request(base + "/status", method="POST", data=b"")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5)
    assert refused.value.code == 405


def test_a_long_cycle_is_alive_and_a_stuck_one_is_not(tmp_path: Path) -> None:
    """A cycle of many timing-out pods can outlast 3 intervals: /healthz stays 200 while it runs (a restart
    would throw away warm-up and stall clocks, and the next cycle would be as long), and fails once it has run
    past STUCK_S; a finished cycle is judged on its start again. Also: vllm_watchdog_leader is 1 from the start
    without leader election, not only after the first good cycle."""
    config = load_config(str(write_config(tmp_path / "config.yaml", **FAST_SETTINGS)), env={})
    now = [1000.0]
    wd = builders.watchdog(config, KubeClient.from_settings(KubeSettings(host="http://127.0.0.1:9",
                                                                         request_timeout_s=1)),
                  clock=lambda: now[0])
    assert wd.metrics.leader._value.get() == 1.0
    served = http.start_http("127.0.0.1:0", wd, 1.0)
    base = f"http://127.0.0.1:{port_of(served)}"
    try:
        wd.last_started = now[0]  # a cycle starts ... and runs on
        now[0] += 60
        status, _, body = get(base + "/healthz")
        assert status == 200 and json.loads(body)["cycle_running"] is True
        now[0] += http.STUCK_S
        assert get(base + "/healthz")[0] == 503  # running for over 10 minutes: stuck
        wd.last_ended = now[0]  # it ends; no new one starts for 3 intervals
        now[0] += 3.5
        status, _, body = get(base + "/healthz")
        assert status == 503 and json.loads(body)["cycle_running"] is False
    finally:
        served.shutdown()
        served.server_close()
        wd.close()

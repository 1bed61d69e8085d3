"""Measurement (not a test): why the Prometheus client is not ``requests`` (docs/scaling.md).

    python tests/bench/bench_prometheus_transport.py [--timeout 2] [--drip 0.2] [--lines 60]

A loopback server answers ``POST /api/v1/query`` with a status line at once, then drips its header lines, one byte
every ``--drip`` s (``--lines`` lines of ``X-Drip: x``; a slow proxy, a wedged sidecar or a hostile one in front
of Prometheus), then a valid empty vector answer. The same query is sent by ``requests`` with
``timeout=--timeout`` and by the watchdog's :class:`~watchdog.adapters.prometheus.PrometheusClient` with
``timeout_s=--timeout``; the wall time of each is printed. ``requests``' timeout is per socket read and the
response head is read before the caller holds anything it could cut, so a head dripped a byte at a time is
waited for to its end; the watchdog's client arms its deadline guard on the socket as soon as it is connected.
Figures only, no assertion.
"""

from __future__ import annotations

import argparse
import socket
import threading
import time

import requests

from watchdog.adapters.prometheus import PrometheusClient, PrometheusError, PrometheusLimits
from watchdog.config.settings import BY_NAME

BODY = b'{"status":"success","data":{"resultType":"vector","result":[]}}'


def serve(listener: socket.socket, drip_s: float, lines: int) -> None:
    """Answer each connection: the status line, then the head a byte at a time, then the body."""
    while True:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            try:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
                for byte in b"X-Drip: x\r\n" * lines:
                    conn.sendall(bytes([byte]))
                    time.sleep(drip_s)
                conn.sendall(b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(BODY), BODY))
            except OSError:  # the client cut the connection: what the deadline is for
                continue


def timed(call: object) -> tuple[float, str]:
    start = time.monotonic()
    try:
        call()  # type: ignore[operator]
        outcome = "answered"
    except (requests.RequestException, PrometheusError) as exc:
        outcome = f"{type(exc).__name__}: {str(exc)[:80]}"
    return time.monotonic() - start, outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timeout", type=float, default=2.0)
    parser.add_argument("--drip", type=float, default=0.2, help="seconds between two bytes of the head")
    parser.add_argument("--lines", type=int, default=15, help="dripped header lines (11 bytes each)")
    args = parser.parse_args()
    listener = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=serve, args=(listener, args.drip, args.lines), daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    head_s = 11 * args.lines * args.drip
    print(f"head dripped over {head_s:.0f} s, timeout {args.timeout:g} s")
    session = requests.Session()
    session.trust_env = False
    took, outcome = timed(lambda: session.post(url + "/api/v1/query", data={"query": "up"},
                                               timeout=args.timeout, allow_redirects=False))
    print(f"requests (timeout={args.timeout:g}):         {took:6.2f} s  {outcome}")
    client = PrometheusClient(PrometheusLimits(url, args.timeout, BY_NAME["prometheus_max_bytes"].default))
    took, outcome = timed(lambda: client.query("up", time.time()))
    print(f"PrometheusClient (timeout_s={args.timeout:g}): {took:6.2f} s  {outcome}")


if __name__ == "__main__":
    main()

"""A simulated vLLM fleet for ``bench_fleet.py``: ONE process serves many pods on loopback (asyncio).

Started by the benchmark as ``python tests/bench/fleet_server.py SPEC.json``; the spec lists the pods
(``[address, port, kind, engines]``, kind ``ok`` | ``slow`` | ``hung``). Once every pod listens it prints one
JSON line ``{"bound": [[address, port], ...]}`` and serves until its stdin closes (the benchmark exited) or
SIGTERM. Loopback addresses only (127.0.0.0/8).

What a pod answers, like vLLM's uvicorn + prometheus_client:

- ``GET /metrics``: a real-size vLLM V1 exposition from ``expositions.build_vllm_v1_exposition`` (1 or 8
  engines; running 20), gzip-compressed when the request accepts gzip (compressed once per body, not per
  request); ``?name[]=...`` restricts it to those samples as a current vLLM's prometheus_client does (spec
  ``"honour_names": false``: ignored, the whole body, as older vLLM releases answer). The counters
  (prompt/generation tokens, the iteration heartbeat) rise once per second of ``time.monotonic()``, the same
  values for every pod of the same engine count, so healthy pods progress.
  A healthy pod answers after ``render_s`` x sqrt(engines) (5 ms, 14 ms with 8 engines: the time vLLM's
  API server takes to render and compress the exposition; the server spends no CPU on it here),
  ``slow`` pods after ``slow_s`` (2 s); ``hung`` pods accept the connection and never answer.
- HTTP/1.1 keep-alive; an idle connection is closed after ``keepalive_s`` (uvicorn closes idle connections
  after 5 s, vLLM's default; the benchmark uses a value shorter than its cycle interval so that, as in
  production at a 15 s interval, every scrape opens a new connection).
- Control (simulation only, not in vLLM): ``POST /sim/wedge`` freezes this pod's counters where they are
  and sets running to 21 (a wedge: /health would still be 200); ``POST /sim/reset`` undoes it;
  ``GET /sim/state``. Hung pods answer ``/sim/*`` too.
"""

from __future__ import annotations

import asyncio
import gzip
import ipaddress
import json
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ -> "bench" package

from bench.expositions import build_vllm_v1_exposition
from watchdog.demo.simpod.server import restrict

CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"
RATES = {"iterations": 40.0, "generation_tokens": 400.0, "prompt_tokens": 1200.0}  # per engine, per second
BASE = {"iterations": 500_000.0, "generation_tokens": 9_000_000.0, "prompt_tokens": 80_000_000.0}
_START = time.monotonic()


def counters(engines: int, tick: int) -> dict[str, list[float]]:
    """Per-engine counter values ``tick`` seconds after this process started."""
    return {name: [BASE[name] + 1000.0 * rank + RATES[name] * tick for rank in range(engines)] for name in RATES}


def response(status: bytes, body: bytes, content_type: bytes, gzipped: bool) -> bytes:
    """A complete HTTP/1.1 response (head + body) as uvicorn would send it."""
    head = [b"HTTP/1.1 " + status, b"date: " + time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime()).encode(),
            b"server: uvicorn", b"content-type: " + content_type, b"content-length: " + str(len(body)).encode()]
    if gzipped:
        head += [b"content-encoding: gzip", b"vary: Accept-Encoding"]
    return b"\r\n".join(head) + b"\r\n\r\n" + body


@dataclass
class Exposition:
    """One body in both encodings, as complete responses; and its restrictions to the samples a request names
    (``?name[]=``, as prometheus_client's filter in a current vLLM renders them), made once per query."""

    plain: bytes
    gzipped: bytes
    body: bytes = b""
    restricted: dict[tuple[bytes, bool], bytes] = field(default_factory=dict)

    @classmethod
    def build(cls, engines: int, running: float, values: dict[str, list[float]]) -> Exposition:
        body = build_vllm_v1_exposition(engines=engines, running=running, waiting=5 if running == 20 else 0,
                                        seed=engines, **values)
        return cls(response(b"200 OK", body, CONTENT_TYPE, False),
                   response(b"200 OK", gzip.compress(body), CONTENT_TYPE, True), body)

    def answer(self, query: bytes, gz: bool) -> bytes:
        names = parse_qs(query.decode(errors="replace")).get("name[]") if self.body else None
        if not names:
            return self.gzipped if gz else self.plain
        cached = self.restricted.get((query, gz))
        if cached is None:
            lean = restrict(self.body, set(names))
            cached = self.restricted[(query, gz)] = response(b"200 OK", gzip.compress(lean) if gz else lean,
                                                             CONTENT_TYPE, gz)
        return cached


class Bodies:
    """The current progressing body per engine count, rebuilt at most once per second."""

    def __init__(self) -> None:
        self._cache: dict[int, tuple[int, Exposition]] = {}

    def tick(self) -> int:
        return int(time.monotonic() - _START)

    def current(self, engines: int) -> Exposition:
        tick = self.tick()
        cached = self._cache.get(engines)
        if cached is None or cached[0] != tick:
            cached = self._cache[engines] = (tick, Exposition.build(engines, 20, counters(engines, tick)))
        return cached[1]


@dataclass
class Pod:
    address: str
    port: int
    kind: str  # ok | slow | hung
    engines: int
    wedged: Exposition | None = None
    scrapes: int = 0
    servers: list[asyncio.AbstractServer] = field(default_factory=list)

    def state(self) -> dict[str, Any]:
        return {"address": self.address, "port": self.port, "kind": self.kind, "engines": self.engines,
                "wedged": self.wedged is not None, "scrapes": self.scrapes}


class Fleet:
    def __init__(self, keepalive_s: float, slow_s: float, render_s: float, honour_names: bool = True) -> None:
        self.keepalive_s, self.slow_s, self.render_s = keepalive_s, slow_s, render_s
        self.honour_names = honour_names  # False: an older vLLM, whose /metrics ignores ?name[]=
        self.bodies = Bodies()

    def metrics(self, pod: Pod, query: bytes, gz: bool) -> bytes:
        pod.scrapes += 1
        exposition = pod.wedged or self.bodies.current(pod.engines)
        return exposition.answer(query, gz) if self.honour_names else (exposition.gzipped if gz else exposition.plain)

    def control(self, pod: Pod, method: bytes, path: bytes) -> bytes:
        if method == b"POST" and path == b"/sim/wedge":
            values = counters(pod.engines, self.bodies.tick())
            pod.wedged = Exposition.build(pod.engines, 21, values)
        elif method == b"POST" and path == b"/sim/reset":
            pod.wedged = None
        elif path != b"/sim/state":
            return response(b"404 Not Found", b'{"detail":"Not Found"}', b"application/json", False)
        return response(b"200 OK", json.dumps(pod.state()).encode(), b"application/json", False)


class PodProtocol(asyncio.Protocol):
    """One connection to one pod: a minimal HTTP/1.1 server (GET/POST, Content-Length bodies, keep-alive)."""

    def __init__(self, fleet: Fleet, pod: Pod) -> None:
        self.fleet, self.pod = fleet, pod
        self.buffer = b""
        self.transport: asyncio.Transport | None = None
        self.idle: asyncio.TimerHandle | None = None
        self.busy = False  # a response is pending (slow) or never coming (hung)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self._arm_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.idle is not None:
            self.idle.cancel()
        self.transport = None

    def _arm_idle(self) -> None:
        if self.idle is not None:
            self.idle.cancel()
        if self.transport is not None:
            self.idle = asyncio.get_running_loop().call_later(self.fleet.keepalive_s, self.transport.close)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while not self.busy and self.transport is not None:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > 65536:
                    self.transport.close()
                return
            head = self.buffer[:end].split(b"\r\n")
            length = 0
            gz = False
            for line in head[1:]:
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    length = int(value.strip() or 0)
                elif name == b"accept-encoding":
                    gz = b"gzip" in value.lower()
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length:]
            method, target, _ = (head[0].split(b" ", 2) + [b"", b""])[:3]
            path, _, query = target.partition(b"?")
            self._handle(method, path, query, gz)

    def _handle(self, method: bytes, path: bytes, query: bytes, gz: bool) -> None:
        assert self.transport is not None
        if self.idle is not None:
            self.idle.cancel()
        if path.startswith(b"/sim/"):
            self._send(self.fleet.control(self.pod, method, path))
        elif self.pod.kind == "hung":
            self.busy = True  # hold the connection, never answer (until the client gives up)
        elif method != b"GET" or path != b"/metrics":
            self._send(response(b"404 Not Found", b'{"detail":"Not Found"}', b"application/json", False))
        else:
            self.busy = True
            delay = self.fleet.slow_s if self.pod.kind == "slow" else self.fleet.render_s * self.pod.engines ** 0.5
            asyncio.get_running_loop().call_later(delay, self._answer, query, gz)

    def _answer(self, query: bytes, gz: bool) -> None:
        self.busy = False
        if self.transport is not None:
            self._send(self.fleet.metrics(self.pod, query, gz))
            self.data_received(b"")  # a request that arrived meanwhile

    def _send(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)
        self._arm_idle()


async def serve(spec: dict[str, Any]) -> None:
    loop = asyncio.get_running_loop()
    fleet = Fleet(float(spec.get("keepalive_s", 2.0)), float(spec.get("slow_s", 2.0)),
                  float(spec.get("render_s", 0.005)), bool(spec.get("honour_names", True)))
    pods = [Pod(a, int(p), k, int(e)) for a, p, k, e in spec["pods"]]
    for pod in pods:
        if not ipaddress.ip_address(pod.address).is_loopback:
            raise SystemExit(f"loopback addresses only, got {pod.address}")
        fleet.bodies.current(pod.engines)  # build once before the first scrape
        try:
            server = await loop.create_server(lambda p=pod: PodProtocol(fleet, p), pod.address, pod.port,
                                              reuse_address=True, backlog=128)
        except OSError:  # the port is taken on this address: any free port
            server = await loop.create_server(lambda p=pod: PodProtocol(fleet, p), pod.address, 0, backlog=128)
        pod.port = server.sockets[0].getsockname()[1]
        pod.servers.append(server)
    print(json.dumps({"bound": [[p.address, p.port] for p in pods]}), flush=True)

    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    loop.add_reader(sys.stdin.fileno(), lambda: stop.set() if not sys.stdin.buffer.read1(4096) else None)
    await stop.wait()
    for pod in pods:
        for server in pod.servers:
            server.close()


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[1]).read_text())
    asyncio.run(serve(spec))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

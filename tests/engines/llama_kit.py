"""The engine tier's kit: a real llama-server process on a loopback address, requests that drive it (streaming
generation, long prompts), a recorder of its /metrics bodies (for `replay --expositions`), a freezer of its
server loop thread (ptrace), and the real watchdog process (`run`) watching it as a pod of the API emulator.

Nothing here fakes the engine: every /metrics body comes from llama-server's own code.
"""

from __future__ import annotations

import base64
import calendar
import ctypes
import ctypes.util
import http.client
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from watchdog.demo.controlplane.api import free_port, stop_process
from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import FAST_SETTINGS, seed_deployment, write_config, write_kubeconfig

HERE = Path(__file__).resolve().parent
LABELS = {"app.kubernetes.io/name": "llama-server"}
NS = "llama"
TARGET = {"name": "llamacpp", "podSelector": "app.kubernetes.io/name=llama-server", "profile": "llamacpp"}
OPEN_RAILS = {"maxDeletions": 10, "maxDeletionsPerNamespace": 10, "breakerFraction": 1.0, "minPodAgeSeconds": 0}


def cache_dir() -> Path:
    """The build script's cache directory (one place decides it: the script's --print-dir)."""
    out = subprocess.run(["bash", str(HERE / "build_llama_server.sh"), "--print-dir"], check=True,
                         capture_output=True, text=True)
    return Path(out.stdout.strip())


def server_binary() -> Path:
    return Path(os.environ.get("LLAMA_SERVER") or cache_dir() / "llama-server")


# ---------------------------------------------------------------------------------------------------- the server


class LlamaServer:
    """``llama-server --metrics`` on ``address`` (loopback only), one CPU thread, the random model.
    ``start()`` returns once /health says the model is loaded."""

    def __init__(self, binary: Path, model: Path, address: str, log: Path, *, slots: int = 1, ctx: int = 16384,
                 batch: int = 2048, ubatch: int = 512, mmproj: Path | None = None,
                 models_dir: Path | None = None) -> None:
        """``mmproj``: a multimodal projector (``--mmproj``). ``models_dir``: router mode (``--models-dir`` instead of
        ``--model``): the server loads each model of the directory in a child llama-server of its own (on
        127.0.0.1, the flags inherited) and serves one model's /metrics at ``/metrics?model=NAME``."""
        assert address.startswith("127."), address
        self.address, self.port, self.log = address, free_port(address), log
        models = ["--models-dir", str(models_dir)] if models_dir else ["--model", str(model)]
        self.argv = [str(binary), *models, "--metrics", "--host", address, "--port", str(self.port),
                     "-np", str(slots), "-c", str(ctx), "-b", str(batch), "-ub", str(ubatch), "-t", "1", "-tb", "1",
                     "--no-warmup", "--no-webui", "-lv", "0", *(["--mmproj", str(mmproj)] if mmproj else [])]
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout_s: float = 60.0) -> LlamaServer:
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                if get(self.url + "/health", 1.0)[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"llama-server not healthy within {timeout_s}s: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            children = list(self.children())
            os.kill(self.proc.pid, signal.SIGCONT)  # a stopped process would not act on SIGTERM
            stop_process(self.proc, 10)
            for pid in children:  # a router's model instances: they exit with it; any left is ended
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def children(self) -> dict[int, str]:
        """Router mode: the model instances (child llama-servers), pid -> model name (their ``--alias``)."""
        out = {}
        for task in Path(f"/proc/{self.pid}/task").glob("*"):
            with suppress(OSError):
                for pid in (task / "children").read_text().split():
                    with suppress(OSError):
                        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                        if b"--alias" in argv:
                            out[int(pid)] = argv[argv.index(b"--alias") + 1].decode()
        return out

    def metrics(self, timeout_s: float = 2.0, path: str = "/metrics") -> str:
        status, body = get(self.url + path, timeout_s)
        assert status == 200, (status, body[:200])
        return body.decode()

    def post(self, path: str, body: dict[str, Any], timeout_s: float = 10.0) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection(self.address, self.port, timeout=timeout_s)
        try:
            conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def load_models(self, *names: str, timeout_s: float = 60.0) -> dict[str, int]:
        """Router mode: load ``names`` (``POST /models/load``) and wait until /models says each is loaded; returns
        model name -> the pid of its instance."""
        for name in names:
            status, body = self.post("/models/load", {"model": name})
            assert status == 200, (name, status, body[:300])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            listed = json.loads(get(self.url + "/models", 2.0)[1])["data"]
            if {m["id"] for m in listed if m["status"]["value"] == "loaded"} >= set(names):
                pids = {name: pid for pid, name in self.children().items()}
                assert set(names) <= set(pids), (names, pids)
                return pids
            time.sleep(0.2)
        raise AssertionError(f"models {names} not loaded within {timeout_s}s: {self.log.read_text()[-2000:]}")


def get(url: str, timeout_s: float) -> tuple[int, bytes]:
    host, _, rest = url.removeprefix("http://").partition("/")
    conn = http.client.HTTPConnection(host, timeout=timeout_s)
    try:
        conn.request("GET", "/" + rest)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def sample(body: str, name: str) -> float | None:
    """The value of the unlabelled sample ``llamacpp:<name>`` in an exposition body."""
    for line in body.splitlines():
        if line.startswith(f"llamacpp:{name} "):
            return float(line.split()[1])
    return None


# ------------------------------------------------------------------------------------------------- the requests


class Stream:
    """One streaming /completion request on its own thread; ``tokens`` counts the chunks received. Closing the
    connection (``close()``) makes llama-server cancel the task and release the slot."""

    def __init__(self, server: LlamaServer, prompt: str, n_predict: int, model: str | None = None) -> None:
        self.tokens, self.done, self.error = 0, threading.Event(), ""
        self.last_chunk_at = 0.0
        self._sock: socket.socket | None = None
        self._conn = http.client.HTTPConnection(server.address, server.port, timeout=600)
        body = {"prompt": prompt, "n_predict": n_predict, "stream": True, "ignore_eos": True,
                "cache_prompt": False, "temperature": 0.8, **({"model": model} if model else {})}
        self._thread = threading.Thread(target=self._run, args=(json.dumps(body),), daemon=True)
        self._thread.start()

    def _run(self, body: str) -> None:
        try:
            self._conn.request("POST", "/completion", body, {"Content-Type": "application/json"})
            self._sock = self._conn.sock  # http.client drops it from the connection on a `Connection: close` answer
            resp = self._conn.getresponse()
            while True:
                line = resp.readline()
                if not line:
                    break
                if line.startswith(b"data: "):
                    self.tokens += 1
                    self.last_chunk_at = time.monotonic()
        except (OSError, AttributeError, ValueError) as exc:  # close(): the normal end (http.client may trip on it)
            self.error = repr(exc)
        finally:
            self.done.set()

    def wait_tokens(self, n: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self.tokens < n and time.monotonic() < deadline and not self.done.is_set():
            time.sleep(0.05)
        assert self.tokens >= n, f"{self.tokens} tokens streamed in {timeout_s}s ({self.error})"

    def close(self) -> None:
        sock = self._sock or self._conn.sock
        if sock is not None:
            with suppress(OSError):
                sock.shutdown(2)
        self._conn.close()
        self._thread.join(10)


def complete(server: LlamaServer, prompt: str | dict[str, Any], n_predict: int,
             timeout_s: float = 300) -> dict[str, Any]:
    """One blocking (non-streaming) /completion request: llama-server's answer, with its ``timings``. ``prompt``:
    text, or ``media_prompt``'s object (text with images)."""
    status, body = server.post("/completion", {"prompt": prompt, "n_predict": n_predict, "ignore_eos": True,
                                               "cache_prompt": False}, timeout_s)
    assert status == 200, (status, body[:300])
    return dict(json.loads(body))


def png_image(side: int, seed: int = 1) -> bytes:
    """A ``side`` x ``side`` PNG of random pixels (RGB, 8 bits): what the server's image decoder (stb_image) reads."""
    rng = random.Random(seed)
    rows = b"".join(b"\0" + rng.randbytes(3 * side) for _ in range(side))  # filter 0 (none) before each row

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def media_prompt(server: LlamaServer, before: str, images: list[bytes], after: str) -> dict[str, Any]:
    """A /completion prompt with ``images`` back to back between two texts: the server's media marker (random per
    process: /props says it) once per image, the images base64-encoded in ``multimodal_data``."""
    marker = json.loads(get(server.url + "/props", 2.0)[1])["media_marker"]
    return {"prompt_string": before + marker * len(images) + after,
            "multimodal_data": [base64.b64encode(image).decode() for image in images]}


def byte_prompt(n_tokens: int) -> str:
    """A prompt of about ``n_tokens`` tokens: the model's vocabulary has no piece for digits, so every digit is one
    byte-fallback token (plus the BOS token and the leading space piece)."""
    return "".join(str(i % 10) for i in range(n_tokens - 2))


# ------------------------------------------------------------------------------------------------- the recorder


class Recorder:
    """Scrapes /metrics every ``interval_s`` into ``directory``/<seconds>.prom (the layout `replay --expositions`
    reads; a failed scrape writes nothing). ``bodies`` keeps (monotonic time, body) for assertions."""

    def __init__(self, server: LlamaServer, directory: Path, interval_s: float = 0.5, path: str = "/metrics") -> None:
        self.server, self.directory, self.interval_s, self.path = server, directory, interval_s, path
        directory.mkdir(parents=True, exist_ok=True)
        self.bodies: list[tuple[float, str]] = []
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Recorder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                body = self.server.metrics(timeout_s=self.interval_s * 2, path=self.path)
            except (OSError, AssertionError):
                self.failures += 1
            else:
                self.bodies.append((t0, body))
                (self.directory / f"{t0:.3f}.prom").write_text(body)
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - t0)))

    def longest_flat_busy_s(self, signals: tuple[str, ...] = ("n_decode_total",)) -> float:
        """The longest stretch (by scrape times) during which a request was processing and none of ``signals``
        moved: for n_decode_total, the longest single llama_decode call the recorder saw, to within one scrape
        interval."""
        longest, start, last = 0.0, None, None
        for t, body in self.bodies:
            busy = (sample(body, "requests_processing") or 0) > 0
            decodes = tuple(sample(body, name) for name in signals)
            if busy and start is not None and decodes == last:
                longest = max(longest, t - start)
            else:
                start = t if busy else None
            last = decodes
        return longest


# -------------------------------------------------------------------------------------------- the loop freezer

PTRACE_DETACH, PTRACE_SEIZE, PTRACE_INTERRUPT = 17, 0x4206, 0x4207
WALL = 0x40000000  # __WALL: wait for any thread of the tracee


class LoopFreezer:
    """Freezes ONE thread of llama-server: the server loop (``start_loop()`` runs on the main thread, so its thread
    id is the process id) with PTRACE_SEIZE + PTRACE_INTERRUPT, and releases it with PTRACE_DETACH. The HTTP
    threads and the queue's worker thread keep running: a metrics task is answered by the worker while the loop
    is inside ``yield_to_queue`` (a decode), so /metrics still answers, with requests_processing > 0 and a frozen
    n_decode_total: the wedge the watchdog is for. Frozen anywhere else, /metrics waits for the loop (a scrape
    timeout: unknown): ``freeze_in_decode`` retries until /metrics answers while frozen.

    Every ptrace call must come from the thread that seized the tracee: use one instance from one thread."""

    def __init__(self, server: LlamaServer, tid: int | None = None, path: str = "/metrics") -> None:
        """``tid``: the loop thread to freeze (default: the server's main thread); in router mode a model
        instance's pid, its /metrics read through the router at ``path``."""
        self.server, self.tid, self.path = server, tid or server.pid, path
        self._libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self._libc.ptrace.restype = ctypes.c_long
        self._libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        self.frozen = False

    def _ptrace(self, request: int) -> None:
        if self._libc.ptrace(request, self.tid, None, None) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"ptrace({request:#x}, {self.tid}): {os.strerror(errno)}")

    def freeze(self) -> None:
        self._ptrace(PTRACE_SEIZE)
        self._ptrace(PTRACE_INTERRUPT)
        _, status = os.waitpid(self.tid, WALL)  # the interrupt's stop (the thread is now still)
        assert os.WIFSTOPPED(status), status
        self.frozen = True

    def release(self) -> None:
        if self.frozen:
            self._ptrace(PTRACE_DETACH)
            self.frozen = False

    def freeze_in_decode(self, attempts: int = 20) -> tuple[float, int]:
        """Freeze the loop inside a decode (checked: /metrics answers while it is frozen). Returns the wall time
        of the freeze that held and how many attempts it took."""
        for attempt in range(1, attempts + 1):
            frozen_at = time.time()
            self.freeze()
            try:
                self.server.metrics(timeout_s=1.0, path=self.path)
                return frozen_at, attempt
            except (OSError, AssertionError):
                self.release()  # frozen between decodes: /metrics would wait for the loop
                time.sleep(0.1 + 0.037 * attempt)
        raise AssertionError(f"the loop was never caught inside a decode in {attempts} attempts")


# ------------------------------------------------------------------------------------------------- the watchdog


@dataclass
class Watch:
    """The real watchdog process (`python -m watchdog run`) and the API emulator holding one Deployment whose pod's
    IP and port are the llama-server's (namespace ``llama``, enforced) and, when asked, a second one on the same
    server in a dry-run namespace (``llama-dry-run``: reported, never deleted, so it is watched to the end)."""

    api: EmulatorServer
    log_path: Path
    pods: dict[str, dict[str, Any]]  # namespace -> pod
    settings: dict[str, Any]
    proc: subprocess.Popen[bytes] | None = None

    def name(self, ns: str = NS) -> str:
        return str(self.pods[ns]["metadata"]["name"])

    def records(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log_path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append({"msg": line, "raw": True})
        return out

    def states(self, ns: str = NS) -> list[tuple[float, str, str]]:
        """(wall time, state, message) of every transition of the pod's engine series, from the JSON log."""
        out, ref = [], f"pod {ns}/{self.name(ns)} series"
        for r in self.records():
            msg = str(r.get("msg"))
            if "state" in r and msg.startswith(ref) and " -> " in msg:
                whole = calendar.timegm(time.strptime(r["ts"][:19], "%Y-%m-%dT%H:%M:%S"))
                out.append((whole + int(r["ts"][20:23]) / 1000, str(r["state"]), msg))
        return out

    def state_names(self, ns: str = NS) -> list[str]:
        return [state for _, state, _ in self.states(ns)]

    def remediations(self, result: str) -> list[dict[str, Any]]:
        """The remediator's outcomes ``result`` (deleted, dry_run, ...), one log record each."""
        return [r for r in self.records() if r.get("result") == result and r.get("logger", "").endswith("remediator")]

    def pod_exists(self, ns: str = NS) -> bool:
        return self.api.get_pod(ns, self.name(ns)) is not None

    def wait(self, what: Callable[[], bool], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if what():
                return True
            assert self.proc is not None and self.proc.poll() is None, self.tail()
            time.sleep(0.1)
        return what()

    def wait_state(self, state: str, timeout_s: float, ns: str = NS, after: float = 0.0) -> float:
        """Wait for a transition to ``state`` logged at or after wall time ``after``; its wall time."""
        def seen() -> float | None:
            return next((t for t, s, _ in self.states(ns) if s == state and t >= after), None)
        assert self.wait(lambda: seen() is not None, timeout_s), (state, self.states(ns), self.tail())
        found = seen()
        assert found is not None
        return found

    def tail(self, n: int = 4000) -> str:
        return self.log_path.read_text()[-n:]


DRY_NS = "llama-dry-run"


@contextmanager
def watch(server: LlamaServer, tmp: Path, *, dry_run_twin: bool = False, twin_labels: dict[str, str] | None = None,
          **settings: Any) -> Iterator[Watch]:
    """Run the watchdog against the emulator with ``server`` as the endpoint of one pod in namespace ``llama``
    (enforced: a stalled engine's pod is deleted) and with ``dry_run_twin`` one more in ``llama-dry-run`` (labelled
    ``twin_labels``, by default as the first: another target can select it). ``settings`` override the fast test
    settings (window 5 s, interval 1 s, 3 samples)."""
    tmp.mkdir(parents=True, exist_ok=True)
    with EmulatorServer() as api:
        pods = {}
        for ns, mode, labels in ((NS, "true", LABELS), (DRY_NS, "dry-run", twin_labels or LABELS))[
                : 2 if dry_run_twin else 1]:
            api.create_namespace(ns, {"vllm-watchdog.io/enabled": mode})
            pods[ns] = seed_deployment(api, ns, "llama", server.address, server.port, labels=labels)["pod"]
        merged = {**FAST_SETTINGS, **OPEN_RAILS, "logFormat": "json", "targets": [TARGET],
                  "listenAddress": f"127.0.0.1:{free_port()}", **settings}
        config = write_config(tmp / "config.yaml", **merged)
        kubeconfig = write_kubeconfig(tmp / "kubeconfig", api.base_url)
        w = Watch(api, tmp / "watchdog.log", pods, merged)
        with open(w.log_path, "wb") as log:
            w.proc = subprocess.Popen([sys.executable, "-m", "watchdog", "run", "--config", str(config),
                                       "--kubeconfig", str(kubeconfig)], stdout=log, stderr=subprocess.STDOUT,
                                      env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            yield w
        finally:
            stop_process(w.proc, 10)


def run_verb(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    """``python -m watchdog ARGS`` (check, replay), its output as text."""
    return subprocess.run([sys.executable, "-m", "watchdog", *args], capture_output=True, text=True,
                          timeout=timeout_s, check=False)


def replay(directory: Path, *extra: str) -> list[dict[str, Any]]:
    """`replay --expositions DIR --profile llamacpp` over recorded bodies: one verdict per file."""
    out = run_verb("replay", "--expositions", str(directory), "--profile", "llamacpp", *extra)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]

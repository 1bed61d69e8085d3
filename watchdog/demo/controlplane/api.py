"""A small JSON client for the real API server (admin token, the server's self-signed CA), polling, free
loopback ports, and the environment for kubectl and helm (no proxies: loopback only)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests


class ApiError(RuntimeError):
    """An API request answered with a status >= 400 (``status``, decoded ``body``)."""

    def __init__(self, method: str, path: str, status: int, body: Any) -> None:
        message = body.get("message") if isinstance(body, dict) else str(body)[:500]
        super().__init__(f"{method} {path}: {status} {message}")
        self.status, self.body = status, body


class Api:
    """A small JSON client for the API server (requests, a bearer token, the server's CA)."""

    def __init__(self, base_url: str, token: str, ca_file: Path) -> None:
        self.base_url, self.token, self.ca_file = base_url, token, ca_file
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {token}"
        self.session.verify = str(ca_file)
        self.session.trust_env = False  # never a proxy: loopback only

    def request(self, method: str, path: str, body: Any = None, *, params: dict[str, Any] | None = None,
                content_type: str = "application/json", ok: tuple[int, ...] = ()) -> tuple[int, Any]:
        """(status, decoded body). Raises :class:`ApiError` for a status >= 400 not in ``ok``."""
        data = None if body is None else json.dumps(body)
        resp = self.session.request(method, self.base_url + path, data=data, params=params, timeout=30,
                                    headers={"Content-Type": content_type})
        try:
            decoded: Any = resp.json()
        except ValueError:
            decoded = resp.text
        if resp.status_code >= 400 and resp.status_code not in ok:
            raise ApiError(method, path, resp.status_code, decoded)
        return resp.status_code, decoded

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params or None)[1]

    def find(self, path: str) -> Any | None:
        """GET ``path``; None on 404."""
        status, body = self.request("GET", path, ok=(404,))
        return None if status == 404 else body

    def create(self, path: str, body: Any) -> Any:
        return self.request("POST", path, body)[1]

    def merge_patch(self, path: str, body: Any) -> Any:
        return self.request("PATCH", path, body, content_type="application/merge-patch+json")[1]

    def delete(self, path: str, body: Any = None, ok: tuple[int, ...] = (404,)) -> tuple[int, Any]:
        return self.request("DELETE", path, body, ok=ok)


def wait_for(what: str, check: Callable[[], Any], timeout: float = 30.0, interval: float = 0.2,
             describe: Callable[[], str] | None = None) -> Any:
    """Poll ``check`` until it returns something truthy (returned); AssertionError naming ``what`` on timeout.
    Exceptions from ``check`` count as "not yet" (the last one is reported)."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            value = check()
            if value:
                return value
        except Exception as exc:
            last = exc
        if time.monotonic() >= deadline:
            extra = f"; last error: {last!r}" if last else ""
            detail = f"\n{describe()}" if describe else ""
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}{extra}{detail}")
        time.sleep(interval)


def free_port(host: str = "127.0.0.1") -> int:
    """A free TCP port on ``host`` (a loopback address; free when asked, the caller binds it soon after)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def stop_process(proc: subprocess.Popen[Any] | None, wait_s: float = 15.0) -> int | None:
    """SIGTERM ``proc`` if it still runs, wait up to ``wait_s``, then kill it; its exit code (None: no process)."""
    if proc is None:
        return None
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    return proc.returncode


PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy")


def tool_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for kubectl, helm and the watchdog process: no proxies (every address here is loopback)."""
    source = os.environ if base is None else base
    env = {k: v for k, v in source.items() if k.lower() not in PROXY_VARIABLES}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env

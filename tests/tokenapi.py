"""A loopback stand-in for the Kubernetes API server's authentication and authorization, for the unit tiers.

It answers only what these tests ask (a pod list, one pod, one pod's log, namespaces) and only a bearer token in
``accepted`` (None in it: a request without a token too); any other is 401 Unauthorized, as the API server does.
A path starting with one of ``forbidden`` is 403 Forbidden for an accepted token (RBAC). Every request's token is
recorded (``tokens``). ``tls``: HTTPS with the self-signed certificate for 127.0.0.1 of tests/fixtures/tls
(:data:`CA`). The Kubernetes API emulator (kmock) does not authenticate at all.
"""

from __future__ import annotations

import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

CA = Path(__file__).parent / "fixtures" / "tls" / "localhost.crt"


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason,
            "code": code}


class TokenApi:
    """Started on 127.0.0.1 (a free port); ``url`` is its base URL. Use as a context manager."""

    def __init__(self, *accepted: str | None, tls: bool = False) -> None:
        self.accepted: set[str | None] = set(accepted)
        self.forbidden: set[str] = set()
        self.tokens: list[str | None] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                auth = self.headers.get("Authorization")
                token = auth.split(" ", 1)[1] if auth and auth.lower().startswith("bearer ") else None
                api.tokens.append(token)
                path = urlsplit(self.path).path
                if token not in api.accepted:
                    self.answer(401, status(401, "Unauthorized", "Unauthorized"))
                elif any(path.startswith(p) for p in api.forbidden):
                    self.answer(403, status(403, "Forbidden", f"cannot get path {path}"))
                elif path.endswith("/log"):
                    self.answer(200, b"a log line\n")
                elif path.startswith("/api/v1/namespaces/") and "/pods/" in path:
                    self.answer(200, {"kind": "Pod", "metadata": {"name": path.rsplit("/", 1)[1], "uid": "u-1"}})
                else:
                    self.answer(200, {"kind": "List", "metadata": {"resourceVersion": "1"}, "items": []})

            def do_POST(self) -> None:  # an Event create, judged as a GET is
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.do_GET()

            def answer(self, code: int, body: dict[str, Any] | bytes) -> None:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(CA, CA.with_suffix(".key"))
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)

    def __enter__(self) -> TokenApi:
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

"""I/O: one bare HTTP/1.1 connection (urllib3's, the transport ``requests`` uses underneath) for the Prometheus
client, and the TLS context it shares with the scrape transport (:func:`client_tls`): no pool (Prometheus is asked
a few times per cycle), no proxy, netrc or CA variables from the environment, HTTPS verified against ``ca_file`` or
else certifi's bundle (as ``requests`` did). The caller bounds the request with a
:class:`~watchdog.adapters.deadline.DeadlineGuard` attached to the socket once connected."""

from __future__ import annotations

import ssl
from functools import lru_cache

import certifi
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.util.ssl_ import create_urllib3_context


def connection(scheme: str, host: str, port: int, connect_timeout_s: float,
               ca_file: str | None = None) -> HTTPConnection:
    """A not yet connected ``http``/``https`` connection to ``host``:``port``."""
    if scheme == "http":
        return HTTPConnection(host, port, timeout=connect_timeout_s)
    return HTTPSConnection(host, port, timeout=connect_timeout_s, ssl_context=client_tls(ca_file))


def client_tls(ca_file: str | None = None) -> ssl.SSLContext:
    """The verifying context of an HTTPS connection: ``ca_file``, else certifi's bundle (read at every call)."""
    return tls_context(ca_file or certifi.where())


@lru_cache(maxsize=8)
def tls_context(ca_file: str) -> ssl.SSLContext:
    """A verifying TLS client context trusting ``ca_file`` only (built once per file: it is read-only after)."""
    context = create_urllib3_context()
    context.load_verify_locations(cafile=ca_file)
    return context

"""Reading a pod's log bounded in bytes and in time (I/O): the tenant's output, read before a deletion as evidence
(:meth:`watchdog.adapters.kube.KubeClient.read_pod_log`)."""

from __future__ import annotations

import time
from typing import Any


def read_bounded(resp: Any, limit: int, deadline: float) -> bytes:
    """At most ``limit`` bytes of the urllib3 response ``resp``, read in chunks until its end, the limit or the
    monotonic ``deadline`` (a log that drips slowly is cut there, never waited for)."""
    chunks: list[bytes] = []
    size = 0
    while size < limit and time.monotonic() < deadline:
        chunk = resp.read1(min(16384, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)

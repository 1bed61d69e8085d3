"""Reading a pod's log bounded in bytes and in time (I/O): the tenant's output, read before a deletion as evidence
(:meth:`watchdog.adapters.kube.KubeClient.read_pod_log`)."""

from __future__ import annotations

import time
from typing import Any


def read_bounded(resp: Any, limit: int, deadline: float, keep: int | None = None) -> bytes:
    """The urllib3 response ``resp`` read in chunks until its end, ``limit`` bytes or the monotonic ``deadline``
    (a log that drips slowly is cut there, never waited for); only its LAST ``keep`` bytes are kept (None: all),
    so a log tail keeps its newest lines whatever came before them."""
    kept = bytearray()
    size = 0
    while size < limit and time.monotonic() < deadline:
        chunk = resp.read1(min(16384, limit - size))
        if not chunk:
            break
        size += len(chunk)
        kept += chunk
        if keep is not None and len(kept) > keep:
            del kept[: len(kept) - keep]
    return bytes(kept)

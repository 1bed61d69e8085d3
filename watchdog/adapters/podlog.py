"""Reading a pod's log bounded in bytes and in time (I/O): the tenant's output, read before a deletion as evidence
(:meth:`watchdog.adapters.kube.KubeClient.read_pod_log`)."""

from __future__ import annotations

import time
from typing import Any

import urllib3.exceptions

from watchdog.adapters.deadline import DeadlineGuard


def read_bounded(resp: Any, deadline: float, keep: int) -> bytes:
    """The last ``keep`` bytes of the urllib3 response ``resp``, read in chunks until its end or the monotonic
    ``deadline``: the scrapes' deadline guard shuts the socket down then, so neither a log that drips nor one that
    falls silent is waited for (what arrived is kept). How much arrives at all is bounded by the request's
    ``tailLines`` (the container runtime splits lines at 16 KiB); only ``keep`` bytes are ever held."""
    guard = DeadlineGuard(deadline)
    guard.attach(resp)
    kept = bytearray()
    try:
        while time.monotonic() < deadline:
            chunk = resp.read1(16384)
            if not chunk:
                break
            kept += chunk
            if len(kept) > keep:
                del kept[: len(kept) - keep]
    except (urllib3.exceptions.HTTPError, OSError):
        if not guard.fired:
            raise
    finally:
        guard.disarm()
    return bytes(kept)

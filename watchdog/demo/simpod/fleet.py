"""Several simulated pods on consecutive loopback addresses."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Sequence
from typing import Any

from watchdog.demo.simpod.pod import SimPod


class SimFleet:
    """Several SimPods on consecutive loopback addresses: ``SimFleet(["progressing", "wedged"])`` puts pod i
    on 127.0.0.(2+i). ``port=0`` gives each pod its own free port; a fixed port is shared by all addresses.
    Extra keyword arguments go to every :class:`SimPod`.
    """

    def __init__(self, modes: Sequence[str], *, port: int = 0, first_address: str = "127.0.0.2", **pod_kwargs: Any):
        first = ipaddress.IPv4Address(first_address)
        self.pods = [SimPod(str(first + i), port, mode, **pod_kwargs) for i, mode in enumerate(modes)]

    def start(self) -> list[str]:
        """Start every pod; on a failure the already started ones are stopped and the error re-raised."""
        try:
            return [pod.start() for pod in self.pods]
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for pod in self.pods:
            pod.stop()

    def __enter__(self) -> SimFleet:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def __iter__(self) -> Iterator[SimPod]:
        return iter(self.pods)

"""The deletion ledger's I/O (see :mod:`watchdog.core.ledger`): one ConfigMap in the watchdog's own namespace,
written after every deletion (read-modify-write guarded by ``resourceVersion``, one retry on a conflict) and read
back with one GET when the budget must be restored. Never raises: a failure is logged and reported."""

from __future__ import annotations

import logging
from typing import Any

from watchdog.adapters.kube import KubeError
from watchdog.controller.ports import Clock, KubeApi
from watchdog.core.ledger import Entry, add, parse, render
from watchdog.core.model import COMPONENT

log = logging.getLogger("watchdog.controller.ledger")


class DeletionLedger:
    """``namespace``/``name``: where the ConfigMap lives; ``window_s``: the deletion budget window."""

    def __init__(self, kube: KubeApi, namespace: str, name: str, window_s: float, wall_clock: Clock) -> None:
        self.kube, self.namespace, self.name = kube, namespace, name
        self.window_s, self.wall_clock = window_s, wall_clock

    @property
    def ref(self) -> str:
        return f"configmap {self.namespace}/{self.name}"

    def read(self) -> list[Entry] | None:
        """The entries, or None when the ledger cannot be used (missing, unreadable, corrupt): fall back."""
        try:
            obj = self.kube.get_config_map(self.namespace, self.name)
        except KubeError as exc:
            log.warning("cannot read the deletion ledger %s (%s): falling back to own Events", self.ref, exc)
            return None
        if obj is None:
            log.info("no deletion ledger %s yet: reading own Events instead", self.ref)
            return None
        entries, problem = parse(obj.get("data"))
        if problem is not None:
            log.warning("deletion ledger %s is unusable (%s): falling back to own Events", self.ref, problem)
            return None
        return entries

    def record(self, namespace: str, pod: str, uid: str) -> bool:
        """Add one deletion; True when it was written."""
        entry = Entry(self.wall_clock(), namespace, pod, uid)
        for attempt in (1, 2):
            try:
                if self._write(entry):
                    return True
            except KubeError as exc:
                if exc.status != 409 or attempt == 2:
                    log.warning("could not record the deletion of %s/%s in %s (%s): a restart would read the "
                                "budget from Events", namespace, pod, self.ref, exc)
                    return False
        return False

    def _write(self, entry: Entry) -> bool:
        obj = self.kube.get_config_map(self.namespace, self.name)
        if obj is None:
            body = self._body(render(add([], entry, wall_now=entry.t, window_s=self.window_s)))
            self.kube.create_config_map(self.namespace, body)
            return True
        entries, _problem = parse(obj.get("data"))  # a corrupt ledger is rewritten from scratch
        data = render(add(entries, entry, wall_now=entry.t, window_s=self.window_s))
        body = self._body(data, str((obj.get("metadata") or {}).get("resourceVersion") or ""))
        self.kube.replace_config_map(self.namespace, self.name, body)
        return True

    def _body(self, data: dict[str, str], resource_version: str = "") -> dict[str, Any]:
        meta: dict[str, Any] = {"name": self.name, "namespace": self.namespace,
                                "labels": {"app.kubernetes.io/managed-by": COMPONENT}}
        if resource_version:
            meta["resourceVersion"] = resource_version
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}

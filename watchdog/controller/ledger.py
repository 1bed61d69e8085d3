"""The deletion ledger's I/O (see :mod:`watchdog.core.ledger`; docs/safety.md "Deletion budgets" for what it
holds and why): one ConfigMap in the watchdog's own namespace, written AHEAD of every removal
(:meth:`DeletionLedger.intend`; when a record is withdrawn: :meth:`~watchdog.controller.actuator.Actuator.remove`)
and read back with one GET when the budget must be restored. Every write is read-modify-write guarded by
``resourceVersion`` (one retry on a conflict) through the actuator (the leadership fence); entries are stamped on
the API server's clock (:func:`server_clock`). Never raises: a failure is logged and reported."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from watchdog.adapters.kube import Fenced, KubeError
from watchdog.controller.actuator import Actuator
from watchdog.controller.ports import Clock, KubeApi
from watchdog.core.ledger import LedgerEntry, LedgerFull, add, parse, render, without
from watchdog.core.model import COMPONENT

log = logging.getLogger("watchdog.controller.ledger")


def server_clock(kube: KubeApi, wall_clock: Clock) -> Clock:
    """The API server's clock (Unix seconds) as ``kube`` last saw it, ``wall_clock`` before any dated answer."""
    def now() -> float:
        server = kube.server_time()
        return wall_clock() if server is None else server
    return now


class DeletionLedger:
    """``namespace``/``name``: where the ConfigMap lives; ``window_s``: the deletion budget window; ``clock``: Unix
    seconds on the API server's clock (:func:`server_clock`)."""

    def __init__(self, kube: KubeApi, actuator: Actuator, namespace: str, name: str, window_s: float,
                 clock: Clock) -> None:
        self.kube, self.actuator, self.namespace, self.name = kube, actuator, namespace, name
        self.window_s, self.clock = window_s, clock

    @property
    def sent_within_s(self) -> float:
        """How long after its stamp an entry's removal may still be applied: two of the actuator's requests (this
        ledger's PUT, then the DELETE or eviction). An entry counts, and is kept, that much past the window."""
        return 2 * self.actuator.write_timeout_s

    @property
    def ref(self) -> str:
        return f"configmap {self.namespace}/{self.name}"

    def read(self) -> list[LedgerEntry] | None:
        """The entries ([] when the ConfigMap does not exist yet: every removal is recorded here before it is
        sent, so none happened), or None when it cannot be used (unreadable, corrupt): the budget stays unknown."""
        try:
            obj = self.kube.get_config_map(self.namespace, self.name)
        except KubeError as exc:
            log.warning("cannot read the deletion ledger %s (%s): deletions wait until it can be read", self.ref, exc)
            return None
        entries, problem = parse((obj or {}).get("data"))  # no ConfigMap: no entries
        if problem is not None:
            log.error("deletion ledger %s is unusable (%s): deletions wait until it is fixed or deleted (RUNBOOK "
                      "section 4, rule budget_unknown)", self.ref, problem)
            return None
        return entries

    def intend(self, namespace: str, pod: str, uid: str) -> bool:
        """Record a removal about to be sent; True when written (only then may it be sent). Stamped after the
        ledger's GET, on the server's clock of that answer."""
        def change(entries: list[LedgerEntry]) -> list[LedgerEntry]:
            entry = LedgerEntry(self.clock(), namespace, pod, uid)
            return add(entries, entry, wall_now=entry.t, window_s=self.window_s + self.sent_within_s)
        return self._update(f"record the removal of {namespace}/{pod} in", change)

    def withdraw(self, uid: str) -> bool:
        """Drop the intent for pod ``uid``: the API answered that its removal was not applied. A failure leaves
        the intent counting (fail closed)."""
        return self._update(f"withdraw pod uid {uid} from", lambda entries: without(entries, uid))

    def _update(self, what: str, change: Callable[[list[LedgerEntry]], list[LedgerEntry]]) -> bool:
        for attempt in (1, 2):
            try:
                self._write(change)
                return True
            except Fenced as exc:
                log.warning("could not %s %s: %s", what, self.ref, exc)
                return False
            except LedgerFull as exc:  # only with entries the budget never allowed (a clock ahead, another writer)
                log.error("could not %s %s: %s; the removal is not sent", what, self.ref, exc)
                return False
            except KubeError as exc:
                if exc.status != 409 or attempt == 2:
                    log.warning("could not %s %s (%s)", what, self.ref, exc)
                    return False
        return False

    def _write(self, change: Callable[[list[LedgerEntry]], list[LedgerEntry]]) -> None:
        obj = self.kube.get_config_map(self.namespace, self.name) or {}  # none yet: created (no resourceVersion)
        entries, problem = parse(obj.get("data"))
        if problem is not None:  # never overwrite what cannot be read: the budget it held would be lost
            raise KubeError(f"update {self.ref}", 0, "unusable", problem)
        body = self._body(render(change(entries)), str((obj.get("metadata") or {}).get("resourceVersion") or ""))
        self.actuator.save_config_map(self.namespace, body)

    def _body(self, data: dict[str, str], resource_version: str) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": self.name, "namespace": self.namespace,
                                "labels": {"app.kubernetes.io/managed-by": COMPONENT}}
        if resource_version:
            meta["resourceVersion"] = resource_version
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}

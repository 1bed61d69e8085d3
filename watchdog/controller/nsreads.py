"""Namespace-only mode (``watchNamespaces``): the pods of each watched namespace are read on their own, so a
namespace whose pods cannot be listed is that namespace's problem alone (issue 36 item 3).

Each cycle the pods of every watched namespace that is opted in (the Namespace exists and carries the opt-in label)
are listed namespace by namespace (:func:`list_by_namespace`). A namespace whose list fails -- RBAC's 403 after its
RoleBinding was deleted, its cache not synced or stale, 404 -- is **unreadable**: its pods are unknown, none of them
is judged or acted on, and the others are judged as ever. :class:`NamespaceReads` remembers since when and why: one
log line when it turns unreadable and one when it is read again, ``vllm_watchdog_namespace_unreadable{namespace}``
(1 while unreadable, 0 while read, no series for a namespace not watched) and ``/status``. A watched namespace that is
deleted or opts out is not listed at all (the cache stops its informers): told once, not an error every cycle.

Refused credentials are the watchdog's own (every request 401/403: :mod:`watchdog.adapters.kubeauth`), never one
namespace's 403 (the cache does not tell those). Only when EVERY watched, opted-in namespace is unreadable does
:meth:`NamespaceReads.everywhere` name it for ``/readyz``: then nothing at all is judged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from watchdog.adapters.kube import KubeError
from watchdog.adapters.logs import facts
from watchdog.adapters.metrics import Metrics
from watchdog.controller.ports import Clock
from watchdog.core.model import Target

log = logging.getLogger("watchdog.controller.cycle")

#: Lists the pods of one namespace matching a selector: ``lister.list_pods(selector, (namespace,))``.
ListPods = Callable[[str, tuple[str, ...]], list[dict[str, Any]]]


@dataclass(frozen=True)
class Unreadable:
    """Why a namespace's pods could not be listed: the one line, the HTTP status (0: none, e.g. not synced yet)
    and since when (monotonic)."""

    why: str
    status: int
    since: float


def list_by_namespace(list_pods: ListPods, targets: Sequence[Target], namespaces: Sequence[str],
                      ) -> tuple[list[tuple[Target, list[dict[str, Any]]]], dict[str, KubeError]]:
    """Every target's pods of ``namespaces``, listed namespace by namespace; a namespace whose list failed for any
    target is left out for every target (its pods unknown), with the failure."""
    failed: dict[str, KubeError] = {}
    listed: list[tuple[Target, dict[str, list[dict[str, Any]]]]] = []
    for target in targets:
        by_namespace: dict[str, list[dict[str, Any]]] = {}
        for namespace in namespaces:
            if namespace in failed:
                continue
            try:
                by_namespace[namespace] = list_pods(target.pod_selector, (namespace,))
            except KubeError as exc:
                failed[namespace] = exc
        listed.append((target, by_namespace))
    return [(target, [pod for ns, pods in by_ns.items() if ns not in failed for pod in pods])
            for target, by_ns in listed], failed


class NamespaceReads:
    """Which watched namespaces' pods could not be listed in the last cycle, since when and why (see the module
    docstring); ``unreadable`` is replaced whole each cycle (the snapshot keeps the mapping it was given)."""

    def __init__(self, watched: Sequence[str], metrics: Metrics, clock: Clock) -> None:
        self.watched, self.metrics, self.clock = tuple(watched), metrics, clock
        self.present = self.watched  # watched namespaces opted in at the last cycle (at first: all expected)
        self.unreadable: Mapping[str, Unreadable] = {}

    def opted_in(self, listed: Collection[str]) -> tuple[str, ...]:
        """The watched namespaces that are opted in now (``listed``: the names of the namespaces carrying the opt-in
        label); one log line for each that stopped being so (deleted or opted out: its pods are not watched) or
        became so."""
        present = tuple(ns for ns in self.watched if ns in listed)
        for namespace in sorted(set(self.present) - set(present)):
            log.info("namespace %s (watchNamespaces) is gone or not opted in any more: its pods are not watched",
                     namespace, extra=facts(namespace=namespace, reason="namespace_gone"))
        for namespace in sorted(set(present) - set(self.present)):
            log.info("namespace %s (watchNamespaces) is opted in: its pods are watched", namespace,
                     extra=facts(namespace=namespace, reason="namespace_watched"))
        self.present = present
        return present

    def cycle(self, failed: Mapping[str, KubeError]) -> None:
        """This cycle's failed lists (among :attr:`present`): logged when a namespace turns unreadable or is read
        again, published, kept for /status."""
        now, before = self.clock(), self.unreadable
        unreadable: dict[str, Unreadable] = {}
        for namespace, exc in failed.items():
            was = before.get(namespace)
            unreadable[namespace] = Unreadable(str(exc), exc.status, was.since if was else now)
            if was is None:
                log.error("namespace %s: its pods cannot be listed, so they are unknown (none is judged or acted "
                          "on; every other namespace is): %s", namespace, exc,
                          extra=facts(namespace=namespace, reason="namespace_unreadable"))
        for namespace in sorted(set(before) - set(unreadable)):
            if namespace in self.present:
                log.info("namespace %s: its pods are listed again after %.0f s", namespace,
                         now - before[namespace].since, extra=facts(namespace=namespace, reason="namespace_readable"))
        self.unreadable = unreadable
        self.metrics.namespaces_unreadable({ns: ns in unreadable for ns in self.present})

    def everywhere(self) -> str | None:
        """One line when every watched, opted-in namespace is unreadable (nothing is judged at all), else None."""
        if not self.present or set(self.present) - set(self.unreadable):
            return None
        first = self.unreadable[self.present[0]]
        return (f"the pods of every watched namespace ({', '.join(self.present)}) cannot be listed, so nothing is "
                f"judged; first: {first.why}")[:500]

"""Wiring, in one place: from the settings and a Kubernetes client to the watchdog and its collaborators — the
Lease campaign (leader election), node escalation, the deletion ledger, the run-time brake — each built only when
its setting is on.
The service loop (:mod:`watchdog.controller.service`) runs what this returns; tests build the same objects
with fakes."""

from __future__ import annotations

import logging

from watchdog.adapters.actuator import Actuator, unfenced
from watchdog.adapters.kube import KubeClient
from watchdog.adapters.leader import LeaderElector
from watchdog.adapters.nodes import NodeEscalator
from watchdog.adapters.podcache import PodCache
from watchdog.config.settings import Settings
from watchdog.controller.brake import Brake
from watchdog.controller.cycle import Watchdog
from watchdog.core.escalation import NodeStallHistory
from watchdog.core.policy import PAUSE_ANNOTATION

log = logging.getLogger("watchdog.controller.service")


def wire(config: Settings, kube: KubeClient, pod_namespace: str | None, *,
         cache: bool = False) -> tuple[Watchdog, LeaderElector | None]:
    """The watchdog for ``config`` and its Lease campaign (None without leader election). ``pod_namespace``:
    the watchdog's own namespace ($POD_NAMESPACE from the downward API; "default" when unset). ``cache``:
    namespaces and pods from the watch-based cache (``run``; its informers start here), else LISTed every
    cycle (``run --once``, tests)."""
    elector = _elector(config, kube, pod_namespace)
    # The one door for every write, behind the leadership fence (the Lease must outlast each write).
    actuator = Actuator(kube, fence=elector.holds_for if elector else unfenced,
                        write_timeout_s=config.api_timeout_seconds)
    escalation = None
    if config.node_escalation:
        escalation = NodeEscalator(kube, actuator, NodeStallHistory(config.node_escalation_threshold,
                                                          config.node_escalation_window_seconds),
                                   taint=config.node_taint, dry_run=config.dry_run)
    brake = None
    if config.pause_config_map is not None:
        brake = Brake(kube, pod_namespace or "default", config.pause_config_map)
        log.info("run-time brake: annotation %s on %s, read every cycle", PAUSE_ANNOTATION, brake.ref)
    prometheus = [t.name for t in config.targets if config.source_of(t) == "prometheus"]
    if prometheus:
        log.info("source prometheus for targets %s: %s", ", ".join(prometheus), config.prometheus_url)
    listing = PodCache(kube, first_sync_wait_s=config.api_timeout_seconds) if cache else None
    watchdog = Watchdog(config, kube, leader=elector.is_leader if elector else lambda: True,
                        actuator=actuator, escalation=escalation,
                        own_namespace=pod_namespace or "default", brake=brake, listing=listing)
    if watchdog.ledger is not None:
        log.info("deletion ledger: %s", watchdog.ledger.ref)
    if listing is not None:
        listing.watch("namespaces", watchdog.namespace_selector)
        for target in config.targets:
            listing.watch("pods", target.pod_selector)
        log.info("namespaces and pods: LIST once, then WATCH (the cache; %d informers)", len(listing.informers))
    return watchdog, elector


def _elector(config: Settings, kube: KubeClient, pod_namespace: str | None) -> LeaderElector | None:
    """The Lease campaign when leader election is on (Lease in leaderElectionNamespace, $POD_NAMESPACE or
    default), with client-go's timings: 15 s lease, 10 s renew deadline, 2 s retry."""
    if not config.leader_election:
        return None
    namespace = config.leader_election_namespace or pod_namespace or "default"
    elector = LeaderElector(kube, namespace, name=config.lease_name)
    log.info("leader election on: Lease %s/%s as %s", namespace, config.lease_name, elector.identity)
    return elector

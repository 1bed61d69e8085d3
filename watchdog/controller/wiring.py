"""The composition root: from the settings and a Kubernetes client to the watchdog and every collaborator — the
actuator, the sources and their clients (the bounded scraper, Prometheus), the policy, the remediator, the Event
recorder, the evidence keeper, the deletion ledger, the readiness gate, the Lease campaign (leader election), node
escalation, the run-time brake — each built only when its setting is on. No other module constructs an adapter
(tests/controller/test_composition.py checks it).
The service loop (:mod:`watchdog.controller.service`) runs what :func:`wire` returns; tests call :func:`build`
with their fakes (a scraper, a Prometheus client, clocks, a leader) in place of the real ones."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from watchdog.adapters.ascrape import AsyncScraper
from watchdog.adapters.events import EventRecorder
from watchdog.adapters.kube import KubeClient
from watchdog.adapters.leader import LeaderElector
from watchdog.adapters.metrics import Metrics, new_metrics
from watchdog.adapters.podcache import PodCache
from watchdog.adapters.prometheus import PrometheusClient, PrometheusLimits
from watchdog.adapters.scrape_errors import ScrapeLimits
from watchdog.config.settings import BY_NAME, Settings
from watchdog.controller.actuator import Actuator, unfenced
from watchdog.controller.brake import Brake
from watchdog.controller.confirmations import Confirmations
from watchdog.controller.cycle import Watchdog, rails_from
from watchdog.controller.evidence import EvidenceKeeper
from watchdog.controller.fanout import Fanout
from watchdog.controller.ledger import DeletionLedger, server_clock
from watchdog.controller.nodes import NodeEscalator
from watchdog.controller.ports import AsyncFetcher, Clock, Cluster, Escalation, Listing, Querier, Source
from watchdog.controller.promsource import PrometheusSource
from watchdog.controller.quarantine import Quarantine
from watchdog.controller.remediator import Remediator
from watchdog.controller.scrapes import ScrapeSource
from watchdog.core.escalation import NodeStallHistory
from watchdog.core.policy import PAUSE_ANNOTATION, DeletionPolicy
from watchdog.core.profiles import Profile, target_profile
from watchdog.core.promql import matchers
from watchdog.core.quarantine import QuarantineRails

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
    watchdog = build(config, kube, leader=elector.term if elector else lambda: True,
                     actuator=actuator, escalation=escalation,
                     own_namespace=pod_namespace or "default", brake=brake, listing=listing)
    if watchdog.ledger is not None:
        log.info("deletion ledger: %s", watchdog.ledger.ref)
    if config.namespaces_watched is not None:
        log.info("namespace-only mode: pods of %s only", ", ".join(config.namespaces_watched))
    if listing is not None:
        listing.watch("namespaces", watchdog.namespace_selector)
        for target in config.targets:
            for namespace in config.namespaces_watched or (None,):
                listing.watch("pods", target.pod_selector, namespace)
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


def build(config: Settings, kube: Cluster, *, metrics: Metrics | None = None, scraper: AsyncFetcher | None = None,
          prometheus: Querier | None = None, clock: Clock = time.monotonic, wall_clock: Clock = time.time,
          leader: Callable[[], int] = lambda: True, actuator: Actuator | None = None,
          escalation: Escalation | None = None, own_namespace: str = "default", brake: Brake | None = None,
          listing: Listing | None = None) -> Watchdog:
    """The watchdog of ``config`` on ``kube`` and every collaborator it holds. What is not given is built from the
    settings: ``scraper`` the bounded scraper, ``prometheus`` the Prometheus client (when a target reads from it),
    ``actuator`` an unfenced one (no leader election), ``metrics`` a fresh registry. ``leader``: this replica's
    leadership term while it holds the Lease, 0 (or False) while not (:meth:`LeaderElector.term`; True: always
    leading, one term)."""
    metrics = metrics or new_metrics()
    actuator = actuator or Actuator(kube, write_timeout_s=config.api_timeout_seconds)
    policy = DeletionPolicy(rails_from(config), started=clock(), budget_known=False)
    # The deletion ledger (budgetLedger): ConfigMap <leaseName>-ledger in the watchdog's own namespace, on the API
    # server's clock.
    ledger = DeletionLedger(kube, actuator, own_namespace, f"{config.lease_name}-ledger",
                            config.deletion_window_seconds, server_clock(kube, wall_clock),
                            ) if config.budget_ledger else None
    actuator.ledger = ledger  # every removal is recorded there ahead of it
    events = EventRecorder(kube, actuator, metrics, clock=clock)
    evidence = EvidenceKeeper(actuator, log_lines=config.evidence_log_lines, log_bytes=config.evidence_log_bytes,
                              clock=clock, wall_clock=wall_clock)
    profiles = {t.name: target_profile(t.name, t.profile, t.metrics) for t in config.targets}
    fanout = Fanout(config.workers, config.scrape_deadline_seconds)  # workers 0: sized by the fleet
    sources = _sources(config, profiles, metrics, fanout, scraper, prometheus, clock, wall_clock)
    confirmations = Confirmations(sources, metrics, clock, budget_s=config.scrape_deadline_seconds)
    remediator = Remediator(
        kube, policy, confirmations, metrics, actuator=actuator, events=events, evidence=evidence,
        grace_period_s=config.grace_period_seconds, require_controller=config.require_controller, clock=clock,
        wall_clock=wall_clock, escalation=escalation)
    quarantine = Quarantine(actuator, metrics, events, QuarantineRails(
        config.quarantine_after_seconds, config.quarantine_max_owner_fraction, config.quarantine_in_dry_run,
        config.dry_run), enabled=config.quarantine, clock=clock, wall_clock=wall_clock)
    return Watchdog(config, kube, metrics=metrics, policy=policy, remediator=remediator, quarantine=quarantine,
                    sources=sources, profiles=profiles, fanout=fanout, clock=clock, wall_clock=wall_clock,
                    leader=leader, confirmations=confirmations, ledger=ledger, brake=brake, listing=listing)


def _sources(config: Settings, profiles: dict[str, Profile], metrics: Metrics, fanout: Fanout,
             scraper: AsyncFetcher | None, prometheus: Querier | None, clock: Clock, wall_clock: Clock,
             ) -> dict[str, Source]:
    """Target name -> the source its pods are read from (``source``, per target): one of each kind in use."""
    scrape = ScrapeSource(scraper or AsyncScraper(ScrapeLimits(
        connect_timeout_s=config.connect_timeout_seconds, deadline_s=config.scrape_deadline_seconds,
        max_bytes=config.max_body_bytes), encoding=config.scrape_encoding), fanout, profiles, metrics, clock)
    built: dict[str, Source] = {"scrape": scrape}
    if any(config.source_of(t) == "prometheus" for t in config.targets):
        built["prometheus"] = PrometheusSource(
            prometheus or PrometheusClient(prometheus_limits(config)), config.prometheus_staleness_seconds,
            config.prometheus_namespace_label, config.prometheus_pod_label, config.prometheus_timeout_seconds,
            profiles=profiles, wall_clock=wall_clock, offset=wall_clock() - clock(),
            where=f"prometheus ({config.prometheus_url})", instance_check=config.prometheus_instance_check,
            extra=matchers(config.prometheus_extra_matchers), confirm_with=scrape.confirm)
    return {t.name: built[config.source_of(t)] for t in config.targets}


def one_scraper(limits: ScrapeLimits) -> AsyncScraper:
    """The bounded scraper alone (``check``): the cycle's transport, called synchronously; ``close()`` it."""
    return AsyncScraper(limits, encoding=BY_NAME["scrape_encoding"].default)


def one_pod_source(limits: PrometheusLimits, staleness_s: float, namespace_label: str,
                   pod_label: str) -> PrometheusSource:
    """The Prometheus source alone (``check --prometheus``), its queries bounded together by ``limits.timeout_s``;
    raises ValueError (one line) on a bad URL, credentials or tenant."""
    return PrometheusSource(PrometheusClient(limits), staleness_s, namespace_label, pod_label, limits.timeout_s)


def prometheus_limits(config: Settings) -> PrometheusLimits:
    """The bounds of the Prometheus client of ``config`` (prometheusUrl must be set)."""
    return PrometheusLimits(
        url=str(config.prometheus_url), timeout_s=config.prometheus_timeout_seconds,
        max_bytes=config.prometheus_max_bytes, bearer_token_file=config.prometheus_bearer_token_file,
        ca_file=config.prometheus_ca_file, username_file=config.prometheus_username_file,
        password_file=config.prometheus_password_file, tenant=config.prometheus_tenant)

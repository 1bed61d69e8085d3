"""Every closed vocabulary of the watchdog, typed once. Pure.

Each is a ``Literal`` (what mypy checks) and a tuple derived from it (what metrics pre-create as label values
and what tests iterate), so a word added here reaches the detector, the remediator, the metrics and the docs
checks together.
"""

from __future__ import annotations

from typing import Literal, get_args

#: The detector's verdict on one engine series (watchdog.core.detector).
EngineState = Literal["idle", "paused", "progressing", "suspect", "stalled", "unknown"]
#: How one scrape ended (watchdog.adapters.scrape); "ok" or a ScrapeError reason. Source prometheus
#: (watchdog.controller.promsource): "ok", "prometheus_unknown" (no fresh series for the pod, or its target's
#: up == 0) or "prometheus_error" (a query failed: every Prometheus pod is unknown that cycle).
ScrapeOutcome = Literal["ok", "timeout", "refused", "http_status", "too_large", "bad_encoding", "parse",
                        "connection", "prometheus_unknown", "prometheus_error"]
#: What one remediation did (watchdog.controller.remediator). "skip" is internal and never counted.
RemediationResult = Literal["deleted", "evicted", "dry_run", "deferred", "not_found", "conflict", "aborted",
                            "error", "skip"]
#: The rule that deferred a deletion (watchdog.core.policy and the remediator).
DeferralRule = Literal["paused", "not_leader", "warm_up", "min_age", "breaker", "namespace_breaker", "budget",
                       "namespace_budget", "owner", "budget_unknown", "pdb", "ledger"]
#: The rule a decision names: a deferral's, or episode (acted on already), retry, dry_run, enforce (every rail allows).
DecisionRule = Literal[DeferralRule, "episode", "retry", "dry_run", "enforce"]
#: What the deletion policy decides for one stall.
DecisionAction = Literal["delete", "retry", "dry_run", "defer", "skip"]
#: A watched namespace's mode, from its opt-in label.
NamespaceMode = Literal["enforce", "dry-run"]
#: How a stalled pod is removed (setting ``action``).
RemovalAction = Literal["delete", "evict"]
#: What one pod write (a removal, a readiness-gate patch) came to (controller.actuator.Applied): done; not applied
#: (the pod gone, replaced, a PDB, refused, the fence, the ledger not written: unrecorded); or lost (may be applied).
WriteOutcome = Literal["done", "not_found", "conflict", "blocked", "several_pdbs", "refused", "lost", "fenced",
                       "unrecorded"]
#: The setting ``action``: a removal, or ``quarantine`` (drain through the readiness gate only, never remove).
StallAction = Literal["delete", "evict", "quarantine"]
#: Where a pod's stall window came from (watchdog.core.podpolicy): the global setting, its target, its annotation.
WindowSource = Literal["global", "target", "annotation"]
#: A change of the readiness gate condition (watchdog.core.quarantine): first set True, set False, True again.
QuarantineChange = Literal["admitted", "quarantined", "released"]
#: The rule that held a wanted quarantine (drain) back.
QuarantineHold = Literal["dry_run", "paused", "breaker", "namespace_breaker", "owner_share", "last_ready"]

ENGINE_STATES: tuple[EngineState, ...] = get_args(EngineState)
#: The states of a stall episode (the detector's clock runs), and those that end one (unknown does neither).
EPISODE_STATES: frozenset[EngineState] = frozenset({"suspect", "stalled"})
SETTLED_STATES: frozenset[EngineState] = frozenset({"idle", "paused", "progressing"})
SCRAPE_OUTCOMES: tuple[ScrapeOutcome, ...] = get_args(ScrapeOutcome)
SCRAPE_ERRORS: frozenset[ScrapeOutcome] = frozenset(SCRAPE_OUTCOMES) - {"ok", "prometheus_unknown",
                                                                         "prometheus_error"}
REMEDIATION_RESULTS: tuple[RemediationResult, ...] = tuple(r for r in get_args(RemediationResult) if r != "skip")
DEFERRAL_RULES: tuple[DeferralRule, ...] = get_args(DeferralRule)
QUARANTINE_CHANGES: tuple[QuarantineChange, ...] = get_args(QuarantineChange)
QUARANTINE_HOLDS: tuple[QuarantineHold, ...] = get_args(QuarantineHold)

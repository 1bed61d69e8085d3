"""The deletion policy: given a stall, may the watchdog delete now, only report it, or hold off? Pure.

Rules, checked in this order by :meth:`DeletionPolicy.decide`, one ``_<name>_rule`` method each (docs/safety.md
"The order of the decision" says what each holds and why; each one has a test that fails without it):

1. ``episode``: one decision per stall episode and mode (a dry-run announcement does not stand for the deletion
   after a flip to enforce); an episode whose removal's answer was lost, the pod still there, is decided ``retry``
   (sent again, never charged twice) while :attr:`DeletionPolicy._RETRY_HOLDS` allow it;
2. ``not_leader``: a standby decides nothing else (no dry-run announcement, no evidence, no log read);
3. ``dry_run``: the global ``dryRun`` setting or a namespace labelled dry-run: a ``StalledPodDryRun`` Event;
4. the deferrals (retried next cycle), in this order: ``paused``, ``warm_up``, ``min_age``, ``breaker``,
   ``namespace_breaker``, ``budget_unknown``, ``budget``, ``namespace_budget``, ``owner``; each says when it frees;
5. ``pdb``: a PodDisruptionBudget refused this episode's eviction: tried again after a backoff
   (:meth:`DeletionPolicy.refused`), nothing read or written for the stall in between.

The fleet-wide breaker (:meth:`begin_cycle`) trips when more than ``breaker_fraction`` of the voting pods, and at
least ``breaker_min_pods``, look stalled at once **and still would with any one tenant left out**, and closes
``breaker_cooldown_seconds`` after the last cycle that exceeded it; who votes: :func:`votes`, who is one tenant:
:func:`~watchdog.core.discovery.tenant_of` (why: docs/safety.md "Mass-stall breaker", docs/tenancy.md). Each
namespace has its own breaker (same thresholds, every watched pod, dry-run or not, and pods that cannot be judged:
rule ``namespace_breaker``): a tenant can hold back deletions in its own namespaces, never in another's.

All times are seconds on the caller's monotonic clock. State is keyed by pod UID, namespace and owner.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from watchdog.core.detector import window_reached, window_slack
from watchdog.core.model import WatchedPod
from watchdog.core.vocab import DecisionAction, DecisionRule, DeferralRule, WriteOutcome

#: A refused eviction (a PodDisruptionBudget) is tried again after one cycle interval, doubled after each refusal, at
#: most this many intervals.
PDB_BACKOFF_MAX_INTERVALS = 4

#: The run-time brake: ``vllm-watchdog.io/paused: "true"`` on the ConfigMap named by the ``pauseConfigMap``
#: setting (the chart's own config ConfigMap), read every cycle.
PAUSE_ANNOTATION = "vllm-watchdog.io/paused"


@dataclass(frozen=True)
class Decision:
    """``action`` and the ``rule`` that decided it; ``why``: one human phrase for logs and Events. For a deferral,
    when the rule that held it frees (the ONE place Events, the log line and /status read it from): ``frees_in_s``,
    seconds after the decision's ``now`` when time alone frees it, else None; ``frees_when``, the phrase that says
    what frees it (another rail may still hold the stall then: it is decided afresh every cycle)."""

    action: DecisionAction
    rule: DecisionRule
    why: str
    frees_in_s: float | None = None
    frees_when: str = ""


def _defer(rule: DeferralRule, why: str, when: str, in_s: float | None = None) -> Decision:
    """A deferral by ``rule``: why, and when it frees (in ``in_s`` seconds, None: not knowable from time)."""
    return Decision("defer", rule, why, None if in_s is None else max(0.0, in_s), when)


def not_leader(why: str) -> Decision:
    """The deferral of a replica that may not write: rule 2, and the remediator's fence before its writes."""
    return _defer("not_leader", why, "when this replica holds the leader Lease")


def _pdb_deferral(why: str, count: int, wait_s: float) -> Decision:
    """The deferral of an eviction refused ``count`` times in a row (``why``), tried again in ``wait_s`` seconds."""
    times = "" if count == 1 else f" ({count} times in a row)"
    return _defer("pdb", f"{why}{times}; never falling back to delete",
                  "when the Eviction API allows it (tried again after a backoff)", wait_s)


@dataclass(frozen=True)
class Rails:
    """The configurable limits (see docs/safety.md). Each field is named as its setting, so the
    controller fills it from the settings without renaming anything; their defaults are the settings' (one place:
    watchdog/config/settings.py), none here."""

    window_seconds: float
    dry_run: bool
    paused: bool
    max_deletions: int
    max_deletions_per_namespace: int
    deletion_window_seconds: float
    breaker_fraction: float
    breaker_min_pods: int
    breaker_cooldown_seconds: float
    min_pod_age_seconds: float | None  # None: the window
    scrape_interval_seconds: float  # a refused eviction's backoff is counted in these


@dataclass(frozen=True)
class CycleFacts:
    """What a cycle reads once, before it acts, for everything it decides: ``leader``, whether this replica holds
    the Lease (read in ONE place, the cycle: a Lease won mid-cycle acts from the next one, after the deletion ledger
    was read back; one lost mid-cycle is held back by the actuator's fence)."""

    leader: bool


@dataclass(frozen=True)
class _Stall:
    """What :meth:`DeletionPolicy.decide` is asked about: its arguments, for its rules."""

    uid: str
    series: str
    namespace: str
    namespace_mode: str
    owner: str | None
    pod_age_s: float | None
    now: float
    leader: bool


#: (uid, series) -> (how it was acted on, the rules that deferred it, what holds it now or None): :meth:`episodes`.
Episodes = Callable[[str, str], tuple[str | None, list[str], dict[str, Any] | None]]


@dataclass
class _Episode:
    """What is kept of one stall episode of one engine series, ended and forgotten together: how it was ``acted``
    on ("dry_run": announced, "delete", "retry": charged, its answer lost, the pod still there), the rules that
    ``deferred`` it (announced once each), the deferral that ``held`` it as of its last decision (rule, frees at
    (monotonic) or None, when), its eviction's ``refused`` backoff (refusals in a row, tried again at, why) and its
    ``evidence`` record id."""

    acted: str | None = None
    deferred: set[str] = field(default_factory=set)
    held: tuple[str, float | None, str] | None = None
    refused: tuple[int, float, str] | None = None
    evidence: str | None = None


@dataclass(frozen=True)
class CycleStatus:
    """What :meth:`DeletionPolicy.begin_cycle` found: ``breaker_tripped`` (it opened in this very cycle) and
    ``breaker_open`` (it is open now)."""

    breaker_tripped: bool
    breaker_open: bool
    namespaces_tripped: tuple[str, ...] = ()  # namespace breakers that opened in this very cycle


class DeletionPolicy:
    """Decisions plus the few facts they need across cycles. ``started``: monotonic start time; ``budget_known``
    False: deletions are deferred until the first :meth:`restore` (fail closed). Its state changes only through its
    methods (but :attr:`unsettled`, which the remediator drops for a pod still there that is no longer watched).
    """

    def __init__(self, rails: Rails, started: float = 0.0, *, budget_known: bool = True) -> None:
        self.rails = rails
        self.started = started
        self._episodes: dict[tuple[str, str], _Episode] = {}  # (pod UID, engine series) -> its stall episode
        # (uid, series) -> what to report once its removal whose answer was lost is seen to happen (settle): kept
        # until resolved, the episode ends or the pod, still there, is no longer watched
        self.unsettled: dict[tuple[str, str], Any] = {}
        self._announced: dict[str, dict[str, str]] = {}  # pod UID -> Event key -> the series whose episode wrote it
        self._deletions: deque[tuple[float, str, str]] = deque()  # (t, namespace, pod UID), oldest first
        self._blind_until: float | None = None  # no ledger: earlier removals unknown until then
        self._blocked_owners: dict[str, float] = {}  # owner key -> when it lost a pod
        self._first_sync: float | None = None
        self._breaker_until: float | None = None
        self._namespace_breakers: dict[str, float] = {}  # namespace -> open until (monotonic)
        self._budget_known = budget_known
        self._brake: str | None = None  # why the run-time brake holds, None while it is off
        self._trips: dict[str, str] = {}  # "" (fleet) or namespace -> what the breaker saw when it last tripped

    @property
    def paused_by(self) -> str | None:
        """Why deletions are paused (the ``paused`` setting or the run-time brake), None when they are not."""
        return "paused: true" if self.rails.paused else self._brake

    def set_brake(self, why: str | None) -> None:
        """The run-time brake, as the controller last knew it: ``why`` it holds (names the annotation and the
        ConfigMap), or None when it is off."""
        self._brake = why

    @property
    def budget_known(self) -> bool:
        """False until earlier deletions were restored (after a restart or a leadership change)."""
        return self._budget_known

    # -- per-cycle inputs ------------------------------------------------------------------------------------
    def begin_cycle(self, now: float, *, watched: int, bad: int,
                    namespaces: Mapping[str, tuple[int, int]] | None = None,
                    spread: Mapping[str, tuple[int, int]] | None = None,
                    listed_at: float | None = None) -> CycleStatus:
        """Call once per cycle after a successful pod listing (at ``listed_at``; None: ``now``): ``watched`` voting
        pods (:func:`votes`), ``bad`` of them with a stalled engine (the fleet-wide breaker); ``spread``: the same two
        counts per tenant (None: the fleet judged as one whole, for callers that know no tenants); ``namespaces``:
        namespace -> (watched, bad) over every watched pod, bad counting the pods that could not be judged too (each
        namespace's own breaker)."""
        if self._first_sync is None:
            self._first_sync = now if listed_at is None else listed_at
        was_open = self.breaker_open(now)
        fleet_over = self._fleet_over(watched, bad, spread)
        if fleet_over:
            self._breaker_until = now + self.rails.breaker_cooldown_seconds
            spread_in = "" if spread is None else (f", in {sum(1 for _, s in spread.values() if s)} tenants "
                                                   "(over the thresholds with any one of them left out)")
            self._trips[""] = f"{bad} of {watched} enforced pods looked stalled{spread_in}"
        tripped = []
        self._namespace_breakers = {ns: t for ns, t in self._namespace_breakers.items() if now < t}
        for namespace, (ns_watched, ns_bad) in (namespaces or {}).items():
            if self._over(ns_watched, ns_bad):
                if namespace not in self._namespace_breakers:
                    tripped.append(namespace)
                self._namespace_breakers[namespace] = now + self.rails.breaker_cooldown_seconds
                self._trips[namespace] = f"{ns_bad} of its {ns_watched} watched pods looked stalled or unknown"
        self._trips = {k: v for k, v in self._trips.items() if k in self._namespace_breakers or k == ""}
        return CycleStatus(breaker_tripped=fleet_over and not was_open,
                           breaker_open=self.breaker_open(now), namespaces_tripped=tuple(sorted(tripped)))

    def _over(self, watched: int, bad: int) -> bool:
        r = self.rails
        return bad >= r.breaker_min_pods and watched > 0 and bad / watched > r.breaker_fraction

    def _fleet_over(self, watched: int, bad: int, spread: Mapping[str, tuple[int, int]] | None) -> bool:
        """The fleet-wide breaker's thresholds, met by the voting pods and by them without any one tenant that has a
        stalled pod (its (voting, stalled) taken away): no single tenant can open it (docs/safety.md says why)."""
        if not self._over(watched, bad):
            return False
        if spread is None:
            return True
        stalled_in = [(t_watched, t_bad) for t_watched, t_bad in spread.values() if t_bad > 0]
        return bool(stalled_in) and all(self._over(watched - w, bad - b) for w, b in stalled_in)

    def breaker_open(self, now: float) -> bool:
        return self._breaker_until is not None and now < self._breaker_until

    def namespace_breaker_open(self, namespace: str, now: float) -> bool:
        return now < self._namespace_breakers.get(namespace, now)

    def owner_ready(self, owner: str, first_seen: float) -> None:
        """A pod of ``owner``, first seen at ``first_seen``, is Ready. If it appeared after the owner lost a pod it
        is the replacement, and the owner may be acted on again (a sibling that was there before does not count)."""
        lost_at = self._blocked_owners.get(owner)
        if lost_at is not None and first_seen > lost_at:
            del self._blocked_owners[owner]

    # -- the decision -------------------------------------------------------------------------------------------
    def decide(self, *, uid: str, series: str, namespace: str, namespace_mode: str, owner: str | None,
               pod_age_s: float | None, now: float, leader: bool = True) -> Decision:
        """Decide for a stalled engine ``series`` of pod ``uid``. ``pod_age_s``: seconds since the pod was
        created (None: unknown, treated as too young). ``leader``: this replica holds the lease. The first of
        :attr:`_RULES` that decides (the module docstring's numbered rules, in order) decides; else delete."""
        stall = _Stall(uid, series, namespace, namespace_mode, owner, pod_age_s, now, leader)
        self._episode(uid, series).held = None  # what holds it now is this decision's (:meth:`held`)
        for rule in self._RULES:
            decision = rule(self, stall)
            if decision is not None:
                return decision
        return Decision("delete", "enforce", "namespace is enforced and every rail allows it")

    def _episode_rule(self, s: _Stall) -> Decision | None:
        """1. One decision per episode and mode: a dry-run announcement does not stand for the deletion once the
        operator flips the namespace (or the global setting) to enforce; a lost answer is sent again."""
        acted = self._episode(s.uid, s.series).acted
        observing = self.rails.dry_run or s.namespace_mode != "enforce"
        if acted == "delete" or (acted == "dry_run" and observing):
            return Decision("skip", "episode", "already acted on this stall episode")
        if acted == "retry":  # sent again only while every rail that is not a budget allows it
            for rule in self._RETRY_HOLDS:
                held = rule(self, s)
                if held is not None:
                    return held
            return Decision("retry", "retry", "the answer to this pod's removal was lost and the pod is still "
                                              "there: sent again (same UID precondition, charged from this send)")
        return None

    def _leader_rule(self, s: _Stall) -> Decision | None:
        """2. Not the leader: before dry-run, a standby announces nothing, keeps no evidence, reads no log."""
        if not s.leader:
            return not_leader("this replica does not hold the leader Lease")
        return None

    def _dry_run_rule(self, s: _Stall) -> Decision | None:
        """3. Dry-run: the global setting, or the namespace's label."""
        if self.rails.dry_run:
            return Decision("dry_run", "dry_run", "global dryRun is on")
        if s.namespace_mode != "enforce":
            return Decision("dry_run", "dry_run", "namespace is labelled dry-run")
        return None

    def _pause_rule(self, s: _Stall) -> Decision | None:
        """4. Deferred: the global pause (the setting or the run-time brake)."""
        if self.paused_by is not None:
            when = "when paused is set back to false" if self.rails.paused else "when the brake is released"
            return _defer("paused", f"the watchdog is paused ({self.paused_by})", when)
        return None

    def _warm_up_rule(self, s: _Stall) -> Decision | None:
        """4. Deferred: warm-up, a full window since start and since the first pod listing."""
        window = self.rails.window_seconds
        if self._first_sync is None or not window_reached(s.now - max(self.started, self._first_sync), window):
            why = (f"warming up: no deletion before a full {window:g} s window since start and since the first pod "
                   "listing")
            if self._first_sync is None:
                return _defer("warm_up", why, f"a full {window:g} s window after the first pod listing")
            ends = max(self.started, self._first_sync) + window - window_slack(window)
            return _defer("warm_up", why, "when the warm-up ends", ends - s.now)
        return None

    def _min_age_rule(self, s: _Stall) -> Decision | None:
        """4. Deferred: the pod is younger than the minimum age (by default the window, with the detector's slack;
        an explicit minimum is exact)."""
        explicit = self.rails.min_pod_age_seconds
        min_age = self.rails.window_seconds if explicit is None else explicit
        age = s.pod_age_s
        old_enough = age is not None and (window_reached(age, min_age) if explicit is None else age >= min_age)
        if not old_enough:
            shown = "unknown" if age is None else f"{age:.0f} s"
            why = f"pod age {shown} is below the minimum {min_age:g} s"
            if age is None:
                return _defer("min_age", why, "once the pod's age is known")
            reached = min_age - window_slack(min_age) if explicit is None else min_age
            return _defer("min_age", why, "when the pod reaches the minimum age", reached - age)
        return None

    def _breaker_rule(self, s: _Stall) -> Decision | None:
        """4. Deferred: the fleet-wide mass-stall breaker is open."""
        if self.breaker_open(s.now) and self._breaker_until is not None:
            return _defer("breaker", "mass-stall breaker is open: too many pods look stalled at once, more likely "
                                     "a network or monitoring fault",
                          f"when the breaker closes (its {self.rails.breaker_cooldown_seconds:g} s cooldown ends, "
                          "if no cycle trips it again)", self._breaker_until - s.now)
        return None

    def _namespace_breaker_rule(self, s: _Stall) -> Decision | None:
        """4. Deferred: the namespace's own breaker is open."""
        if self.namespace_breaker_open(s.namespace, s.now):
            return _defer("namespace_breaker", f"the breaker of namespace {s.namespace} is open: too many of its "
                                               "pods look stalled or cannot be judged",
                          f"when the breaker of namespace {s.namespace} closes (its "
                          f"{self.rails.breaker_cooldown_seconds:g} s cooldown ends, if no cycle trips it again)",
                          self._namespace_breakers[s.namespace] - s.now)
        return None

    def _budget_unknown_rule(self, s: _Stall) -> Decision | None:
        """4. Deferred: earlier deletions not read back yet, or (no ledger) unknown for a while after a start."""
        if not self.budget_known:
            return _defer("budget_unknown", "earlier deletions could not be read back yet from the deletion ledger; "
                                            "the budget is unknown", "once the deletion ledger is read back")
        if self._blind_until is not None and s.now < self._blind_until:
            left = self._blind_until - s.now
            return _defer("budget_unknown", "no deletion ledger (budgetLedger: false): what an earlier replica "
                                            f"removed is unknown for {left:.0f} s more",
                          "when what an earlier replica removed no longer counts", left)
        return None

    def _budget_rule(self, s: _Stall) -> Decision | None:
        """4. Deferred: the cluster-wide budget is used up (deletions older than its window expire first)."""
        r = self.rails
        self._expire(s.now)
        times = [t for t, _, _ in self._deletions]
        return self._used_up("budget", times, r.max_deletions, "maxDeletions", "", s.now,
                             lambda: f"cluster budget used: {len(times)} deletions in the last "
                                     f"{r.deletion_window_seconds:g} s (max {r.max_deletions})")

    def _namespace_budget_rule(self, s: _Stall) -> Decision | None:
        """4. Deferred: the namespace's budget is used up."""
        r = self.rails
        times = [t for t, ns, _ in self._deletions if ns == s.namespace]
        return self._used_up("namespace_budget", times, r.max_deletions_per_namespace, "maxDeletionsPerNamespace",
                             f" in {s.namespace}", s.now, lambda: f"namespace budget used: {len(times)} deletions "
                             f"in {s.namespace} in the last {r.deletion_window_seconds:g} s")

    def _owner_rule(self, s: _Stall) -> Decision | None:
        """4. Deferred: the owner already lost a pod and its replacement is not Ready yet."""
        if s.owner is not None and s.owner in self._blocked_owners:
            return _defer("owner", f"{s.owner} already lost a pod; waiting for its replacement to be Ready",
                          "when the replacement pod is Ready")
        return None

    def _pdb_rule(self, s: _Stall) -> Decision | None:
        """5. Deferred: a PodDisruptionBudget refused this episode's eviction and its backoff has not ended."""
        count, until, why = self._episode(s.uid, s.series).refused or (0, s.now, "")
        return _pdb_deferral(why, count, until - s.now) if s.now < until else None

    def _frees_at(self, times: list[float], limit: int) -> float:
        """When a budget of ``limit`` with these counted deletion ``times`` (oldest first) has room again: the
        time the deletion that must go for the count to fall below the limit leaves the rolling window (the
        oldest, while exactly ``limit`` are counted)."""
        return times[len(times) - limit] + self.rails.deletion_window_seconds

    def _used_up(self, rule: DeferralRule, times: list[float], limit: int, setting: str, where: str, now: float,
                 why: Callable[[], str]) -> Decision | None:
        """The deferral by a budget ``rule`` of ``limit`` (the ``setting``) with these counted deletion ``times``
        (oldest first, ``where``: in which namespace) while it is used up (``why`` is made only then): it frees
        when the oldest deletions that must go leave the rolling window (:meth:`_frees_at`), or never while the
        limit is 0."""
        if len(times) < limit:
            return None
        if limit <= 0:
            return _defer(rule, why(), f"once {setting} is raised above 0")
        extra = len(times) - limit
        which = "the oldest counted deletion" if extra == 0 else f"the {extra + 1} oldest counted deletions"
        return _defer(rule, why(), f"when {which}{where} {'leaves' if extra == 0 else 'leave'} the rolling "
                                 f"{self.rails.deletion_window_seconds:g} s window", self._frees_at(times, limit) - now)

    #: :meth:`decide`'s rules, in the order of the module docstring's numbered list.
    _RULES: ClassVar[tuple[Callable[[DeletionPolicy, _Stall], Decision | None], ...]] = (
        _episode_rule,  # 1
        _leader_rule,  # 2
        _dry_run_rule,  # 3
        _pause_rule, _warm_up_rule, _min_age_rule, _breaker_rule, _namespace_breaker_rule,  # 4
        _budget_unknown_rule, _budget_rule, _namespace_budget_rule, _owner_rule,
        _pdb_rule,  # 5
    )

    #: The rules a ``retry`` must pass too: all but the budgets (it is charged already) and the warm-up/age rules
    #: (passed when it was first sent).
    _RETRY_HOLDS: ClassVar[tuple[Callable[[DeletionPolicy, _Stall], Decision | None], ...]] = (
        _leader_rule, _dry_run_rule, _pause_rule, _breaker_rule, _namespace_breaker_rule, _budget_unknown_rule,
    )

    # -- what happened ----------------------------------------------------------------------------------------
    def record(self, uid: str, series: str, action: str = "delete") -> None:
        """Remember that this stall episode was acted on: ``action`` "dry_run" (announced) or "delete"."""
        self._episode(uid, series).acted = "dry_run" if action == "dry_run" else "delete"

    def record_deletion(self, now: float, *, uid: str, namespace: str, owner: str | None) -> None:
        """A pod was deleted (or evicted) at ``now``: charge the budgets (one entry per pod: a removal sent again
        after a lost answer counts for a whole window from its last send, never less) and block its owner until a
        replacement is Ready."""
        self._deletions = deque(sorted([d for d in self._deletions if d[2] != uid] + [(now, namespace, uid)]))
        if owner is not None:
            self._blocked_owners[owner] = now

    def settle(self, outcome: WriteOutcome, now: float, *, uid: str, series: str, namespace: str, owner: str | None,
               again: bool, pending: object = None) -> None:
        """The accounting of one sent removal from its ``outcome`` alone, at ``now`` (its answer's time): applied or
        maybe applied is charged (fail closed), one sent ``again`` moved to this send (never charged twice); ``lost``
        makes the next decision ``retry`` and keeps ``pending`` (:attr:`unsettled`) until :meth:`resolved`."""
        if (again and outcome != "unrecorded") or outcome in ("done", "lost"):
            self.record_deletion(now, uid=uid, namespace=namespace, owner=None if again else owner)
        if outcome == "done":
            self.resolved(uid, series)
        elif outcome == "lost":
            self._episode(uid, series).acted = "retry"
            self.unsettled[(uid, series)] = pending

    def resolved(self, uid: str, series: str) -> None:
        """The episode's removal happened (answered, or seen after a lost answer): acted on, nothing unsettled."""
        self.record(uid, series)
        self.unsettled.pop((uid, series), None)

    def refused(self, uid: str, series: str, now: float, why: str) -> Decision:
        """This episode's eviction was refused at ``now`` (``why``: a PodDisruptionBudget, or several): it is tried
        again after a backoff (one cycle interval, doubled after each refusal in a row, at most
        :data:`PDB_BACKOFF_MAX_INTERVALS` intervals); the deferral that says so."""
        episode = self._episode(uid, series)
        count = (episode.refused or (0, now, why))[0] + 1
        wait = self.rails.scrape_interval_seconds * min(2 ** (count - 1), PDB_BACKOFF_MAX_INTERVALS)
        episode.refused = (count, now + wait, why)
        return _pdb_deferral(why, count, wait)

    def evidence(self, uid: str, series: str, keep: Callable[[], str]) -> str:
        """The id of this stall episode's evidence record, kept by ``keep`` the first time it is asked for (one per
        episode: a removal tried again, after a refusal or a lost answer, points to the first)."""
        episode = self._episode(uid, series)
        if episode.evidence is None:
            episode.evidence = keep()
        return episode.evidence

    def forget_budget(self) -> None:
        """Mark the deletion history as to be read back again (e.g. when this replica becomes leader): deletions
        are deferred (``budget_unknown``) until the next :meth:`restore`, which merges what it reads with what
        this process already knows (its own removals are never forgotten)."""
        self._budget_known = False

    def restore(self, deletions: Iterable[tuple[float, str, str]], *, blind_until: float | None = None) -> None:
        """Merge ``deletions`` read back ((monotonic t, namespace, pod UID) each, from the deletion ledger) into the
        history: one entry per pod UID, the latest time kept (a removal counts for its whole window from the
        latest record of it); the budget is known from now on. ``blind_until``: without a ledger,
        earlier removals are unknown until then (every removal is deferred, fail closed)."""
        merged: dict[str, tuple[float, str, str]] = {}
        for entry in [*self._deletions, *deletions]:
            kept = merged.get(entry[2])
            if kept is None or entry[0] > kept[0]:
                merged[entry[2]] = entry
        self._deletions = deque(sorted(merged.values()))
        self._blind_until = blind_until if blind_until is not None else self._blind_until
        self._budget_known = True

    def first_event(self, uid: str, series: str, key: str) -> bool:
        """True the first time an Event ``key`` (reason and rule) is asked for pod ``uid`` while the episode of
        the series that first asked lasts: one Event per pod, not per engine series (a pod inventing 64 frozen
        series gets one)."""
        keys = self._announced.setdefault(uid, {})
        if key in keys:
            return False
        keys[key] = series
        return True

    def held(self, uid: str, series: str, decision: Decision, now: float) -> tuple[bool, bool]:
        """The remediator deferred this stall episode (``decision``: the policy's, or one of its own — ledger,
        PDB, fence — made at ``now``): remembered for /status until the next decision on it. Returns (the first
        deferral of this episode by any rule: ``vllm_watchdog_remediations_total{result="deferred"}`` counts a
        held stall once, not once per cycle; the first by this rule: one Event per episode and rule, no spam)."""
        episode = self._episode(uid, series)
        first_episode, first_rule = not episode.deferred, decision.rule not in episode.deferred
        episode.deferred.add(decision.rule)
        at = None if decision.frees_in_s is None else now + decision.frees_in_s
        episode.held = (decision.rule, at, decision.frees_when)
        return first_episode, first_rule

    def stalled(self, uid: str, series: str) -> bool:
        """The engine series is judged stalled: True when that opens its stall episode (one follows the detector's
        clock: it ends only at :meth:`episode_over`, the engine seen idle, paused or progressing, never on a failed
        scrape)."""
        opened = (uid, series) not in self._episodes
        self._episode(uid, series)
        return opened

    def episode_over(self, uid: str, series: str) -> None:
        """The engine series left the stalled state: a later stall is a new episode (a removal whose answer was lost
        is no longer reported as ours: the pod removed later is someone else's doing)."""
        self._episodes.pop((uid, series), None)  # every progressing series every cycle: O(1)
        self.unsettled.pop((uid, series), None)
        keys = self._announced.get(uid)
        if keys:  # only a pod with Events written: a handful of keys
            self._announced[uid] = {k: s for k, s in keys.items() if s != series}

    def _episode(self, uid: str, series: str) -> _Episode:
        return self._episodes.setdefault((uid, series), _Episode())

    def forget_pods(self, live_uids: set[str]) -> None:
        """Drop what is known about pods that are gone (budgets and owner blocks are kept)."""
        self._episodes = {key: e for key, e in self._episodes.items() if key[0] in live_uids}
        self._announced = {uid: keys for uid, keys in self._announced.items() if uid in live_uids}

    # -- what it knows, for /status ------------------------------------------------------------------------------
    def view(self, now: float) -> dict[str, Any]:
        """The policy's state at ``now`` as plain data (JSON-ready), changing nothing: global dry-run, the pause and
        why, warm-up, budget used and left (cluster-wide and per namespace with deletions in the window), owners
        waiting for a replacement, the breakers (open, closing in, what tripped them) and open deferrals per rule."""
        r = self.rails
        counted = [(t, ns) for t, ns, _ in self._deletions if now - t < r.deletion_window_seconds]
        recent = Counter(ns for _, ns in counted)
        used = sum(recent.values())

        def frees_in(times: list[float], limit: int) -> float | None:  # as the budget rules say it
            return round(max(0.0, self._frees_at(times, limit) - now), 1) if len(times) >= limit > 0 else None
        since = None if self._first_sync is None else max(self.started, self._first_sync)
        warm_left = r.window_seconds if since is None else max(0.0, since + r.window_seconds - now)
        fleet_open = self.breaker_open(now)
        closes_in = round(self._breaker_until - now, 1) if fleet_open and self._breaker_until is not None else None
        return {
            "dry_run": r.dry_run,  # the global setting (a namespace's dry-run label is each pod's "mode")
            "paused": self.paused_by is not None, "paused_why": self.paused_by,
            "warm_up": {"done": since is not None and warm_left == 0, "left_s": round(warm_left, 1)},
            "budget": {
                "known": self._budget_known, "window_s": r.deletion_window_seconds,
                "cluster": {"max": r.max_deletions, "used": used, "left": max(0, r.max_deletions - used)},
                "namespace_max": r.max_deletions_per_namespace,
                "namespaces": {ns: {"used": n, "left": max(0, r.max_deletions_per_namespace - n)}
                               for ns, n in sorted(recent.items())},
                # a used-up budget: seconds until it has room again (the budget rules' frees_in_s)
                "frees_in_s": {
                    "cluster": frees_in([t for t, _ in counted], r.max_deletions),
                    "namespaces": {ns: left for ns in sorted(recent) if (left := frees_in(
                        [t for t, n_s in counted if n_s == ns], r.max_deletions_per_namespace)) is not None}},
            },
            "owners_waiting": sorted(self._blocked_owners),
            "breaker": {
                "open": fleet_open, "why": self._trips.get("") if fleet_open else None,
                "closes_in_s": closes_in,
                "namespaces": {ns: {"closes_in_s": round(until - now, 1), "why": self._trips.get(ns)}
                               for ns, until in sorted(self._namespace_breakers.items()) if now < until},
            },
            "deferrals": dict(sorted(Counter(rule for e in self._episodes.values() for rule in e.deferred).items())),
        }

    def episodes(self, now: float) -> Episodes:
        """The stall episode of any engine series ``(uid, series)`` at ``now``: how it was acted on ("delete",
        "dry_run" or None), the rules that deferred it so far and what holds it as of its last decision (None: not
        held): ``{"rule", "frees_in_s" (from ``now``; None: not knowable from time), "frees_when"}``; indexed once (a
        status snapshot asks for thousands of series)."""
        index = {key: (e.acted, sorted(e.deferred), None if e.held is None else {
            "rule": e.held[0], "frees_in_s": None if e.held[1] is None else round(max(0.0, e.held[1] - now), 1),
            "frees_when": e.held[2]}) for key, e in self._episodes.items()}
        return lambda uid, series: index.get((uid, series), (None, [], None))

    def _expire(self, now: float) -> None:
        while self._deletions and now - self._deletions[0][0] >= self.rails.deletion_window_seconds:
            self._deletions.popleft()


def votes(pod: WatchedPod) -> bool:
    """Whether ``pod`` counts in the fleet-wide breaker (docs/safety.md "Mass-stall breaker"): only a pod the
    watchdog may remove, one in an enforced namespace; a dry-run namespace's pods never do."""
    return pod.mode == "enforce"


def brake_from(config_map: Mapping[str, Any] | None) -> tuple[bool, str | None]:
    """What the run-time brake ConfigMap says, as read (None: it does not exist): (on, the annotation's value or
    None when absent). ``"true"`` in any case is on; absent, ``"false"`` or empty is off; any other value is on."""
    annotations = ((config_map or {}).get("metadata") or {}).get("annotations") or {}
    value = annotations.get(PAUSE_ANNOTATION)
    if value is None:
        return False, None
    return str(value).strip().lower() not in ("false", ""), str(value)


def ambiguous(status: int) -> bool:
    """True when a DELETE/eviction answered with ``status`` (0: no answer: timeout, reset) may still have been
    applied by the API server: no answer at all, or a 5xx ("may still be processing"). Such an outcome is
    charged to the budgets (fail closed) before it is resolved."""
    return status == 0 or status >= 500


def fate_after_lost_answer(pod: Mapping[str, Any] | None, uid: str) -> bool:
    """Whether a removal whose answer was lost took effect, from a fresh GET of the pod: gone, a new pod under
    the name (ours is gone), or ours terminating (deletionTimestamp set) mean it did."""
    if pod is None:
        return True
    meta = pod.get("metadata") or {}
    return meta.get("uid") != uid or bool(meta.get("deletionTimestamp"))

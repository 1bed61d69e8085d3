"""The oracles: what must hold of everything the API server applied (:class:`Facts`, built from a world after each
step by :func:`facts_of`, or by hand in tests/sim/test_oracles.py). Each returns its violations, one line each
(empty: it holds).

Safety
- :func:`removed_only_wedged`: a pod is removed only while one of its engines has been wedged (or its tenant froze
  its exposition busy) for at least its window less the detector's slack (a restart ends a wedge: a process that
  hangs again after it is a new wedge), never in a dry-run namespace, never after its namespace was set to dry-run or
  the pod excluded (however stale the LIST that still showed it);
- :func:`paused_held`: no removal while the run-time brake is set;
- :func:`budgets_held`: removals in any rolling deletion window <= maxDeletions, and per namespace <=
  maxDeletionsPerNamespace, across restarts, failovers and lost answers (the API's view: what was applied);
- :func:`owner_share_held`: a second removal of one owner's pods only after a replacement pod of that owner,
  created after the first, was Ready;
- :func:`writes_fenced`: with leader election, every write is sent by the Lease's holder, within a lease duration
  of its last Lease write;
- :func:`ledger_ahead`: with the ledger, every removal's pod UID is in the ledger ConfigMap when the API applies it.
Accounting
- :func:`accounted`: at most one StalledPodDeleted Event per pod (exactly one when nothing interfered), at most one
  ledger entry per pod UID.
Liveness
- :func:`live`: after the faults stop, a pod of an honest tenant wedged past ``window + LIVENESS_SLACK_S`` (counted
  from when it could first be judged) is removed, or its last deferral names a rule that holds on the API's side
  (a ``budget_unknown`` or ``not_leader`` then is a failure). A hostile tenant's pods may hold back only its own;
- :func:`announced`: such a pod in a dry-run namespace has been announced (a ``StalledPodDryRun`` Event).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from sim_api import Write

from watchdog.core.detector import window_slack
from watchdog.core.ledger import parse

LIVENESS_INTERVALS = 4  # cycles after the window within which a wedged pod is acted on once nothing holds it
LEASE_DURATION_S = 15.0


@dataclass
class PodFacts:
    uid: str
    namespace: str
    tenant: str
    owner: str
    created: float
    ready_at: float
    window: float
    honest: bool = True  # its tenant is not hostile (a hostile tenant may hold back its own pods)
    gone: bool = False  # not in the API any more (or terminating) at the judged time
    pdb: bool = False
    forbidden: bool = False  # the watchdog's rights in its namespace were removed (it cannot act there)


@dataclass
class Facts:
    """What the oracles judge: the applied ``writes`` and the ground truth, at time ``now``."""

    writes: list[Write]
    pods: dict[str, PodFacts]
    wedged_since: Callable[[str, float], float | None]  # pod UID, t -> when its wedge began (None: not wedged)
    now: float = 0.0
    visibly_wedged_since: Callable[[str, float], float | None] | None = None  # liveness (None: wedged_since)
    interval: float = 15.0
    dry_run_namespaces: frozenset[str] = frozenset()
    max_deletions: int = 2
    max_per_namespace: int = 1
    deletion_window: float = 600.0
    ledger_margin: float = 0.0  # a ledger entry counts this much past the window (written ahead of its send)
    leader_election: bool = False
    ledger: bool = True
    quiet_from: float = float("inf")
    restarts: list[float] = field(default_factory=list)  # truth times a replica (re)started or a Lease changed hands
    ready: list[tuple[float, str, str]] = field(default_factory=list)  # (t, owner, uid) a pod turned Ready
    brake_on: bool = False
    breaker_min_pods: int = 3
    breaker_fraction: float = 0.3
    bad_by_step: list[dict[str, tuple[int, int, int]]] = field(default_factory=list)  # ns -> watched, stalled, bad
    breaker_cooldown: float = 300.0
    tenant_of: dict[str, str] = field(default_factory=dict)  # namespace -> tenant
    failed_events: set[str] = field(default_factory=set)
    crash_times: list[float] = field(default_factory=list)
    lost_removals: list[float] = field(default_factory=list)  # times a removal was applied but its answer lost
    # (t, on, writes applied before): the run-time brake set or released (the order decides, not the time: a cycle
    # frozen past the next step's start removes at the very time the world sets the brake, before it)
    brake_log: list[tuple[float, bool, int]] = field(default_factory=list)
    unread: list[float] = field(default_factory=list)  # times a ConfigMap GET failed (the brake kept as it was)
    wall0: float = 0.0  # the wall clock at truth time 0 (the ledger's entries are wall times)
    opt_outs: list[tuple[float, str, str]] = field(default_factory=list)  # (t, "namespace"/"pod", name/UID) opted out

    def opted_out(self, pod: PodFacts, t: float) -> float | None:
        """When ``pod`` was opted out (its namespace set to dry-run, or the pod excluded) at or before ``t``."""
        return next((at for at, kind, key in self.opt_outs if at <= t and key == (
            pod.namespace if kind == "namespace" else pod.uid)), None)

    def removals(self) -> list[Write]:
        return [w for w in self.writes if w.verb == "remove"]


def removed_only_wedged(f: Facts) -> list[str]:
    out = []
    for w in f.removals():
        pod = f.pods.get(w.key)
        if pod is None:
            out.append(f"t={w.t:.0f} {w.replica} removed unknown pod uid {w.key}")
            continue
        if pod.namespace in f.dry_run_namespaces:
            out.append(f"t={w.t:.0f} {w.replica} removed {w.key} in dry-run namespace {pod.namespace}")
        opted = f.opted_out(pod, w.t)
        if opted is not None:
            out.append(f"t={w.t:.0f} {w.replica} removed {pod.namespace}/{w.key}, opted out (namespace to dry-run or "
                       f"the pod excluded) at t={opted:.0f}")
        since = f.wedged_since(w.key, w.t)
        need = pod.window - window_slack(pod.window)
        if since is None or w.t - since < need:
            wedged = "not wedged" if since is None else f"wedged for {w.t - since:.0f} s only"
            out.append(f"t={w.t:.0f} {w.replica} removed pod {pod.namespace}/{w.key}: {wedged} "
                       f"(window {pod.window:g} s)")
    return out


def paused_held(f: Facts) -> list[str]:
    """No removal while the run-time brake is set (it is read at the start of every cycle; the world sets it
    between cycles), unless a read of it failed since it was set (documented: kept as it was until a read works)."""
    out = []
    for i, w in enumerate(f.writes):
        states = [(t, on) for t, on, before in f.brake_log if before <= i]
        if w.verb == "remove" and states and states[-1][1] and not any(states[-1][0] <= t <= w.t for t in f.unread):
            out.append(f"t={w.t:.0f} {w.replica} removed {w.key} while the brake was set")
    return out


def budgets_held(f: Facts) -> list[str]:
    out = []
    removals = f.removals()
    for i, w in enumerate(removals):
        inside = [r for r in removals[: i + 1] if r.t > w.t - f.deletion_window]
        if len(inside) > f.max_deletions:
            out.append(f"t={w.t:.0f} {len(inside)} removals within {f.deletion_window:g} s (maxDeletions "
                       f"{f.max_deletions}): " + ", ".join(f"{r.key}@{r.t:.0f}" for r in inside))
        same = [r for r in inside if r.detail.get("namespace") == w.detail.get("namespace")]
        if len(same) > f.max_per_namespace:
            out.append(f"t={w.t:.0f} {len(same)} removals in namespace {w.detail.get('namespace')} within "
                       f"{f.deletion_window:g} s (maxDeletionsPerNamespace {f.max_per_namespace})")
    return out


def owner_share_held(f: Facts) -> list[str]:
    out = []
    last: dict[str, Write] = {}
    for w in f.removals():
        pod = f.pods.get(w.key)
        if pod is None or not pod.honest:  # a tenant that forges its owner references evades only its own rule
            continue
        before = last.get(pod.owner)
        if before is not None and not any(
                owner == pod.owner and before.t < t <= w.t and f.pods[uid].created > before.t - 1e-9
                for t, owner, uid in f.ready if uid in f.pods):
            out.append(f"t={w.t:.0f} removed {w.key} of owner {pod.owner}: no replacement Ready since the removal "
                       f"of {before.key} at t={before.t:.0f}")
        last[pod.owner] = w
    return out


def writes_fenced(f: Facts) -> list[str]:
    if not f.leader_election:
        return []
    out = []
    for w in f.writes:
        if w.verb == "lease" or w.replica == "tenant":
            continue
        holder, renewed = w.detail.get("holder"), w.detail.get("renewed")
        if holder != w.replica or renewed is None or w.t - renewed >= LEASE_DURATION_S:
            out.append(f"t={w.t:.0f} {w.replica} wrote {w.verb} {w.key} without a valid Lease (holder {holder}, "
                       f"its last Lease write at {renewed})")
    return out


def ledger_ahead(f: Facts) -> list[str]:
    if not f.ledger:
        return []
    out = []
    for w in f.removals():
        uids = {e.uid for data in w.detail.get("ledger", []) for e in _entries(data)}
        if w.key not in uids:
            out.append(f"t={w.t:.0f} {w.replica} removed {w.key} before the ledger held it")
    return out


def _entries(data: str) -> list[object]:
    import json
    entries, _ = parse(json.loads(data))
    return entries  # type: ignore[return-value]


def accounted(f: Facts) -> list[str]:
    out = []
    events = Counter(w.key for w in f.writes if w.verb == "event" and w.detail.get("reason") == "StalledPodDeleted"
                     and w.detail.get("kind") == "Pod")
    out += [f"{n} StalledPodDeleted Events for pod {uid}" for uid, n in events.items() if n > 1]
    removed = {w.key: w for w in f.removals()}
    for uid, w in removed.items():
        # A removal whose answer was lost is known only once a cycle reads the pod gone: its Event may wait for the
        # faults to stop (a failing LIST delays that cycle), then LIVENESS_INTERVALS cycles.
        unanswered = w.t in f.lost_removals and f.now < max(w.t, f.quiet_from) + LIVENESS_INTERVALS * f.interval
        disturbed = (f.leader_election or uid in f.failed_events or unanswered
                     or any(w.t - f.interval <= c <= w.t + f.interval for c in f.crash_times))
        if not events[uid] and not disturbed and w.t < f.now:
            out.append(f"pod {uid} removed at t={w.t:.0f} without a StalledPodDeleted Event")
    for w in f.writes:
        if w.verb == "configmap" and w.key.endswith("-ledger"):
            entries, _ = parse(w.detail.get("data"))
            twice = [u for u, n in Counter(e.uid for e in entries).items() if n > 1]
            out += [f"t={w.t:.0f} the ledger holds pod {u} {n}x" for u, n in Counter(twice).items()]
    return out


def _overdue(f: Facts, pod: PodFacts) -> float | None:
    """When the visible wedge of ``pod`` began, if it has lasted its window + LIVENESS_INTERVALS since it could first
    be judged (Ready, old enough, after the faults stopped, a window after any restart or change of leader)."""
    since = (f.visibly_wedged_since or f.wedged_since)(pod.uid, f.now)
    if since is None:
        return None
    judged_from = max([since, pod.ready_at, pod.created + pod.window, f.quiet_from,
                       *(t + pod.window for t in f.restarts)])
    return since if f.now - judged_from >= pod.window + LIVENESS_INTERVALS * f.interval else None


def announced(f: Facts) -> list[str]:
    """Liveness of dry-run: an honest pod of a dry-run namespace wedged as long as :func:`live` asks has been announced
    (a StalledPodDryRun Event), unless an Event about it was lost or refused."""
    out = []
    told = {w.key for w in f.writes if w.verb == "event" and w.detail.get("reason") == "StalledPodDryRun"}
    for pod in f.pods.values():
        if (pod.namespace not in f.dry_run_namespaces or pod.gone or not pod.honest or pod.forbidden
                or pod.uid in told or pod.uid in f.failed_events):
            continue
        since = _overdue(f, pod)
        if since is not None:
            out.append(f"t={f.now:.0f} pod {pod.namespace}/{pod.uid} (dry-run) wedged since {since:.0f} and never "
                       "announced (no StalledPodDryRun Event)")
    return out


def live(f: Facts) -> list[str]:
    """Liveness at ``f.now`` (see the module docstring)."""
    out = []
    removed = {w.key for w in f.removals()}
    for pod in f.pods.values():
        if (pod.gone or pod.uid in removed or not pod.honest or pod.forbidden
                or pod.namespace in f.dry_run_namespaces or f.opted_out(pod, f.now) is not None):
            continue
        since = _overdue(f, pod)
        if since is None:
            continue
        # one deferral Event per episode and rule: the rule holding it now may be any announced since its wedge
        rules = deferrals(f.writes, pod.uid, since)
        rule = rules[-1] if rules else None
        held = justified(f, pod)
        if not rules and not held:
            out.append(f"t={f.now:.0f} pod {pod.namespace}/{pod.uid} wedged since {since:.0f} and neither removed "
                       f"nor held by a rail that applies")
        elif rule is not None and not held & set(rules) and pod.uid not in f.failed_events:
            out.append(f"t={f.now:.0f} pod {pod.namespace}/{pod.uid} wedged since {since:.0f} held by rule {rule}, "
                       f"which does not apply (applies: {', '.join(sorted(held)) or 'none'})")
    return out


def deferrals(writes: Iterable[Write], uid: str, since: float = 0.0) -> list[str]:
    """The rules the deferral Events about pod ``uid`` named from ``since`` on, in order."""
    rules = []
    for w in writes:
        if (w.verb == "event" and w.key == uid and w.t >= since
                and w.detail.get("reason") == "StalledPodDeletionDeferred"):
            message = str(w.detail.get("message", ""))
            if "rule " in message:
                rules.append(message.split("rule ", 1)[1].split(",", 1)[0].strip())
    return rules


def justified(f: Facts, pod: PodFacts) -> set[str]:
    """The deferral rules that hold for ``pod`` at ``f.now`` from the API's side (and the ground truth)."""
    held: set[str] = set()
    recent = [w for w in f.removals() if w.t > f.now - f.deletion_window - f.ledger_margin]
    ledger = _ledger_uids(f)
    if len(recent) >= f.max_deletions or len(ledger) >= f.max_deletions:
        held.add("budget")
    if sum(1 for w in recent if w.detail.get("namespace") == pod.namespace) >= f.max_per_namespace or sum(
            1 for ns in ledger.values() if ns == pod.namespace) >= f.max_per_namespace:
        held.add("namespace_budget")
    lost = [w for w in f.removals() if (p := f.pods.get(w.key)) is not None and p.owner == pod.owner]
    if lost and not any(o == pod.owner and t > lost[-1].t and f.pods[u].created >= lost[-1].t
                        for t, o, u in f.ready if u in f.pods):
        held.add("owner")
    if f.brake_on:
        held.add("paused")
    if pod.pdb:
        held.add("pdb")
    if _breaker(f):
        held.add("breaker")
    if _namespace_breaker(f, pod.namespace):
        held.add("namespace_breaker")
    return held


def _ledger_uids(f: Facts) -> dict[str, str]:
    """The pod UIDs (-> namespace) the newest ledger write holds within the deletion window."""
    latest = [w for w in f.writes if w.verb == "configmap" and w.key.endswith("-ledger")]
    if not latest:
        return {}
    entries, _ = parse(latest[-1].detail.get("data"))
    return {e.uid: e.namespace for e in entries if e.t > f.wall0 + f.now - f.deletion_window - f.ledger_margin}


def _recent_steps(f: Facts) -> list[dict[str, tuple[int, int, int]]]:
    steps = int(f.breaker_cooldown // f.interval) + 1
    return f.bad_by_step[-steps:]


def _breaker(f: Facts) -> bool:
    """The fleet breaker applies when, with any one TENANT left out, enough pods look stalled at once."""
    for seen in _recent_steps(f):
        tenants = {f.tenant_of.get(ns, ns) for ns in seen}
        if all(_trips(f, [v for ns, v in seen.items() if f.tenant_of.get(ns, ns) != left]) for left in tenants):
            return True
    return False


def _trips(f: Facts, counts: list[tuple[int, int, int]]) -> bool:
    watched, stalled = sum(c[0] for c in counts), sum(c[1] for c in counts)
    return stalled >= f.breaker_min_pods and watched > 0 and stalled / watched > f.breaker_fraction


def _namespace_breaker(f: Facts, namespace: str) -> bool:
    for seen in _recent_steps(f):
        watched, _stalled, bad = seen.get(namespace, (0, 0, 0))
        if bad >= f.breaker_min_pods and watched and bad / watched > f.breaker_fraction:
            return True
    return False


SAFETY = (removed_only_wedged, paused_held, budgets_held, owner_share_held, writes_fenced, ledger_ahead)
ALL = (*SAFETY, accounted, live, announced)


def check(f: Facts, oracles: Iterable[Callable[[Facts], list[str]]] = ALL) -> list[str]:
    return [f"{oracle.__name__}: {v}" for oracle in oracles for v in oracle(f)]

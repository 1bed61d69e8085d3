"""One seed = one world and its schedule, run through the production composition root.

:class:`World` builds tenants (several namespaces each), Deployments -> ReplicaSets -> pods on shared nodes, one
ground-truth :class:`~sim_engines.Engine` per data-parallel rank of each pod, and the watchdog replicas, each made
by :func:`watchdog.controller.wiring.build` with only the edges swapped: the in-memory API (:mod:`sim_api`), a
scraper whose bodies are the ground truth's exposition (:class:`SimScraper`: the real fan-out, the real parse; what
it skips is the HTTP transport: connect/deadline timing, gzip, the body cap's streaming read), and a virtual clock.
Leader election is the real ``LeaderElector`` stepped by the world (no thread). Each step moves time by
``interval``: the kubelet ends pods whose grace passed, ReplicaSets replace them, the world's scheduled events
happen (brake flips, RBAC removed, a namespace deleted, forged Events), the electors step, every live replica runs
one cycle; then the oracles (:mod:`sim_oracles`) judge what the API server applied.

No sleeps, no threads: the scrape coroutines run to completion on one event loop in this thread."""

from __future__ import annotations

import asyncio
import random
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any

from sim_api import WALL0, WRITES, Crash, Faults, SimKube, Store
from sim_engines import CAN, Engine, render

from watchdog.adapters.kube import KubeError
from watchdog.adapters.leader import LeaderElector
from watchdog.adapters.scrape_errors import ScrapeError
from watchdog.config.settings import defaults
from watchdog.controller.actuator import Actuator
from watchdog.controller.brake import Brake
from watchdog.controller.cycle import Watchdog
from watchdog.controller.nodes import NodeEscalator
from watchdog.controller.wiring import build
from watchdog.core.detector import window_slack
from watchdog.core.escalation import NodeStallHistory
from watchdog.core.model import EXCLUDE_ANNOTATION, NAMESPACE_LABEL, Target
from watchdog.core.policy import PAUSE_ANNOTATION

OWN_NS = "watchdog"
PROFILES = ("vllm", "sglang", "llamacpp", "trtllm")
TARGETS = tuple(Target(p, f"app.kubernetes.io/name={p}", profile=p, path="/prometheus/metrics" if p == "trtllm"
                       else "/metrics", completion_only_window_seconds=600.0 if p == "trtllm" else None)
                for p in PROFILES)
#: Hostile tenant behaviours (chosen by the seed).
HOSTILE = ("frozen", "invented", "huge", "forged_events", "odd_owner", "many_namespaces")
#: The API calls faults hit 8x as often as the others.
HOT_CALLS = ("delete_pod", "evict_pod", "create_config_map", "replace_config_map", "replace_lease", "get_pod")
#: World events (chosen by the seed), at a step.
WORLD_EVENTS = ("brake_on", "brake_off", "rbac_removed", "namespace_deleted", "skew")
#: Patterns (one per seed, 60% of seeds, drawn from their own stream so that a seed without one is the world it always
#: was): a combination of faults, wedges and world events that reaches one rule on purpose, where the uniform draws
#: above would need thousands of seeds (tests/sim/README.md, "Patterns").
PATTERNS = ("owner_wedge", "tenant_storm", "lost_then_crash", "failover_unread", "delete_fails", "removal_pause",
            "stale_opt_out", "restart_wedged", "leaderless_dry_run", "leader_blink")
#: Patterns that need two replicas (leader election).
PATTERNS_ELECTED = ("failover_unread", "removal_pause", "leaderless_dry_run", "leader_blink")
#: Patterns whose faults are the whole schedule (no uniform draws: their crashes would restart the warm-up past the
#: point the pattern aims at).
PATTERNS_ALONE = ("lost_then_crash", "failover_unread", "delete_fails", "removal_pause", "stale_opt_out",
                  "leaderless_dry_run", "leader_blink")



class SimScraper:
    """The AsyncFetcher port: bodies rendered from the ground truth (by pod IP) and run on one event loop, to the
    end, in the caller's thread (the cycle's fan-out and parse are the real ones)."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.loop = asyncio.new_event_loop()

    async def fetch_async(self, url: str, deadline_s: float | None = None) -> bytes:
        return self.fetch(url)

    def fetch(self, url: str) -> bytes:
        return self.world.exposition(url)

    def run(self, coro: Any) -> Future[Any]:
        done: Future[Any] = Future()
        done.set_result(self.loop.run_until_complete(coro))
        return done

    def close(self) -> None:
        pass  # the world closes the loop once


@dataclass
class PodTruth:
    uid: str
    namespace: str
    name: str
    tenant: str
    profile: str
    owner: str  # ReplicaSet name
    ip: str
    engines: list[Engine]
    created: float
    ready_at: float
    hostile: tuple[str, ...] = ()
    gone_at: float | None = None


@dataclass
class Replica:
    name: str  # identity (the Lease holder)
    kube: SimKube
    watchdog: Watchdog
    elector: LeaderElector | None
    started: float
    skew: float = 0.0


@dataclass
class Plan:
    """What the seed chose, for the report and the oracles."""

    seed: int
    steps: int
    interval: float
    quiet_from: float  # no fault, no world event from here (liveness is judged after)
    leader_election: bool
    action: str
    brake: bool
    escalation: bool
    hostile: dict[str, tuple[str, ...]] = field(default_factory=dict)  # tenant -> behaviours
    events: dict[int, list[tuple[str, str]]] = field(default_factory=dict)  # step -> (event, argument)
    fault_rate: float = 0.0
    pattern: str = ""  # one of PATTERNS, or none


class World:
    """One seed's world. ``faults``: a fixed schedule (call index -> fault) to replay or shrink, else drawn;
    ``pattern``: the seed's pattern (None: its own draw; "": none, the world as it was before patterns)."""

    def __init__(self, seed: int, *, faults: dict[int, str] | None = None, steps: int | None = None,
                 pattern: str | None = None) -> None:
        self.seed = seed
        rng = random.Random(seed)
        self.rng = rng
        self.profiles = tuple(sorted(rng.sample(PROFILES, 2)))  # the engine kinds of this world (its targets)
        self.store = Store()
        interval = 15.0
        n = rng.choice((20, 22, 24))  # drawn whatever ``steps`` says: a shorter replay is the same world, cut short
        self.plan = Plan(seed, n, interval, quiet_from=interval * int(n * 0.4),
                         leader_election=rng.random() < 0.35, action="evict" if rng.random() < 0.2 else "delete",
                         brake=rng.random() < 0.25, escalation=rng.random() < 0.25,
                         fault_rate=rng.choice((0.0, 0.01, 0.03, 0.06)))
        self.run_steps = min(n, steps) if steps is not None else n
        self.prng = random.Random(seed * 104729 + 7)  # the pattern's own stream
        drawn = self.prng.choice(PATTERNS) if self.prng.random() < 0.6 else ""
        self.plan.pattern = drawn if pattern is None else pattern
        self.plan.leader_election |= self.plan.pattern in PATTERNS_ELECTED
        self.plan.fault_rate *= self.plan.pattern not in PATTERNS_ALONE
        self.config = replace(
            defaults(), window_seconds=rng.choice((45.0, 60.0)), scrape_interval_seconds=interval,
            leader_election=self.plan.leader_election, action=self.plan.action,  # type: ignore[arg-type]
            pause_config_map="watchdog-config" if self.plan.brake else None, node_escalation=self.plan.escalation,
            max_deletions=rng.choice((1, 2, 3)), max_deletions_per_namespace=rng.choice((1, 2)),
            deletion_window_seconds=rng.choice((150.0, 300.0)), tenant_label="tenant",
            targets=tuple(t for t in TARGETS if t.profile in self.profiles), log_level="critical")
        fault_rng = random.Random(seed * 7919 + 1)
        rate = self.plan.fault_rate

        def draw(_index: int, call: str, choices: tuple[str, ...]) -> str | None:
            # the calls around a removal (its ledger record, the removal, the Lease) are where faults matter most
            if rate and fault_rng.random() < rate * (8 if call in HOT_CALLS else 1):
                return fault_rng.choice(choices)
            return None

        self.faults = Faults(draw=None if faults is not None else draw, schedule=dict(faults or {}),
                             until=self.plan.quiet_from, pattern=self._pattern_fault)
        self._pattern_state: dict[str, Any] = {}
        self.pods: dict[str, PodTruth] = {}
        self.replica_sets: dict[str, tuple[str, str, str, int]] = {}  # rs key -> (namespace, tenant, profile, dp)
        self.ready: list[tuple[float, str, str]] = []  # (t, owner key, uid): a pod of that owner became Ready
        self.replicas: list[Replica] = []
        self.crashes: list[tuple[float, str, str]] = []  # (t, replica, why)
        self.unexpected: list[str] = []  # exceptions a cycle should never raise
        self._frozen = False  # a replica is frozen at an API call (a pause): no pause nests inside it
        self.tenants: dict[str, list[str]] = {}  # tenant -> its namespaces
        self.opt_outs: list[tuple[float, str, str]] = []  # (t, "namespace" or "pod", name or UID): no removal after
        self.bad_by_step: list[dict[str, tuple[int, int, int]]] = []  # ns -> (watched, looks stalled, looks bad)
        self.starts: list[float] = []  # truth times a replica started
        self.brake_log: list[tuple[float, bool, int]] = []  # (t, on, writes applied before) each brake change
        self.scraper = SimScraper(self)
        self._uid = 0
        self._ip = 10
        self._gen = 0
        self.store.hook = self._pause
        self._build_cluster()
        self._schedule_events()
        self._apply_pattern()
        for i in range(2 if self.plan.leader_election else 1):
            self.replicas.append(self._start_replica(f"r{i}"))

    # -- the cluster -------------------------------------------------------------------------------------------
    def _next_uid(self) -> str:
        self._uid += 1
        return f"{self.seed:x}-{self._uid:04d}"

    def _build_cluster(self) -> None:
        rng, store = self.rng, self.store
        store.namespaces[OWN_NS] = {"metadata": {"name": OWN_NS, "uid": "ns-own", "labels": {}}}
        if self.plan.brake:
            store.config_maps[(OWN_NS, "watchdog-config")] = {"metadata": {
                "name": "watchdog-config", "namespace": OWN_NS, "resourceVersion": store.next_rv(),
                "annotations": {PAUSE_ANNOTATION: "false"}}, "data": {}}
        for i in range(3):
            store.nodes[f"node-{i}"] = {"metadata": {"name": f"node-{i}", "resourceVersion": store.next_rv()},
                                        "spec": {"taints": []}}
        tenants = rng.randint(2, 3)
        hostile_tenant = f"t{rng.randrange(tenants)}" if rng.random() < 0.4 else None
        for ti in range(tenants):
            tenant = f"t{ti}"
            hostile: tuple[str, ...] = ()
            if tenant == hostile_tenant:
                hostile = tuple(sorted(rng.sample(HOSTILE, rng.randint(1, 3))))
                self.plan.hostile[tenant] = hostile
            spaces = rng.randint(1, 2) + (1 if "many_namespaces" in hostile else 0)
            for si in range(spaces):
                ns = f"{tenant}-ns{si}"
                self.tenants.setdefault(tenant, []).append(ns)
                mode = "dry-run" if rng.random() < 0.12 else "true"
                store.namespaces[ns] = {"metadata": {"name": ns, "uid": f"ns-{ns}",
                                                     "labels": {NAMESPACE_LABEL: mode, "tenant": tenant}}}
                for di in range(rng.randint(1, 2)):
                    self._deployment(ns, tenant, f"d{di}", rng.choice(self.profiles), hostile)

    def _deployment(self, ns: str, tenant: str, name: str, profile: str, hostile: tuple[str, ...]) -> None:
        rng, store = self.rng, self.store
        dep_uid, rs_uid = self._next_uid(), self._next_uid()
        rs = f"{name}-rs"
        store.owners[("Deployment", ns, name)] = {"metadata": {"name": name, "namespace": ns, "uid": dep_uid}}
        store.owners[("ReplicaSet", ns, rs)] = {"metadata": {
            "name": rs, "namespace": ns, "uid": rs_uid, "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "uid": dep_uid, "controller": True}]}}
        dp = rng.choice((1, 1, 2)) if profile in ("vllm", "sglang") else 1
        self.replica_sets[f"{ns}/{rs}"] = (ns, tenant, profile, dp)
        if self.config.action == "evict" and rng.random() < 0.3:
            store.pdbs.setdefault(ns, []).append({"app.kubernetes.io/name": profile})
        for _ in range(rng.randint(1, 2)):
            self._pod(f"{ns}/{rs}", 0.0, hostile, ready_after=0.0)

    def _pod(self, rs_key: str, now: float, hostile: tuple[str, ...], ready_after: float) -> PodTruth:
        rng, store = self.rng, self.store
        ns, tenant, profile, dp = self.replica_sets[rs_key]
        rs = rs_key.split("/", 1)[1]
        rs_obj = store.owners[("ReplicaSet", ns, rs)]
        uid = self._next_uid()
        name = f"{rs}-{uid[-4:]}"
        self._ip += 1
        ip = f"10.{self._ip // 250 % 250}.{self._ip % 250}.{7 + self.seed % 200}"
        engines = [self._engine(profile, now) for _ in range(dp)]
        truth = PodTruth(uid, ns, name, tenant, profile, rs_key, ip, engines, now, now + ready_after,
                         tuple(h for h in hostile if rng.random() < 0.6))
        if "frozen" in truth.hostile:
            engines[0].frozen_from = now + rng.uniform(0, 300)
        owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs, "uid": rs_obj["metadata"]["uid"],
                 "controller": True}
        if "odd_owner" in truth.hostile:
            owner = rng.choice(({**owner, "name": "../../nodes/node-0"}, {**owner, "kind": "Node", "name": "node-0"},
                                {**owner, "uid": "someone-else"}))
        store.pods[(ns, name)] = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "uid": uid, "resourceVersion": store.next_rv(),
                         "labels": {"app.kubernetes.io/name": profile}, "ownerReferences": [owner],
                         "creationTimestamp": _stamp(WALL0 + now - (3600.0 if now == 0 else 0.0))},
            "spec": {"nodeName": f"node-{rng.randrange(3)}", "terminationGracePeriodSeconds": rng.choice((0, 30)),
                     "containers": [{"name": "engine", "ports": [{"name": "http", "containerPort": 8000}]}]},
            "status": {"phase": "Running", "podIP": ip, "conditions": [
                {"type": "Ready", "status": "True" if ready_after == 0 else "False"}],
                "containerStatuses": [{"name": "engine", "restartCount": 0, "ready": ready_after == 0}]}}
        self.pods[uid] = truth
        if ready_after == 0:
            self.ready.append((now, rs_key, uid))
        return truth

    def _engine(self, profile: str, now: float) -> Engine:
        """Progressing first; then, maybe, something else (a wedge from t1, recovering at t2 or not)."""
        rng = self.rng
        horizon = self.plan.interval * self.plan.steps
        phases = [(now, "progressing")]
        t = now
        while True:
            t += rng.uniform(60, 500)
            if t >= horizon:
                break
            kind = rng.choice((*CAN[profile], "wedged", "wedged"))
            phases.append((t, kind))
            if kind == "wedged" and rng.random() < 0.6:
                break  # wedged for good
        return Engine(phases, rate=rng.uniform(5, 80))

    def _schedule_events(self) -> None:
        rng, plan = self.rng, self.plan
        last = max(1, int(plan.quiet_from / plan.interval))
        for _ in range(rng.choice((0, 0, 1, 2, 3))):
            step = rng.randrange(1, last)
            kind = rng.choice(WORLD_EVENTS)
            if kind.startswith("brake") and not plan.brake:
                continue
            arg = rng.choice(sorted(ns for spaces in self.tenants.values() for ns in spaces))
            plan.events.setdefault(step, []).append((kind, arg))
        for tenant, behaviours in plan.hostile.items():
            if "forged_events" in behaviours:
                for step in rng.sample(range(1, plan.steps), 3):
                    plan.events.setdefault(step, []).append(("forged_event", self.tenants[tenant][0]))
        if plan.brake:  # a brake set during the faults is lifted before the quiet end (liveness is judged there)
            plan.events.setdefault(last, []).append(("brake_off", ""))

    # -- patterns ----------------------------------------------------------------------------------------------
    def _honest(self) -> list[PodTruth]:
        """The pods of honest tenants in enforced namespaces, as built (the patterns' material)."""
        spaces = self.store.namespaces
        return [p for p in self.pods.values() if p.tenant not in self.plan.hostile and p.namespace in spaces
                and spaces[p.namespace]["metadata"]["labels"].get(NAMESPACE_LABEL) == "true"]

    def _wedge(self, truth: PodTruth, at: float, *phases: tuple[float, str]) -> None:
        """Engine 0 of ``truth`` progresses until ``at``, then hangs for good (or follows ``phases`` from ``at``)."""
        old = truth.engines[0]
        truth.engines[0] = Engine([(truth.created, "progressing"), (max(at, truth.created), "wedged")]
                                  if not phases else list(phases), rate=old.rate)

    def _apply_pattern(self) -> None:
        """The seed's pattern (PATTERNS): its wedges, budgets and events; its faults: :meth:`_pattern_fault`."""
        pattern, prng, plan = self.plan.pattern, self.prng, self.plan
        honest = self._honest()
        if not pattern or not honest:
            plan.pattern = ""
            return
        early = sorted(honest, key=lambda p: (p.namespace, p.uid))
        prng.shuffle(early)
        if pattern == "owner_wedge":  # two pods of one owner hang together (a bad rollout): the owner rule
            pod = early[0]
            if sum(1 for p in self.pods.values() if p.owner == pod.owner) < 2:
                self._pod(pod.owner, 0.0, (), ready_after=0.0)
            at = prng.uniform(0, plan.quiet_from)
            for p in [p for p in self.pods.values() if p.owner == pod.owner]:
                self._wedge(p, at + prng.uniform(0, 10))
            self.config = replace(self.config, max_deletions=max(2, self.config.max_deletions),
                                  max_deletions_per_namespace=2)
        elif pattern == "tenant_storm":  # every pod of one tenant hangs (its own fault), and one elsewhere: the
            tenant = early[0].tenant     # fleet breaker must not open for one tenant
            mine = [p for p in honest if p.tenant == tenant]
            while len(mine) < 4:
                mine.append(self._pod(mine[len(mine) % 2 if len(mine) > 1 else 0].owner, 0.0, (), ready_after=0.0))
            at = prng.uniform(30, plan.quiet_from)
            for p in mine:
                self._wedge(p, at + prng.uniform(0, 10))
            others = [p for p in honest if p.tenant != tenant]
            if others:
                self._wedge(others[0], at + prng.uniform(0, 30))
        elif pattern in ("lost_then_crash", "failover_unread", "delete_fails", "removal_pause", "leader_blink"):
            spread = sorted(early, key=lambda p: sum(q.namespace == p.namespace for q in early[:early.index(p)]))
            for p in spread[:3]:  # early wedges, in several namespaces: their removals come while faults are drawn
                self._wedge(p, prng.uniform(0, 40 if pattern == "removal_pause" else 10))
            if pattern in ("lost_then_crash", "failover_unread", "leader_blink"):  # one removal (a DELETE) fills it
                self.config = replace(self.config, max_deletions=1, deletion_window_seconds=300.0, action="delete")
            elif pattern == "delete_fails":
                self.config = replace(self.config, max_deletions=max(2, self.config.max_deletions),
                                      max_deletions_per_namespace=2)
        elif pattern == "stale_opt_out":  # opted out (namespace to dry-run, pod excluded) while LISTs lag behind
            pod, quiet = early[0], int(plan.quiet_from / plan.interval)
            step = prng.randint(5, max(5, quiet - 1))
            self._wedge(pod, step * plan.interval + 10 - self.config.window_seconds - prng.uniform(0, 15))
            kind = prng.choice(("ns_dry_run", "exclude"))
            plan.events.setdefault(step, []).append((kind, pod.namespace if kind == "ns_dry_run" else pod.uid))
            self._pattern_state["lag"] = (step * plan.interval, (step + 2) * plan.interval)
            self.config = replace(self.config, max_deletions=3, max_deletions_per_namespace=2)
        elif pattern == "leaderless_dry_run":  # a dry-run pod's stall is first seen while the leader is gone
            pod, window = early[0], self.config.window_seconds
            self.store.namespaces[pod.namespace]["metadata"]["labels"][NAMESPACE_LABEL] = "dry-run"
            step = prng.randint(5, 7)  # its cycle: killed at its first call, before the faults stop (quiet_from)
            samples = int(-(-(window - window_slack(window)) // plan.interval))  # cycles from the last progress seen
            last = (step - samples) * plan.interval + 10  # the cycle that sees its last progress
            self._wedge(pod, last - prng.uniform(0.5, plan.interval - 0.5))
            self._pattern_state["kill"] = step * plan.interval + 10
        elif pattern == "restart_wedged":  # hung from the start (counters at zero), restarted, hung again at once
            pod = next((p for p in early if p.created == 0.0), early[0])
            self._wedge(pod, 0.0, (pod.created, "wedged"), (pod.created + prng.uniform(20, 40), "rewedged"))

    def _pattern_fault(self, call: str, replica: str, name: str) -> str | None:
        """The faults of the seed's pattern (asked before the uniform draw; recorded in the schedule like it)."""
        pattern, state, prng = self.plan.pattern, self._pattern_state, self.prng
        removal = call in ("delete_pod", "evict_pod")
        if pattern == "lost_then_crash" or pattern == "failover_unread":
            if removal and "sent" not in state:
                state["sent"] = replica  # the first removal's answer lost (or not), its sender killed soon after
                state["crash_in"] = prng.randint(3, 8)  # after the answer is handled (charged, recorded)
                return "lost" if pattern == "lost_then_crash" else None
            if "crash_in" in state and replica == state["sent"]:
                state["crash_in"] -= 1
                if state["crash_in"] == 0:
                    del state["crash_in"]
                    return "crash_before"
            if (pattern == "failover_unread" and "sent" in state and "crash_in" not in state and "unread" not in state
                    and call == "get_config_map" and name.endswith("-ledger") and replica == self.holder()
                    and replica != state["sent"]):
                state["unread"] = True  # the new leader's first read of the ledger fails
                return "5xx"
        elif pattern == "delete_fails" and removal and state.get("failed", 0) < 2:
            state["failed"] = state.get("failed", 0) + 1  # sent, not applied (a 5xx): the answer is ambiguous
            return prng.choice(("5xx", "timeout"))
        elif pattern == "removal_pause" and state.get("pauses", 0) < 4:
            ledger = name.endswith("-ledger")
            # before the ledger's write: within the renew deadline but past the fence's margin, or long enough for
            # the Lease to change hands; inside a write: up to its own timeout (the fence's promise)
            long = call == "get_config_map" and ledger and state.get(replica) == "get_namespace"  # a removal's
            short = removal or (ledger and call in ("create_config_map", "replace_config_map"))
            if (long or short) and prng.random() < 0.7:
                state["pauses"] = state.get("pauses", 0) + 1
                seconds = (prng.choice((prng.uniform(5, 9.5), prng.uniform(15, 22))) if long
                           else prng.uniform(5, self.config.api_timeout_seconds))
                return f"pause:{seconds:.2f}"
        elif pattern == "leader_blink":  # the leader loses the Lease and wins it back between two of its cycles
            return self._blink(call, replica)
        elif (pattern == "leaderless_dry_run" and call == "list_namespaces" and replica == self.holder()
              and state["kill"] <= self.store.t < state["kill"] + 5):
            state["kill"] = -1.0
            return "crash_before"
        if pattern == "removal_pause":
            state[replica] = call  # the replica's previous call (a removal's ledger read follows its fresh GETs)
        if pattern == "stale_opt_out" and call in ("list_namespaces", "list_pods"):
            start, end = state["lag"]
            if start <= self.store.t < end:
                return "stale"
        return None

    def _blink(self, call: str, replica: str) -> str | None:
        """``leader_blink``: the leader freezes at its first fresh GET of a pod (20 s: the other takes the Lease and
        removes a pod), its cycles fail at their LIST while it does not hold the Lease, the other is killed after its
        removal: the first leads again without having finished a cycle as a standby."""
        state = self._pattern_state
        if "first" not in state:
            if call == "get_pod" and replica == self.holder():
                state["first"] = replica
                return "pause:20"
            return None
        if replica == state["first"]:
            return "5xx" if call == "list_namespaces" and self.holder() != replica else None
        if call == "delete_pod" and "kill_in" not in state:
            state["kill_in"] = 2
        elif state.get("kill_in", 0) > 0:
            state["kill_in"] -= 1
            return "crash_before" if state["kill_in"] == 0 else None
        return None

    # -- the replicas ------------------------------------------------------------------------------------------
    def _start_replica(self, base: str) -> Replica:
        self._gen += 1
        name = f"{base}-g{self._gen}"
        kube = SimKube(self.store, name, self.faults)
        skew = 0.0
        mono = lambda: self.store.t  # noqa: E731 -- the replica's monotonic clock
        wall = lambda: WALL0 + self.store.t + replica.skew  # noqa: E731
        elector = None
        fence: Any = None
        if self.config.leader_election:
            elector = LeaderElector(kube, OWN_NS, name=self.config.lease_name, identity=name,  # type: ignore[arg-type]
                                    clock=mono)
            fence = elector.holds_for
        actuator = Actuator(kube, fence=fence or (lambda _s: True), write_timeout_s=self.config.api_timeout_seconds)
        escalation = None
        if self.config.node_escalation:
            escalation = NodeEscalator(kube, actuator, NodeStallHistory(  # type: ignore[arg-type]
                self.config.node_escalation_threshold, self.config.node_escalation_window_seconds),
                taint=self.config.node_taint, dry_run=self.config.dry_run)
        brake = Brake(kube, OWN_NS, self.config.pause_config_map) if self.config.pause_config_map else None  # type: ignore[arg-type]
        watchdog = build(self.config, kube, scraper=self.scraper, clock=mono, wall_clock=wall,
                         leader=elector.term if elector else lambda: True, actuator=actuator,
                         escalation=escalation, own_namespace=OWN_NS, brake=brake)
        replica = Replica(name, kube, watchdog, elector, self.store.t, skew)
        self.starts.append(self.store.t)
        return replica

    def _pause(self, replica: str, call: str, seconds: float | None = None) -> None:
        """The process froze at an API call (a long GC, a throttled CPU) for ``seconds`` (None: the world's usual):
        time passes and the other replicas act: their electors step (the Lease may change hands mid-cycle)."""
        # inside a write no longer than its own timeout (10 s: the fence's promise is about writes that end within
        # it); before a read, long enough for the Lease to change hands
        if self._frozen:  # a pause drawn while another replica is frozen: stepping the frozen replica's elector
            return        # from here would re-enter its step (its lock held up the stack: a deadlock)
        self._frozen = True
        try:
            if seconds is None:
                seconds = 6.0 if call in WRITES else self.rng.choice((6.0, 12.0, 20.0))
            self.store.t += seconds
            for other in list(self.replicas):
                if other.name != replica and other.elector is not None and other in self.replicas:
                    self._guarded(other, other.elector.step)
        finally:
            self._frozen = False

    # -- the scrape edge ---------------------------------------------------------------------------------------
    def exposition(self, url: str) -> bytes:
        host = url.split("//", 1)[1].split(":", 1)[0].strip("[]")
        truth = next((p for p in self.pods.values() if p.ip == host and p.gone_at is None), None)
        if truth is None:
            raise ScrapeError("refused", f"{url}: connection refused")
        t = self.store.t
        if any(e.behaviour(t) == "unreachable" and e.frozen_from is None for e in truth.engines[:1]):
            raise ScrapeError("timeout", f"{url}: no answer within the deadline")
        extra = 12 if "invented" in truth.hostile else 0
        body = render(truth.profile, truth.engines, t, extra=extra)
        huge = "huge" in truth.hostile and t > truth.created + 200
        if huge and len(body) * 4096 > self.config.max_body_bytes:  # the scraper's cap, without building the body
            raise ScrapeError("too_large", f"{url}: body over {self.config.max_body_bytes} bytes")
        return body

    # -- time --------------------------------------------------------------------------------------------------
    def run(self, check: Any = None) -> None:
        """Every step; ``check(world, step)`` after each (the oracles)."""
        try:
            for step in range(self.run_steps):
                self.step(step)
                if check is not None:
                    check(self, step)
        finally:
            self.scraper.loop.close()

    def step(self, step: int) -> None:
        plan, store = self.plan, self.store
        store.t = max(store.t, step * plan.interval)
        self._kubelet()
        for kind, arg in plan.events.get(step, []):
            self._event(kind, arg)
        store.remember_view()
        for sub in (0.0, 5.0, 10.0):  # the electors retry more often than the cycle runs
            if sub:
                store.t = max(store.t, step * plan.interval + sub)
            for replica in list(self.replicas):
                if replica.elector is not None:
                    self._guarded(replica, replica.elector.step)
            if sub == 10.0:
                self.bad_by_step.append(self._looks_bad())  # the truth when the cycles look, not at the step's start
                for replica in list(self.replicas):
                    if replica in self.replicas:
                        self._guarded(replica, replica.watchdog.run_cycle)

    def _guarded(self, replica: Replica, call: Any) -> None:
        try:
            call()
        except Crash as crash:
            self._restart(replica, str(crash))
        except KubeError:
            pass  # a failed discovery fails the cycle; the service logs it and runs the next one
        except Exception as exc:  # the service would log it; the sim calls it a finding
            self.unexpected.append(f"t={self.store.t:.0f} {replica.name}: {type(exc).__name__}: {exc}"[:300])

    def _restart(self, replica: Replica, why: str) -> None:
        """The process is gone; a new one starts from the cluster alone (nothing remembered)."""
        if replica not in self.replicas:
            return  # already killed and restarted (a crash inside a call that froze while the others acted)
        self.crashes.append((self.store.t, replica.name, why))
        self.replicas.remove(replica)  # killed: it releases nothing (its Lease expires on its own)
        self.replicas.append(self._start_replica(replica.name.split("-")[0]))

    def _kubelet(self) -> None:
        """Terminating pods whose grace passed are gone; their ReplicaSet makes a replacement (Ready later);
        engines restart (restartCount); new pods turn Ready."""
        store, now = self.store, self.store.t
        for key, pod in list(store.pods.items()):
            truth = self.pods[pod["metadata"]["uid"]]
            gone_at = pod.get("_gone_at")
            if gone_at is not None and now >= gone_at:
                del store.pods[key]
                truth.gone_at = now
                if truth.namespace in store.namespaces and not store.namespaces[truth.namespace]["metadata"].get(
                        "deletionTimestamp"):
                    hostile = self.plan.hostile.get(truth.tenant, ())
                    self._pod(truth.owner, now, hostile, ready_after=self.rng.choice((15.0, 45.0)))
                continue
            status = pod["status"]
            if truth.ready_at <= now and status["conditions"][0]["status"] != "True":
                status["conditions"][0]["status"] = "True"
                status["containerStatuses"][0]["ready"] = True
                self.ready.append((now, truth.owner, truth.uid))
            restarts = truth.engines[0].restarts(now)
            if status["containerStatuses"][0]["restartCount"] != restarts:
                status["containerStatuses"][0]["restartCount"] = restarts

    def _event(self, kind: str, arg: str) -> None:
        store = self.store
        if kind in ("brake_on", "brake_off") and self.plan.brake:
            self.brake_log.append((store.t, kind == "brake_on", len(store.history)))
            cm = store.config_maps[(OWN_NS, "watchdog-config")]
            cm["metadata"]["annotations"][PAUSE_ANNOTATION] = "true" if kind == "brake_on" else "false"
            cm["metadata"]["resourceVersion"] = store.next_rv()
        elif kind == "rbac_removed":
            store.forbidden.add(arg)
        elif kind == "namespace_deleted" and arg in store.namespaces:
            store.namespaces[arg]["metadata"]["deletionTimestamp"] = _stamp(WALL0 + store.t)
            store.namespaces[arg]["status"] = {"phase": "Terminating"}
            for (ns, _), pod in store.pods.items():
                if ns == arg and not pod["metadata"].get("deletionTimestamp"):
                    pod["metadata"]["deletionTimestamp"] = _stamp(WALL0 + store.t)
                    pod["_gone_at"] = store.t + 30
        elif kind == "ns_dry_run" and arg in store.namespaces:
            store.namespaces[arg]["metadata"]["labels"][NAMESPACE_LABEL] = "dry-run"
            self.opt_outs.append((store.t, "namespace", arg))
        elif kind == "exclude":
            pod = next((p for p in store.pods.values() if p["metadata"]["uid"] == arg), None)
            if pod is not None:
                pod["metadata"].setdefault("annotations", {})[EXCLUDE_ANNOTATION] = "true"
                pod["metadata"]["resourceVersion"] = store.next_rv()
                self.opt_outs.append((store.t, "pod", arg))
        elif kind == "skew" and self.replicas:
            self.replicas[0].skew = self.rng.choice((-30.0, 30.0, 90.0))
        elif kind == "forged_event":
            victim = next((p for p in store.pods.values() if p["metadata"]["namespace"] == arg), None)
            uid = victim["metadata"]["uid"] if victim else "none"
            store.events.append((store.t, "tenant", arg, {
                "reason": "StalledPodDeleted", "involvedObject": {"kind": "Pod", "uid": uid},
                "message": "Deleted stalled pod (forged)", "source": {"component": "vllm-stall-watchdog"}}))

    def _looks_bad(self) -> dict[str, tuple[int, int, int]]:
        """Per opted-in namespace from the ground truth: Ready pods, those that look stalled (wedged or frozen), and
        those that look stalled or cannot be judged (unreachable, a body over the cap)."""
        out: dict[str, tuple[int, int, int]] = {}
        t = self.store.t
        for truth in self.pods.values():
            if truth.gone_at is not None or truth.ready_at > t or truth.namespace not in self.store.namespaces:
                continue
            stalled = "invented" in truth.hostile or any(e.wedged_since(t) is not None for e in truth.engines)
            unknown = (truth.engines[0].behaviour(t) == "unreachable" and truth.engines[0].frozen_from is None) or (
                "huge" in truth.hostile and t > truth.created + 200)
            w, s, b = out.get(truth.namespace, (0, 0, 0))
            out[truth.namespace] = (w + 1, s + stalled, b + (stalled or unknown))
        return out

    # -- what the oracles read -------------------------------------------------------------------------------
    def holder(self) -> str | None:
        lease = self.store.leases.get((OWN_NS, self.config.lease_name))
        return (lease or {}).get("spec", {}).get("holderIdentity") if lease else None


def _stamp(wall: float) -> str:
    import datetime as dt
    return dt.datetime.fromtimestamp(wall, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

"""Run one seed with the oracles after every step; shrink a failing one; say how to replay it.

``python tests/sim/sim_run.py SEED [--faults 'INDEX:FAULT,...'] [--steps N]`` replays one seed (the same steps every
time) and prints its violations; ``make sim SEED=n`` does the same through pytest."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import logging
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from sim_oracles import ALL, Facts, PodFacts, check
from sim_world import OWN_NS, WALL0, World

from watchdog.core.policy import PAUSE_ANNOTATION

Oracle = Callable[[Facts], list[str]]
#: The fleet breaker judged with one TENANT left out (the namespaces of one ``tenant`` label value together, the
#: world's tenantLabel), not one namespace. SIM_TENANTS=0 judges per namespace (before tenantLabel, a tenant with two
#: namespaces opened it for everyone: seeds 326 and 388 found it).
TENANTS = os.environ.get("SIM_TENANTS", "1") == "1"


@dataclass
class Outcome:
    seed: int
    violations: list[str]
    step: int | None  # the first step at which an oracle fired
    schedule: dict[int, str]  # the faults of this run (call index -> fault)
    steps: int
    removals: int
    digest: str = ""  # of everything the API applied: equal runs give equal digests
    taken: list[tuple[int, str, str, float]] = field(default_factory=list)
    pattern: str | None = None  # the pattern asked for (None: the seed's own)

    def command(self) -> str:
        faults = ",".join(f"{i}:{f}" for i, f in sorted(self.schedule.items())) or "none"  # none: no fault at all
        chosen = "" if self.pattern is None else self.pattern or "none"  # asked for (none: no pattern)
        return (f"make sim SEED={self.seed} SIM_STEPS={self.steps} SIM_FAULTS='{faults}'"
                + (f" SIM_PATTERN={chosen}" if chosen else "")
                + f"   # or: .venv/bin/python tests/sim/sim_run.py {self.seed} --steps {self.steps} --faults '{faults}'"
                + (f" --pattern {chosen}" if chosen else ""))


def facts_of(world: World) -> Facts:
    store, config = world.store, world.config
    pods = {}
    for uid, truth in world.pods.items():
        live = store.pods.get((truth.namespace, truth.name))
        gone = live is None or live["metadata"]["uid"] != uid or bool(live["metadata"].get("deletionTimestamp"))
        window = 600.0 if truth.profile == "trtllm" else config.window_seconds
        pdb = config.action == "evict" and any(
            all(v == truth.profile for v in s.values()) for s in store.pdbs.get(truth.namespace, []))
        pods[uid] = PodFacts(uid, truth.namespace, truth.tenant, truth.owner, truth.created, truth.ready_at, window,
                             honest=not world.plan.hostile.get(truth.tenant), gone=gone, pdb=pdb,
                             forbidden=truth.namespace in store.forbidden)
    holders: list[float] = []
    last = None
    for w in store.history:
        if w.verb == "lease" and w.detail.get("holder") != last:
            holders.append(w.t)
            last = w.detail.get("holder")
    brake = store.config_maps.get((OWN_NS, "watchdog-config"))
    flipped = {key for _, kind, key in world.opt_outs if kind == "namespace"}  # dry-run from then on: opt_outs
    dry = frozenset(ns for ns, obj in store.namespaces.items() if ns not in flipped
                    and (obj["metadata"].get("labels") or {}).get("vllm-watchdog.io/enabled") == "dry-run")

    def wedged_since(uid: str, t: float) -> float | None:
        truth = world.pods[uid]
        if "invented" in truth.hostile:  # its invented engine series are busy and frozen from the start
            return truth.created
        starts = [s for e in truth.engines if (s := e.wedged_since(t)) is not None]
        return min(starts) if starts else None

    def visibly_wedged_since(uid: str, t: float) -> float | None:
        truth = world.pods[uid]
        if "invented" in truth.hostile:
            return truth.created
        reachable = truth.engines[0].reachable_since(t)
        starts = [s for e in truth.engines if (s := e.visibly_wedged_since(t)) is not None]
        return max(min(starts), reachable) if starts and reachable is not None else None

    return Facts(
        writes=store.history, pods=pods, wedged_since=wedged_since, visibly_wedged_since=visibly_wedged_since,
        now=store.t, interval=world.plan.interval,
        dry_run_namespaces=dry, max_deletions=config.max_deletions,
        max_per_namespace=config.max_deletions_per_namespace, deletion_window=config.deletion_window_seconds,
        ledger_margin=2 * config.api_timeout_seconds if config.budget_ledger else 0.0,
        leader_election=config.leader_election, ledger=config.budget_ledger, quiet_from=world.plan.quiet_from,
        restarts=[*world.starts, *holders], ready=world.ready,
        brake_on=bool(brake and brake["metadata"]["annotations"].get(PAUSE_ANNOTATION) == "true"),
        breaker_min_pods=config.breaker_min_pods, breaker_fraction=config.breaker_fraction,
        bad_by_step=world.bad_by_step, breaker_cooldown=config.breaker_cooldown_seconds,
        tenant_of={ns: t for t, spaces in world.tenants.items() for ns in spaces} if TENANTS else {},
        failed_events=store.failed_events, brake_log=world.brake_log,
        unread=[t for _, call, fault, t in world.faults.taken if call == "get_config_map" and fault != "pause"],
        lost_removals=[t for _, call, fault, t in world.faults.taken if call in ("delete_pod", "evict_pod")
                       and fault == "lost"],
        crash_times=[c[0] for c in world.crashes],
        wall0=WALL0, opt_outs=world.opt_outs)


def run_seed(seed: int, *, faults: dict[int, str] | None = None, steps: int | None = None,
             oracles: Iterable[Oracle] = ALL, pattern: str | None = None) -> Outcome:
    """One world, the oracles after every step; stops at the first step an oracle fires. ``pattern``: the world's
    pattern instead of the seed's own ("": none). The watchdog's log is quiet meanwhile (the sim judges what was
    written, not what was said), and as it was afterwards: other tests in the same process read it."""
    with _quiet():
        return _run(seed, faults, steps, tuple(oracles), pattern)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    logger = logging.getLogger("watchdog")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def _run(seed: int, faults: dict[int, str] | None, steps: int | None, chosen: tuple[Oracle, ...],
         pattern: str | None) -> Outcome:
    world = World(seed, faults=faults, steps=steps, pattern=pattern)
    found: list[str] = []
    at: list[int] = []

    def judge(w: World, step: int) -> None:
        violations = check(facts_of(w), chosen) + [f"unexpected: {u}" for u in w.unexpected]
        if violations and not found:
            found.extend(violations)
            at.append(step)
            raise _Stop

    with contextlib.suppress(_Stop):
        world.run(judge)
    digest = hashlib.sha256(repr([(w.t, w.replica, w.verb, w.key) for w in world.store.history]).encode())
    return Outcome(seed, found, at[0] if at else None, dict(world.faults.schedule), world.run_steps,
                   sum(1 for w in world.store.history if w.verb == "remove"), digest.hexdigest()[:16],
                   list(world.faults.taken), pattern)


class _Stop(Exception):  # a control-flow signal: the first violation ends the run
    pass


def shrink(outcome: Outcome, oracles: Iterable[Oracle] = ALL) -> Outcome:
    """The smallest failing variant found greedily: fewer steps (up to the failing one), then each fault of the
    schedule taken out while the run still fails (the world itself is the seed's)."""
    chosen = tuple(oracles)
    pattern = outcome.pattern
    best = run_seed(outcome.seed, faults=outcome.schedule, steps=(outcome.step or outcome.steps) + 1, oracles=chosen,
                    pattern=pattern)
    if not best.violations:
        best = run_seed(outcome.seed, faults=outcome.schedule, steps=outcome.steps, oracles=chosen, pattern=pattern)
    if not best.violations:
        return outcome  # the schedule alone does not reproduce it (should not happen: runs are deterministic)
    changed = True
    while changed:
        changed = False
        for index in sorted(best.schedule):
            fewer = {i: f for i, f in best.schedule.items() if i != index}
            tried = run_seed(outcome.seed, faults=fewer, steps=best.steps, oracles=chosen, pattern=pattern)
            if tried.violations:
                best, changed = tried, True
                break
    return best


def report(outcome: Outcome, oracles: Iterable[Oracle] = ALL) -> str:
    small = shrink(outcome, oracles)
    faults = ", ".join(f"call {i}: {f}" for i, f in sorted(small.schedule.items())) or "none"
    return "\n".join([f"seed {outcome.seed} failed at step {outcome.step}:",
                      *(f"  {v}" for v in outcome.violations[:8]),
                      f"smallest failing schedule: {small.steps} steps, faults: {faults}",
                      *(f"  {v}" for v in small.violations[:3]), f"replay: {small.command()}"])


def parse_pattern(text: str | None) -> str | None:
    """A pattern named on the command line or in SIM_PATTERN: "none" is no pattern, unset the seed's own."""
    return None if not text else "" if text == "none" else text


def parse_faults(text: str | None) -> dict[int, str] | None:
    if not text:
        return None  # the seed's own faults
    if text == "none":
        return {}
    return {int(i): f for i, f in (part.split(":", 1) for part in text.split(",") if part)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="replay one seed of the simulation")
    parser.add_argument("seed", type=int)
    parser.add_argument("--faults", default=None, help="INDEX:FAULT,... or none (default: the seed's own)")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--pattern", default=None, help="the world's pattern instead of the seed's own (none: none)")
    args = parser.parse_args(argv)
    outcome = run_seed(args.seed, faults=parse_faults(args.faults), steps=args.steps,
                       pattern=parse_pattern(args.pattern))
    print(f"seed {args.seed}: {outcome.steps} steps, {outcome.removals} removals, faults {len(outcome.taken)}, "
          f"digest {outcome.digest}")
    for index, call, fault, t in outcome.taken:
        print(f"  fault at call {index} ({call}, t={t:.0f}): {fault}")
    print("\n".join(outcome.violations) or "no violation")
    return 1 if outcome.violations else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

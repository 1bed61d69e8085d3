"""`source: prometheus` end to end: the real watchdog process reads the engines' signals from a real Prometheus
(scraping simulated vLLM pods through file_sd, 1 s scrapes) and deletes through the API emulator.

One world, one run: a wedged pod, a busy one, a data-parallel pod with one wedged rank, a pod whose counters
reset (an engine restart) after it wedged, a data-parallel pod one of whose engines vanishes from its /metrics
while the other goes on (Prometheus marks its series stale), the same with samples carrying explicit
timestamps (Prometheus writes no staleness marker for those), a pod Prometheus stops scraping (its series age past
prometheusStalenessSeconds), a pod whose engine stops answering (up == 0 while its older samples are still
inside the staleness bound), a pod whose target never answers (up == 0 from the start), a pod of two
containers on two ports, two scrape targets with their own sample times, one serving a wedged model, and a
data-parallel pod frozen while vLLM's pod-scoped ``rl_weight_update_operations_in_flight{operation}`` (no engine
label) reads 1: both its engines paused, never stalled.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from prom_kit import (
    OPEN_RAILS,
    PROMETHEUS_SETTINGS,
    FileTarget,
    Server,
    WatchdogRun,
    engine_states,
    free_port,
    outcomes,
    pod_views,
)

from watchdog.demo.emulator import EmulatorServer
from watchdog.demo.scenario import FAST_SETTINGS, seed_deployment, write_config, write_kubeconfig
from watchdog.demo.simpod import SimPod

pytestmark = pytest.mark.prometheus

NS = "prom"
WINDOW_S = 8.0
STALENESS_S = 10.0  # the unscraped pod stays in the answers this long: fed on the watchdog clock, it would stall
SD_DELAY_S = 5.0  # Prometheus applies service-discovery changes at most every 5 s
SETTINGS = {**FAST_SETTINGS, **OPEN_RAILS, **PROMETHEUS_SETTINGS, "windowSeconds": WINDOW_S,
            "prometheusStalenessSeconds": STALENESS_S}
ADDRESSES = {"busy": "127.0.0.30", "wedged": "127.0.0.31", "dp": "127.0.0.32", "reset": "127.0.0.33",
             "unscraped": "127.0.0.34", "stopped": "127.0.0.35", "down": "127.0.0.36", "shrink": "127.0.0.37",
             "ghost": "127.0.0.38", "pair": "127.0.0.39", "updating": "127.0.0.40"}


class TimestampedPod(SimPod):
    """Every sample line carries an explicit timestamp (as federation or some exporters write them): when a
    series leaves /metrics, Prometheus writes no staleness marker and answers its last values until they age out."""

    def exposition(self) -> bytes:
        stamp = b" %d" % int(time.time() * 1000)
        return b"\n".join(line + stamp if line and not line.startswith(b"#") else line
                          for line in super().exposition().split(b"\n"))


class UpdatingPod(SimPod):
    """An RL weight update under way for the whole run: vLLM prints its gauge with the operation label only."""

    def exposition(self) -> bytes:
        return super().exposition() + (b"# TYPE vllm:rl_weight_update_operations_in_flight gauge\n"
                                       b'vllm:rl_weight_update_operations_in_flight{operation="update"} 1.0\n')


@dataclass
class World:
    api: EmulatorServer
    prom: Server
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    sims: dict[str, SimPod] = field(default_factory=dict)
    marks: dict[str, float] = field(default_factory=dict)  # time.monotonic() of each action
    history: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    log: str = ""
    alive: set[str] = field(default_factory=set)
    events: list[dict[str, Any]] = field(default_factory=list)

    def deploy(self, key: str, mode: str, cls: type[SimPod] = SimPod, more_ports: tuple[int, ...] = (),
               **kw: Any) -> SimPod:
        sim = cls(ADDRESSES[key], 0, mode, **kw)
        sim.start()
        self.sims[key] = sim
        self.pods[key] = seed_deployment(self.api, NS, key, sim.address, sim.port, more_ports=more_ports)
        return sim

    def name(self, key: str) -> str:
        return str(self.pods[key]["pod"]["metadata"]["name"])

    def target(self, key: str, port: int | None = None) -> FileTarget:
        container = self.pods[key]["pod"]["spec"]["containers"][0]
        return FileTarget(f"{ADDRESSES[key]}:{port or container['ports'][0]['containerPort']}", NS, self.name(key))

    def gone(self, key: str) -> bool:
        return self.api.get_pod(NS, self.name(key)) is None

    def views(self, key: str, since: float = 0.0, until: float = float("inf")) -> list[dict[str, Any]]:
        return [v for v in pod_views([h for h in self.history if h[0] < until], self.name(key), since)]

    def settled(self, key: str) -> float:
        """When the pod's engines have had two samples: 3 s after the start, or 2 cycles after the pod's first view
        when the watchdog's start was slower (a first busy sample is always suspect: no progress seen yet)."""
        first = min((at for at, doc in self.history for p in doc.get("pods") or [] if p.get("pod") == self.name(key)),
                    default=self.marks["start"])
        return max(self.marks["start"] + 3, first + 2 * SETTINGS["scrapeIntervalSeconds"])


def _restart_with_lower_counters(world: World, key: str) -> None:
    """The engine restarts in place (same address and port): its counters start again from the warm start,
    below what they had reached; it comes back wedged."""
    old = world.sims[key]
    old.stop()
    new = SimPod(old.address, old.port, "wedged")
    new.start()
    world.sims[key] = new


@pytest.fixture(scope="module")
def world(prometheus: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("prometheus-source")
    with EmulatorServer() as api:
        world = World(api, prometheus)
        api.create_namespace(NS, {"vllm-watchdog.io/enabled": "true"})
        run = None
        try:
            world.deploy("busy", "progressing")
            world.deploy("wedged", "wedged")
            world.deploy("dp", "wedged", engines=2).set_mode("progressing", engines=[0])  # rank 1 stays wedged
            world.deploy("reset", "progressing")
            world.deploy("unscraped", "wedged")
            world.deploy("stopped", "wedged")
            world.deploy("shrink", "progressing", engines=2)
            world.deploy("ghost", "progressing", cls=TimestampedPod, engines=2)
            world.deploy("updating", "wedged", cls=UpdatingPod, engines=2)
            # a pod of two containers on two declared ports; the second one's engine wedged (a removal is confirmed
            # by reading the pod itself on each declared port Prometheus scraped it on)
            second = world.sims["pair_b"] = SimPod(ADDRESSES["pair"], 0, "wedged", model_name="model-b")
            second.start()
            world.deploy("pair", "progressing", model_name="model-a", more_ports=(second.port,))
            dead_port = free_port(ADDRESSES["down"])  # nothing listens there: Prometheus' up == 0
            world.pods["down"] = seed_deployment(api, NS, "down", ADDRESSES["down"], dead_port)
            prometheus.set_targets([*(world.target(k) for k in ("busy", "wedged", "dp", "reset", "unscraped",
                                                                "stopped", "down", "shrink", "ghost", "pair",
                                                                "updating")),
                                    world.target("pair", second.port)])
            prometheus.wait_up({world.name(k): 1.0 for k in world.pods if k != "down"} | {world.name("down"): 0.0})
            status_port = free_port()
            config = write_config(tmp / "config.yaml", **{**SETTINGS, "prometheusUrl": prometheus.url,
                                                          "listenAddress": f"127.0.0.1:{status_port}"})
            run = WatchdogRun(config, write_kubeconfig(tmp / "kubeconfig", api.base_url), tmp / "watchdog.log",
                              status_port).start()
            t0 = world.marks["start"] = time.monotonic()
            # the target leaves at once: an HA pair's replicas each apply it within ~5-8 s (Prometheus' SD cadence;
            # the querier answers from the later one), which must stay inside the wedged pod's 8 s window
            steps = [(0.0, "unscraped", lambda: prometheus.remove_target(world.target("unscraped").address)),
                     (2.0, "stopped", lambda: world.sims["stopped"].stop()),
                     (1.0, "reset_wedged", lambda: world.sims["reset"].set_mode("wedged")),
                     (1.0, "shrink", lambda: world.sims["shrink"].keep_engines(1)),
                     (1.0, "ghost", lambda: world.sims["ghost"].keep_engines(1)),
                     (5.5, "reset", lambda: _restart_with_lower_counters(world, "reset"))]
            deadline = t0 + 45
            while time.monotonic() < deadline and run.alive():
                now = time.monotonic()
                for at, mark, action in steps:
                    if mark not in world.marks and now >= t0 + at:
                        action()
                        world.marks[mark] = time.monotonic()
                if len(world.marks) > len(steps) and world.gone("wedged") and world.gone("dp") and \
                        world.gone("reset") and world.gone("pair") and \
                        now > world.marks["unscraped"] + SD_DELAY_S + STALENESS_S + 4:
                    break
                time.sleep(0.1)
            time.sleep(3)  # three more cycles: nothing else may be deleted
            world.alive = {p["metadata"]["name"] for p in api.list_objects("/api/v1/pods")}
            world.events = api.list_events(NS)
        finally:
            if run is not None:
                world.log = run.stop()
                world.history = run.history
                (tmp / "status-history.json").write_text(json.dumps(
                    {"marks": world.marks, "history": run.history, "names": {k: world.name(k) for k in world.pods}}))
            for sim in world.sims.values():
                sim.stop()
            prometheus.set_targets([])
        yield world


def _deleted_lines(world: World) -> list[str]:
    return [line for line in world.log.splitlines() if "remediation deleted" in line]


def _pod_event(world: World, key: str, reason: str = "StalledPodDeleted") -> dict[str, Any]:
    events = [e for e in world.events if e["involvedObject"]["kind"] == "Pod"
              and e["involvedObject"]["name"] == world.name(key)]
    (event,) = [e for e in events if e["reason"] == reason] or [None]
    assert event is not None, [(e["reason"], e["message"]) for e in events]
    return event


def test_the_watchdog_ran_against_prometheus(world: World) -> None:
    assert world.history, world.log[-3000:]
    assert "Traceback" not in world.log, world.log[-3000:]
    seen = {p["pod"] for _, doc in world.history for p in doc.get("pods") or []}
    assert {world.name(k) for k in ("busy", "wedged", "dp", "reset")} <= seen
    assert "ok" in outcomes(world.views("busy"))


def test_a_wedge_read_from_prometheus_deletes_exactly_that_pod(world: World) -> None:
    assert world.name("wedged") not in world.alive, world.log[-3000:]
    event = _pod_event(world, "wedged")
    assert event["reason"] == "StalledPodDeleted"
    message = event["message"]
    assert "21 requests running" in message and 'engine="0"' in message, message
    # the values Prometheus scraped, unchanged: the simulated engine's warm start, frozen
    assert "vllm:generation_tokens_total=456789 " in message and "vllm:prompt_tokens_total=1234567 " in message
    assert "vllm:request_success_total=5000 " in message  # summed over finished_reason, as the parser sums
    assert world.name("busy") in world.alive
    assert "stalled" not in engine_states(world.views("busy"))
    assert "progressing" in engine_states(world.views("busy"))


def test_data_parallel_engines_are_kept_apart(world: World) -> None:
    assert world.name("dp") not in world.alive, world.log[-3000:]
    message = _pod_event(world, "dp")["message"]
    # rank 1 is the wedged one; its own counters (warm start + 100 generation tokens per rank) are named
    assert 'engine="1"' in message and 'engine="0"' not in message, message
    assert "vllm:generation_tokens_total=456889 " in message and "vllm:prompt_tokens_total=1235567 " in message
    by_rank: dict[str, set[str]] = {}
    for view in world.views("dp"):
        for engine in view.get("engines") or []:
            by_rank.setdefault(str(engine["labels"].get("engine")), set()).add(str(engine["state"]))
    assert set(by_rank) == {"0", "1"}, by_rank
    assert "progressing" in by_rank["0"] and "progressing" not in by_rank["1"]
    changes = [line for line in world.log.splitlines() if f"pod {NS}/{world.name('dp')} series {{" in line]
    assert any('{engine="1",' in line and "-> stalled" in line for line in changes), changes
    assert not any('{engine="0",' in line and "-> stalled" in line for line in changes), changes


def test_a_counter_reset_is_progress(world: World) -> None:
    reset = world.marks["reset"]
    before = world.views("reset", since=world.marks["reset_wedged"] + 3, until=reset)
    assert before and "progressing" not in engine_states(before[-2:]), before[-2:]  # wedged, not moving
    after = world.views("reset", since=reset, until=reset + 4)
    assert "progressing" in engine_states(after), [v.get("engines") for v in after]
    # the stall clock restarted at the reset: never stalled within a window after it
    stalled_at = [at for at, doc in world.history for p in doc.get("pods") or []
                  if p.get("pod") == world.name("reset") and "stalled" in engine_states([p])]
    assert not stalled_at or stalled_at[0] >= reset + WINDOW_S - 1.5, (stalled_at[0] - reset)


def test_a_series_prometheus_no_longer_scrapes_goes_unknown_and_is_never_deleted(world: World) -> None:
    assert world.name("unscraped") in world.alive, world.log[-3000:]
    states = engine_states(world.views("unscraped"))
    assert "stalled" not in states, states
    # its newest samples age past the bound (once Prometheus has applied the target's removal): unknown
    late = world.views("unscraped", since=world.marks["unscraped"] + SD_DELAY_S + STALENESS_S + 2)
    assert late and outcomes(late) == {"prometheus_unknown"}, outcomes(late)
    assert engine_states(late) <= {"unknown"}


@pytest.mark.parametrize("key", ["shrink", "ghost"])
def test_an_engine_gone_from_the_pods_metrics_is_not_fed_its_last_values(world: World, key: str) -> None:
    # engine 1's series end while engine 0 goes on, so the pod's time keeps advancing: its last values, answered
    # for prometheusStalenessSeconds (> the window), must not stall it. "shrink": Prometheus writes staleness
    # markers (the instant selector drops the series at once); "ghost": explicit timestamps, no marker (its own
    # newest running sample is older than its pod's: unknown).
    assert world.name(key) in world.alive, world.log[-3000:]
    late = world.views(key, since=world.marks[key] + 3)
    assert late, world.marks
    for view in late:
        states = {str(e["labels"].get("engine")): e["state"] for e in view.get("engines") or []}
        assert states.get("0") == "progressing" and states.get("1") in (None, "unknown"), states
    assert not any(f"{world.name(key)} series" in line and "-> stalled" in line for line in world.log.splitlines())


def test_the_engines_of_a_pod_on_two_scrape_targets_are_each_read_and_the_wedged_one_deletes_it(
        world: World) -> None:
    # Prometheus scrapes the two ports at different moments: each engine series is read at its own target's
    # sample time, so the busy container's engine is never left out for being older than the other's.
    assert world.name("pair") not in world.alive, world.log[-3000:]
    message = _pod_event(world, "pair")["message"]
    assert 'model_name="model-b"' in message and "model-a" not in message, message
    views = world.views("pair", since=world.settled("pair"))
    assert views, world.marks
    for view in views:
        states = {str(e["labels"].get("model_name")): e["state"] for e in view.get("engines") or []}
        assert set(states) == {"model-a", "model-b"} and states["model-a"] == "progressing", states


def test_a_pod_scoped_pause_pauses_every_engine_of_the_pod_and_it_is_never_deleted(world: World) -> None:
    # Both engines run 21 requests with frozen counters far longer than the window, while the pod-scoped weight
    # update gauge (one series of the pod, no engine label) reads 1: applied to every engine, never a stall.
    assert world.name("updating") in world.alive, world.log[-3000:]
    views = world.views("updating", since=world.settled("updating"))
    assert views, world.marks
    for view in views:
        states = {str(e["labels"].get("engine")): e["state"] for e in view.get("engines") or []}
        assert states == {"0": "paused", "1": "paused"}, states
    assert not any(f"{world.name('updating')} series" in line and "-> stalled" in line
                   for line in world.log.splitlines())


def test_a_target_whose_scrape_fails_is_unknown(world: World) -> None:
    assert world.name("down") in world.alive and world.name("stopped") in world.alive
    assert outcomes(world.views("down")) == {"prometheus_unknown"}
    assert engine_states(world.views("down")) <= {"unknown"}
    # up == 0 on the newest `up` sample decides before the older samples age past the staleness bound
    stopped = world.marks["stopped"]
    early = world.views("stopped", since=stopped + 3.0, until=stopped + STALENESS_S - 0.5)
    assert early and outcomes(early) == {"prometheus_unknown"}, outcomes(early)
    assert "stalled" not in engine_states(world.views("stopped"))


def test_nothing_else_was_deleted(world: World) -> None:
    deleted = _deleted_lines(world)
    names = {world.name(k) for k in ("wedged", "dp", "reset", "pair")}
    assert len(deleted) == len({n for n in names if n not in world.alive}), deleted
    assert all(any(n in line for n in names) for line in deleted), deleted

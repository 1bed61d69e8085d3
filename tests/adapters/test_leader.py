"""Lease-based leader election against the Kubernetes API emulator (real HTTP) with an injected clock."""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from typing import Any

import pytest
from fakes import FakeKube

from watchdog.adapters.kube import KubeClient, KubeError
from watchdog.adapters.leader import LeaderElector, default_identity
from watchdog.demo.emulator import EmulatorServer

NS = "vllm-stall-watchdog"
LEASE = "vllm-stall-watchdog"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
MICRO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z"


class Clock:
    """A fake monotonic clock shared by the electors of one test."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def elector(kube: Any, clock: Clock, identity: str) -> LeaderElector:
    return LeaderElector(kube, NS, LEASE, identity=identity, clock=clock)


def lease(srv: EmulatorServer) -> dict[str, Any]:
    status, body = srv.request("GET", f"{LEASES}/{LEASE}")
    assert status == 200
    return dict(body["spec"])


def test_one_acquires_the_other_does_not(emulator: EmulatorServer, kube_client: KubeClient) -> None:
    clock = Clock()
    a, b = elector(kube_client, clock, "a"), elector(kube_client, clock, "b")
    assert not a.is_leader()
    assert a.step() is True and a.is_leader()
    spec = lease(emulator)
    assert spec["holderIdentity"] == "a" and spec["leaseDurationSeconds"] == 15 and spec["leaseTransitions"] == 0
    assert re.fullmatch(MICRO, spec["renewTime"]) and spec["acquireTime"] == spec["renewTime"]
    emulator.emulator.request_log.clear()
    assert b.step() is False and not b.is_leader()
    assert [r.verb for r in emulator.emulator.request_log] == ["get"]  # a live holder: b does not even write
    clock.t += 2
    assert a.step() is True and a.is_leader()  # renewal keeps acquireTime, moves renewTime
    renewed = lease(emulator)
    assert renewed["acquireTime"] == spec["acquireTime"] and renewed["renewTime"] > spec["renewTime"]
    assert renewed["leaseTransitions"] == 0
    assert [r.verb for r in emulator.emulator.request_log] == ["get", "get", "replace"]


def test_takeover_only_after_the_lease_duration_on_our_own_clock(emulator: EmulatorServer,
                                                                 kube_client: KubeClient) -> None:
    clock = Clock()
    a, b = elector(kube_client, clock, "a"), elector(kube_client, clock, "b")
    assert a.step()
    assert not b.step()  # b first sees a's record now (t0)
    clock.t += 8
    assert a.step()  # a renews: a new record, b's observation restarts when b sees it
    clock.t += 1
    assert not b.step()  # observed at t0 + 9
    clock.t += 14.9  # a stopped renewing at t0 + 8; b saw that record at t0 + 9
    assert not a.is_leader()  # 15.9 s > renew deadline: a stopped acting long ago
    assert not b.step()
    clock.t += 0.1
    assert b.step() and b.is_leader()
    spec = lease(emulator)
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1 and spec["acquireTime"] == spec["renewTime"]
    assert not a.step() and not a.is_leader()  # a sees b's live record
    assert b.step() and lease(emulator)["leaseTransitions"] == 1


def test_a_stale_wall_clock_in_the_record_is_not_trusted(emulator: EmulatorServer, kube_client: KubeClient) -> None:
    emulator.create_object(LEASES, {"metadata": {"name": LEASE}, "spec": {
        "holderIdentity": "ghost", "leaseDurationSeconds": 15, "renewTime": "2000-01-01T00:00:00.000000Z",
        "acquireTime": "2000-01-01T00:00:00.000000Z", "leaseTransitions": 4}})
    clock = Clock()
    b = elector(kube_client, clock, "b")
    assert not b.step()  # renewTime is 26 years old, but we have only just seen this record
    clock.t += 14
    assert not b.step()
    clock.t += 1
    assert b.step() and lease(emulator)["leaseTransitions"] == 5


def test_the_holders_advertised_duration_is_respected(emulator: EmulatorServer, kube_client: KubeClient) -> None:
    emulator.create_object(LEASES, {"metadata": {"name": LEASE},
                                    "spec": {"holderIdentity": "slow", "leaseDurationSeconds": 60}})
    clock = Clock()
    b = elector(kube_client, clock, "b")
    assert not b.step()
    clock.t += 59
    assert not b.step()
    clock.t += 1
    assert b.step()


def test_is_leader_turns_false_at_the_renew_deadline_without_a_successful_renew(
        emulator: EmulatorServer, kube_client: KubeClient) -> None:
    clock = Clock()
    a = elector(kube_client, clock, "a")
    assert a.step()
    clock.t += 5
    emulator.stop()  # the API server is unreachable from now on
    assert a.step() is False  # logged, never raised
    assert a.is_leader()  # a failed renew alone does not end leadership ...
    clock.t += 4.99
    assert a.is_leader()
    clock.t += 0.01
    assert not a.is_leader()  # ... the deadline does, on the next call, with no thread and no request


def test_the_fence_holds_only_while_the_lease_outlasts_the_write(emulator: EmulatorServer,
                                                                 kube_client: KubeClient) -> None:
    """Issue 27 item 3: a write whose timeout is 11 s is sent only while renew + 15 s - now > 11 s; a standby's
    fence never holds."""
    clock = Clock()
    a, b = elector(kube_client, clock, "a"), elector(kube_client, clock, "b")
    assert a.step() and not b.step()
    assert a.holds_for(11.0) and not b.holds_for(0.0)
    clock.t += 3.99
    assert a.holds_for(11.0)
    clock.t += 0.01  # 4 s after the renew started: 11 s left, not more than 11
    assert not a.holds_for(11.0) and a.holds_for(10.0) and a.is_leader()
    assert a.step()  # renewed: the fence holds again
    assert a.holds_for(11.0)


def test_another_holder_ends_leadership_at_once(emulator: EmulatorServer, kube_client: KubeClient) -> None:
    clock = Clock()
    a = elector(kube_client, clock, "a")
    assert a.step()
    current = emulator.request("GET", f"{LEASES}/{LEASE}")[1]
    current["spec"]["holderIdentity"] = "intruder"
    assert emulator.request("PUT", f"{LEASES}/{LEASE}", current)[0] == 200
    assert a.is_leader()  # not seen yet
    assert not a.step() and not a.is_leader()  # seen: stop acting even before the renew deadline


def test_each_acquisition_is_a_new_term_so_a_lease_lost_and_won_back_shows(emulator: EmulatorServer,
                                                                           kube_client: KubeClient) -> None:
    """term() is 0 while not leader, the same number across renewals and a new one each time the Lease is acquired:
    a replica that lost it to another (who may have removed pods) and won it back between two cycles sees a new
    term, where is_leader() said True twice (the cycle then reads the deletion ledger back: sim seed 48)."""
    clock = Clock()
    a, b = elector(kube_client, clock, "a"), elector(kube_client, clock, "b")
    assert a.term() == 0
    assert a.step() and a.term() == 1
    clock.t += 2
    assert a.step() and a.term() == 1  # a renewal: the same term
    assert not b.step() and b.term() == 0
    clock.t += 16  # a stops renewing; b takes over
    assert b.step() and b.term() == 1
    assert not a.step() and a.term() == 0
    clock.t += 16  # b stops renewing; a takes the Lease back
    assert a.step() and a.is_leader() and a.term() == 2
    clock.t += 11  # past the renew deadline without a renew: not leader, no term
    assert a.term() == 0


def test_an_acquisition_whose_answer_was_lost_is_a_term_once_seen(emulator: EmulatorServer,
                                                                 kube_client: KubeClient) -> None:
    """The create that won the Lease timed out on its way back: the next attempt reads the Lease as ours (a renew for
    the API) and that is where our term begins (sim seed 76 found a replica that led with term 0, deciding nothing)."""

    class LosesFirstAnswer:
        def __init__(self) -> None:
            self.lost = False

        def __getattr__(self, name: str) -> Any:
            return getattr(kube_client, name)

        def create_lease(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
            created = kube_client.create_lease(namespace, body)
            if not self.lost:
                self.lost = True
                raise KubeError("create lease", 0, "ReadTimeoutError: timed out")
            return created

    clock = Clock()
    a = elector(LosesFirstAnswer(), clock, "a")
    assert not a.step() and a.term() == 0 and lease(emulator)["holderIdentity"] == "a"
    clock.t += 2
    assert a.step() and a.is_leader() and a.term() == 1


def test_stop_releases_so_another_takes_over_at_once(emulator: EmulatorServer, kube_client: KubeClient) -> None:
    clock = Clock()
    a, b = elector(kube_client, clock, "a"), elector(kube_client, clock, "b")
    assert a.step() and not b.step()
    a.stop()
    assert not a.is_leader()
    spec = lease(emulator)
    assert spec["holderIdentity"] == "" and spec["leaseDurationSeconds"] == 1 and spec["leaseTransitions"] == 0
    assert b.step() and b.is_leader()  # same instant: no lease duration to wait
    assert lease(emulator)["holderIdentity"] == "b" and lease(emulator)["leaseTransitions"] == 1
    emulator.emulator.request_log.clear()
    a.stop()  # not the holder: no write
    assert emulator.emulator.count_requests(verb="replace") == 0 and lease(emulator)["holderIdentity"] == "b"


def test_a_stop_with_a_write_in_flight_leaves_the_lease_to_expire(emulator: EmulatorServer,
                                                                  kube_client: KubeClient) -> None:
    """Fresh-eyes finding: SIGTERM released the Lease while a cycle's write could still be at the server, and a
    standby's fence let it write at once. With a cycle still running the Lease is left to expire."""
    clock = Clock()
    a, b = elector(kube_client, clock, "a"), elector(kube_client, clock, "b")
    assert a.step() and not b.step()
    a.stop(release=False)
    assert not a.is_leader() and not a.holds_for(0.0)
    assert lease(emulator)["holderIdentity"] == "a"
    assert not b.step()  # the others wait the lease duration, timed on their own clocks
    clock.t += 15.0
    assert b.step() and b.is_leader()


class Interleaved(FakeKube):
    """Forwards to a KubeClient; runs ``hook`` once right after the next get_lease answered."""

    def __init__(self, kube: KubeClient) -> None:
        super().__init__(kube)
        self.hook: Callable[[], object] | None = None

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        result = self.inner.get_lease(namespace, name)
        hook, self.hook = self.hook, None
        if hook is not None:
            hook()
        return result


class Slow(FakeKube):
    """Forwards to a KubeClient; the next get_lease runs ``hook`` (time passes, the others act) before the server
    answers it: a GET that froze (a GC pause, a throttled API server) and then returned what was there by then."""

    def __init__(self, kube: KubeClient) -> None:
        super().__init__(kube)
        self.hook: Callable[[], object] | None = None

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        hook, self.hook = self.hook, None
        if hook is not None:
            hook()
        return self.inner.get_lease(namespace, name)


def test_a_record_is_observed_when_the_answer_arrives_not_when_the_request_started(emulator: EmulatorServer,
                                                                                   kube_client: KubeClient) -> None:
    # Found by the simulation's hour-long run (seed 4462; tests/sim/README.md): b's GET froze for 15 s, during which
    # a took over the lapsed Lease; b timed its observation of a's fresh record from the start of that GET, so 11 s
    # later it judged a's Lease expired and took it while a, renewed 11 s before, still held and wrote: two leaders.
    clock = Clock()
    slow = Slow(kube_client)
    a, b = elector(kube_client, clock, "a"), elector(slow, clock, "b")
    assert b.step() and not a.step()  # b holds; a first sees b's record at t0
    clock.t += 5

    def frozen() -> None:
        clock.t += 15  # b's GET sent at t0 + 5 is answered at t0 + 20
        assert a.step() and a.is_leader()  # b's record unrenewed since t0: a takes over at t0 + 20
    slow.hook = frozen
    assert not b.step() and not b.is_leader()  # b sees a's record: the answer arrived at t0 + 20
    clock.t += 11  # t0 + 31: a's Lease (renewed at t0 + 20) lasts until t0 + 35
    assert not b.step() and lease(emulator)["holderIdentity"] == "a"  # (a stopped acting at its renew deadline)
    clock.t += 4  # t0 + 35: a never renewed; b's observation of its record is 15 s old
    assert b.step() and lease(emulator)["holderIdentity"] == "b"


@pytest.mark.parametrize("existing", [False, True], ids=["create-race", "takeover-race"])
def test_a_lost_write_race_is_a_409_and_not_leadership(emulator: EmulatorServer, kube_client: KubeClient,
                                                       existing: bool) -> None:
    if existing:
        emulator.create_object(LEASES, {"metadata": {"name": LEASE},
                                        "spec": {"holderIdentity": "ghost", "leaseDurationSeconds": 15}})
    clock = Clock()
    racy = Interleaved(kube_client)
    a, b = elector(kube_client, clock, "a"), elector(racy, clock, "b")
    if existing:
        assert not a.step() and not b.step()
        clock.t += 15
    racy.hook = a.step  # a reads AND writes between b's read and b's write
    emulator.emulator.request_log.clear()
    assert b.step() is False and not b.is_leader()
    assert a.is_leader() and lease(emulator)["holderIdentity"] == "a"
    writes = [r.verb for r in emulator.emulator.request_log if r.verb != "get"]
    assert writes == (["replace", "replace"] if existing else ["create", "create"])  # a's won, b's got 409


def test_racing_electors_are_never_leaders_together(emulator: EmulatorServer, kube_client: KubeClient) -> None:
    clock, rng = Clock(), random.Random(6)
    electors = [elector(kube_client, clock, name) for name in ("a", "b", "c")]
    paused_until = dict.fromkeys(range(3), 0.0)
    leaders_seen = set()
    for _ in range(300):
        clock.t += rng.choice([0.0, 0.5, 1.0, 2.0, 3.0])
        i = rng.randrange(3)
        if rng.random() < 0.05:
            paused_until[i] = clock.t + rng.uniform(5, 40)  # a GC pause / partition: no renewals
        if clock.t >= paused_until[i]:
            electors[i].step()
        leaders = [e.identity for e in electors if e.is_leader()]
        assert len(leaders) <= 1, (clock.t, leaders)
        leaders_seen.update(leaders)
    assert len(leaders_seen) >= 2  # leadership did move between them


def test_background_thread_campaigns_and_hands_over_on_stop(emulator: EmulatorServer,
                                                            kube_client: KubeClient) -> None:
    a, b = (LeaderElector(kube_client, NS, LEASE, identity=name, lease_duration_s=3.0, renew_deadline_s=2.0,
                          retry_period_s=0.1) for name in ("a", "b"))  # wide margins for a busy CI machine
    a.start()
    assert wait_for(a.is_leader, 2.0)
    b.start()
    time.sleep(0.4)
    assert a.is_leader() and not b.is_leader()  # a keeps renewing; b keeps waiting
    stopped = time.monotonic()
    a.stop()
    assert not a.is_leader()
    assert wait_for(b.is_leader, 2.0)
    assert time.monotonic() - stopped < 2.5  # released: no lease duration (3 s) to wait out
    b.stop()
    assert lease(emulator)["holderIdentity"] == ""


def wait_for(predicate: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def test_settings_are_checked_and_identities_unique(kube_client: KubeClient) -> None:
    for lease_s, renew_s, retry_s in ((10.0, 10.0, 2.0), (15.0, 2.0, 2.0), (15.0, 10.0, 0.0)):
        with pytest.raises(ValueError, match=r"lease duration .* > renew deadline"):
            LeaderElector(kube_client, NS, LEASE, lease_duration_s=lease_s, renew_deadline_s=renew_s,
                          retry_period_s=retry_s)
    with pytest.raises(ValueError, match="identity"):
        LeaderElector(kube_client, NS, LEASE, identity="")
    assert default_identity() != default_identity()
    assert LeaderElector(kube_client, NS, LEASE).identity.split("_")[0]

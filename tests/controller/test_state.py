"""What the cycle remembers per pod (watchdog/controller/state.py): the scrapes in a row that timed out, and
engine series fed at their own sample times (source prometheus), never twice at one."""

from __future__ import annotations

from watchdog.controller.reading import Reading
from watchdog.controller.state import PodRecord
from watchdog.core.detector import DetectorState
from watchdog.core.model import WatchedPod
from watchdog.core.parsing import ParseResult, parse_exposition
from watchdog.core.profiles import get_profile

VLLM = get_profile("vllm")

TARGET = WatchedPod(uid="uid-0", namespace="ns", name="pod-0", ip="10.0.0.1", port=8000, path="/metrics",
                    target_name="vllm", profile="vllm", mode="enforce", restart_count=0, owner=None)


def test_timeouts_count_the_timed_out_scrapes_in_a_row_and_any_other_outcome_restarts_them() -> None:
    pod = PodRecord(0, 0.0)
    counts = []
    for now, outcome in enumerate(["timeout", "timeout", "timeout", "connection", "timeout", "ok", "timeout"]):
        pod.take(TARGET, Reading(outcome), float(now))
        counts.append(pod.timeouts)
    assert counts == [1, 2, 3, 0, 1, 0, 1]


def _parsed(tokens: dict[str, float]) -> ParseResult:
    return parse_exposition("".join(f'vllm:num_requests_running{{engine="{e}"}} 3\n'
                                    f'vllm:generation_tokens_total{{engine="{e}"}} {v}\n'
                                    for e, v in tokens.items()), VLLM)


def test_stamped_engines_are_fed_at_their_own_time_and_never_twice_at_one() -> None:
    # Source prometheus, two scrape targets: engine 0 stamped 0, 10, 20 ..., engine 1 at 5, 15 ...; the cycle
    # reads every 5 s, so each reading has one engine whose time did not move: it is held, not fed again.
    pod, fed = PodRecord(0, 0.0), []

    def detector() -> DetectorState:
        return DetectorState(30.0, min_samples=3, signals=VLLM.progress)

    zero, one = (("engine", "0"),), (("engine", "1"),)
    for cycle in range(12):
        stamps = {zero: 10.0 * (cycle // 2), one: 10.0 * ((cycle - 1) // 2) + 5}
        _, seen = pod.observe(max(stamps.values()), _parsed({"0": 7, "1": 9}), 30.0, detector, stamps)
        fed.append([(o.key, o.verdict.t) for o in seen])
        assert all(o.present for o in seen)
    assert fed[2] == [('engine="0"', 10.0), ('engine="1"', 5.0)] and fed[3] == fed[2][:1] + [('engine="1"', 15.0)]
    zero_engine, one_engine = pod.engines['engine="0"'], pod.engines['engine="1"']
    # engine 0 frozen busy from t=0 to 50 (6 samples, each once, not 12); engine 1 from -5 to 55 (7 samples)
    assert (zero_engine.verdict.busy_samples, zero_engine.verdict.stalled_for_s) == (6, 50.0)
    assert (one_engine.verdict.busy_samples, one_engine.verdict.stalled_for_s) == (7, 60.0)
    assert zero_engine.verdict.stalled and zero_engine.fed_at == 50.0 and one_engine.fed_at == 55.0


def test_without_stamps_every_engine_is_fed_at_the_pods_time() -> None:
    pod = PodRecord(0, 0.0)
    for t in (0.0, 0.0, 1.0):
        _, seen = pod.observe(t, _parsed({"0": 7}), 30.0, lambda: DetectorState(30.0, signals=VLLM.progress))
    assert seen[0].verdict.busy_samples == 3 and pod.engines['engine="0"'].fed_at is None


def test_an_engine_stamped_none_is_held_and_a_new_one_is_unknown_until_it_has_a_stamp() -> None:
    pod, zero, one = PodRecord(0, 0.0), (("engine", "0"),), (("engine", "1"),)

    def detector() -> DetectorState:
        return DetectorState(30.0, signals=VLLM.progress)

    pod.observe(5.0, _parsed({"0": 7}), 30.0, detector, {zero: 5.0}, 60.0)
    _, seen = pod.observe(9.0, _parsed({"0": 8, "1": 9}), 30.0, detector, {zero: None, one: None}, 60.0)
    assert [(o.key, o.verdict.state, o.verdict.t) for o in seen] == [
        ('engine="0"', "suspect", 5.0), ('engine="1"', "unknown", 9.0)]  # held; new: unknown, never evidence
    assert pod.engines['engine="0"'].held and pod.engines['engine="0"'].last.progress[0] == 7  # type: ignore[union-attr]
    assert seen[1].verdict.reason == (
        "no evidence: its samples changed while Prometheus was read (fed when they hold still)")


def test_an_engine_held_past_the_bound_turns_unknown_and_says_why_then_goes_on_when_fed() -> None:
    # Its samples change during every read (Prometheus appends a scrape of it between the two time queries):
    # held for at most hold_s, then unknown (visible: ManyUnknown, /status), never a silent old verdict.
    pod, zero = PodRecord(0, 0.0), (("engine", "0"),)

    def detector() -> DetectorState:
        return DetectorState(30.0, signals=VLLM.progress)

    states = []
    for t, stamp in ((0.0, 0.0), (10.0, 10.0), (20.0, None), (30.0, None), (40.0, None), (50.0, 50.0)):
        _, (seen,) = pod.observe(t, _parsed({"0": 7}), 30.0, detector, {zero: stamp}, 25.0)
        states.append((seen.verdict.state, seen.verdict.t, pod.engines['engine="0"'].held))
    assert states == [("suspect", 0.0, False), ("suspect", 10.0, False), ("suspect", 10.0, True),
                      ("suspect", 10.0, True), ("unknown", 40.0, False), ("stalled", 50.0, False)]
    assert seen.verdict.stalled_for_s == 50.0  # the clock ran on across the unknown gap (detector rule 5)
    _, (held,) = pod.observe(60.0, _parsed({"0": 7}), 30.0, detector, {zero: None}, 25.0)
    assert held.verdict.state == "stalled" and pod.engines['engine="0"'].held
    _, (late,) = pod.observe(80.0, _parsed({"0": 7}), 30.0, detector, {zero: None}, 25.0)
    assert late.verdict.reason == ("no evidence: no sample of it fed for 30 s (its samples changed while "
                                   "Prometheus was read each time, or stopped)")

"""The deterministic simulation (issue 37): every seed's world run through ``wiring.build`` with the oracles after
every step (tests/sim/README.md). ``SIM_SEEDS`` seeds (the default run: 200; ``make sim``: 2,000 on 2 workers;
``make sim SEEDS=N``), or one ``SIM_SEED`` (with ``SIM_FAULTS``/``SIM_STEPS``: a shrunk schedule) replayed.
A failure prints the smallest failing schedule it found and the one command that replays it."""

from __future__ import annotations

import os

import pytest
from sim_run import parse_faults, parse_pattern, report, run_seed

pytestmark = pytest.mark.sim

CHUNK = 25
#: Seeds that fail on the current code for a listed finding (tests/sim/README.md "Findings"): each must still fail
#: (strict xfail); once fixed, it passes and the test says to move it back into the run.
KNOWN: dict[int, str] = {406: "the owner share is forgotten across a restart (README Findings 7)"}
#: Seeds that once failed for a finding, fixed since: kept in every run as regressions (README "Findings"), with the
#: pattern they failed with ("": none: the seeds found before patterns, whose worlds stay as they were then).
REGRESSIONS = {130: "", 326: "", 388: "", 2088: "", 3224: "", 4462: "", 6417: "", 6630: "", 6647: "",
               16849: "", 48: "leader_blink"}
SEEDS = int(os.environ.get("SIM_SEEDS", "200"))
FIRST = int(os.environ.get("SIM_FIRST", "0"))
ONE = os.environ.get("SIM_SEED")


def _chunks() -> list[range]:
    if ONE is not None:
        return [range(int(ONE), int(ONE) + 1)]
    return [range(s, min(s + CHUNK, FIRST + SEEDS)) for s in range(FIRST, FIRST + SEEDS, CHUNK)]


@pytest.mark.parametrize("seeds", _chunks(), ids=lambda r: f"seeds{r.start}-{r.stop - 1}")
def test_seeds_hold_every_oracle(seeds: range) -> None:
    faults = parse_faults(os.environ.get("SIM_FAULTS")) if ONE is not None else None
    steps = int(os.environ["SIM_STEPS"]) if ONE is not None and os.environ.get("SIM_STEPS") else None
    pattern = parse_pattern(os.environ.get("SIM_PATTERN")) if ONE is not None else None
    for seed in seeds:
        if seed in KNOWN and ONE is None:
            continue
        outcome = run_seed(seed, faults=faults, steps=steps, pattern=pattern)
        if outcome.violations:
            pytest.fail(report(outcome), pytrace=False)


def test_a_seed_replays_the_same_steps() -> None:
    """Determinism: the same seed applies the same writes at the same times, whatever ran before it."""
    first, other, again = run_seed(11), run_seed(12), run_seed(11)
    assert first.digest == again.digest and first.schedule == again.schedule
    assert first.digest != other.digest


def test_a_fixed_schedule_replays_the_drawn_one() -> None:
    """Replaying a seed with the schedule it drew gives the same run (what shrinking and the replay command rely
    on)."""
    drawn = next(o for o in (run_seed(s) for s in range(40)) if len(o.taken) >= 3)
    replayed = run_seed(drawn.seed, faults=drawn.schedule)
    assert replayed.digest == drawn.digest
    assert [t[:3] for t in replayed.taken] == [t[:3] for t in drawn.taken]


def test_a_shorter_replay_is_the_same_world_cut_short() -> None:
    """What the replay command of a shrunk run relies on: fewer steps (and an explicit empty schedule) replay the
    same world up to where they stop (asking for fewer steps once drew another world: the hour-long run's seed
    3224 did not fail when replayed)."""
    whole = run_seed(3224, oracles=())
    short = run_seed(3224, faults=whole.schedule, steps=whole.steps - 4, oracles=())
    assert short.steps == whole.steps - 4 and short.taken == whole.taken[:len(short.taken)]
    assert parse_faults("none") == {} and parse_faults(None) is None


@pytest.mark.parametrize("seed", sorted(KNOWN))
def test_known_findings_still_fail(seed: int) -> None:
    """A listed finding's seed fails on the current code; when it passes, the finding is fixed: drop it from KNOWN
    (it runs with the others again) and from the README."""
    outcome = run_seed(seed)
    assert outcome.violations, f"seed {seed} passes now ({KNOWN[seed]} fixed?): remove it from KNOWN"


@pytest.mark.parametrize("seed", sorted(REGRESSIONS))
def test_fixed_findings_stay_fixed(seed: int) -> None:
    """The seeds of the findings fixed since (README "Findings"), whatever SIM_SEEDS the run asks for."""
    outcome = run_seed(seed, pattern=REGRESSIONS[seed])
    assert not outcome.violations, report(outcome)


def test_every_reintroduced_defect_still_applies_to_the_code() -> None:
    """tests/sim/defects.py's table is only evidence while each defect's text still matches the code it breaks
    exactly once: a refactor that moves it must move the defect too (three had silently stopped applying)."""
    from defects import DEFECTS, ROOT

    stale = {d.id: (ROOT / "watchdog" / d.path).read_text().count(d.old) for d in DEFECTS}
    assert {k: n for k, n in stale.items() if n != 1} == {}

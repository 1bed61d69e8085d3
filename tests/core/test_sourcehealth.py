"""The source-health rule (watchdog/core/sourcehealth.py): a cycle failed when every due read failed to reach
what it reads; FAILED_CYCLES of them in a row make the source down until a cycle reads anything."""

from __future__ import annotations

from watchdog.core.sourcehealth import FAILED_CYCLES, TRANSPORT_FAILURES, SourceHealth
from watchdog.core.vocab import SCRAPE_OUTCOMES

PROM_DOWN = [("prometheus_error", "reading it from Prometheus: Prometheus http://prom:9090 unreachable: refused")] * 4
SCRAPES_DOWN = [("timeout", "scrape of http://10.0.0.1:8000/metrics: timeout after 3.0 s"),
                ("refused", "scrape of http://10.0.0.2:8000/metrics: connection refused"),
                ("connection", "scrape of http://10.0.0.3:8000/metrics: TLS handshake failed")]


def cycles(health: SourceHealth, reads: list[tuple[str, str]], n: int) -> SourceHealth:
    for _ in range(n):
        health = health.after(reads)
    return health


def test_down_after_the_third_failed_cycle_in_a_row_and_up_at_the_first_read() -> None:
    assert FAILED_CYCLES == 3
    h = cycles(SourceHealth(), PROM_DOWN, FAILED_CYCLES - 1)
    assert h.up and h.failed_cycles == 2
    h = h.after(PROM_DOWN)
    assert not h.up and h.failed_cycles == 3
    assert h.why == ("all 4 reads of the last cycle failed, first: reading it from Prometheus: Prometheus "
                     "http://prom:9090 unreachable: refused")
    assert not cycles(h, PROM_DOWN, 5).up
    back = h.after([*PROM_DOWN, ("ok", "")])  # one pod read
    assert back == SourceHealth() and back.up


def test_a_read_between_failed_cycles_starts_the_count_again() -> None:
    h = cycles(SourceHealth(), SCRAPES_DOWN, 2).after([("ok", "")])
    assert cycles(h, SCRAPES_DOWN, 2).up
    assert not cycles(h, SCRAPES_DOWN, 3).up


def test_no_pod_due_is_no_evidence_either_way() -> None:
    assert SourceHealth().after([]) == SourceHealth()
    h = cycles(SourceHealth(), SCRAPES_DOWN, 2)
    assert h.after([]) == h  # the count stays: not a failed cycle, not a read
    down = cycles(SourceHealth(), SCRAPES_DOWN, 3)
    assert down.after([]) == down and not down.after([]).up


def test_one_tenants_pods_all_down_is_not_a_failed_cycle_while_another_pod_answered() -> None:
    tenant_a_down = [("refused", "scrape of http://10.0.1.1:8000/metrics: connection refused")] * 5
    assert cycles(SourceHealth(), [*tenant_a_down, ("ok", "")], 10) == SourceHealth()


def test_a_pod_that_answered_was_reached() -> None:
    """An HTTP error, a body too large or undecodable, a body that does not parse, and Prometheus answering without
    the pod's series: the source was reached, so none of these is a failed read."""
    reached = [o for o in SCRAPE_OUTCOMES if o not in TRANSPORT_FAILURES]
    assert sorted(reached) == ["bad_encoding", "http_status", "ok", "parse", "prometheus_unknown", "too_large"]
    for outcome in reached:
        assert cycles(SourceHealth(), [(outcome, "x")], 5) == SourceHealth(), outcome
    assert cycles(SourceHealth(), [*SCRAPES_DOWN, ("http_status", "HTTP 503")], 5).up


def test_every_transport_failure_counts() -> None:
    for outcome in TRANSPORT_FAILURES:
        assert not cycles(SourceHealth(), [(outcome, "x")], 3).up, outcome

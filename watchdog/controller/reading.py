"""What a source hands the cycle for one pod (:class:`Reading`): the reading goes into the pod's record
(:mod:`watchdog.controller.state`), verdicts come out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from watchdog.core.lines import Labels
from watchdog.core.parsing import ParseResult


@dataclass(frozen=True, slots=True)
class Reading:
    """One pod's engine signals as a source read them.

    ``outcome``: "ok", or why the pod is unknown this cycle (a scrape error reason, "parse", "prometheus_error",
    "prometheus_unknown": the label of vllm_watchdog_scrapes_total); ``parsed``: its engine series (None unless
    ok); ``detail``: why it failed, one line ("" when ok); ``what``: what failed, for the log ("scrape of URL");
    ``t``: the sample time on the monotonic clock (None: now); ``stamps``: each engine series' own sample time by
    its labels (None for one not to be fed this cycle), or None when every series is at ``t``; ``seconds``: how
    long the pod's own read took (the fan-out's order next cycle; None: not a read of its own); ``mark``: the
    source's own time mark kept on the pod's record and handed back next cycle (Prometheus: the newest sample
    time fed, its clock; None: unchanged)."""

    outcome: str
    parsed: ParseResult | None = None
    detail: str = ""
    what: str = ""
    t: float | None = None
    stamps: Mapping[Labels, float | None] | None = None
    seconds: float | None = None
    mark: float | None = None

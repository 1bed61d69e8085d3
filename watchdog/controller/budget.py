"""The deletion budget survives restarts and leader changes: this watchdog's recent removals read back into the
policy from its deletion ledger, MERGED with what this process already knows (docs/safety.md "Deletion budgets":
never from Events; without a ledger, one deletion window of ``budget_unknown``)."""

from __future__ import annotations

import logging

from watchdog.controller.ledger import DeletionLedger
from watchdog.core.ledger import deletions as ledger_deletions
from watchdog.core.policy import DeletionPolicy

log = logging.getLogger(__name__)


def restore_budget(policy: DeletionPolicy, now: float, ledger: DeletionLedger | None) -> bool:
    """Restore ``policy``'s deletion history from ``ledger`` (every entry of it, whatever namespace), aged on the
    API server's clock as of the read (the ledger's clock). ``now``: monotonic seconds. False (logged; the caller
    tries again next cycle) when the ledger cannot be read."""
    window = policy.rails.deletion_window_seconds
    if ledger is None:
        policy.restore([], blind_until=now + window)
        log.warning("no deletion ledger (budgetLedger: false): what an earlier replica removed is unknown, so "
                    "nothing is removed for one deletion window (%g s)", window)
        return True
    entries = ledger.read()
    if entries is None:
        return False
    restored = ledger_deletions(entries, now=now, wall_now=ledger.clock(), window_s=window,
                                sent_within_s=ledger.sent_within_s)
    policy.restore(restored)
    log.info("deletion budget restored from the ledger %s: %d removals in the last %g s (merged with this "
             "process's own)", ledger.ref, len(restored), window)
    return True

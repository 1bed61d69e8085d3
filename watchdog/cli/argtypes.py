"""argparse value types shared by the verbs: one clear line for a bad value, never a traceback; and the verbs'
one-line refusal (:func:`refuse`)."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable

MAX_SECONDS = 86400.0  # a day: a longer duration is a typo, and overflows timers and sleeps
MAX_INT = 1 << 40


def refuse(prog: str, message: str) -> int:
    """Say ``message`` on stderr as one line after the verb's ``prog``; return exit status 2 (bad usage or input)."""
    print(f"{prog}: {message}", file=sys.stderr)
    return 2


def seconds_between(low: float, high: float = MAX_SECONDS, *, low_inclusive: bool = False) -> Callable[[str], float]:
    """A type for a finite number of seconds in ``low..high`` (``low`` itself only when ``low_inclusive``)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text[:80]!r} is not a number of seconds") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text[:80]!r} is not a finite number of seconds")
        if value < low or (value == low and not low_inclusive):
            raise argparse.ArgumentTypeError(f"{text[:80]!r} must be {'>=' if low_inclusive else '>'} {low:g} seconds")
        if value > high:
            raise argparse.ArgumentTypeError(f"{text[:80]!r} must be at most {high:g} seconds")
        return value

    parse.__name__ = "seconds"  # argparse names the type in its "invalid ... value" fallback
    return parse


positive_seconds = seconds_between(0.0)  # a finite number of seconds > 0 and at most MAX_SECONDS
non_negative_seconds = seconds_between(0.0, low_inclusive=True)  # the same, >= 0


def positive_int(text: str) -> int:
    """A whole number >= 1 (and at most 2**40)."""
    try:
        value = int(text[:50])
        if len(text) > 50:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:80]!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 1")
    if value > MAX_INT:
        raise argparse.ArgumentTypeError(f"{text!r} must be at most {MAX_INT}")
    return value

"""Command-line flags derived from the settings table: one ``--flag`` per row, each help naming its
``WATCHDOG_*`` variable, file key and default."""

from __future__ import annotations

import argparse
from typing import Any

from watchdog.config.settings import SETTINGS


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Add one flag per setting (``--window-seconds`` ...); each help names its env var and default."""
    group = parser.add_argument_group("settings (flag > env var > config file > default)")
    for s in SETTINGS:
        default = "unset" if s.default is None else s.default
        text = f"{s.help} [env {s.env}, file key {s.key}, default {default}]"
        if s.type == "bool":
            group.add_argument(s.flag, dest=s.name, action=argparse.BooleanOptionalAction, default=None, help=text)
        else:
            metavar = ("|".join(s.choices) if s.choices else "SECONDS" if s.name.endswith("_seconds")
                       else {"int": "N", "float": "NUMBER"}.get(s.type, "TEXT"))
            group.add_argument(s.flag, dest=s.name, default=None, metavar=metavar, help=text)


def flags_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The setting flags given on the command line (name -> raw value; absent flags are left out)."""
    return {s.name: getattr(args, s.name) for s in SETTINGS if getattr(args, s.name, None) is not None}

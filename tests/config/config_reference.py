"""docs/configuration.md, the configuration reference, generated from the settings table
(watchdog/config/settings.py): every setting with its config-file key, flag, environment variable, type, default,
bounds and help; the keys a target may set for its own pods; the rules between settings (settings.COMPARISONS,
which the chart checks too). ``.venv/bin/python tests/config/config_reference.py`` rewrites it;
tests/config/test_config_reference.py fails while it differs. Pure but for :func:`main`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from watchdog.config.settings import (
    BY_NAME,
    COMPARISONS,
    SETTINGS,
    TARGET_KEYS,
    TARGET_POLICY,
    Comparison,
    Setting,
    number_text,
)

PATH = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _default(s: Setting) -> str:
    if s.default is None:
        return "unset"
    if isinstance(s.default, bool):
        return str(s.default).lower()
    if isinstance(s.default, float):
        return number_text(s.default)
    return f'"{s.default}"' if isinstance(s.default, str) else str(s.default)


def _bounds(s: Setting) -> str:
    if s.choices:
        return ", ".join(s.choices)
    if s.minimum is None and s.maximum is None:
        return ""
    return " .. ".join("" if x is None else number_text(x) for x in (s.minimum, s.maximum))


def _rule(r: Comparison) -> str:
    right = BY_NAME[r.right].key if isinstance(r.right, str) else number_text(r.right)
    bound = f"{number_text(r.factor)} x {right}" if r.factor != 1 else right
    if r.floor:
        bound = f"max({number_text(r.floor)}, {bound})"
    text = f"`{BY_NAME[r.left].key}` {r.op} {bound}"
    conditions = [f"only with `{BY_NAME[r.when].key}: true`"] if r.when else []
    conditions += ["0 (off) always passes"] if r.unless_zero else []
    return text + (f" ({'; '.join(conditions)})" if conditions else "")


def reference() -> str:
    """The whole document."""
    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated from watchdog/config/settings.py by tests/config/config_reference.py: edit the table and run",
        "it; tests/config/test_config_reference.py fails while this file differs. -->",
        "",
        "Every setting of the watchdog, from one table. Each is read, in rising precedence, from its default, the",
        "config file (`--config`, or `$WATCHDOG_CONFIG`: YAML, the key below), the environment variable and the flag.",
        "In the Helm chart the key goes under `config:` (except `watchNamespaces`, a top-level list, and the keys the",
        "chart sets itself: `listenAddress`, `pauseConfigMap`, `kubeconfig`, `context`). `python -m watchdog run",
        "--help` lists the same. A value out of its bounds, or breaking a rule below, is refused at start-up in one",
        "line naming it, and by `helm template`/`install`/`upgrade` first.",
        "",
        "| Key | Flag | Environment | Type | Default | Bounds or choices | What it does |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in SETTINGS:
        kind = s.type if s.type != "choice" else "one of"
        lines.append(f"| `{s.key}` | `{s.flag}` | `{s.env}` | {kind}{' or unset' if s.optional else ''} | "
                     f"{_cell(_default(s))} | {_cell(_bounds(s))} | {_cell(s.help)} |")
    lines += [
        "",
        "## Targets",
        "",
        "`targets` (config file, `$WATCHDOG_TARGETS` as YAML or JSON, the chart's `config.targets`) lists which pods",
        f"are watched and how: each entry has the keys {', '.join(f'`{k}`' for k in TARGET_KEYS)}. A target's own",
        f"{', '.join(f'`{BY_NAME[n].key}`' for n in TARGET_POLICY)} replace the global setting for its pods (unset:",
        "the global one), with the same bounds and the rules below.",
        "",
        "## Rules between settings",
        "",
        "Checked at start-up and by the chart at render time, also on each target's own values:",
        "",
    ]
    lines += [f"- {_rule(r)}" for r in COMPARISONS]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else PATH
    text = reference()
    old = path.read_text() if path.exists() else ""
    path.write_text(text)
    print(f"{path}: {'rewritten' if text != old else 'already up to date'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

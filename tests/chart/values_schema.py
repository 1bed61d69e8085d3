"""The chart's values schema (helm/vllm-stall-watchdog/values.schema.json), its ``config`` part generated from the
settings table and the profile table, so a bound, an enum or a default is written once.

:func:`chart_schema` takes the schema as it is and returns it with every generated node replaced: each setting's
property under ``config`` (type, minimum/maximum, enum, default, description; for a fractional setting also the
decimal string ``helm --set`` passes, held to the same bounds by a pattern), the install-time cross-setting rules
the schema can express (``config.allOf``), and the ``profile``/``source`` enums of ``config.targets``;
:func:`chart_rules` writes templates/_rules.tpl, the rules a schema cannot express (settings.COMPARISONS, the label
selector grammar) as data the chart's validate helper evaluates. Everything
else (image, resources, probes, the target item's other keys, ...) is the chart's own and kept as written.
``.venv/bin/python tests/chart/values_schema.py [PATH]`` rewrites the file; tests/chart/test_helm.py fails while it
differs. Chart tooling beside the chart's other generator (chart_readme.py), not part of the watchdog: it only reads
the package's tables. Pure but for :func:`main`.
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from watchdog.config.settings import BY_NAME, COMPARISONS, SETTINGS, TARGET_POLICY, Setting
from watchdog.core.model import NEVER_WATCHED_NAMESPACES
from watchdog.core.profiles import PROFILES

#: Settings the chart does not expose under ``config``: listenAddress is fixed to the port the probes, the
#: Service and the NetworkPolicy use; in-cluster the watchdog uses its ServiceAccount (no kubeconfig/context);
#: pauseConfigMap is the chart's own config ConfigMap, set by the Deployment's env; watchNamespaces is the chart's
#: top-level list of that name, which also renders the Roles in those namespaces.
NOT_IN_CHART = ("kubeconfig", "context", "listen_address", "pause_config_map", "watch_namespaces")
#: Settings set elsewhere in the chart's values: under ``config`` each is refused with a message saying where it goes.
MISPLACED = {"watch_namespaces": "not under config: set the top-level value watchNamespaces (a list of namespaces: it "
                                 "also renders their Roles); the chart writes it into config.yaml"}
DEFAULT_PATH = Path(__file__).resolve().parents[2] / "helm/vllm-stall-watchdog/values.schema.json"
_TYPES = {"int": "integer", "float": "number", "bool": "boolean", "str": "string"}
_DNS_LABEL = "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
_LABEL_NAME = "^([a-zA-Z][a-zA-Z0-9_]*|_([a-zA-Z0-9][a-zA-Z0-9_]*)?)$"  # no "__" prefix: Prometheus reserves it
_FILE = {"minLength": 1}
# Single-setting rules the watchdog checks in code (watchdog/core/promql.py, names.py, taints.py), as schema
# keywords so the chart refuses them at install time; tests/chart/test_helm.py holds each to the watchdog's verdict.
EXTRA: Mapping[str, Mapping[str, Any]] = {
    "prometheus_url": {"pattern": "^https?://[^@/?#]+(/[^?#]*)?$"},
    "prometheus_bearer_token_file": _FILE,
    "prometheus_username_file": _FILE,
    "prometheus_password_file": _FILE,
    "prometheus_tenant": {"minLength": 1, "maxLength": 256},
    "prometheus_ca_file": _FILE,
    "prometheus_namespace_label": {"pattern": _LABEL_NAME},
    "prometheus_pod_label": {"pattern": _LABEL_NAME},
    "leader_election_namespace": {"pattern": _DNS_LABEL},
    "lease_name": {"pattern": "^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"},
    "node_taint": {"pattern": "^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
                              "(=([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?)?:(NoSchedule|PreferNoSchedule|"
                              "NoExecute)$"},
}


# --- a decimal string within [minimum, maximum], as one regular expression --------------------------------

def _digits(x: float) -> tuple[str, str]:
    """``x`` (>= 0) as its integer digits and its fraction digits without trailing zeros: 0.05 -> ("0", "05")."""
    whole, _, frac = format(Decimal(repr(float(x))), "f").partition(".")
    return whole, frac.rstrip("0")


def _span(low: int, high: int) -> str:
    return str(low) if low == high else f"[{low}-{high}]"


def _group(option: str) -> str | None:
    """The inside of ``option`` when it is one whole ``(?:...)`` group, else None."""
    if not option.startswith("(?:"):
        return None
    depth = 0
    for i, char in enumerate(option):
        depth += {"(": 1, ")": -1}.get(char, 0) if option[i - 1:i] != "\\" else 0
        if depth == 0:
            return option[3:-1] if i == len(option) - 1 else None
    return None


def _alternatives(options: Sequence[str | None]) -> str | None:
    present = [o for o in options if o is not None]
    if len(present) < 2:
        return present[0] if present else None
    return "(?:" + "|".join(_group(o) or o for o in present) + ")"  # (?:a|b)|c is a|b|c


def _free(size: int) -> str:
    """The tail after an integer digit when ``size`` digits follow and no bound constrains them."""
    digits = "" if not size else "[0-9]" if size == 1 else f"[0-9]{{{size}}}"
    return digits + "(?:\\.[0-9]+)?"


def _then(head: str, rest: str | None, empty_ok: bool) -> str | None:
    """``head`` followed by a digit string of ``rest`` (or nothing, when ``empty_ok``); None: no such string."""
    if rest is None:
        return head if empty_ok else None
    if empty_ok and rest == "[0-9]+":
        return head + "[0-9]*"
    return head + (f"(?:{rest})?" if empty_ok else rest)


def _fraction(low: str | None, high: str | None) -> tuple[str | None, bool]:
    """Fraction digits f with 0.f >= 0.low and 0.f <= 0.high (None: no such bound; the bounds' digits still to
    match, without trailing zeros): a regex of the non-empty ones (None: none) and whether the empty one is."""
    low = low or None
    if low is None and high is None:
        return "[0-9]+", True
    if high == "":  # the bound is reached: only zeros may follow
        return (None, False) if low else ("0+", True)
    lo_d, hi_d = int(low[0]) if low else 0, int(high[0]) if high is not None else 9
    if low and high is not None and lo_d == hi_d:
        return _then(str(lo_d), *_fraction(low[1:], high[1:])), False
    options = []
    if low:
        options.append(_then(str(lo_d), *_fraction(low[1:], None)))
    start, end = lo_d + bool(low), hi_d - (high is not None)
    if start <= end:
        options.append(f"{_span(start, end)}[0-9]*")
    if high is not None:
        options.append(_then(str(hi_d), *_fraction(None, high[1:])))
    return _alternatives(options), low is None


def _integer(pos: int, size: int, low: str | None, high: str | None, fracs: tuple[str, str]) -> str | None:
    """Integers of ``size`` digits (no leading zero) from digit ``pos`` on, >= ``low`` and <= ``high`` (the
    bounds' digits, None once no longer tight), each followed by the fraction that tightness leaves."""
    if pos == size:
        rest, empty_ok = _fraction(fracs[0] if low is not None else None, fracs[1] if high is not None else None)
        if rest is None:
            return "" if empty_ok else None
        return f"(?:\\.{rest})?" if empty_ok else f"\\.{rest}"
    lo_d = int(low[pos]) if low is not None else int(pos == 0 and size > 1)
    hi_d = int(high[pos]) if high is not None else 9
    if low is not None and high is not None and lo_d == hi_d:
        tail = _integer(pos + 1, size, low, high, fracs)
        return None if tail is None else str(lo_d) + tail
    free = _free(size - pos - 1)
    low_tail = _integer(pos + 1, size, low, None, fracs) if low is not None else free
    high_tail = _integer(pos + 1, size, None, high, fracs) if high is not None else free
    start, end = lo_d + (low_tail != free), hi_d - (high_tail != free)  # a bound digit with a free tail joins
    return _alternatives([None if low_tail in (None, free) else str(lo_d) + low_tail,
                          _span(start, end) + free if start <= end else None,
                          None if high_tail in (None, free) else str(hi_d) + high_tail])


def decimal_pattern(minimum: float, maximum: float) -> str:
    """A regex of the decimal strings (``^[0-9]+(\\.[0-9]+)?$``, leading zeros allowed) whose value is within
    [minimum, maximum] (0 <= minimum <= maximum): how the schema holds ``--set key=2.5`` (a string) to a
    setting's bounds. An RE2 and ECMA-262 regex: no look-around."""
    if not 0 <= minimum <= maximum:
        raise ValueError(f"bounds {minimum}..{maximum}: want 0 <= minimum <= maximum")
    (lo_int, lo_frac), (hi_int, hi_frac) = _digits(minimum), _digits(maximum)
    options: list[str | None] = []
    free_sizes: list[int] = []  # sizes > 1 with every integer of that size in range: one [1-9][0-9]{m,n}
    for size in range(len(lo_int), len(hi_int) + 1):
        option = _integer(0, size, lo_int if size == len(lo_int) else None,
                          hi_int if size == len(hi_int) else None, (lo_frac, hi_frac))
        if size > 1 and option == "[1-9]" + _free(size - 1):
            free_sizes.append(size)
            continue
        options.append(option)
    if free_sizes:
        low, high = free_sizes[0] - 1, free_sizes[-1] - 1
        options.insert(len(options) - (len(hi_int) > free_sizes[-1]),
                       "[1-9][0-9]" + ("" if low == high == 1 else f"{{{low}}}" if low == high else f"{{{low},{high}}}")
                       + "(?:\\.[0-9]+)?")
    return f"^0*{_alternatives(options)}$"


# --- the generated nodes ----------------------------------------------------------------------------------

def setting_schema(setting: Setting) -> dict[str, Any]:
    """One setting's property: its type (a fractional setting also as the decimal string ``helm --set k=2.5``
    passes, held to the same bounds; an optional one also null), bounds or enum, default and help."""
    out: dict[str, Any] = {}
    if setting.type == "choice":
        out["enum"] = list(setting.choices)
    else:
        types = [_TYPES[setting.type]] + (["string"] if setting.type == "float" else [])
        out["type"] = types + ["null"] if setting.optional else types[0] if len(types) == 1 else types
    if setting.type == "float" and setting.minimum is not None and setting.maximum is not None:
        out["pattern"] = decimal_pattern(setting.minimum, setting.maximum)
    for keyword in ("minimum", "maximum"):
        bound = getattr(setting, keyword)
        if bound is not None:
            out[keyword] = int(bound) if float(bound).is_integer() else bound
    out.update(EXTRA.get(setting.name, {}))
    out["default"] = setting.default
    out["description"] = setting.help
    return out


def target_setting_schema(setting: Setting) -> dict[str, Any]:
    """A target's own value of a global setting (``targets[].windowSeconds`` ...): the row's schema, unset (or
    null) meaning the global value, so no default of its own."""
    out = setting_schema(setting)
    del out["default"]
    if "enum" in out:
        out["enum"] = [*out["enum"], None]
    else:
        out["type"] = [*([out["type"]] if isinstance(out["type"], str) else out["type"]), "null"]
    out["description"] = f"this target's own {setting.key} (unset: the global one, with its bounds): {setting.help}"
    return out


def _key(name: str) -> str:
    return BY_NAME[name].key


def _is(name: str, value: Any) -> dict[str, Any]:
    return {"properties": {_key(name): {"const": value}}, "required": [_key(name)]}


def _set(name: str) -> dict[str, Any]:
    """The (optional) setting has a value, not null."""
    return {"properties": {_key(name): {"type": "string"}}, "required": [_key(name)]}


def cross_rules() -> list[dict[str, Any]]:
    """The cross-setting rules a schema can express (the watchdog checks them too: settings.quarantine_problems,
    sources.source_checks, core/promql.auth_problem); a comparison of two numbers is settings.COMPARISONS, which
    :func:`chart_rules` writes into templates/_rules.tpl for the chart's validate helper."""
    prometheus = {"anyOf": [_is("source", "prometheus"), {
        "properties": {"targets": {"contains": {"properties": {"source": {"const": "prometheus"}},
                                                "required": ["source"]}}}, "required": ["targets"]}]}
    username, password = _set("prometheus_username_file"), _set("prometheus_password_file")
    quarantined = {"anyOf": [_is("action", "quarantine"), {
        "properties": {"targets": {"contains": {"properties": {"action": {"const": "quarantine"}},
                                                "required": ["action"]}}}, "required": ["targets"]}]}
    return [
        {"$comment": "action quarantine (globally or on a target) needs quarantine: true", "if": quarantined,
         "then": _is("quarantine", True)},
        {"$comment": "source prometheus (globally or on a target) needs prometheusUrl", "if": prometheus,
         "then": _set("prometheus_url")},
        {"$comment": "basic auth needs both files", "if": username, "then": password},
        {"$comment": "basic auth needs both files", "if": password, "then": username},
        {"$comment": "basic auth or a bearer token, not both", "if": username,
         "then": {"properties": {_key("prometheus_bearer_token_file"): {"type": "null"}}}},
    ]


# --- the rules the schema cannot express, as data for the chart's templates --------------------------------

_SP = "[\\t\\n\\v\\f\\r ]"  # what separates the selector's tokens (watchdog/config/selectors.py SPACE)
_NAME = "[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX = "[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*/"


def selector_pattern() -> str:
    """The label selectors watchdog/config/selectors.py accepts, as one RE2 regex for the chart (test_values_schema
    holds the two to one verdict): requirements ``KEY``, ``!KEY``, ``KEY (=|==|!=) [VALUE]``, ``KEY (in|notin)
    (VALUES)`` apart by commas, tokens apart by optional spaces (a word and ``in`` by at least one). A key's prefix
    longer than 253 characters passes here and is refused at start-up."""
    key = f"(?:{_PREFIX})?{_NAME}"
    values = f"(?:{_NAME}|,(?:{_SP}*{_NAME})?)(?:{_SP}*,(?:{_SP}*{_NAME})?)*"
    requirement = (f"(?:!{_SP}*{key}|{key}(?:{_SP}*(?:==?|!=)(?:{_SP}*{_NAME})?"
                   f"|{_SP}+(?:not)?in{_SP}*\\({_SP}*{values}{_SP}*\\))?)")
    return f"^{_SP}*(?:{requirement}(?:{_SP}*,{_SP}*{requirement})*{_SP}*)?$"


RULES_PATH = DEFAULT_PATH.parent / "templates" / "_rules.tpl"


def chart_rules() -> str:
    """templates/_rules.tpl: the rules of watchdog/config/settings.py the schema cannot express, as JSON data the
    validate helper (templates/_helpers.tpl) evaluates: each comparison with its keys, and the target keys that
    hold a target's own value; and the label selector grammar."""
    def key(name: str | float) -> str | float:
        return BY_NAME[name].key if isinstance(name, str) else name

    data = {"comparisons": [{"left": key(r.left), "op": r.op, "right": key(r.right), "message": r.message,
                             "factor": r.factor, "floor": r.floor, "when": key(r.when) if r.when else "",
                             "unlessZero": r.unless_zero} for r in COMPARISONS],
            "targetKeys": [BY_NAME[n].key for n in TARGET_POLICY],
            "neverWatched": sorted(NEVER_WATCHED_NAMESPACES),
            "selector": selector_pattern()}
    return ("{{- /* Generated from watchdog/config/settings.py (COMPARISONS, TARGET_POLICY) and the label selector "
            "grammar of\nwatchdog/config/selectors.py by tests/chart/values_schema.py: edit those and run it. "
            "Evaluated by \"vllm-stall-watchdog.validate\". */}}\n"
            "{{- define \"vllm-stall-watchdog.rules\" -}}\n" + json.dumps(data, indent=1) + "\n{{- end }}\n")


def chart_schema(current: Mapping[str, Any]) -> dict[str, Any]:
    """``current`` (the chart's values.schema.json) with every generated node as the tables say."""
    out = copy.deepcopy(dict(current))
    config = out["properties"]["config"]
    targets = config["properties"]["targets"]
    config["properties"] = {s.key: setting_schema(s) for s in SETTINGS if s.name not in NOT_IN_CHART}
    config["properties"]["targets"] = targets
    config["properties"].update({BY_NAME[n].key: {"const": where, "description": where}
                                 for n, where in MISPLACED.items()})
    config["allOf"] = cross_rules()
    item = targets["items"]["properties"]
    item["profile"]["enum"] = list(PROFILES)
    item["source"]["enum"] = list(BY_NAME["source"].choices)
    item.update({BY_NAME[n].key: target_setting_schema(BY_NAME[n]) for n in TARGET_POLICY})
    out["properties"]["config"] = {"$comment": "generated from watchdog/config/settings.py (SETTINGS) and "
                                   "watchdog/core/profiles.py (PROFILES): edit those and run python "
                                   "tests/chart/values_schema.py",
                                   **{k: v for k, v in config.items() if k != "$comment"}}
    return out


def dumps(schema: Mapping[str, Any]) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def main(argv: Sequence[str] = ()) -> int:
    """Rewrite the schema file (argument, else the chart's in this checkout) and templates/_rules.tpl beside it
from the tables."""
    path = Path(argv[0]) if argv else DEFAULT_PATH
    rules = path.parent / "templates" / RULES_PATH.name
    for where in (path, rules):
        text = where.read_text() if where.exists() else ""
        new = chart_rules() if where == rules else dumps(chart_schema(json.loads(text)))
        where.write_text(new)
        print(f"{where}: {'rewritten' if new != text else 'already up to date'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Configuration loading: the settings table (:mod:`watchdog.config.settings`) from defaults, a YAML file, the
environment and flags.

Precedence: built-in default < config file (YAML, camelCase keys) < environment < command-line flag.
:func:`load_config` collects every problem before it fails and raises :class:`ConfigError` whose ``str()`` is
one line per problem, each naming where it came from (file and line, env var, or flag).
"""

from __future__ import annotations

import difflib
import ipaddress
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from watchdog.config.flags import add_flags, flags_from_args
from watchdog.config.names import label_problem, subdomain_problem
from watchdog.config.selectors import label_key_problem, normalised, selector_problem, show
from watchdog.config.settings import (
    BY_KEY,
    BY_NAME,
    SETTINGS,
    TARGET_KEYS,
    TARGET_POLICY,
    Setting,
    Settings,
    comparison_problems,
    number_text,
    quarantine_problems,
)
from watchdog.config.sources import SOURCES
from watchdog.config.sources import source_checks as _source_checks
from watchdog.core import profiles
from watchdog.core.model import (
    DEFAULT_TARGETS,
    NEVER_WATCHED_NAMESPACES,
    Target,
)
from watchdog.core.profiles import Profile
from watchdog.core.taints import parse_taint

__all__ = ["ConfigError", "Settings", "add_flags", "flags_from_args", "load_config"]


class ConfigError(Exception):
    """Invalid configuration; ``problems`` lists one line per problem, each naming its source; ``log_format``:
    the configured log format when it could be read (else the default), to report the problems in."""

    def __init__(self, problems: Sequence[str], log_format: str) -> None:
        # One line each, and bounded: a message never echoes a huge value (values are cut by show() already;
        # this is the backstop for text quoted by other modules' exceptions).
        lines = [_one_line(p) for p in problems]
        super().__init__("\n".join(lines))
        self.problems = lines
        self.log_format = log_format


_MAX_PROBLEM = 400


def _one_line(problem: str) -> str:
    text = " ".join(str(problem).splitlines())
    return text if len(text) <= _MAX_PROBLEM else text[: _MAX_PROBLEM - 3] + "..."


_TRUE_WORDS = ("true", "1", "yes", "on")
_FALSE_WORDS = ("false", "0", "no", "off")


def _coerce(setting: Setting, raw: Any, where: str, problems: list[str]) -> Any:
    """Convert ``raw`` (from YAML, env or a flag) to the setting's type; append a problem and return None."""
    if raw is None or (isinstance(raw, str) and raw.strip() == "" and setting.optional):
        if not setting.optional:
            problems.append(f"{where}: a value is required")
        return None
    convert = _CONVERTERS.get(setting.type, _to_text)
    value, problem = convert(setting, raw)
    if problem:
        problems.append(f"{where}: {problem}")
        return None
    return value


def _to_bool(setting: Setting, raw: Any) -> tuple[Any, str]:
    """A boolean, or one of the words for one (any case, spaces around ignored); else the problem."""
    if isinstance(raw, bool):
        return raw, ""
    word = raw.strip().lower() if isinstance(raw, str) else None
    if word in _TRUE_WORDS or word in _FALSE_WORDS:
        return word in _TRUE_WORDS, ""
    return None, f"{show(raw)} is not a boolean (true/false)"


def _to_number(setting: Setting, raw: Any) -> tuple[Any, str]:
    """An integer or a float (``setting.type``), finite and within the setting's bounds; else the problem."""
    if isinstance(raw, bool):
        return None, f"{show(raw)} is not a number"
    value: int | float
    try:
        if setting.type == "int":
            value = raw if isinstance(raw, int) else int(str(raw))
        else:
            value = float(raw) if isinstance(raw, int | float) else float(str(raw))
    except (ValueError, OverflowError):
        what = "an integer" if setting.type == "int" else "a number"
        return None, f"{show(raw)} is not {what}"
    return value, _bounds_problem(setting, raw, value)


def _bounds_problem(setting: Setting, raw: Any, value: float) -> str:
    """Why the number ``value`` (read from ``raw``) is out of the setting's bounds, or ""."""
    if value != value or value in (float("inf"), float("-inf")):
        return f"{show(raw)} is not a finite number"
    if setting.minimum is not None and value < setting.minimum:
        return f"{show(raw)} is below the minimum {setting.minimum:g}"
    if setting.maximum is not None and value > setting.maximum:
        return f"{show(raw)} is above the maximum {number_text(setting.maximum)}"
    return ""


def _to_text(setting: Setting, raw: Any) -> tuple[Any, str]:
    """A string (a number is taken as its text): one of the choices, a valid selector; else the problem.
    watchNamespaces may also be a list of names (the chart's shape), read as their comma-separated string."""
    if setting.name == "watch_namespaces" and isinstance(raw, list) and all(isinstance(n, str) for n in raw):
        raw = ",".join(raw)
    if not isinstance(raw, str | int | float):
        return None, f"expected a string, got {type(raw).__name__}"
    value = str(raw)
    if setting.type == "choice" and value not in setting.choices:
        return None, f"{show(value)} is not one of {', '.join(setting.choices)}"
    if setting.name == "namespace_selector" and (problem := selector_problem(value)):
        return None, f"{show(value)} is not a valid label selector: {problem}"
    if setting.name == "tenant_label" and value and (problem := label_key_problem(value)):
        return None, problem
    return value, ""


_CONVERTERS = {"bool": _to_bool, "int": _to_number, "float": _to_number}  # any other type: _to_text


_PORT_NAME = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")


def _port_problem(port: Any) -> str | None:
    """Why ``port`` is not a container port name (IANA_SVC_NAME) or number 1-65535, or None."""
    what = "a container port name (IANA_SVC_NAME, e.g. http) or a number 1-65535 is required"
    if isinstance(port, bool) or not isinstance(port, str | int):
        return what
    text = str(port)
    if re.fullmatch(r"[0-9]+", text, flags=re.ASCII):
        return None if 1 <= int(text) <= 65535 else f"{show(port)} is not a port number 1-65535"
    if isinstance(port, int):
        return f"{show(port)} is not a port number 1-65535"
    if (len(text) > 15 or not _PORT_NAME.fullmatch(text) or "--" in text
            or not any("a" <= c <= "z" for c in text)):
        return f"{show(port)}: {what} (a name has at most 15 of a-z, 0-9, '-', with a letter)"
    return None


def _targets(raw: Any, where: str, problems: list[str]) -> tuple[Target, ...] | None:
    if not isinstance(raw, list) or not raw:
        problems.append(f"{where}: targets must be a non-empty list of {{name, podSelector, profile, port, path}}")
        return None
    read = [(i, _target(item, f"{where}[{i}]", problems)) for i, item in enumerate(raw)]
    out = [t for _, t in read if t is not None]
    names = [t.name for t in out]
    for dup in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"{where}: target name {show(dup)} is used twice")
    problems.extend(_same_selectors([(i, t) for i, t in read if t is not None], where))
    return tuple(out)


def _same_selectors(targets: Sequence[tuple[int, Target]], where: str) -> list[str]:
    """Targets whose podSelectors are the same (spelled alike, :func:`normalised`): every pod of one is a pod of
    the other, so one of them can never judge a pod. Selectors that merely overlap are resolved per pod at run time
    (:func:`watchdog.core.podpolicy.resolve_target`): they cannot in general be proven disjoint here."""
    first: dict[str, tuple[int, Target]] = {}
    problems = []
    for i, target in targets:
        if selector_problem(target.pod_selector) is not None:
            continue  # said already
        j, other = first.setdefault(normalised(target.pod_selector), (i, target))
        if j != i:
            problems.append(f"{where}: targets[{j}] ({show(other.name)}) and targets[{i}] ({show(target.name)}) "
                            f"have the same podSelector {show(target.pod_selector)}: every pod of one is a pod of the "
                            "other; merge them into one target")
    return problems


def _target(item: Any, at: str, problems: list[str]) -> Target | None:
    """One entry of ``targets`` (at ``at``): its problems appended; None when it is not a mapping at all."""
    if not isinstance(item, dict):
        problems.append(f"{at}: expected a mapping with {', '.join(TARGET_KEYS)}")
        return None
    for key in sorted(set(item) - set(TARGET_KEYS)):
        problems.append(f"{at}: unknown key {show(key)}{_suggest(str(key)[:100], TARGET_KEYS)}")
    name = item.get("name")
    selector = item.get("podSelector")
    if not isinstance(name, str) or not name:
        problems.append(f"{at}.name: a non-empty string is required")
    if problem := _pod_selector_problem(selector):
        problems.append(f"{at}.podSelector: {problem}")
    port = item.get("port", "http")
    if problem := _port_problem(port):
        problems.append(f"{at}.port: {problem}")
    metrics = item.get("metrics", {})
    if not isinstance(metrics, dict) or not all(isinstance(k, str) for k in metrics):
        problems.append(f"{at}.metrics: a mapping of profile key -> series selector(s) is required")
        metrics = {}
    profile = item.get("profile", "vllm")
    built, problem = _build_profile(str(name), profile, metrics)
    if problem:
        problems.append(f"{at}: {problem}")
    path = item.get("path", built.metrics_path if built else "/metrics")
    if not _is_url_path(path):
        problems.append(f"{at}.path: {show(path)} must be an absolute URL path like /metrics")
    source = item.get("source")
    if source is not None and source not in SOURCES:
        problems.append(f"{at}.source: {show(source)} is not one of {', '.join(SOURCES)}")
        source = None
    # Its own policy: each key read by the global setting's row (same type, bounds and choices), unset: global.
    own = {n: _coerce(BY_NAME[n], item[BY_NAME[n].key], f"{at}.{BY_NAME[n].key}", problems)
           for n in TARGET_POLICY if item.get(BY_NAME[n].key) is not None}
    return Target(str(name), str(selector), str(profile), str(port), str(path), dict(metrics),
                  None if source is None else str(source), **own)


def _pod_selector_problem(selector: Any) -> str | None:
    """Why ``selector`` is not a non-empty label selector the API server accepts, or None."""
    if not isinstance(selector, str) or not selector.strip():
        return "a non-empty label selector string is required (e.g. app=vllm)"
    problem = selector_problem(selector)
    return f"{show(selector)} is not a valid label selector: {problem}" if problem else None


def _is_url_path(path: Any) -> bool:
    """An absolute URL path, with no ``//``, ``@`` or ``..`` in it."""
    return isinstance(path, str) and path.startswith("/") and "//" not in path and "@" not in path and ".." not in path


def _build_profile(name: str, profile: Any, metrics: Mapping[str, object]) -> tuple[Profile | None, str]:
    """The target's profile (built-in, or custom over it) and "" -- or None and the problem."""
    try:
        return profiles.target_profile(name, str(profile), metrics), ""
    except ValueError as exc:
        return None, str(exc)


def _suggest(word: str, options: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(options), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _read_file(path: str, problems: list[str]) -> dict[str, tuple[Any, str]]:
    """Read the YAML file: key -> (value, 'file:line key'). Problems are appended, never raised."""
    try:
        with open(path, encoding="utf-8") as stream:
            text = stream.read()
    except OSError as exc:
        problems.append(f"{path}: cannot read config file: {exc.strerror or exc}")
        return {}
    except UnicodeDecodeError as exc:
        problems.append(f"{path}: not UTF-8 text (byte {exc.start}): expected a YAML config file")
        return {}
    data, node = _parse_yaml(text, path, problems, in_file=True)
    if data is None:
        return {}
    if not isinstance(data, dict) or node is None:
        problems.append(f"{path}:1: the config file must be a mapping of settings")
        return {}
    lines = {k.value: k.start_mark.line + 1 for k, _ in node.value if isinstance(k, yaml.ScalarNode)}
    return {str(k): (v, f"{path}:{lines.get(k, 1)} key {show(k)}") for k, v in data.items()}


def _parse_yaml(text: str, where: str, problems: list[str], in_file: bool = False) -> tuple[Any, yaml.Node | None]:
    """``text`` read as YAML, and its node tree; anchors and aliases, and a key twice in one mapping, are refused.
    On a problem it is appended and the answer is (None, None). ``in_file``: the config file ``where``, whose
    problems name their line and say more; else a value such as ``env WATCHDOG_TARGETS``."""
    def at(line: int | None) -> str:
        return f"{where}:{line}" if in_file and line is not None else where

    try:
        alias = _anchor_or_alias(text)
        if alias is not None:
            problems.append(f"{at(alias)}: YAML anchors and aliases " + (
                "(&name, *name, <<) are not allowed in the config file: write each value out" if in_file
                else "(&name, *name) are not allowed"))
            return None, None
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        twice = _duplicate_key(node)
        if twice is not None:
            problems.append(f"{at(twice[1])}: key {show(twice[0])} appears twice in one mapping"
                            + (" (refused rather than letting the last one win)" if in_file else ""))
            return None, None
        return yaml.safe_load(text), node
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problems.append(f"{at(None if mark is None else mark.line + 1)}: " + (
            f"not valid YAML: {getattr(exc, 'problem', None) or exc}" if in_file else "not valid YAML/JSON"))
    except ValueError:  # PyYAML's int() of a number with thousands of digits
        problems.append(f"{where}: " + (
            "a number in the config file has too many digits" if in_file else "not valid YAML/JSON"))
    return None, None


def _duplicate_key(node: yaml.Node | None) -> tuple[str, int] | None:
    """The first key that appears twice in one mapping anywhere under ``node`` (and its 1-based line)."""
    stack = [node] if node is not None else []
    while stack:
        current = stack.pop()
        if isinstance(current, yaml.MappingNode):
            seen: set[str] = set()
            for key, value in current.value:
                if isinstance(key, yaml.ScalarNode):
                    if key.value in seen:
                        return str(key.value), int(key.start_mark.line) + 1
                    seen.add(key.value)
                stack.append(value)
        elif isinstance(current, yaml.SequenceNode):
            stack.extend(current.value)
    return None


def _anchor_or_alias(text: str) -> int | None:
    """The 1-based line of the first YAML anchor or alias in ``text``, or None. Raises yaml.YAMLError."""
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            mark = event.start_mark
            return 1 if mark is None else int(mark.line) + 1
    return None


def load_config(
    file: str | None = None,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
) -> Settings:
    """Build the effective :class:`Settings` from defaults, ``file``, ``env`` (default ``os.environ``) and
    ``flags`` (setting name -> value, ``None`` = not given). Raises :class:`ConfigError` listing every problem."""
    env = os.environ if env is None else env
    flags = flags or {}
    problems: list[str] = []
    values: dict[str, Any] = {s.name: s.default for s in SETTINGS}
    targets: tuple[Target, ...] = DEFAULT_TARGETS

    file = file if file is not None else env.get("WATCHDOG_CONFIG") or None
    if file:
        targets = _from_file(file, values, problems) or targets
    targets = _from_env(env, values, problems) or targets
    warnings = _unknown_env(env)
    for name, raw in flags.items():
        if raw is not None:
            values[name] = _coerce(BY_NAME[name], raw, BY_NAME[name].flag, problems)

    if not problems:
        problems.extend(_cross_checks(values))
    if not problems:
        problems.extend(_target_policy_problems(values, targets))
    if not problems:
        problems.extend(_source_checks(values, targets))
    if problems:
        raise ConfigError(problems, values["log_format"] or BY_NAME["log_format"].default)
    return Settings.from_values(values, targets, tuple(warnings))


def _from_file(file: str, values: dict[str, Any], problems: list[str]) -> tuple[Target, ...] | None:
    """The config file's settings into ``values``; its targets (None: none given, or none usable)."""
    targets = None
    for key, (raw, where) in _read_file(file, problems).items():
        if key == "targets":
            targets = _targets(raw, where, problems) or targets
        elif key in BY_KEY:
            values[BY_KEY[key].name] = _coerce(BY_KEY[key], raw, where, problems)
        else:
            problems.append(f"{where}: unknown setting{_suggest(key[:100], [*BY_KEY, 'targets'])}")
    return targets


def _from_env(env: Mapping[str, str], values: dict[str, Any], problems: list[str]) -> tuple[Target, ...] | None:
    """The environment's settings into ``values``; the targets of ``WATCHDOG_TARGETS`` (None: not set, or none
    usable)."""
    for s in SETTINGS:
        if s.env in env:
            values[s.name] = _coerce(s, env[s.env], f"env {s.env}", problems)
    if "WATCHDOG_TARGETS" not in env:
        return None
    before = len(problems)
    raw, _ = _parse_yaml(env["WATCHDOG_TARGETS"], "env WATCHDOG_TARGETS", problems)
    if len(problems) != before:
        return None
    return _targets(raw, "env WATCHDOG_TARGETS", problems)


_SERVICE_LINK = re.compile(r".*_(SERVICE_HOST|SERVICE_PORT(_.*)?|PORT(_\d+_(TCP|UDP|SCTP)(_.*)?)?)$")


def _unknown_env(env: Mapping[str, str]) -> list[str]:
    """WATCHDOG_* variables that set nothing (typos), minus Kubernetes service-link variables."""
    known = {s.env for s in SETTINGS} | {"WATCHDOG_CONFIG", "WATCHDOG_TARGETS"}
    return [f"env {show(name)[1:-1]} is not a setting and is ignored{_suggest(name[:100], sorted(known))}"
            for name in sorted(env)
            if name.startswith("WATCHDOG_") and name not in known and not _SERVICE_LINK.match(name)]


def _cross_checks(v: Mapping[str, Any]) -> list[str]:
    return [*comparison_problems(v), *_rail_problems(v), *_listen_problems(v), *_name_problems(v),
            *_leadership_problems(v), *_watch_problems(v)]


def _target_policy_problems(v: Mapping[str, Any], targets: Sequence[Target]) -> list[str]:
    """Each target's own policy under the global rules (the same checks, on the global values with the target's
    own in their place), each problem naming the target's key, ``targets[N].windowSeconds``."""
    problems: list[str] = []
    for i, target in enumerate(targets):
        own = {n: getattr(target, n) for n in TARGET_POLICY if getattr(target, n) is not None}
        if not own:
            continue  # the global values, checked already
        names = {n: f"targets[{i}].{BY_NAME[n].key}" for n in own}
        merged = {**v, **own}
        found = comparison_problems(merged, names, only=own)
        if "action" in own:
            found += quarantine_problems(merged, names["action"])
        problems.extend(f"{problem} (target {show(target.name)})" for problem in found)
    return problems


def _rail_problems(v: Mapping[str, Any]) -> list[str]:
    """The breaker, quarantine, the budgets and the node taint."""
    problems = []
    if v["breaker_fraction"] > 1:
        problems.append(f"breakerFraction ({v['breaker_fraction']:g}) is a fraction of the watched pods: 0..1")
    problems.extend(quarantine_problems(v))
    try:
        parse_taint(str(v["node_taint"]))
    except ValueError as exc:
        problems.append(f"nodeTaint: {exc}")
    return problems


def _listen_problems(v: Mapping[str, Any]) -> list[str]:
    if _is_listen_address(str(v["listen_address"])):
        return []
    return [f"listenAddress {show(v['listen_address'])} must be IP:port (or localhost:port) with a port 0-65535, "
            "an IPv6 address in brackets, e.g. [::]:8080 (IPv4 and IPv6) or 0.0.0.0:8080"]


def _is_listen_address(address: str) -> bool:
    """An IP address (IPv6 in brackets) or localhost, and an ASCII port 0-65535: an address to bind, never a name
    to look up."""
    from urllib.parse import urlsplit  # here: this check is the only user

    try:  # the URL grammar: an IPv6 host in brackets (validated), an ASCII port 0-65535
        where = urlsplit("//" + address)
        listen_ok = bool(where.hostname) and where.port is not None and where.netloc == address and "@" not in address
    except ValueError:
        return False
    if not listen_ok or where.hostname == "localhost":
        return listen_ok
    try:
        ipaddress.ip_address(str(where.hostname))
    except ValueError:
        return False
    return True


def _name_problems(v: Mapping[str, Any]) -> list[str]:
    """The Lease's name, the deletion ledger's ConfigMap named after it, and the pause ConfigMap."""
    lease = str(v["lease_name"])
    names = [(lease, "leaseName")]
    if v["budget_ledger"] and len(lease) <= 253:
        names.append((f"{lease}-ledger", "the ledger ConfigMap name (leaseName-ledger)"))
    if v["pause_config_map"] is not None:
        names.append((str(v["pause_config_map"]), "pauseConfigMap"))
    problems = [problem for name, what in names if (problem := subdomain_problem(name, what))]
    if v["budget_ledger"] and v["pause_config_map"] == f"{lease}-ledger":
        problems.append(f"pauseConfigMap {show(v['pause_config_map'])} is the deletion ledger's ConfigMap "
                        "(leaseName-ledger), which the watchdog rewrites whole: name another ConfigMap")
    return problems


#: At most this many namespaces in namespace-only mode: a LIST and a WATCH each per namespace and target.
MAX_WATCH_NAMESPACES = 100


def _watch_problems(v: Mapping[str, Any]) -> list[str]:
    """watchNamespaces: a comma-separated list of namespace names, at most :data:`MAX_WATCH_NAMESPACES`."""
    if v["watch_namespaces"] is None:
        return []
    names = [n.strip() for n in str(v["watch_namespaces"]).split(",")]
    if len(names) > MAX_WATCH_NAMESPACES:
        return [f"watchNamespaces names {len(names)} namespaces, at most {MAX_WATCH_NAMESPACES} (each costs a LIST "
                "and a WATCH per target): watch the whole cluster instead (unset it)"]
    problems = [problem for name in names if (problem := label_problem(name, "watchNamespaces entry"))]
    return problems + [f"watchNamespaces names {name}, which is never watched: leave it out (its Role would grant "
                       "pod deletes for nothing)" for name in names if name in NEVER_WATCHED_NAMESPACES]


def _leadership_problems(v: Mapping[str, Any]) -> list[str]:
    """The Lease's namespace (the API timeout under the leadership fence: a COMPARISONS rule)."""
    if v["leader_election_namespace"] is not None and (
            problem := label_problem(str(v["leader_election_namespace"]), "leaderElectionNamespace")):
        return [problem]
    return []

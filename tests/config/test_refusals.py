"""Issue 11 items 14-18: configuration that should refuse at start-up (exit 2, one line per problem), not limp."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from watchdog.cli.main import main
from watchdog.config.loader import ConfigError, load_config
from watchdog.config.selectors import selector_problem, show
from watchdog.config.settings import SETTINGS

# --- item 14: label selectors, with the API server's grammar ------------------------------------------------

GOOD_SELECTORS = [
    "", "app=vllm", "app==vllm", "app!=vllm", "app", "!app", "app=", "app in (a,b)", "app notin (a)",
    "app in (a, b), tier!=x, !legacy", "inference.llmkube.dev/runtime=vllm", "app.kubernetes.io/name=vllm",
    "  app = vllm ,  env in ( prod ) ", "k_8.s-x=V_1.2-z", "a" * 63 + "=" + "b" * 63,
]
BAD_SELECTORS = [
    ("app in ()", "empty"), ("app notin ()", "empty"), ("app in a", "parenthesised"), ("app in (a", "not closed"),
    ("-app=x", "label key"), ("app-=x", "label key"), ("Example.com/app=x", "prefix"), ("/app=x", "prefix"),
    ("a/b/c=x", "prefix"), ("a" * 64 + "=x", "label key"), ("app=" + "v" * 64, "label value"),
    ("app=-v", "label value"), ("app=a b", "between requirements"), ("app>5", "Gt/Lt"), ("app<5", "Gt/Lt"),
    ("app=x,", "trailing"), (",app=x", "label key"), ("!app=x", "takes no operator"), ("app=(x)", "label value"),
    ("app in (a b)", "',' or ')'"), ("app=vllm;", "label value"), ("app é", "operator"), ("=x", "label key"),
]


@pytest.mark.parametrize("text", GOOD_SELECTORS)
def test_the_api_servers_valid_selectors_pass(text: str) -> None:
    assert selector_problem(text) is None


@pytest.mark.parametrize(("text", "needle"), BAD_SELECTORS)
def test_selectors_the_api_server_refuses_are_refused(text: str, needle: str) -> None:
    problem = selector_problem(text)
    assert problem is not None and needle in problem and "\n" not in problem


def test_a_bad_pod_selector_names_file_line_and_target(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("dryRun: true\ntargets:\n- name: a\n  podSelector: app in ()\n")
    with pytest.raises(ConfigError) as err:
        load_config(str(f), env={})
    assert err.value.problems == [
        f"{f}:2 key 'targets'[0].podSelector: 'app in ()' is not a valid label selector: "
        "the 'in' list of 'app' is empty: give at least one value"]


@pytest.mark.parametrize(("source", "where"), [
    ("file", ":1 key 'namespaceSelector'"), ("env", "env WATCHDOG_NAMESPACE_SELECTOR"),
    ("flag", "--namespace-selector"),
])
def test_a_bad_namespace_selector_names_its_source(tmp_path: Path, source: str, where: str) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("namespaceSelector: shard>a\n")
    kwargs = {"file": {"file": str(f), "env": {}},
              "env": {"env": {"WATCHDOG_NAMESPACE_SELECTOR": "shard>a"}},
              "flag": {"env": {}, "flags": {"namespace_selector": "shard>a"}}}[source]
    with pytest.raises(ConfigError) as err:
        load_config(**kwargs)  # type: ignore[arg-type]
    [problem] = err.value.problems
    assert where in problem and "'shard>a' is not a valid label selector" in problem and "Gt/Lt" in problem


def test_run_exits_2_with_one_line_per_bad_selector(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["run", "--namespace-selector", "shard in ()", "--dry-run"])
    lines = capsys.readouterr().err.splitlines()
    assert status == 2 and len(lines) == 1  # one line, in the configured (default: json) log format
    record = json.loads(lines[0])
    assert (record["level"], record["reason"]) == ("error", "config")
    assert record["problems"] == [
        "--namespace-selector: 'shard in ()' is not a valid label selector: "
        "the 'in' list of 'shard' is empty: give at least one value"]


# --- item 15: targets[].port --------------------------------------------------------------------------------

@pytest.mark.parametrize("port", ["http", "metrics", "h2c", "my-port-9", "abcdefghijklmno", 1, 8000, 65535,
                                  "8000", "1"])
def test_port_names_and_numbers_pass(tmp_path: Path, port: object) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(f"targets:\n- name: a\n  podSelector: app=vllm\n  port: {port!r}\n".replace("'", '"'))
    [target] = load_config(str(f), env={}).targets
    assert target.port == str(port)


@pytest.mark.parametrize("port", [0, 70000, 65536, -1, '"70000"', '"0"', '"٣"', '"٨٠٠٠"', '"HTTP"',
                                  '"abcdefghijklmnop"', '"-http"', '"http-"', '"ht--tp"', '"123-456"',
                                  '"http port"', '""', "8080.0", "true", "[80]"])
def test_bad_ports_are_refused(tmp_path: Path, port: str) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(f"targets:\n- name: a\n  podSelector: app=vllm\n  port: {port}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_config(str(f), env={})
    [problem] = err.value.problems
    assert problem.startswith(f"{f}:1 key 'targets'[0].port: ")


# --- item 16: every number has a sane maximum ---------------------------------------------------------------

def test_every_numeric_setting_has_a_maximum() -> None:
    numeric = [s for s in SETTINGS if s.type in ("int", "float")]
    assert numeric and all(s.maximum is not None and s.maximum >= s.default for s in numeric if s.default)
    by_name = {s.name: s for s in SETTINGS}
    assert by_name["api_timeout_seconds"].maximum == 300
    assert by_name["workers"].maximum == 1024
    assert by_name["max_body_bytes"].maximum == 1024 ** 3
    assert by_name["prometheus_timeout_seconds"].maximum == 300  # a query, like an API request
    assert by_name["prometheus_staleness_seconds"].maximum == 300  # Prometheus' lookback delta
    assert all(s.maximum == 86400 for s in numeric if s.name.endswith("_seconds") and s.name not in (
        "api_timeout_seconds", "prometheus_timeout_seconds", "prometheus_staleness_seconds"))


@pytest.mark.parametrize(("name", "raw", "message"), [
    ("scrape_interval_seconds", "2e12", "--scrape-interval-seconds: '2e12' is above the maximum 86400"),
    ("api_timeout_seconds", "1e12", "--api-timeout-seconds: '1e12' is above the maximum 300"),
    ("workers", "100000", "--workers: '100000' is above the maximum 1024"),
    # issue 36 item 7: a budget the deletion ledger cannot hold (it keeps 1,000 entries) is refused
    ("max_deletions", "1001", "--max-deletions: '1001' is above the maximum 1000"),
    ("max_deletions_per_namespace", "1001", "--max-deletions-per-namespace: '1001' is above the maximum 1000"),
    ("max_body_bytes", str(2 ** 31), f"--max-body-bytes: '{2 ** 31}' is above the maximum 1073741824"),
    ("grace_period_seconds", "9" * 30, "--grace-period-seconds: '" + "9" * 30 + "' is above the maximum 86400"),
])
def test_values_above_the_maximum_are_refused(name: str, raw: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(env={}, flags={name: raw})
    assert err.value.problems == [message]


def test_api_timeout_from_the_file_is_bounded(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("apiTimeoutSeconds: 1e12\n")
    with pytest.raises(ConfigError) as err:
        load_config(str(f), env={})
    assert err.value.problems == [f"{f}:1 key 'apiTimeoutSeconds': '1e12' is above the maximum 300"]


def test_run_with_a_huge_interval_exits_2_without_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--scrape-interval-seconds", "2e12"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "is above the maximum 86400" in err


# --- item 17: jitter below the interval ---------------------------------------------------------------------

@pytest.mark.parametrize("jitter", ["15", "20", "1000"])
def test_jitter_not_below_the_interval_is_refused(jitter: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(env={"WATCHDOG_JITTER_SECONDS": jitter})
    assert err.value.problems == [
        f"jitterSeconds ({float(jitter):g}) must be shorter than scrapeIntervalSeconds (15): a later cycle start "
        "makes /healthz report stale cycles"]


def test_jitter_below_the_interval_passes() -> None:
    assert load_config(env={"WATCHDOG_JITTER_SECONDS": "14.9"}).jitter_seconds == 14.9


# --- item 18: bounded messages, no YAML aliases -------------------------------------------------------------

ALIAS_BOMB = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
workers: [*g,*g,*g,*g,*g,*g,*g,*g,*g]
"""


def test_a_yaml_alias_bomb_is_refused_in_one_line(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(ALIAS_BOMB)
    with pytest.raises(ConfigError) as err:
        load_config(str(f), env={})
    assert err.value.problems == [
        f"{f}:1: YAML anchors and aliases (&name, *name, <<) are not allowed in the config file: "
        "write each value out"]


def test_an_alias_is_reported_on_its_line(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("dryRun: true\nwindowSeconds: 300\nlogLevel: *x\n")
    with pytest.raises(ConfigError) as err:
        load_config(str(f), env={})
    [problem] = err.value.problems
    assert problem.startswith(f"{f}:3: YAML anchors and aliases")


def test_aliases_in_the_targets_env_var_are_refused() -> None:
    with pytest.raises(ConfigError) as err:
        load_config(env={"WATCHDOG_TARGETS": "[&t {name: a, podSelector: app=x}, *t]"})
    assert err.value.problems == ["env WATCHDOG_TARGETS: YAML anchors and aliases (&name, *name) are not allowed"]


@pytest.mark.parametrize(("text", "needle"), [
    ("workers: [" + ", ".join(["1"] * 2000) + "]\n", "<list of 2000 items> is not an integer"),
    ("logLevel: " + "x" * 100000 + "\n", "is not one of"),
    ("minSamples: " + "9" * 100000 + "\n", "a number in the config file has too many digits"),
    ("minSamples: " + "9" * 1000 + "\n", "is above the maximum 10000"),
    ("windowSeconds: '" + "9" * 100000 + "'\n", "is not a finite number"),
    ("targets:\n- name: a\n  podSelector: app=" + "v" * 100000 + "\n", "is not a valid label selector"),
    ("targets:\n- name: a\n  podSelector: app=x\n  path: " + "p" * 100000 + "\n", "absolute URL path"),
    ("listenAddress: " + "h" * 100000 + "\n", "must be IP:port"),
    ("x" * 1000 + ": 1\n", "unknown setting"),
])
def test_messages_never_quote_more_than_about_80_characters(tmp_path: Path, text: str, needle: str) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(str(f), env={})
    [problem] = err.value.problems
    assert needle in problem and len(problem) < len(str(f)) + 400, problem


def test_show_cuts_values() -> None:
    assert show("abc") == "'abc'"
    assert len(show("x" * 10 ** 6)) == 80 and show("x" * 10 ** 6).endswith("...")
    assert show(list(range(10 ** 6))) == "<list of 1000000 items>"


def test_a_zero_grace_period_force_delete_is_refused() -> None:
    """Issue 12: gracePeriodSeconds 0 is a force delete on a real API server (the object leaves etcd before the
    container stops); it is refused, with the reason, from every source."""
    from watchdog.config.loader import ConfigError, load_config

    with pytest.raises(ConfigError) as err:
        load_config(env={"WATCHDOG_GRACE_PERIOD_SECONDS": "0"})
    assert err.value.problems == ["env WATCHDOG_GRACE_PERIOD_SECONDS: '0' is below the minimum 1"]
    assert load_config(env={"WATCHDOG_GRACE_PERIOD_SECONDS": "1"}).grace_period_seconds == 1


def _load_file(tmp_path: Any, text: str) -> list[str]:
    from watchdog.config.loader import ConfigError, load_config

    path = tmp_path / "c.yaml"
    path.write_text(text)
    try:
        load_config(str(path), env={})
    except ConfigError as exc:
        return exc.problems
    return []


def test_a_key_given_twice_is_refused_not_last_one_wins(tmp_path: Any) -> None:
    """Fresh-eyes find: `dryRun: true` then `dryRun: false` silently enforced."""
    problems = _load_file(tmp_path, "dryRun: true\nwindowSeconds: 120\ndryRun: false\n")
    assert len(problems) == 1 and problems[0].endswith(":3: key 'dryRun' appears twice in one mapping (refused "
                                                       "rather than letting the last one win)")
    nested = _load_file(tmp_path, "targets:\n  - name: a\n    podSelector: a=b\n    podSelector: c=d\n")
    assert nested and ":4: key 'podSelector' appears twice" in nested[0]
    from watchdog.config.loader import ConfigError, load_config

    with pytest.raises(ConfigError, match="appears twice"):
        load_config(env={"WATCHDOG_TARGETS": '[{"name": "a", "podSelector": "a=b", "podSelector": "c=d"}]'})


@pytest.mark.parametrize(("text", "fragment"), [
    ("leaseName: UPPER_case\n", "leaseName 'UPPER_case' must be a valid Kubernetes object name"),
    ("leaseName: " + "a" * 250 + "\n", "the ledger ConfigMap name"),
    ("leaderElectionNamespace: Bad NS\n", "leaderElectionNamespace 'Bad NS' must be a valid namespace name"),
    ("listenAddress: 999.1.1.1:80\n", "must be IP:port"),
    ("listenAddress: example.com:80\n", "must be IP:port"),
    ("leaderElection: true\napiTimeoutSeconds: 11\n", "apiTimeoutSeconds (11) is too long for leaderElection: a write "
     "is sent only while the 15 s Lease outlasts it (the leadership fence), so at most 10"),
])
def test_names_and_the_listen_address_are_checked_at_load(tmp_path: Any, text: str, fragment: str) -> None:
    problems = _load_file(tmp_path, text)
    assert any(fragment in p for p in problems), problems


def test_valid_names_and_addresses_load(tmp_path: Any) -> None:
    assert _load_file(tmp_path, "leaderElection: true\napiTimeoutSeconds: 10\n") == []
    assert _load_file(tmp_path, "leaseName: wd-a.shard\nleaderElectionNamespace: ops\n"
                                "listenAddress: '[::1]:0'\n") == []

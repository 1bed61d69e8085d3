"""load_config's problems word for word, one case per way a value, a target or a combination is refused (issue 28
item 6: _coerce, _targets, load_config and _cross_checks were split up; every message must read as before).
FILE stands for the config file's path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from watchdog.config.loader import ConfigError, load_config

REFUSED: list[tuple[str, str | None, dict[str, str], dict[str, Any], list[str], str]] = [
    ('a required value is null',
     'windowSeconds:\n',
     {}, {},
     [
         "FILE:1 key 'windowSeconds': a value is required",
     ], 'json'),
    ('not a boolean',
     'dryRun: maybe\ncountWaiting: 1\n',
     {'WATCHDOG_PAUSED': 'Yes', 'WATCHDOG_QUARANTINE': 'off'}, {},
     [
         "FILE:1 key 'dryRun': 'maybe' is not a boolean (true/false)",
         "FILE:2 key 'countWaiting': 1 is not a boolean (true/false)",
     ], 'json'),
    ('a boolean is no number',
     'windowSeconds: true\nminSamples: false\n',
     {}, {},
     [
         "FILE:1 key 'windowSeconds': True is not a number",
         "FILE:2 key 'minSamples': False is not a number",
     ], 'json'),
    ('not a number',
     'windowSeconds: abc\nminSamples: 1.5\nmaxBodyBytes: 1e10\n',
     {}, {'breaker_min_pods': 'x'},
     [
         "FILE:1 key 'windowSeconds': 'abc' is not a number",
         "FILE:2 key 'minSamples': 1.5 is not an integer",
         "FILE:3 key 'maxBodyBytes': '1e10' is not an integer",
         "--breaker-min-pods: 'x' is not an integer",
     ], 'json'),
    ('not finite',
     'windowSeconds: .nan\nscrapeIntervalSeconds: .inf\n',
     {}, {},
     [
         "FILE:1 key 'windowSeconds': nan is not a finite number",
         "FILE:2 key 'scrapeIntervalSeconds': inf is not a finite number",
     ], 'json'),
    ('a number too big for a float',
     'windowSeconds: ' + '9' * 400 + '\n',
     {}, {},
     [
         "FILE:1 key 'windowSeconds': <integer of 1329 bits> is not a number",
     ], 'json'),
    ('below and above the bounds',
     'windowSeconds: 0.5\nminSamples: 10001\nbreakerFraction: 1.5\n',
     {}, {'scrape_deadline_seconds': '0'},
     [
         "FILE:1 key 'windowSeconds': 0.5 is below the minimum 1",
         "FILE:2 key 'minSamples': 10001 is above the maximum 10000",
         "FILE:3 key 'breakerFraction': 1.5 is above the maximum 1",
         "--scrape-deadline-seconds: '0' is below the minimum 0.1",
     ], 'json'),
    ('not a string',
     'logFormat: [a]\nleaseName: {a: 1}\n',
     {}, {},
     [
         "FILE:1 key 'logFormat': expected a string, got list",
         "FILE:2 key 'leaseName': expected a string, got dict",
     ], 'json'),
    ('not a choice',
     'logFormat: xml\n',
     {'WATCHDOG_ACTION': 'kill'}, {},
     [
         "FILE:1 key 'logFormat': 'xml' is not one of json, text",
         "env WATCHDOG_ACTION: 'kill' is not one of delete, evict, quarantine",
     ], 'json'),
    ('a bad namespace selector',
     "namespaceSelector: 'a in ()'\n",
     {}, {},
     [
         "FILE:1 key 'namespaceSelector': 'a in ()' is not a valid label "
         "selector: the 'in' list of 'a' is empty: give at least one value",
     ], 'json'),
    ('a bad tenant label',  # issue 36: the Namespace label naming a namespace's tenant must be a label key
     "tenantLabel: 'Capsule Tenant'\n",
     {'WATCHDOG_TENANT_LABEL': 'tenants.example.com/'}, {},
     [
         "FILE:1 key 'tenantLabel': label key 'Capsule Tenant': the name must be 1-63 characters, alphanumeric at "
         "both ends, with only '-', '_' and '.' inside",
         "env WATCHDOG_TENANT_LABEL: label key 'tenants.example.com/': the name must be 1-63 characters, "
         "alphanumeric at both ends, with only '-', '_' and '.' inside",
     ], 'json'),
    ('targets not a list',
     'targets: {name: a}\n',
     {}, {},
     [
         "FILE:1 key 'targets': targets must be a non-empty list of {name, " 'podSelector, profile, port, path}',
     ], 'json'),
    ('targets empty',
     'targets: []\n',
     {}, {},
     [
         "FILE:1 key 'targets': targets must be a non-empty list of {name, " 'podSelector, profile, port, path}',
     ], 'json'),
    ('a target not a mapping',
     'targets: [5, {name: a, podSelector: app=a}]\n',
     {}, {},
     [
         "FILE:1 key 'targets'[0]: expected a mapping with name, podSelector, "
         'profile, port, path, metrics, source, windowSeconds, minSamples, action, '
         'completionOnlyWindowSeconds',
     ], 'json'),
    ("a target's every field wrong",
     "targets:\n- nam: x\n  podSelector: ' '\n  port: 0\n  metrics: [1]\n  "
     'profile: nope\n  path: rel\n  source: nope\n  selector: x\n',
     {}, {},
     [
         "FILE:1 key 'targets'[0]: unknown key 'nam' (did you mean 'name'?)",
         "FILE:1 key 'targets'[0]: unknown key 'selector' (did you mean " "'podSelector'?)",
         "FILE:1 key 'targets'[0].name: a non-empty string is required",
         "FILE:1 key 'targets'[0].podSelector: a non-empty label selector " 'string is required (e.g. app=vllm)',
         "FILE:1 key 'targets'[0].port: 0 is not a port number 1-65535",
         "FILE:1 key 'targets'[0].metrics: a mapping of profile key -> series " 'selector(s) is required',
         "FILE:1 key 'targets'[0]: unknown profile 'nope' (known: llamacpp, " 'lmdeploy, sglang, trtllm, vllm)',
         "FILE:1 key 'targets'[0].path: 'rel' must be an absolute URL path like " '/metrics',
         "FILE:1 key 'targets'[0].source: 'nope' is not one of scrape, " 'prometheus',
     ], 'json'),
    ("a target's selector and metrics keys",
     "targets:\n- name: ''\n  podSelector: 'app in ()'\n  metrics: {1: x}\n  " 'port: Http\n',
     {}, {},
     [
         "FILE:1 key 'targets'[0].name: a non-empty string is required",
         "FILE:1 key 'targets'[0].podSelector: 'app in ()' is not a valid label "
         "selector: the 'in' list of 'app' is empty: give at least one value",
         "FILE:1 key 'targets'[0].port: 'Http': a container port name "
         '(IANA_SVC_NAME, e.g. http) or a number 1-65535 is required (a name '
         "has at most 15 of a-z, 0-9, '-', with a letter)",
         "FILE:1 key 'targets'[0].metrics: a mapping of profile key -> series " 'selector(s) is required',
     ], 'json'),
    ('a target name twice',
     'targets:\n- {name: a, podSelector: app=a}\n- {name: a, podSelector: '
     'app=b}\n- {name: b, podSelector: app=c}\n- {name: b, podSelector: ' 'app=d}\n',
     {}, {},
     [
         "FILE:1 key 'targets': target name 'a' is used twice",
         "FILE:1 key 'targets': target name 'b' is used twice",
     ], 'json'),
    ('targets from the environment',
     None,
     {'WATCHDOG_TARGETS': '[{name: a, podSelector: app=a, source: x}]'}, {},
     [
         "env WATCHDOG_TARGETS[0].source: 'x' is not one of scrape, prometheus",
     ], 'json'),
    ('targets from the environment, bad YAML',
     None,
     {'WATCHDOG_TARGETS': '[a'}, {},
     [
         'env WATCHDOG_TARGETS: not valid YAML/JSON',
     ], 'json'),
    ('targets from the environment, an alias',
     None,
     {'WATCHDOG_TARGETS': '[&a x, *a]'}, {},
     [
         'env WATCHDOG_TARGETS: YAML anchors and aliases (&name, *name) are not ' 'allowed',
     ], 'json'),
    ('unknown settings',
     'windowSecond: 5\nfoo: 1\n',
     {'WATCHDOG_WINDOW_SECOND': '1', 'WATCHDOG_X_SERVICE_HOST': 'h'}, {},
     [
         "FILE:1 key 'windowSecond': unknown setting (did you mean " "'windowSeconds'?)",
         "FILE:2 key 'foo': unknown setting",
     ], 'json'),
    ('every source at once',
     'windowSeconds: 10\ntargets: [{name: f, podSelector: app=f}]\n',
     {'WATCHDOG_WINDOW_SECONDS': 'x', 'WATCHDOG_TARGETS': '[{name: e}]'}, {'min_samples': '0', 'window_seconds': None},
     [
         "env WATCHDOG_WINDOW_SECONDS: 'x' is not a number",
         'env WATCHDOG_TARGETS[0].podSelector: a non-empty label selector ' 'string is required (e.g. app=vllm)',
         "--min-samples: '0' is below the minimum 1",
     ], 'json'),
    ('cross checks after every value is read',
     'scrapeIntervalSeconds: 10\nwindowSeconds: 20\nlogFormat: text\n',
     {}, {},
     [
         'windowSeconds (20) must be at least 3 scrape intervals (3 x 10 s): a '
         'stall needs several scrapes of evidence',
     ], 'text'),
    ('the source checks only after the cross checks pass',
     'source: prometheus\nlogFormat: text\n',
     {}, {},
     [
         'source prometheus (targets llmkube-vllm, vllm) needs prometheusUrl '
         '(e.g. http://prometheus.monitoring:9090)',
     ], 'text'),
    ('the source checks, when the cross checks pass',
     "source: prometheus\nprometheusTenant: 'a b'\n",
     {}, {},
     [
         'source prometheus (targets llmkube-vllm, vllm) needs prometheusUrl '
         '(e.g. http://prometheus.monitoring:9090)',
     ], 'json'),
    ('the log format, unreadable',
     'logFormat: xml\nwindowSeconds: x\n',
     {}, {},
     [
         "FILE:1 key 'logFormat': 'xml' is not one of json, text",
         "FILE:2 key 'windowSeconds': 'x' is not a number",
     ], 'json'),
    ('intervals and deadlines',
     'scrapeIntervalSeconds: 5\nscrapeDeadlineSeconds: 5\njitterSeconds: '
     '6\nconnectTimeoutSeconds: 10\nwindowSeconds: ' '120\ncompletionOnlyWindowSeconds: 5\n',
     {}, {},
     [
         'completionOnlyWindowSeconds (5) must be 0 (off) or at least 600 s and '
         'at least windowSeconds (120): a counter that moves only when a '
         'request finishes stays flat for as long as the longest request',
         'scrapeDeadlineSeconds (5) must be shorter than scrapeIntervalSeconds ' '(5)',
         'jitterSeconds (6) must be shorter than scrapeIntervalSeconds (5): a '
         'later cycle start makes /healthz report stale cycles',
         'connectTimeoutSeconds (10) must not exceed scrapeDeadlineSeconds (5)',
     ], 'json'),
    ('budgets and the breaker',
     'maxDeletions: 2\nmaxDeletionsPerNamespace: 3\nbreakerFraction: 1\n',
     {}, {},
     [
         'maxDeletionsPerNamespace (3) must not exceed maxDeletions (2), the cluster-wide budget',
     ], 'json'),
    ('a bad node taint',
     "nodeTaint: 'a=b:Sometimes'\n",
     {}, {},
     [
         "nodeTaint: invalid taint 'a=b:Sometimes': effect 'Sometimes' is not "
         'one of NoSchedule, PreferNoSchedule, NoExecute',
     ], 'json'),
    ('a node taint with no effect',
     "nodeTaint: 'a'\n",
     {}, {},
     [
         "nodeTaint: invalid taint 'a': expected key[=value]:Effect, e.g. "
         "'vllm-watchdog.io/stalled=true:NoSchedule'",
     ], 'json'),
    ('listen address, a name',
     "listenAddress: 'example.com:80'\n",
     {}, {},
     [
         "listenAddress 'example.com:80' must be IP:port (or localhost:port) "
         'with a port 0-65535, an IPv6 address in brackets, e.g. [::]:8080 ' '(IPv4 and IPv6) or 0.0.0.0:8080',
     ], 'json'),
    ('listen address, a bad IPv6',
     "listenAddress: '[::1:80'\n",
     {}, {},
     [
         "listenAddress '[::1:80' must be IP:port (or localhost:port) with a "
         'port 0-65535, an IPv6 address in brackets, e.g. [::]:8080 (IPv4 and ' 'IPv6) or 0.0.0.0:8080',
     ], 'json'),
    ('listen address, a port out of range',
     "listenAddress: '0.0.0.0:99999'\n",
     {}, {},
     [
         "listenAddress '0.0.0.0:99999' must be IP:port (or localhost:port) "
         'with a port 0-65535, an IPv6 address in brackets, e.g. [::]:8080 ' '(IPv4 and IPv6) or 0.0.0.0:8080',
     ], 'json'),
    ('listen address, no port',
     "listenAddress: '0.0.0.0'\n",
     {}, {},
     [
         "listenAddress '0.0.0.0' must be IP:port (or localhost:port) with a "
         'port 0-65535, an IPv6 address in brackets, e.g. [::]:8080 (IPv4 and ' 'IPv6) or 0.0.0.0:8080',
     ], 'json'),
    ('listen address, a user',
     "listenAddress: 'u@0.0.0.0:80'\n",
     {}, {},
     [
         "listenAddress 'u@0.0.0.0:80' must be IP:port (or localhost:port) with "
         'a port 0-65535, an IPv6 address in brackets, e.g. [::]:8080 (IPv4 and ' 'IPv6) or 0.0.0.0:8080',
     ], 'json'),
    ('names of the lease, ledger and pause ConfigMap',
     "leaseName: 'Bad_Name'\npauseConfigMap: 'x..y'\nleaderElectionNamespace: " "'Ns'\n",
     {}, {},
     [
         "leaseName 'Bad_Name' must be a valid Kubernetes object name "
         "(lowercase letters, digits, '-' and '.', at most 253 characters, "
         'starting and ending with a letter or digit)',
         "the ledger ConfigMap name (leaseName-ledger) 'Bad_Name-ledger' must "
         "be a valid Kubernetes object name (lowercase letters, digits, '-' and "
         "'.', at most 253 characters, starting and ending with a letter or " 'digit)',
         "pauseConfigMap 'x..y' must be a valid Kubernetes object name "
         "(lowercase letters, digits, '-' and '.', at most 253 characters, "
         'starting and ending with a letter or digit)',
         "leaderElectionNamespace 'Ns' must be a valid namespace name "
         "(lowercase letters, digits and '-', at most 63 characters, starting " 'and ending with a letter or digit)',
     ], 'json'),
    ('a lease name too long for its ledger',
     "leaseName: '" + 'a' * 250 + "'\n",
     {}, {},
     [
         "the ledger ConfigMap name (leaseName-ledger) '" + 'a' * 80 +
         "' must be a valid Kubernetes object name (lowercase letters, digits, " +
         "'-' and '.', at most 253 characters, starting and ending with a " + 'letter or digit)',
     ], 'json'),
    ('a lease name too long',
     "leaseName: '" + 'a' * 260 + "'\n",
     {}, {},
     [
         "leaseName '" + 'a' * 80 + "' must be a valid Kubernetes object name (lowercase letters, digits, " +
         "'-' and '.', at most 253 characters, starting and ending with a " + 'letter or digit)',
     ], 'json'),
    ('the pause ConfigMap is the ledger',
     'leaseName: wd\npauseConfigMap: wd-ledger\n',
     {}, {},
     [
         "pauseConfigMap 'wd-ledger' is the deletion ledger's ConfigMap "
         '(leaseName-ledger), which the watchdog rewrites whole: name another ' 'ConfigMap',
     ], 'json'),
    ('an API timeout too long for leader election',
     'leaderElection: true\napiTimeoutSeconds: 100.5\n',
     {}, {},
     [
         'apiTimeoutSeconds (100.5) is too long for leaderElection: a write is '
         'sent only while the 15 s Lease outlasts it (the leadership fence), so ' 'at most 10',
     ], 'json'),
]

ACCEPTED: list[tuple[str, str | None, dict[str, str], dict[str, Any]]] = [
    ('an optional value left empty',
     "pauseConfigMap:\nminPodAgeSeconds: ''\n",
     {'WATCHDOG_CONTEXT': ' '}, {}),
    ('numbers as strings',
     'leaseName: 5\nkubeconfig: 1.5\n',
     {}, {}),
    ('listen address, good ones',
     "listenAddress: 'localhost:8080'\n",
     {}, {}),
    ('listen address, IPv6',
     "listenAddress: '[::1]:0'\n",
     {}, {}),
    ('a long lease name without a ledger',
     "leaseName: '" + 'a' * 250 + "'\nbudgetLedger: false\n",
     {}, {}),
    ("the pause ConfigMap is the ledger's name, no ledger",
     'leaseName: wd\npauseConfigMap: wd-ledger\nbudgetLedger: false\n',
     {}, {}),
    ('a long API timeout without leader election',
     'apiTimeoutSeconds: 100\n',
     {}, {}),
    ('a good leader election namespace',
     'leaderElectionNamespace: wd\n',
     {}, {}),
]


def _load(tmp_path: Path, text: str | None, env: dict[str, str], flags: dict[str, Any]) -> Any:
    path = None
    if text is not None:
        path = tmp_path / "c.yaml"
        path.write_text(text)
    return load_config(None if path is None else str(path), env=env, flags=flags)


@pytest.mark.parametrize(("name", "text", "env", "flags", "problems", "log_format"), REFUSED,
                         ids=[case[0] for case in REFUSED])
def test_each_problem_reads_word_for_word(tmp_path: Path, name: str, text: str | None, env: dict[str, str],
                                          flags: dict[str, Any], problems: list[str], log_format: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, text, env, flags)
    assert caught.value.problems == [p.replace("FILE", str(tmp_path / "c.yaml")) for p in problems]
    assert caught.value.log_format == log_format


@pytest.mark.parametrize(("name", "text", "env", "flags"), ACCEPTED, ids=[case[0] for case in ACCEPTED])
def test_what_is_accepted(tmp_path: Path, name: str, text: str | None, env: dict[str, str],
                          flags: dict[str, Any]) -> None:
    _load(tmp_path, text, env, flags)


def test_empty_optional_values_are_unset_and_booleans_are_words(tmp_path: Path) -> None:
    c = _load(tmp_path, "pauseConfigMap:\nminPodAgeSeconds: ''\n", {"WATCHDOG_CONTEXT": " ", "WATCHDOG_PAUSED": "Yes",
                                                                    "WATCHDOG_QUARANTINE": "off"}, {})
    assert (c.pause_config_map, c.min_pod_age_seconds, c.context, c.paused, c.quarantine) == (None, None, None, True,
                                                                                              False)
    c = _load(tmp_path, "leaseName: 5\nkubeconfig: 1.5\n", {}, {})
    assert (c.lease_name, c.kubeconfig) == ("5", "1.5")


def test_a_long_lease_name_is_refused_for_its_ledger_only_with_one() -> None:
    assert load_config(env={}, flags={"lease_name": "a" * 250, "budget_ledger": "false"}).lease_name == "a" * 250

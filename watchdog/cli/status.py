"""``status``: ask a running watchdog what it thinks (``GET /status`` on its listen address) and print it.

Exit status: 0 printed; 1 the watchdog answered but has not completed a cycle yet (its last error is printed);
2 bad usage, or no usable answer (not reachable, not the watchdog, not JSON). ``--ready`` asks ``GET /readyz``
instead and prints one line (the chart's ``helm test``): 0 ready, 1 not ready and why (no cycle completed, a source
that reads nothing, refused credentials), 2 no usable answer.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from typing import Any

from watchdog.cli.argtypes import positive_seconds, refuse
from watchdog.core.events import escape_controls

PROG = "vllm-watchdog status"
DEFAULT_URL = "http://127.0.0.1:8080"
NAMESPACE, DEPLOYMENT = "vllm-stall-watchdog", "deploy/vllm-stall-watchdog"  # the chart's defaults (RUNBOOK)
PORT_FORWARD = f"kubectl -n {NAMESPACE} port-forward {DEPLOYMENT} 8080"

HELP = f"""\
Ask a running watchdog what it thinks, from its own HTTP endpoint (GET URL/status): every watched pod and
engine series with its state, for how long it has been suspect or stalled, its last scrape and the signal
values; then the deletion policy's view: budget left (cluster-wide and per namespace) and when a used-up one
frees, the breakers and why, deferrals, each held engine series with the rule holding it and when it may proceed
(as its StalledPodDeletionDeferred Event says), owners waiting for a replacement, warm-up, the pause (setting or
run-time brake) and leadership.

Reach the watchdog in a cluster with a port-forward, then run this on your machine:
  {PORT_FORWARD}
  python -m watchdog status
or run it inside the watchdog pod (the same default URL works there):
  kubectl -n {NAMESPACE} exec {DEPLOYMENT} -- python -m watchdog status
With leader election, the standby replica sees the same pods but acts on nothing: port-forward to the leader.

Table columns (one row per engine series; a pod whose scrape fails before any series is known is one row):
  MODE         enforce, or dry-run (the namespace's label, or the global dryRun: then every pod is dry-run)
  TARGET       the target judging the pod (its podSelector matched; '-' from a watchdog that does not say)
  WINDOW       its stall window and where it came from: global, target or annotation (the pod's own)
  STATE        idle, paused, progressing, suspect, stalled or unknown (the detector's verdict)
  FOR          how long the engine has been suspect or stalled (no progress while busy)
  LAST-SCRAPE  the last scrape's outcome and age; a failing one says for how long it has failed
  RUN/WAIT     requests running / waiting in the last good scrape ('-': not exposed)
  ACTED        deleted / dry-run for this stall, or the rules deferring it (budget, breaker, paused, ...)
The watchdog lists at most 2,000 pods, the worst first; the rest is counted, not listed.
--pod NAMESPACE/NAME explains one pod: the target and profile judging it (and every target matching it), its
mode, window and where it came from, each engine series with its state and for how long, what acted on it,
which rail would hold a stall of it back right now, and the command that lists its Events.
--format json prints the watchdog's document as it came (times are seconds: *_s_ago ages are as of its
snapshot, taken at the end of its last completed cycle; snapshot_age_s says how old that is).

--ready prints one line from the watchdog's GET /readyz instead (what the chart's `helm test` runs): ready, or
not ready and why: no cycle completed yet, a source that has read no pod for 3 cycles (an unreachable
prometheusUrl, or no pod's /metrics reachable), credentials the API server refuses, cycles that stopped.

Exit status: 0 printed (--ready: ready); 1 the watchdog has not completed a cycle yet (its last error is shown;
--ready: not ready); 2 bad usage, or no usable answer (connection refused: start the port-forward above).
"""


def add_parser(verbs: Any) -> None:
    """Register the ``status`` verb."""
    p: argparse.ArgumentParser = verbs.add_parser(
        "status", help="ask a running watchdog what it thinks (pods, engine states, budget, breaker, brake)",
        description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default=DEFAULT_URL, help="the watchdog's listen address (default: %(default)s); "
                   "/status is added unless the URL already ends in it")
    p.add_argument("--format", choices=("table", "json"), default="table", help="output format (default: table)")
    p.add_argument("--timeout", type=positive_seconds, default=5.0, metavar="SECONDS",
                   help="how long to wait for the answer (default: %(default)s)")
    p.add_argument("--ready", action="store_true", help="one line from GET /readyz: ready, or why not (exit 1)")
    p.add_argument("--pod", type=_pod_ref, metavar="NAMESPACE/NAME", help="explain one pod: its target, profile, "
                   "window, engine series, the rails that would hold it back now, its Events (exit 1: not watched)")
    p.set_defaults(handler=status)


def fetch(url: str, timeout_s: float) -> dict[str, Any] | str:
    """The status document at ``url``, or one line saying why there is none."""
    answer = _get(url, timeout_s)
    if isinstance(answer, str):
        return answer
    if answer.status_code != 200:
        return f"{url} answered HTTP {answer.status_code}, not the watchdog's status (is --url its listen address?)"
    try:
        doc = answer.json()
    except ValueError:
        return f"{url} did not answer JSON: is --url the watchdog's listen address?"
    if not isinstance(doc, dict) or "cycle" not in doc or "pods" not in doc:
        return f"{url} answered JSON that is not the watchdog's status document"
    return doc


def readiness(url: str, timeout_s: float) -> tuple[bool, str] | str:
    """(ready, one line) from the watchdog's /readyz at ``url``, or one line saying why there is no answer."""
    answer = _get(url, timeout_s)
    if isinstance(answer, str):
        return answer
    try:
        doc = answer.json()
    except ValueError:
        doc = None
    if answer.status_code not in (200, 503) or not isinstance(doc, dict) or "ready" not in doc:
        return f"{url} answered HTTP {answer.status_code}, not the watchdog's /readyz (is --url its listen address?)"
    if doc["ready"] is True:
        return True, f"ready: the last cycle completed {doc.get('seconds_since_completed')} s ago"
    line = f"not ready: {doc.get('why') or 'no reason given'}"
    if doc.get("last_error"):
        line += f"; last error {doc.get('seconds_since_error')} s ago: {doc['last_error']}"
    return False, _cell(line, 1000)


def _get(url: str, timeout_s: float) -> Any:
    """The answer to GET ``url`` (a requests Response), or one line saying why there is none."""
    import requests  # here: only this verb needs it

    try:
        with requests.Session() as session:
            session.trust_env = False  # no proxy, no .netrc: the watchdog is reached directly (a port-forward)
            answer = session.get(url, timeout=timeout_s, allow_redirects=False,
                                 headers={"Accept": "application/json"})
    except (requests.exceptions.InvalidURL, requests.exceptions.MissingSchema, requests.exceptions.InvalidSchema,
            ValueError):
        return f"--url {url[:200]!r} is not an http(s) URL"
    except requests.exceptions.Timeout:
        return f"no answer from {url} within {timeout_s:g} s (--timeout)"
    except requests.exceptions.SSLError:
        return f"TLS failed with {url}: the watchdog serves plain HTTP; use an http:// URL"
    except requests.exceptions.ConnectionError as exc:
        refused = "refused" in str(exc).lower()
        return (f"cannot connect to {url}{' (connection refused)' if refused else ''}; is a port-forward to the "
                f"watchdog running? {PORT_FORWARD}")
    except requests.exceptions.RequestException as exc:
        return f"cannot read {url}: {type(exc).__name__}"
    return answer


def status_url(given: str) -> str | None:
    """``given`` (``HOST:PORT`` — an IPv6 HOST bare or in brackets, as a Service's ``*_SERVICE_HOST`` variable gives
    it —, a base URL, or the /status URL itself) as the /status URL; None when it is not an http(s) URL with a host
    and a valid port."""
    from urllib.parse import urlsplit, urlunsplit

    if "://" not in given and given.count(":") > 1 and not given.startswith("["):
        host, _, port = given.rpartition(":")
        given = f"[{host}]:{port}"
    parts = urlsplit(given if "://" in given else f"http://{given}")
    try:
        port_ok = parts.port is None or 1 <= parts.port <= 65535
    except ValueError:
        port_ok = False
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        return None
    path = parts.path.rstrip("/").removesuffix("/readyz")  # the /readyz URL itself names the same watchdog
    path = path if path.endswith("/status") else path + "/status"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def _pod_ref(text: str) -> tuple[str, str]:
    """``NAMESPACE/NAME`` as a pair; argparse turns the ValueError into a usage error naming the flag."""
    namespace, slash, name = text.partition("/")
    if not slash or not namespace or not name or "/" in name:
        raise argparse.ArgumentTypeError(f"{text[:200]!r} is not NAMESPACE/NAME (e.g. llm/vllm-0)")
    return namespace, name


def status(args: argparse.Namespace) -> int:
    url = status_url(args.url)
    if url is None:
        return refuse(PROG, f"--url {args.url[:200]!r} is not an http(s) URL of the watchdog (e.g. {DEFAULT_URL})")
    if args.ready:
        said = readiness(url.removesuffix("/status") + "/readyz", args.timeout)
        if isinstance(said, str):
            return refuse(PROG, said)
        print(f"{PROG}: {said[1]}")
        return 0 if said[0] else 1
    doc = fetch(url, args.timeout)
    if isinstance(doc, str):
        return refuse(PROG, doc)
    if args.pod is not None and doc.get("pods") is not None:
        return explain(doc, args.pod, as_json=args.format == "json")
    if args.format == "json":
        print(json.dumps(doc, indent=1))
    else:
        try:
            print("\n".join(render(doc)))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            return refuse(PROG, f"{url} answered a status document this version cannot read "
                                f"({type(exc).__name__}: {str(exc)[:100]}); try --format json")
    return 0 if doc.get("pods") is not None else 1


def _age(seconds: object) -> str:
    """``135`` -> ``2m15s``; None -> ``-``."""
    if not isinstance(seconds, int | float):
        return "-"
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _num(value: object) -> str:
    if not isinstance(value, int | float):
        return "-"
    return f"{value:.0f}" if float(value).is_integer() else f"{value:g}"


def _cell(value: object, width: int = 80) -> str:
    """A table cell: control characters escaped, cut at ``width`` (a sentence line passes a larger width)."""
    return escape_controls(str(value))[:width]


def _mode(pod: Mapping[str, Any], global_dry_run: bool) -> str:
    return "dry-run" if global_dry_run else str(pod.get("mode") or "-")


def _window(pod: Mapping[str, Any]) -> str:
    """``120s(global)``: the pod's stall window and where it came from; ``-`` when the document has none."""
    policy = pod.get("policy")
    if not isinstance(policy, Mapping):
        return "-"
    return f"{_age(policy.get('window_s'))}({policy.get('window_source') or '?'})"


def _rows(pods: Sequence[Mapping[str, Any]], global_dry_run: bool = False) -> list[list[str]]:
    rows = []
    for pod in pods:
        scrape = pod["scrape"]
        last = f"{scrape['outcome'] or '-'} {_age(scrape['age_s'])} ago"
        if scrape.get("failing_for_s") is not None:
            last = f"{scrape['outcome']}, failing {_age(scrape['failing_for_s'])}"
        head = [pod["namespace"], pod["pod"], _mode(pod, global_dry_run), pod.get("target") or "-", _window(pod)]
        for engine in pod["engines"] or [None]:
            if engine is None:
                rows.append([*head, pod["state"], "-", last, "-", "-", "-"])
                continue
            rows.append([*head, engine["state"], _age(engine["for_s"]), last,
                         f"{_num(engine['running'])}/{_num(engine['waiting'])}", _acted(engine),
                         engine["engine"] or "-"])
    return [[_cell(c) for c in row] for row in rows]


def _acted(engine: Mapping[str, Any]) -> str:
    """How this stall episode was acted on: deleted, dry-run, the rules deferring it, or ``-``."""
    acted = {"delete": "deleted", "dry_run": "dry-run"}.get(engine["acted"] or "", "")
    return acted or ",".join(engine["deferred_by"]) or "-"


def _held(pods: Sequence[Mapping[str, Any]], most: int = 20) -> list[str]:
    """One line per engine series a rail holds now: the rule and when it may proceed (as its Event says)."""
    held = [(pod, engine) for pod in pods for engine in pod["engines"] if engine.get("held")]
    out = []
    for pod, engine in held[:most]:
        h = engine["held"]
        when = (f"in {_age(h['frees_in_s'])}, " if h["frees_in_s"] is not None else "") + h["frees_when"]
        out.append(_cell(f"held {pod['namespace']}/{pod['pod']} {{{engine['engine']}}}: {h['rule']}, may proceed "
                         f"{when}", 400))
    if len(held) > most:
        out.append(f"... and {len(held) - most} more held engine series (--format json lists them)")
    return out


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [header, *rows]]


def render(doc: Mapping[str, Any]) -> list[str]:
    """The document as text lines: the engine table, then the policy's view and the loop's health."""
    cycle, out = doc["cycle"], []
    if doc["pods"] is None:
        out.append("no cycle has completed yet" + (f"; last error {_age(cycle['last_error_s_ago'])} ago: "
                                                   f"{_cell(cycle['last_error'], 400)}" if cycle["last_error"] else ""))
        return out
    header = ["NAMESPACE", "POD", "MODE", "TARGET", "WINDOW", "STATE", "FOR", "LAST-SCRAPE", "RUN/WAIT", "ACTED",
              "ENGINE"]
    global_dry_run = bool(doc["policy"].get("dry_run"))  # an older watchdog's document has none
    out.extend(_table(header, _rows(doc["pods"], global_dry_run)) if doc["pods"] else ["(no pods watched)"])
    if global_dry_run:
        out.append("global dryRun is on: every pod is observed only (StalledPodDryRun Events, no deletion)")
    if doc["truncated"]["pods"]:
        out.append(f"... and {doc['truncated']['pods']} more pods, not listed (the worst are listed first)")
    p = doc["policy"]
    engines = " ".join(f"{k}={v}" for k, v in doc["engines"].items() if v) or "none"
    out += ["", f"pods watched: {doc['pods_watched']}   engines: {engines}"]
    out += [f"namespace {n['namespace']}: its pods cannot be listed (unknown) for {_age(n['for_s'])}: "
            f"{_cell(n['why'], 400)}" for n in doc.get("namespaces_unreadable") or []]  # an older watchdog: none
    brake = f"ON ({_cell(p['paused_why'], 400)})" if p["paused"] else "off"
    warm = "done" if p["warm_up"]["done"] else f"{_age(p['warm_up']['left_s'])} left"
    out.append(f"leader: {'yes' if doc['leader'] else 'no (standby: acts on nothing)'}   pause: {brake}   "
               f"warm-up: {warm}")
    b = p["budget"]
    frees = b.get("frees_in_s") or {"cluster": None, "namespaces": {}}  # an older watchdog's document has none

    def room(left_s: object) -> str:
        return "" if left_s is None else f", frees in {_age(left_s)}"

    spent = ", ".join(f"{_cell(ns)} {v['left']} left{room(frees['namespaces'].get(ns))}"
                      for ns, v in b["namespaces"].items())
    out.append(f"budget ({_age(b['window_s'])} window{'' if b['known'] else ', NOT KNOWN yet: deferring'}): "
               f"cluster {b['cluster']['left']} of {b['cluster']['max']} left{room(frees['cluster'])}; per namespace "
               f"{b['namespace_max']}" + (f" ({spent})" if spent else ""))
    k = p["breaker"]
    out.append("breaker: " + (f"OPEN, closes in {_age(k['closes_in_s'])}: {_cell(k['why'], 400)}" if k["open"]
                              else "closed"))
    for ns, v in k["namespaces"].items():
        out.append(f"namespace breaker {_cell(ns)}: OPEN, closes in {_age(v['closes_in_s'])}: {_cell(v['why'])}")
    if p["deferrals"]:
        out.append("deferred stalls by rule: " + " ".join(f"{r}={n}" for r, n in p["deferrals"].items()))
    out.extend(_held(doc["pods"]))
    for row in doc.get("targets_conflict", [])[:20]:  # an older watchdog's document has none
        out.append(_cell(f"not judged {row['namespace']}/{row['pod']}: its targets {', '.join(row['targets'])} have "
                         "different engine profiles (targets_conflict)", 400))
    if p["owners_waiting"]:
        out.append("owners waiting for a Ready replacement: " + ", ".join(_cell(o) for o in p["owners_waiting"][:20]))
    error = f"; last error {_age(cycle['last_error_s_ago'])} ago: {_cell(cycle['last_error'], 400)}" if cycle[
        "last_error"] else ""
    out.append(f"cycle: last started {_age(cycle['started_s_ago'])} ago, last completed "
               f"{_age(cycle['completed_s_ago'])} ago (this view: {_age(doc['snapshot_age_s'])} old){error}")
    return out


def explain(doc: Mapping[str, Any], ref: tuple[str, str], as_json: bool = False) -> int:
    """``status --pod``: what the watchdog thinks of one pod (exit 0), or why it is not listed (exit 1)."""
    namespace, name = ref
    pod = next((p for p in doc["pods"] if p["namespace"] == namespace and p["pod"] == name), None)
    if pod is None:
        more = doc["truncated"]["pods"]
        print(f"{PROG}: {namespace}/{name} is not among the {len(doc['pods'])} pods listed" + (
            f" ({more} more are watched but not listed: the worst come first)" if more else
            ": not watched. Its namespace needs the label vllm-watchdog.io/enabled=true (or dry-run), a target's "
            "podSelector must match it, it must be Running with a pod IP and (requireController) have a "
            "controller; the watchdog's log says which targets it lists"))
        return 1
    if as_json:
        print(json.dumps(pod, indent=1))
        return 0
    print("\n".join(explain_lines(doc, pod)))
    return 0


def explain_lines(doc: Mapping[str, Any], pod: Mapping[str, Any]) -> list[str]:
    """The lines of ``status --pod``: who judges the pod and how, its engine series, the rails now, its Events."""
    p = doc["policy"]
    ns, name = pod["namespace"], pod["pod"]
    targets = [str(t) for t in pod.get("targets") or []]
    target = pod.get("target")
    judged = (f"target {target}" if target else "a target this watchdog does not name") + \
        f", profile {pod.get('profile') or '-'}"
    if len(targets) > 1:
        judged += (f" (the podSelectors of targets {', '.join(targets)} match it: the one with the longest window "
                   "judges, the first listed on a tie)")
    mode = ("dry-run (global dryRun: observe only)" if p.get("dry_run") else
            "dry-run (its namespace is labelled dry-run: observe only)" if pod["mode"] == "dry-run" else
            "enforce (a stall is removed when no rail holds it)")
    out = [_cell(f"pod {ns}/{name} (uid {pod['uid']})", 400), _cell(f"judged by: {judged}", 400),
           f"mode: {mode}", _cell(f"policy: {_policy_text(pod.get('policy'))}", 400)]
    scrape = pod["scrape"]
    out.append(_cell(f"last scrape: {scrape['outcome'] or 'none yet'}, {_age(scrape['age_s'])} ago" + (
        f", failing for {_age(scrape['failing_for_s'])}" if scrape.get("failing_for_s") is not None else "") + (
        f": {scrape['detail']}" if scrape.get("detail") else ""), 400))
    out.append("engine series:" if pod["engines"] else "engine series: none known yet (state unknown)")
    for engine in pod["engines"]:
        line = f"  {engine['engine'] or '-'}: {engine['state']}"
        if engine["for_s"] is not None:
            line += f" for {_age(engine['for_s'])}"
        line += f", running/waiting {_num(engine['running'])}/{_num(engine['waiting'])}, acted: {_acted(engine)}"
        if engine.get("held"):
            h = engine["held"]
            line += (f"; held by {h['rule']}, may proceed " + (f"in {_age(h['frees_in_s'])}, " if h["frees_in_s"]
                                                              is not None else "") + str(h["frees_when"]))
        out.append(_cell(line, 600))
    rails = _rails_now(doc, ns)
    out.append("rails that would hold a stall of it back now: " + ("; ".join(rails) if rails else
                                                                    "none (a stall would be removed)"))
    out.append(_cell(f"its Events (the watchdog writes them, never reads them back): kubectl -n {ns} get events "
                     f"--field-selector involvedObject.uid={pod['uid']} --sort-by=.lastTimestamp", 600))
    return out


def _policy_text(policy: object) -> str:
    if not isinstance(policy, Mapping):
        return "not known yet (the pod was not judged yet)"
    completion = policy.get("completion_only_window_s")
    return (f"window {_num(policy.get('window_s'))} s ({policy.get('window_source')}: "
            f"{_WINDOW_SOURCES.get(str(policy.get('window_source')), '?')}), min samples "
            f"{policy.get('min_samples')}, action {policy.get('action')}, completion-only window "
            + (f"{_num(completion)} s" if completion else "off"))


_WINDOW_SOURCES = {"global": "windowSeconds", "target": "its target's windowSeconds",
                   "annotation": "the pod's annotation vllm-watchdog.io/window-seconds"}


def _rails_now(doc: Mapping[str, Any], namespace: str) -> list[str]:
    """The rails that would hold a stall of a pod in ``namespace`` back at the snapshot, in the policy's order."""
    p, rails = doc["policy"], []
    if not doc.get("leader"):
        rails.append("not the leader (this replica acts on nothing: ask the leader)")
    if p.get("dry_run"):
        rails.append("global dryRun (announced, never removed)")
    if p["paused"]:
        rails.append(f"paused ({p['paused_why']})")
    if not p["warm_up"]["done"]:
        rails.append(f"warm-up ({_age(p['warm_up']['left_s'])} left)")
    if p["breaker"]["open"]:
        rails.append(f"breaker open, closes in {_age(p['breaker']['closes_in_s'])}")
    if namespace in p["breaker"]["namespaces"]:
        rails.append(f"namespace breaker open, closes in {_age(p['breaker']['namespaces'][namespace]['closes_in_s'])}")
    b = p["budget"]
    if not b["known"]:
        rails.append("deletion budget not known yet")
    if b["cluster"]["left"] <= 0:
        rails.append("cluster deletion budget used up")
    if b["namespaces"].get(namespace, {}).get("left", 1) <= 0:
        rails.append(f"namespace {namespace} deletion budget used up")
    return [_cell(r, 200) for r in rails]

"""``helm test`` on the real node (issue 30 item 4's done-when): the chart's test hook — a Pod from the project's
image asking the watchdog's /readyz through its Service — passes against a Ready watchdog, and fails with its one
line naming the source when ``prometheusUrl`` points nowhere (on a fresh install: no namespace opted in, the source
is probed)."""

from __future__ import annotations

import subprocess

import pytest

from watchdog.demo.controlplane.api import wait_for
from watchdog.demo.node.kit import GATEWAY

pytestmark = pytest.mark.node


def helm_test(s) -> subprocess.CompletedProcess[str]:
    return subprocess.run([s.world.helm_bin, "test", s.release, "-n", s.release, "--logs", "--timeout", "90s",
                           "--kubeconfig", str(s.world.node.admin_kubeconfig)],
                          capture_output=True, text=True, timeout=150)


def test_helm_test_passes_when_ready_and_names_an_unreachable_prometheus(scenario, world):
    ready = scenario("hooked")
    ready.install()
    done = helm_test(ready)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Phase:          Succeeded" in done.stdout and "ready" in done.stdout, done.stdout

    url = f"http://{GATEWAY}:9"  # inside the node's namespace, nothing listens there
    wrong = scenario("hooked-wrong", config={"source": "prometheus", "prometheusUrl": url,
                                            "prometheusTimeoutSeconds": 0.5})
    wrong.install(wait_ready=False)

    def failed_with_reason() -> str | None:
        attempt = helm_test(wrong)
        out = attempt.stdout + attempt.stderr
        return out if attempt.returncode != 0 and f"source prometheus ({url})" in out else None

    out = wait_for("helm test failing with the source's reason", failed_with_reason, timeout=180, interval=5,
                   describe=lambda: wrong.watchdog_log()[-2000:])
    (line,) = [x for x in out.splitlines() if "not ready:" in x]
    assert "has read no pod for" in line and "unreachable" in line, line

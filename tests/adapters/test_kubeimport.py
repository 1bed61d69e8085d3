"""The lean import of the official Kubernetes client (adapters/kubeimport.py): the adapters work without the
generated model classes, and nothing happens when the client is already imported. Each case runs in a fresh
interpreter (the test process itself has the client imported in full)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.e2e  # each case is a Python process of its own


def run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_adapters_work_without_the_model_classes() -> None:
    out = run("""
        import sys
        from watchdog.adapters.kubeimport import lean_client
        assert lean_client() is True
        import watchdog.controller.wiring  # everything run imports
        from watchdog.adapters.kube import KubeClient
        from kubernetes import client, config
        api = client.ApiClient(client.Configuration())
        kube = KubeClient(api, request_timeout_s=10.0)
        body = api.sanitize_for_serialization({"metadata": {"name": "x"}, "gracePeriodSeconds": 5})
        models = [m for m in sys.modules if m.startswith("kubernetes.client.models.")]
        print(len(models), body["gracePeriodSeconds"], callable(config.load_kube_config), kube.api_requests)
    """)
    assert out == "0 5 True 0"


def test_nothing_happens_when_the_client_is_already_imported() -> None:
    out = run("""
        import sys
        import kubernetes
        from watchdog.adapters.kubeimport import lean_client
        print(lean_client(), len([m for m in sys.modules if m.startswith("kubernetes.client.models.")]) > 500)
    """)
    assert out == "False True"


def test_a_layout_it_does_not_know_falls_back_to_the_ordinary_import() -> None:
    out = run("""
        import sys
        from watchdog.adapters import kubeimport
        kubeimport._CLASSES = (*kubeimport._CLASSES, ("api.no_such_api", "NoSuchApi"))  # a client it does not know
        assert kubeimport.lean_client() is False
        assert not [m for m in sys.modules if m == "kubernetes" or m.startswith("kubernetes.")]  # nothing half-done
        from kubernetes import client
        print(hasattr(client, "V1Pod"), client.CoreV1Api.__name__)
    """)
    assert out == "True CoreV1Api"

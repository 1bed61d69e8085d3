"""I/O set-up: import the official Kubernetes client without its generated model classes.

``import kubernetes`` runs ``kubernetes/__init__.py``, which imports ``kubernetes.client``, whose
``__init__.py`` imports every API class and about 900 generated model classes: about 34 MiB of the watchdog's
resident memory (measured: 69 MiB after ``import kubernetes`` against 35 MiB with :func:`lean_client`), for
classes the watchdog never uses -- :mod:`watchdog.adapters.kube` reads every answer with
``_preload_content=False`` and ``json.loads`` and sends plain dicts, so nothing is (de)serialised through a
model.

:func:`lean_client` registers the packages ``kubernetes``, ``kubernetes.client``, ``kubernetes.client.api`` and
``kubernetes.client.models`` as plain namespace modules (their ``__path__`` set, their ``__init__`` not run),
imports the client's own modules the adapters use (``configuration``, ``api_client``, ``rest``,
``exceptions``, the core/v1 and coordination/v1 APIs) and publishes them under the names ``kubernetes.client``
offers, then imports ``kubernetes.config`` and ``kubernetes.watch`` as they are. The client code that runs is
the library's own, unchanged. ``run`` calls it first thing; tests and the embedded demo import the client
as usual, and the e2e and cluster tiers run ``run`` as a process, so both ways are exercised. It does nothing
(and says so) when the client is already imported or its layout is not the one expected.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types

#: The client's modules the adapters use, and the names ``kubernetes.client`` publishes them under.
_CLASSES = (("configuration", "Configuration"), ("api_client", "ApiClient"),
            ("api.core_v1_api", "CoreV1Api"), ("api.coordination_v1_api", "CoordinationV1Api"))


def lean_client() -> bool:
    """Import the client the lean way; False (nothing done) when ``kubernetes`` is already imported or is not
    laid out as expected, in which case the ordinary import happens later."""
    if "kubernetes" in sys.modules:
        return False
    spec = importlib.util.find_spec("kubernetes")
    if spec is None or not spec.submodule_search_locations:
        return False
    root = next(iter(spec.submodule_search_locations))
    packages = {"kubernetes": root, "kubernetes.client": os.path.join(root, "client"),
                "kubernetes.client.api": os.path.join(root, "client", "api"),
                "kubernetes.client.models": os.path.join(root, "client", "models")}
    if not all(os.path.isfile(os.path.join(path, "__init__.py")) for path in packages.values()):
        return False
    for name, path in packages.items():
        module = types.ModuleType(name)
        module.__path__ = [path]
        module.__package__ = name
        sys.modules[name] = module
    try:
        client = sys.modules["kubernetes.client"]
        for module_name, class_name in _CLASSES:
            module = importlib.import_module(f"kubernetes.client.{module_name}")
            setattr(client, class_name, getattr(module, class_name))
        for module_name in ("rest", "exceptions"):
            setattr(client, module_name, importlib.import_module(f"kubernetes.client.{module_name}"))
        top = sys.modules["kubernetes"]
        top.client = client  # type: ignore[attr-defined]
        top.config = importlib.import_module("kubernetes.config")  # type: ignore[attr-defined]
        top.watch = importlib.import_module("kubernetes.watch")  # type: ignore[attr-defined]
    except (ImportError, AttributeError):
        for name in [n for n in sys.modules if n == "kubernetes" or n.startswith("kubernetes.")]:
            del sys.modules[name]  # back to nothing: the ordinary import follows
        return False
    return True

"""Kubernetes object-name grammars the settings must follow (pure): a DNS-1123 subdomain for object names
(the Lease, the ledger ConfigMap) and a DNS-1123 label for namespaces. One line per problem."""

from __future__ import annotations

import re

_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def subdomain_problem(name: str, what: str) -> str | None:
    """Why ``name`` is not a valid object name (DNS-1123 subdomain: <= 253 characters, lowercase
    alphanumerics, '-' and '.', starting and ending alphanumeric), else None."""
    if not name or len(name) > 253 or not all(_LABEL.fullmatch(part) for part in name.split(".")):
        return (f"{what} {name[:80]!r} must be a valid Kubernetes object name (lowercase letters, digits, '-' and "
                "'.', at most 253 characters, starting and ending with a letter or digit)")
    return None


def label_problem(name: str, what: str) -> str | None:
    """Why ``name`` is not a valid namespace name (DNS-1123 label: <= 63 characters), else None."""
    if not name or len(name) > 63 or not _LABEL.fullmatch(name):
        return (f"{what} {name[:80]!r} must be a valid namespace name (lowercase letters, digits and '-', at most "
                "63 characters, starting and ending with a letter or digit)")
    return None

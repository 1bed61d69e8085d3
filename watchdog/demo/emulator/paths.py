"""kmock's request parsing, patched process-wide on import (kmock's rendering calls ``parsing.parse_path`` and
``parsing.guess_k8s``): ``/api/v1/namespaces[/NAME[/status|finalize]]`` is the namespaces resource (kmock gave
500), and ``watch`` is a watch for every spelling of true the API server accepts (the official Python client
sends ``watch=True``; kmock knew only ``true`` and served a LIST instead)."""

from __future__ import annotations

from kmock._internal import enums, parsing

_original_parse_path = parsing.parse_path
_original_guess_k8s = parsing.guess_k8s


def true(value: str | None) -> bool:
    """A boolean query parameter as the API server reads it (Go's strconv.ParseBool)."""
    return value in ("1", "t", "T", "true", "TRUE", "True")


def _parse_path(path: str) -> parsing.ParsedPath:
    parts = path.strip("/").split("/")
    if parts[:3] == ["api", "v1", "namespaces"] and (len(parts) <= 4 or parts[4:] in (["status"], ["finalize"])):
        name, sub = (parts + [None, None])[3:5]
        return parsing.ParsedPath(group="", version="v1", plural="namespaces", name=name, subresource=sub)
    return _original_parse_path(path)


def _guess_k8s(k8s: parsing.ParsedPath, method: enums.method, query: dict[str, str]) -> enums.action | None:
    if true(query.get("watch")):
        query = {**query, "watch": "true"}
    return _original_guess_k8s(k8s, method, query)


setattr(parsing, "parse_path", _parse_path)  # noqa: B010
setattr(parsing, "guess_k8s", _guess_k8s)  # noqa: B010

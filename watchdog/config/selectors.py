"""Label selector strings, checked with the Kubernetes API server's grammar before they are ever sent (pure; no
I/O). A selector the API server would refuse makes every LIST fail with a 400, so it is refused at start-up.

Grammar (``k8s.io/apimachinery/pkg/labels.Parse``)::

    selector    := requirement ( ',' requirement )*
    requirement := KEY | '!' KEY | KEY ( '=' | '==' | '!=' ) VALUE | KEY ( 'in' | 'notin' ) '(' VALUES ')'
    KEY         := [ DNS-subdomain '/' ] NAME          NAME  := <= 63 chars, [A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?
    VALUE       := '' | NAME                           VALUES := VALUE ( ',' VALUE )*, not empty

The numeric ``>`` / ``<`` (Gt/Lt) operators are refused: they make no sense for pod and namespace labels here.
"""

from __future__ import annotations

import re

__all__ = ["selector_problem", "show"]

_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SPECIAL = "!=<>(),"
MAX_SHOWN = 80


def show(value: object, limit: int = MAX_SHOWN) -> str:
    """``repr(value)`` cut to about ``limit`` characters (``...`` marks the cut): a message never echoes a huge
    value. Large containers are not rendered whole first."""
    if isinstance(value, dict | list | tuple | set) and len(value) > limit:
        return f"<{type(value).__name__} of {len(value)} items>"
    if isinstance(value, int) and value.bit_length() > 4 * limit:  # repr() of a huge int is slow, or refused
        return f"<integer of {value.bit_length()} bits>"
    text = repr(value) if not isinstance(value, str) or len(value) <= 4 * limit else repr(value[: 4 * limit])
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in _SPECIAL:
            two = text[i:i + 2]
            if two in ("==", "!="):
                out.append(two)
                i += 2
            else:
                out.append(ch)
                i += 1
        else:
            j = i
            while j < len(text) and not text[j].isspace() and text[j] not in _SPECIAL:
                j += 1
            out.append(text[i:j])
            i = j
    return out


def _key_problem(key: str) -> str | None:
    prefix, slash, name = key.rpartition("/")
    bad_prefix = not prefix or len(prefix) > 253 or not all(_DNS_LABEL.fullmatch(p) for p in prefix.split("."))
    if slash and bad_prefix:
        return f"label key {show(key)}: the prefix must be a DNS subdomain (lowercase, e.g. example.com/name)"
    if not name or len(name) > 63 or not _NAME.fullmatch(name):
        return (f"label key {show(key)}: the name must be 1-63 characters, alphanumeric at both ends, "
                "with only '-', '_' and '.' inside")
    return None


def _value_problem(value: str) -> str | None:
    if value and (len(value) > 63 or not _NAME.fullmatch(value)):
        return (f"label value {show(value)} must be at most 63 characters, alphanumeric at both ends, "
                "with only '-', '_' and '.' inside")
    return None


def _is_word(token: str | None) -> bool:
    return token is not None and token not in _SPECIAL and token not in ("==", "!=")


def selector_problem(text: str) -> str | None:
    """Why the API server would refuse the label selector ``text`` (one line), or None when it is valid.
    The empty selector is valid (it matches everything)."""
    toks = _tokens(text)
    pos = 0

    def peek() -> str | None:
        return toks[pos] if pos < len(toks) else None

    while toks:
        tok = peek()
        negated = tok == "!"
        if negated:
            pos += 1
            tok = peek()
        if not _is_word(tok):
            return f"expected a label key, found {show(tok or '')}"
        assert tok is not None
        problem = _key_problem(tok)
        if problem:
            return problem
        pos += 1
        op = peek()
        if negated or op in (None, ","):
            if negated and op not in (None, ","):
                return f"'!{tok}' (does not exist) takes no operator or value"
        elif op in ("=", "==", "!="):
            pos += 1
            value = peek()
            if _is_word(value):
                assert value is not None
                problem = _value_problem(value)
                if problem:
                    return problem
                pos += 1
            elif value not in (None, ","):
                return f"expected a label value after {op!r}, found {show(value)}"
        elif op in ("in", "notin"):
            pos += 1
            if peek() != "(":
                return f"{op!r} needs a parenthesised list of values, e.g. {tok} {op} (a,b)"
            pos += 1
            values: list[str] = []
            while True:
                value = peek()
                if value == ")":
                    break
                if value is None:
                    return f"{op!r} list is not closed with ')'"
                if value == ",":
                    values.append("")
                    pos += 1
                    continue
                if not _is_word(value):
                    return f"expected a label value in the {op!r} list, found {show(value)}"
                problem = _value_problem(value)
                if problem:
                    return problem
                values.append(value)
                pos += 1
                if peek() == ",":
                    pos += 1
                    if peek() == ")":
                        values.append("")
                elif peek() is None:
                    return f"{op!r} list is not closed with ')'"
                elif peek() != ")":
                    return f"expected ',' or ')' in the {op!r} list, found {show(peek() or '')}"
            pos += 1
            if not values:
                return f"the {op!r} list of {tok!r} is empty: give at least one value"
        elif op in (">", "<"):
            return f"{op!r} (Gt/Lt) is not allowed in a label selector here; use =, !=, in, notin or exists"
        else:
            return f"expected an operator (=, ==, !=, in, notin) or ',' after {show(tok)}, found {show(op)}"
        after = peek()
        if after is None:
            return None
        if after != ",":
            return f"expected ',' between requirements, found {show(after)}"
        pos += 1
        if peek() is None:
            return "a trailing ',' ends the selector: a requirement must follow"
    return None

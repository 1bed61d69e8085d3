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
    toks = _Tokens(text)
    if toks.peek() is None:
        return None
    while True:
        problem = _requirement_problem(toks)
        if problem:
            return problem
        after = toks.peek()
        if after is None:
            return None
        if after != ",":
            return f"expected ',' between requirements, found {show(after)}"
        toks.skip()
        if toks.peek() is None:
            return "a trailing ',' ends the selector: a requirement must follow"


class _Tokens:
    """The selector's tokens and the position of the next one: the parser's only state."""

    def __init__(self, text: str) -> None:
        self.items = _tokens(text)
        self.pos = 0

    def peek(self) -> str | None:
        return self.items[self.pos] if self.pos < len(self.items) else None

    def skip(self) -> None:
        self.pos += 1


def _requirement_problem(toks: _Tokens) -> str | None:
    """One requirement (``KEY``, ``!KEY`` or ``KEY <operator> ...``), read up to the token after it."""
    key = toks.peek()
    negated = key == "!"
    if negated:
        toks.skip()
        key = toks.peek()
    if not _is_word(key):
        return f"expected a label key, found {show(key or '')}"
    assert key is not None
    problem = _key_problem(key)
    if problem:
        return problem
    toks.skip()
    op = toks.peek()
    if op is None or op == ",":
        return None  # KEY or !KEY: exists, does not exist
    if negated:
        return f"'!{key}' (does not exist) takes no operator or value"
    return _operator_problem(toks, key, op)


def _operator_problem(toks: _Tokens, key: str, op: str) -> str | None:
    """What follows ``key`` when it is not the end of the requirement: an operator and its value(s)."""
    if op in ("=", "==", "!="):
        return _equality_problem(toks, op)
    if op in ("in", "notin"):
        return _set_problem(toks, key, op)
    if op in (">", "<"):
        return f"{op!r} (Gt/Lt) is not allowed in a label selector here; use =, !=, in, notin or exists"
    return f"expected an operator (=, ==, !=, in, notin) or ',' after {show(key)}, found {show(op)}"


def _equality_problem(toks: _Tokens, op: str) -> str | None:
    """``=``, ``==`` or ``!=`` and its value (which may be empty)."""
    toks.skip()
    value = toks.peek()
    if _is_word(value):
        assert value is not None
        toks.skip()
        return _value_problem(value)
    if value is not None and value != ",":
        return f"expected a label value after {op!r}, found {show(value)}"
    return None


def _set_problem(toks: _Tokens, key: str, op: str) -> str | None:
    """``in`` or ``notin`` and its parenthesised list of values: not empty, though a value in it may be."""
    toks.skip()
    if toks.peek() != "(":
        return f"{op!r} needs a parenthesised list of values, e.g. {key} {op} (a,b)"
    toks.skip()
    if toks.peek() == ")":
        return f"the {op!r} list of {key!r} is empty: give at least one value"
    return _values_problem(toks, op)


def _values_problem(toks: _Tokens, op: str) -> str | None:
    """The values of an ``in``/``notin`` list, read up to and including its ``)``; a ``,`` with no value before it
    stands for the empty value."""
    while True:
        value = toks.peek()
        if value == ")":
            toks.skip()
            return None
        if value is None:
            return f"{op!r} list is not closed with ')'"
        if value == ",":
            toks.skip()
            continue
        if not _is_word(value):
            return f"expected a label value in the {op!r} list, found {show(value)}"
        problem = _value_problem(value)
        if problem:
            return problem
        toks.skip()
        after = toks.peek()
        if after == ",":
            toks.skip()
        elif after is None:
            return f"{op!r} list is not closed with ')'"
        elif after != ")":
            return f"expected ',' or ')' in the {op!r} list, found {show(after)}"

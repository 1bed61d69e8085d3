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
from collections import deque

from watchdog.config.names import subdomain_problem

__all__ = ["label_key_problem", "normalised", "selector_problem", "show"]

_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
SPACE = "\t\n\v\f\r "  # what separates tokens: ASCII white space only (the chart's pattern says the same)
# spaces apart: ==, !=, one of !=<>(), or a run of the rest (another space, e.g. U+00A0, is part of a word: refused)
_TOKEN = re.compile(rf"==|!=|[!=<>(),]|[^{SPACE}!=<>(),]+")
_END = ""  # the token after the last one (no token is empty)
_PUNCTUATION = {*"!=<>(),", "==", "!=", _END}  # every token that is not a word
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


def label_key_problem(key: str) -> str | None:
    """Why ``key`` is not a label key (``[DNS-subdomain/]NAME``), one line, or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and subdomain_problem(prefix, "the prefix"):
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


def selector_problem(text: str) -> str | None:
    """Why the API server would refuse the label selector ``text`` (one line), or None when it is valid.
    The empty selector is valid (it matches everything)."""
    toks = deque([*_TOKEN.findall(text), _END])  # the parser's only state: the tokens not read yet
    while toks[0] != _END:
        problem = _requirement_problem(toks)
        if problem:
            return problem
        if toks[0] == ",":
            toks.popleft()
            if toks[0] == _END:
                return "a trailing ',' ends the selector: a requirement must follow"
        elif toks[0] != _END:
            return f"expected ',' between requirements, found {show(toks[0])}"
    return None


def _requirement_problem(toks: deque[str]) -> str | None:
    """One requirement (``KEY``, ``!KEY``, ``KEY`` and an operator with its value or list of values), read up to
    the token after it."""
    negated = toks[0] == "!"
    if negated:
        toks.popleft()
    key = toks[0]
    if key in _PUNCTUATION:
        return f"expected a label key, found {show(key)}"
    problem = label_key_problem(key)
    if problem:
        return problem
    toks.popleft()
    op = toks[0]
    if op in (",", _END):
        return None  # KEY or !KEY: exists, does not exist
    if negated:
        return f"'!{key}' (does not exist) takes no operator or value"
    if op in (">", "<"):
        return f"{op!r} (Gt/Lt) is not allowed in a label selector here; use =, !=, in, notin or exists"
    if op not in ("=", "==", "!=", "in", "notin"):
        return f"expected an operator (=, ==, !=, in, notin) or ',' after {show(key)}, found {show(op)}"
    toks.popleft()
    if op in ("in", "notin"):
        return _list_problem(toks, key, op)
    value = toks[0]  # none (the end, or a ','): KEY= is KEY equal to ""
    if value not in _PUNCTUATION:
        toks.popleft()
        return _value_problem(value)
    if value not in (",", _END):
        return f"expected a label value after {op!r}, found {show(value)}"
    return None


def _list_problem(toks: deque[str], key: str, op: str) -> str | None:
    """The parenthesised values of ``in`` or ``notin``, read up to and including the ``)``: not an empty list,
    though a value in it may be empty (a ``,`` with no value before it)."""
    if toks[0] != "(":
        return f"{op!r} needs a parenthesised list of values, e.g. {key} {op} (a,b)"
    toks.popleft()
    if toks[0] == ")":
        return f"the {op!r} list of {key!r} is empty: give at least one value"
    after_value = False
    while toks[0] != ")":
        token = toks.popleft()
        if token == _END:
            return f"{op!r} list is not closed with ')'"
        if token == ",":
            after_value = False
        elif after_value:
            return f"expected ',' or ')' in the {op!r} list, found {show(token)}"
        elif token in _PUNCTUATION:
            return f"expected a label value in the {op!r} list, found {show(token)}"
        elif problem := _value_problem(token):
            return problem
        else:
            after_value = True
    toks.popleft()
    return None


def normalised(text: str) -> str:
    """A valid selector (:func:`selector_problem` says None) in one spelling: spaces dropped, ``==`` as ``=``, the
    values of ``in``/``notin`` sorted, the requirements sorted, each once. Two selectors with the same spelling
    select the same pods (the converse does not hold: this is no proof that two selectors are disjoint)."""
    requirements: set[str] = set()
    current: list[str] = []
    depth = 0
    for token in _TOKEN.findall(text):
        depth += (token == "(") - (token == ")")
        if token == "," and depth == 0:
            requirements.add(_spelled(current))
            current = []
        else:
            current.append("=" if token == "==" else token)
    requirements.add(_spelled(current))
    return ",".join(sorted(requirements))


def _spelled(tokens: list[str]) -> str:
    """One requirement's tokens as text; an ``in``/``notin`` list's values sorted, each once."""
    if len(tokens) > 2 and tokens[1] in ("in", "notin"):
        values: set[str] = set()
        value = ""
        for token in tokens[3:-1]:  # between the parentheses
            if token == ",":
                values.add(value)
                value = ""
            else:
                value = token
        values.add(value)
        return f"{tokens[0]} {tokens[1]} ({','.join(sorted(values))})"
    return "".join(tokens)

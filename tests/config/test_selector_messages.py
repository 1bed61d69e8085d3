"""selector_problem's messages, word for word, one per way the API server's grammar is broken (issue 28 item 6:
the function was split up; every refusal must read as before)."""

from __future__ import annotations

import pytest

from watchdog.config.selectors import selector_problem

MESSAGES = [
    (",app=x", "expected a label key, found ','"),
    ("!", "expected a label key, found ''"),
    ("!=x", "expected a label key, found '!='"),
    ("Example.com/app=x", "label key 'Example.com/app': the prefix must be a DNS subdomain (lowercase, e.g. "
                          "example.com/name)"),
    ("app-=x", "label key 'app-': the name must be 1-63 characters, alphanumeric at both ends, with only '-', '_' "
               "and '.' inside"),
    ("!app=x", "'!app' (does not exist) takes no operator or value"),
    ("!app in (a)", "'!app' (does not exist) takes no operator or value"),
    ("app=-v", "label value '-v' must be at most 63 characters, alphanumeric at both ends, with only '-', '_' and "
               "'.' inside"),
    ("app=(x)", "expected a label value after '=', found '('"),
    ("app!=)", "expected a label value after '!=', found ')'"),
    ("app in a", "'in' needs a parenthesised list of values, e.g. app in (a,b)"),
    ("app notin", "'notin' needs a parenthesised list of values, e.g. app notin (a,b)"),
    ("app in (", "'in' list is not closed with ')'"),
    ("app in (a", "'in' list is not closed with ')'"),
    ("app in (a,", "'in' list is not closed with ')'"),
    ("app in (a,=)", "expected a label value in the 'in' list, found '='"),
    ("app notin ((a)", "expected a label value in the 'notin' list, found '('"),
    ("app in (a,-b)", "label value '-b' must be at most 63 characters, alphanumeric at both ends, with only '-', '_' "
                      "and '.' inside"),
    ("app in (a b)", "expected ',' or ')' in the 'in' list, found 'b'"),
    ("app in (a=)", "expected ',' or ')' in the 'in' list, found '='"),
    ("app in ()", "the 'in' list of 'app' is empty: give at least one value"),
    ("app>5", "'>' (Gt/Lt) is not allowed in a label selector here; use =, !=, in, notin or exists"),
    ("app<5", "'<' (Gt/Lt) is not allowed in a label selector here; use =, !=, in, notin or exists"),
    ("app é", "expected an operator (=, ==, !=, in, notin) or ',' after 'app', found 'é'"),
    ("app (", "expected an operator (=, ==, !=, in, notin) or ',' after 'app', found '('"),
    ("app=a b", "expected ',' between requirements, found 'b'"),
    ("app in (a) b", "expected ',' between requirements, found 'b'"),
    ("app=x,", "a trailing ',' ends the selector: a requirement must follow"),
    ("app,,b", "expected a label key, found ','"),
]
VALID = ["app in (,a)", "app in (a,)", "app in (,)", "app notin (a,,b)", "app=,b", "app!=", "!a,!b", "a,b=c"]


@pytest.mark.parametrize(("text", "message"), MESSAGES)
def test_each_refusal_reads_word_for_word(text: str, message: str) -> None:
    assert selector_problem(text) == message


@pytest.mark.parametrize("text", VALID)
def test_empty_values_in_lists_and_after_operators_are_valid(text: str) -> None:
    assert selector_problem(text) is None

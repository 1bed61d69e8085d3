"""The line level of the parser (watchdog.core.lines): the name pattern and the label texts remembered between
scrapes (bounded, and never changing a result)."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

import pytest
from bench.expositions import build_vllm_v1_exposition
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from watchdog.core import lines
from watchdog.core.lines import scrape_url
from watchdog.core.parsing import LIMITS, parse_exposition
from watchdog.core.profiles import get_profile

VLLM = get_profile("vllm")


def running(engine: str, value: float, model: str = "m") -> bytes:
    return b'vllm:num_requests_running{engine="%s",model_name="%s"} %r\n' % (engine.encode(), model.encode(), value)


@pytest.mark.parametrize("names", [[b"a"], [b"ab", b"ac", b"a"], [b"vllm:a", b"vllm:ab", b"vllm:b"],
                                   [b"a.b", b"a+c", b"a*"], [b"x" * 5_000, b"x" * 4_999 + b"y"]])
def test_the_name_pattern_matches_exactly_the_names(names: list[bytes]) -> None:
    pattern = re.compile(lines._trie(sorted(names)))
    for name in names:
        assert pattern.fullmatch(name), name
        for other in (name[:-1], name + b"z", b"z" + name):
            assert bool(pattern.fullmatch(other)) == (other in names), other



# --- the label texts remembered between scrapes are bounded, and never change a result ------------------------


def test_remembered_label_texts_stay_within_their_bound_and_give_the_same_series() -> None:
    known = lines.matcher(VLLM).known
    known.clear()
    for start in range(0, 3 * lines._KNOWN_ENTRIES, 1_000):  # a fleet of 12,288 models, 1,000 a body
        body = b"".join(running(str(i), i, model=f"m{i}") for i in range(start, start + 1_000))
        result = parse_exposition(body, VLLM)
        assert [s.running for s in result.series] == [float(i) for i in sorted(range(start, start + 1_000), key=str)
                                                     ][: LIMITS.series]
        assert len(known) <= lines._KNOWN_ENTRIES
    assert len(known) > 0


def test_a_long_label_text_is_read_every_time_but_never_remembered() -> None:
    known = lines.matcher(VLLM).known
    known.clear()
    model = "m" * lines._KNOWN_TEXT
    for value in (3, 4):  # the second scrape reads its own value, not a remembered one
        assert [s.running for s in parse_exposition(running("0", value, model=model), VLLM).series] == [value]
    assert known == {}
    assert [s.running for s in parse_exposition(running("0", 5), VLLM).series] == [5]
    assert list(known) == [(b"vllm:num_requests_running", b'{engine="0",model_name="m"}')]  # never its value


# A label text is remembered with the line's value cut off (the last space and what follows it): what is kept must
# make a canonical line with ANY value, and a line the pre-filter splits otherwise is read on its own, in full.
SPLITS = [b'{engine="0"} %s', b"%s", b'{engine="0"}  %s', b'{engine="0"}\t%s', b'{engine="0"} %s \r',
          b'{engine="0"} %s\r', b"{} %s", b'{engine="0 1"} %s', b'{engine="0 1700"} %s',
          b'{engine="0"} %s 1700000000',  # a timestamp: what precedes it holds the value
          b'{engine="0"} 1700 %s',  # 3 fields once the value is cut off, yet 2 with it: never remembered
          b'{engine="0",engine="1"} %s', b'{__engine="0"} %s', b'{engine="0\\"1"} %s', b'{engine="0"} %s_1']


@pytest.mark.parametrize("rest", SPLITS)
def test_a_remembered_label_text_reads_every_value_as_the_whole_line_would(rest: bytes) -> None:
    known = lines.matcher(VLLM).known
    known.clear()
    parse_exposition(b"vllm:num_requests_running" + rest % b"2" + b"\n", VLLM)  # remembers what it can
    for value in (b"3", b"4.5", b"NaN"):
        line = b"vllm:num_requests_running" + rest % value
        warm = parse_exposition(line + b"\n", VLLM)
        known.clear()
        assert repr(warm) == repr(parse_exposition(line + b"\n", VLLM))  # read again with nothing remembered
        assert repr([s.running for s in warm.series]) == repr(_prometheus(line))


def _prometheus(line: bytes) -> list[float]:
    """The value prometheus_client's parser reads in one sample line (none when it refuses it)."""
    try:
        return [float(s.value) for f in text_string_to_metric_families(line.decode() + "\n") for s in f.samples]
    except ValueError:
        return []


@pytest.mark.parametrize("engines", [1, 8])
def test_the_samples_a_scrape_asks_for_give_the_same_series_as_the_whole_body(engines: int) -> None:
    # prometheus_client's own filter (a current vLLM's /metrics?name[]=...) over a real-size vLLM exposition:
    # what the parser reads is the same, from ~20 lines per engine instead of ~690
    profile = get_profile("vllm")
    body = build_vllm_v1_exposition(engines=engines)
    families = list(text_string_to_metric_families(body.decode()))
    registry = CollectorRegistry(auto_describe=True)
    registry.register(_Fixed(families))
    names = parse_qs(urlsplit(scrape_url("http://10.0.0.1:8000/metrics", profile)).query)["name[]"]
    restricted = generate_latest(registry.restricted_registry(names))
    assert len(restricted) < len(body) / 20
    assert parse_exposition(restricted, profile) == parse_exposition(body, profile)
    assert parse_exposition(restricted, profile).series


class _Fixed:
    """A collector of parsed families (describe() names them, so the restricted registry can pick it)."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def describe(self) -> list[Metric]:
        return self.families

    def collect(self) -> list[Metric]:
        return self.families


def test_a_scrape_url_with_a_query_of_its_own_keeps_it() -> None:
    url = scrape_url("http://10.0.0.1:8000/metrics?x=1", get_profile("vllm"))
    assert url.startswith("http://10.0.0.1:8000/metrics?x=1&name%5B%5D=")

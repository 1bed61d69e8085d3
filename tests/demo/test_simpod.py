"""Simulated vLLM pods: modes, wire format, gzip, hang, runtime switching, standalone process."""

from __future__ import annotations

import gzip
import http.client
import json
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from watchdog.demo.simpod import SimFleet, SimPod

PROMPT, GEN = "vllm:prompt_tokens_total", "vllm:generation_tokens_total"
RUNNING, WAITING = "vllm:num_requests_running", "vllm:num_requests_waiting"
STEPS = "vllm:iteration_tokens_total_count"


def fetch(url: str, gzip_ok: bool = False, timeout: float = 5) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"} if gzip_ok else {})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.status, dict(resp.headers), resp.read()


def scrape(pod: SimPod) -> dict[tuple[str, str], float]:
    """{(sample name, engine): value} for the samples labelled with an engine (and no other label but le)."""
    text = fetch(pod.url + "/metrics")[2].decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if "engine" in s.labels and set(s.labels) == {"engine", "model_name"}:
                samples[(s.name, s.labels["engine"])] = s.value
    return samples


@pytest.fixture
def pod() -> Iterator[SimPod]:
    with SimPod("127.0.0.2", 0, "progressing") as p:
        yield p


def test_loopback_address_other_than_127_0_0_1_binds(pod: SimPod) -> None:
    assert re.fullmatch(r"http://127\.0\.0\.2:\d+", pod.url)
    status, _, body = fetch(pod.url + "/health")
    assert (status, body) == (200, b"")


def test_progressing_counters_rise_between_scrapes(pod: SimPod) -> None:
    first = scrape(pod)
    time.sleep(0.2)
    second = scrape(pod)
    assert first[(RUNNING, "0")] == 20 and first[(WAITING, "0")] == 2
    for name in (PROMPT, GEN, STEPS, "vllm:iteration_tokens_total_sum"):
        assert second[(name, "0")] > first[(name, "0")], name
    # about 1200 prompt tokens per second
    assert 150 <= second[(PROMPT, "0")] - first[(PROMPT, "0")] <= 600
    assert pod.scrapes == 2


def test_idle_and_wedged_freeze_every_counter() -> None:
    with SimFleet(["idle", "wedged"], engines=2) as fleet:
        first = [scrape(p) for p in fleet]
        time.sleep(0.2)
        second = [scrape(p) for p in fleet]
    assert [p.address for p in fleet] == ["127.0.0.2", "127.0.0.3"]
    for before, after in zip(first, second, strict=True):
        for engine in ("0", "1"):
            for name in (PROMPT, GEN, STEPS, "vllm:iteration_tokens_total_sum"):
                assert after[(name, engine)] == before[(name, engine)] > 0, (name, engine)
    assert (second[0][(RUNNING, "0")], second[0][(RUNNING, "1")]) == (0, 0)
    assert (second[1][(RUNNING, "0")], second[1][(WAITING, "1")]) == (21, 0)


KV = "vllm:kv_cache_usage_perc"


def test_prefill_moves_only_the_kv_cache_usage_as_vllm_v1_does() -> None:
    with SimPod("127.0.0.2", 0, "prefill") as p:
        first = scrape(p)
        time.sleep(0.35)
        second = scrape(p)
    assert second[(RUNNING, "0")] == 1
    for name in (PROMPT, GEN, STEPS, "vllm:iteration_tokens_total_sum", "vllm:request_success_total"):
        assert second.get((name, "0")) == first.get((name, "0")), name  # no step produced an output
    # ~10 steps/s x 128 blocks of 16 tokens per 2048-token chunk, out of 40,000 blocks
    assert 0.005 <= second[(KV, "0")] - first[(KV, "0")] <= 0.02


def sleep_state(pod: SimPod) -> dict[str, float]:
    text = fetch(pod.url + "/metrics")[2].decode()
    return {s.labels["sleep_state"]: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == "vllm:engine_sleep_state"}


def test_sleeping_keeps_requests_running_flat_and_says_it_is_asleep() -> None:
    with SimPod("127.0.0.2", 0, "progressing") as p:
        assert sleep_state(p) == {"awake": 1.0, "weights_offloaded": 0.0, "discard_all": 0.0}
        p.set_mode("sleeping")
        first = scrape(p)
        time.sleep(0.15)
        assert scrape(p) == first and first[(RUNNING, "0")] == 21
        assert sleep_state(p) == {"awake": 0.0, "weights_offloaded": 1.0, "discard_all": 0.0}


def test_wedge_after_then_recover() -> None:
    with SimPod("127.0.0.2", 0, "wedge_after", wedge_after_s=0.3) as p:
        assert p.effective_mode() == "progressing" and scrape(p)[(RUNNING, "0")] == 20
        time.sleep(0.45)
        wedged = scrape(p)
        time.sleep(0.15)
        assert scrape(p) == wedged and wedged[(RUNNING, "0")] == 21
        assert p.mode == "wedge_after" and p.effective_mode() == "wedged"
        p.set_mode("progressing")
        time.sleep(0.1)
        assert scrape(p)[(PROMPT, "0")] > wedged[(PROMPT, "0")]


def test_one_engine_can_wedge_alone() -> None:
    with SimPod("127.0.0.2", 0, "progressing", engines=2) as p:
        p.set_mode("wedged", engines=[1])
        first = scrape(p)
        time.sleep(0.15)
        second = scrape(p)
    assert second[(PROMPT, "0")] > first[(PROMPT, "0")]
    assert second[(PROMPT, "1")] == first[(PROMPT, "1")] and second[(RUNNING, "1")] == 21


def test_hang_accepts_but_never_answers_until_switched(pod: SimPod) -> None:
    pod.set_mode("hang")
    started = time.monotonic()
    with socket.create_connection((pod.address, pod.port), timeout=1) as sock:  # the connection is accepted
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        with pytest.raises(TimeoutError):
            sock.recv(1)
    assert 0.9 <= time.monotonic() - started < 2
    status, _, body = fetch(pod.url + "/sim/mode")  # control endpoint still answers
    assert status == 200 and json.loads(body)["engines"] == [{"mode": "hang", "effective": "hang"}]
    conn = http.client.HTTPConnection(pod.address, pod.port, timeout=5)
    conn.request("POST", "/sim/mode?mode=progressing")
    assert conn.getresponse().status == 200
    assert fetch(pod.url + "/health", timeout=1)[0] == 200


def test_a_stopped_pod_answers_no_connection_kept_alive_from_before() -> None:
    # Prometheus keeps its scrape connection alive: a stopped pod must not go on answering on it.
    pod = SimPod("127.0.0.2", 0, "progressing")
    pod.start()
    conn = http.client.HTTPConnection(pod.address, pod.port, timeout=5)
    conn.request("GET", "/metrics")
    first = conn.getresponse()
    assert first.status == 200 and first.read()
    pod.stop()
    conn.request("GET", "/metrics")
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        conn.getresponse()
    conn.close()


def test_gzip_when_asked(pod: SimPod) -> None:
    _, headers, body = fetch(pod.url + "/metrics", gzip_ok=True)
    assert headers["Content-Encoding"] == "gzip"
    text = gzip.decompress(body).decode()
    assert text.startswith("# HELP ") and "vllm:num_requests_running{" in text
    _, plain_headers, plain = fetch(pod.url + "/metrics")
    assert "Content-Encoding" not in plain_headers and plain.startswith(b"# HELP ")
    assert plain_headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"


def test_wire_format_matches_vllm_v1(pod: SimPod) -> None:
    text = fetch(pod.url + "/metrics")[2].decode()
    model = 'model_name="meta-llama/Llama-3.1-8B-Instruct"'
    for line in ("# TYPE vllm:num_requests_running gauge", "# TYPE vllm:prompt_tokens_total counter",
                 "# TYPE vllm:prompt_tokens_created gauge", "# TYPE vllm:iteration_tokens_total histogram",
                 "# TYPE vllm:iteration_tokens_total_created gauge",
                 "# TYPE vllm:time_to_first_token_seconds histogram",
                 "# HELP vllm:generation_tokens_total Number of generation tokens processed."):
        assert line + "\n" in text
    assert re.search(r'^vllm:prompt_tokens_total\{engine="0",' + model + r"\} 1\.\d+e\+06$", text, re.M)
    # labels sorted by name, ``le`` included, as in vLLM's output
    assert re.search(r'^vllm:iteration_tokens_total_bucket\{engine="0",le="\+Inf",' + model + r"\} \d", text, re.M)
    families = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert families["vllm:iteration_tokens_total"] == "histogram"
    assert families["vllm:kv_cache_usage_perc"] == "gauge"


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="loopback"):
        SimPod("10.0.0.1", 0)
    with pytest.raises(ValueError, match="unknown mode 'stuck'"):
        SimPod("127.0.0.2", 0, "stuck")


def test_standalone_process() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "watchdog.demo.simpod", "--address", "127.0.0.3", "--port", "0",
                             "--mode", "wedged", "--engines", "2"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        match = re.fullmatch(r"simpod listening on (http://127\.0\.0\.3:\d+) mode=wedged\n", proc.stdout.readline())
        assert match
        text = fetch(match.group(1) + "/metrics")[2].decode()
        assert 'vllm:num_requests_running{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 21.0' in text
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0


def sglang_samples(pod: SimPod) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = fetch(pod.url + "/metrics")[2].decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def test_sglang_flavor_prints_split_series_as_sglang_does() -> None:
    with SimPod("127.0.0.2", 0, "progressing", engines=2, flavor="sglang") as p:
        p.set_mode("wedged", engines=[1])
        first = sglang_samples(p)
        time.sleep(0.2)
        second = sglang_samples(p)
    running = {dict(k[1])["dp_rank"]: v for k, v in second.items() if k[0] == "sglang:num_running_reqs"}
    assert running == {"0": 20.0, "1": 21.0}  # gauges on TP rank 0 only: one per dp rank
    assert {dict(k[1])["tp_rank"] for k in second if k[0] == "sglang:cuda_graph_passes_total"} == {"0", "1"}
    tokenizer = [k for k in second if k[0] == "sglang:generation_tokens_total"]
    assert tokenizer and all(set(dict(k[1])) == {"engine_type", "is_streaming", "model_name"} for k in tokenizer)
    decode = {dict(k[1])["dp_rank"]: (first[k], v) for k, v in second.items()
              if k[0] == "sglang:realtime_tokens_total" and dict(k[1])["mode"] == "decode"}
    assert decode["0"][1] > decode["0"][0] and decode["1"][1] == decode["1"][0]  # rank 1 wedged
    assert not any(name.endswith("_created") for name, _ in second)


def test_unknown_flavor_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown flavor 'tgi'"):
        SimPod("127.0.0.2", 0, "idle", flavor="tgi")


def test_listen_any_is_an_explicit_opt_in() -> None:
    """Loopback is the default; any address only with ``listen_any`` (for a container's own network namespace,
    which the node tier's engine image binds; not bound here: a host test stays on loopback)."""
    with pytest.raises(ValueError, match="listen_any=True"):
        SimPod("0.0.0.0", 0)
    with pytest.raises(ValueError, match="loopback"):
        SimPod("10.244.0.5", 8000)
    assert SimPod("0.0.0.0", 8000, listen_any=True).url == "http://0.0.0.0:8000"
    assert SimPod("10.244.0.5", 8000, listen_any=True).address == "10.244.0.5"

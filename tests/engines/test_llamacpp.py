"""A real llama-server (built from the pinned llama.cpp sources, a random-weight model, CPU) judged by the real
watchdog: `run` against the API emulator with the server as a pod's endpoint, `check` of its live /metrics and
`replay` of bodies recorded while it ran. Each scenario drives the engine into one situation of the llamacpp
profile (docs/engines.md) and asserts the verdict:

- idle, before and after a request: idle, kept;
- streaming generation: progressing (llamacpp:n_decode_total moves per token), idle when it ends;
- a long prompt (one llama_decode call of seconds, nothing moves inside it): never stalled when the window exceeds
  the longest call; a window shorter than that call would call it stalled (replay);
- the whole process SIGSTOPped: every scrape fails, unknown, never deleted;
- the server loop thread frozen (ptrace) while /metrics still answers: stalled within window + interval, the pod
  deleted in enforce mode; progressing again once released;
- two slots (-np 2) generating at once: one engine, progressing with 2 running;
- a multimodal prompt (a random projector): nothing moves during the image's encode; never stalled when the window
  exceeds it, a shorter window would call it stalled (replay); prompt_tokens_total flushed only with output;
- router mode (two models, a child server each): the target's path names one model: idle beside the other model
  generating, progressing, stalled and deleted when its loop is frozen; plain /metrics (400) unknown.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

import pytest
from llama_kit import (
    DRY_NS,
    TARGET,
    LlamaServer,
    LoopFreezer,
    Recorder,
    Stream,
    byte_prompt,
    complete,
    get,
    media_prompt,
    png_image,
    replay,
    run_verb,
    sample,
    watch,
)
from model import V_IMAGE, V_PATCH

pytestmark = pytest.mark.engines

WINDOW, INTERVAL = 5.0, 1.0  # FAST_SETTINGS: the window the scenarios run with unless they say otherwise
Start = Callable[..., LlamaServer]


def settled(states: list[tuple[float, str, str]]) -> list[tuple[float, str, str]]:
    """The transitions without the first sample's: a busy engine's first scrape has nothing to compare with, so it
    reads ``suspect`` ("first busy sample, no progress baseline yet") until the second one."""
    if states and states[0][1] == "suspect" and "first busy sample" in states[0][2]:
        return states[1:]
    return states


def test_idle_server_is_idle_before_and_after_a_request_and_check_reads_every_signal(
        llama: Start, tmp_path: Path) -> None:
    server = llama("127.0.0.41")
    with watch(server, tmp_path / "watch") as w:
        w.wait_state("idle", 15)
        answer = complete(server, "the engine", 16)  # counters and gauges move, then rest at non-zero values
        assert answer["tokens_predicted"] == 16
        time.sleep(WINDOW + 3 * INTERVAL)  # a whole window after it: flat counters, nothing running
        states = w.state_names()
        assert states[-1] == "idle" and set(states) <= {"idle", "progressing"}, w.states()
        assert w.pod_exists() and not w.remediations("deleted")

    out = run_verb("check", f"{server.url}/metrics", "--profile", "llamacpp", "--format", "json")
    assert out.returncode == 0, out.stderr
    checked = json.loads(out.stdout)
    (series,) = checked["series"]
    assert series["running"] == 0 and series["labels"] == {}, series
    assert series["progress"]["llamacpp:tokens_predicted_total"] == 16, series
    # One llama_decode call per prompt batch (it also yields the first token) and one per further token.
    assert series["progress"]["llamacpp:n_decode_total"] == 1 + 15, series
    assert series["progress"]["llamacpp:prompt_tokens_total"] > 0, series
    assert {"llamacpp:requests_processing", "llamacpp:requests_deferred"} <= set(checked["found"]), checked

def test_streaming_generation_is_progressing_then_idle(llama: Start, tmp_path: Path) -> None:
    server = llama("127.0.0.42")
    stream = Stream(server, "the engine is", 15000)
    try:
        stream.wait_tokens(20, 30)
        with watch(server, tmp_path / "watch") as w:
            w.wait_state("progressing", 15)
            before = stream.tokens
            time.sleep(WINDOW + 2 * INTERVAL)  # a whole window of generation
            assert stream.tokens > before + 50 and not stream.done.is_set(), (before, stream.tokens, stream.error)
            states = settled(w.states())
            assert [s for _, s, _ in states] == ["progressing"], w.states()
            assert states[0][2].endswith("progressing: 1 running, llamacpp:n_decode_total moving"), states
            stream.close()
            w.wait_state("idle", WINDOW + 5)
            assert w.pod_exists() and not w.remediations("deleted")
            assert [s for _, s, _ in settled(w.states())] == ["progressing", "idle"], w.states()
    finally:
        stream.close()


# Two llama_decode calls (batches of 3072 and 2928 tokens; micro-batches of 512 inside each, which move nothing):
# about 2.5 s and 3.3 s here on one CPU thread.
LONG_PROMPT_TOKENS, LONG_BATCH = 6000, 3072
LONG_WINDOW = 10.0


def test_long_prompt_is_never_stalled_when_the_window_exceeds_the_longest_decode(
        llama: Start, tmp_path: Path) -> None:
    server = llama("127.0.0.43", batch=LONG_BATCH, ubatch=512)
    recorded = tmp_path / "recorded"
    with watch(server, tmp_path / "watch", windowSeconds=LONG_WINDOW) as w, \
            Recorder(server, recorded, interval_s=0.5) as rec:
        w.wait_state("idle", 15)
        answer = complete(server, byte_prompt(LONG_PROMPT_TOKENS), 2)
        time.sleep(2 * INTERVAL)
        kept = w.pod_exists()
    prompt_s = answer["timings"]["prompt_ms"] / 1000
    flat = rec.longest_flat_busy_s()
    # The scenario is what it claims: llama_decode calls long enough to hold n_decode_total still across several
    # scrapes (nothing moves inside one call), and the window longer than the longest of them.
    assert answer["timings"]["prompt_n"] >= LONG_PROMPT_TOKENS - 10, answer["timings"]
    assert 2.0 <= flat < LONG_WINDOW - 2 * INTERVAL, (flat, prompt_s)
    # While the second call runs, the first one's 3,072 prompt tokens are only queued: prompt_tokens_total is
    # flushed by a batch that produces output (the last one), not per batch (issue 41 item 5).
    second = [body for _, body in rec.bodies
              if sample(body, "requests_processing") == 1 and sample(body, "n_decode_total") == 1]
    assert len(second) >= 2 and {sample(body, "prompt_tokens_total") for body in second} == {0}, second
    assert sample(rec.bodies[-1][1], "prompt_tokens_total") == answer["timings"]["prompt_n"]
    states = w.state_names()
    assert "progressing" in states and "stalled" not in states, w.states()
    assert kept and not w.remediations("deleted")
    # The same bodies, replayed: never stalled with that window; a window shorter than the longest call would
    # call the engine stalled in the middle of it (the minimum safe window of docs/engines.md is real).
    assert not any(v["stalled"] for v in replay(recorded, "--window", str(LONG_WINDOW)))
    short = replay(recorded, "--window", f"{max(1.5, flat - 1.0):.1f}", "--min-samples", "3")
    assert any(v["stalled"] for v in short), [(v["t"], v["state"]) for v in short]
    print(f"prompt of {answer['timings']['prompt_n']} tokens in {prompt_s:.1f}s; longest llama_decode seen "
          f"{flat:.1f}s; window {LONG_WINDOW}s: {states}")


def test_sigstopped_server_is_unknown_never_deleted(llama: Start, tmp_path: Path) -> None:
    server = llama("127.0.0.44")
    stream = Stream(server, "the engine is", 15000)
    try:
        stream.wait_tokens(20, 30)
        with watch(server, tmp_path / "watch") as w:
            w.wait_state("progressing", 15)
            stopped_at = time.time()
            os.kill(server.pid, signal.SIGSTOP)
            try:
                w.wait_state("unknown", WINDOW, after=stopped_at)
                time.sleep(WINDOW + 3 * INTERVAL)  # every scrape of more than a window fails
                assert w.pod_exists() and not w.remediations("deleted") and not w.remediations("dry_run")
                after = [(s, m) for t, s, m in w.states() if t >= stopped_at]
                assert {s for s, _ in after} == {"unknown"}, after
                failed = [r for r in w.records() if r.get("result") == "timeout" and r.get("state") == "unknown"]
                assert failed and w.name() in failed[0]["msg"], w.tail()
            finally:
                os.kill(server.pid, signal.SIGCONT)
            resumed = stream.tokens
            w.wait_state("progressing", WINDOW, after=time.time())
            stream.wait_tokens(resumed + 20, 10)
            assert "stalled" not in w.state_names()
    finally:
        stream.close()


def test_frozen_server_loop_is_stalled_deleted_and_progressing_once_released(llama: Start, tmp_path: Path) -> None:
    server = llama("127.0.0.45")
    stream = Stream(server, "the engine is", 15000)
    freezer = LoopFreezer(server)
    recorded = tmp_path / "recorded"
    try:
        stream.wait_tokens(20, 30)
        with watch(server, tmp_path / "watch", dry_run_twin=True) as w, Recorder(server, recorded) as rec:
            # Both pods watched, a few samples of generation (the verdict before the freeze is the streaming
            # scenario's: asserted there, so that a broken rule fails here on the stall itself).
            assert w.wait(lambda: bool(w.states() and w.states(DRY_NS)), 15), w.tail()
            time.sleep(2 * INTERVAL)
            frozen_at, attempts = freezer.freeze_in_decode()
            tokens = stream.tokens
            # /metrics still answers (the HTTP threads and the queue's worker run) with a request processing and
            # n_decode_total frozen: exactly a wedged engine behind a live server.
            first = server.metrics()
            assert sample(first, "requests_processing") == 1, first
            stalled_at = w.wait_state("stalled", WINDOW + INTERVAL + 5, after=frozen_at)
            assert w.wait(lambda: not w.pod_exists(), 10), w.tail()
            deleted_at = time.time()
            assert sample(server.metrics(), "n_decode_total") == sample(first, "n_decode_total")
            assert stream.tokens == tokens  # nothing was generated while frozen
            freezer.release()
            released_at = time.time()
            stream.wait_tokens(tokens + 20, 10)
            w.wait_state("progressing", WINDOW, ns=DRY_NS, after=released_at)
        # Stalled within window + interval of the freeze (plus the scrape deadline and the cycle's own time).
        assert stalled_at - frozen_at <= WINDOW + INTERVAL + 1.0, (frozen_at, stalled_at, attempts)
        (deleted,) = w.remediations("deleted")
        assert w.name() in deleted["msg"], deleted
        said = next(m for _, s, m in w.states() if s == "stalled")
        decodes = int(sample(first, "n_decode_total") or 0)
        assert f"1 requests running (0 waiting), progress signals unchanged (llamacpp:n_decode_total={decodes}," in said
        dry = w.state_names(DRY_NS)
        assert dry[-2:] == ["stalled", "progressing"], w.states(DRY_NS)
        assert len(w.remediations("dry_run")) == 1
        verdicts = replay(recorded, "--window", str(WINDOW))
        assert any(v["stalled"] for v in verdicts) and verdicts[-1]["state"] == "progressing", \
            [(v["t"], v["state"]) for v in verdicts]
        print(f"freeze -> stalled {stalled_at - frozen_at:.1f}s, -> deleted {deleted_at - frozen_at:.1f}s "
              f"(window {WINDOW}s, interval {INTERVAL}s; {attempts} freeze attempt(s); "
              f"{len(rec.bodies)} bodies recorded)")
    finally:
        freezer.release()
        stream.close()


def test_two_slots_generating_are_one_engine_progressing(llama: Start, tmp_path: Path) -> None:
    server = llama("127.0.0.46", slots=2, ctx=32768)
    streams = [Stream(server, "the engine is", 15000), Stream(server, "a stall of the pod", 15000)]
    try:
        for stream in streams:
            stream.wait_tokens(20, 30)
        body = server.metrics()
        assert sample(body, "requests_processing") == 2, body
        with watch(server, tmp_path / "watch") as w:
            w.wait_state("progressing", 15)
            time.sleep(WINDOW + INTERVAL)
            streams[0].close()  # one slot released, the other goes on
            time.sleep(WINDOW + INTERVAL)
            assert not streams[1].done.is_set()
            streams[1].close()
            w.wait_state("idle", WINDOW + 5)
            states = settled(w.states())
            assert [s for _, s, _ in states] == ["progressing", "idle"], w.states()
            assert states[0][2].endswith("progressing: 2 running, llamacpp:n_decode_total moving"), states
            assert w.pod_exists() and not w.remediations("deleted")
            # One engine series: llama.cpp serves every slot from one loop (no labels).
            assert {m.split("series {", 1)[1].split("}", 1)[0] for _, _, m in states} == {""}
    finally:
        for stream in streams:
            stream.close()


# A multimodal (mtmd) prompt: text, three images of 1,024 image tokens each back to back (the random projector,
# model.py), text. The images are encoded by the vision encoder and their tokens decoded into the text model outside
# metrics_post_decode: about 1.3 s per image on one CPU thread of a quiet machine (CI), 4-8 s at load average 6-14,
# during which /metrics answers and no signal moves (one image was too short to measure on the quiet machine: 1.0 s
# flat). The window costs no test time (nothing waits for it): wide, so that a loaded machine does not fail the test.
MM_WINDOW = 60.0
MM_IMAGES = 3
MM_SIGNALS = ("n_decode_total", "tokens_predicted_total", "prompt_tokens_total")


def test_multimodal_encode_moves_no_signal_and_is_kept_when_the_window_exceeds_it(
        llama: Start, mmproj: Path, tmp_path: Path) -> None:
    server = llama("127.0.0.47", mmproj=mmproj)
    recorded = tmp_path / "recorded"
    prompt = media_prompt(server, "the engine ", [png_image(64, seed=i + 1) for i in range(MM_IMAGES)], " is")
    with watch(server, tmp_path / "watch", windowSeconds=MM_WINDOW) as w, \
            Recorder(server, recorded, interval_s=0.25) as rec:
        w.wait_state("idle", 15)
        answer = complete(server, prompt, 2)
        time.sleep(2 * INTERVAL)
        kept = w.pod_exists()
    timings, image_tokens = answer["timings"], MM_IMAGES * (V_IMAGE // V_PATCH) ** 2
    assert timings["prompt_n"] >= image_tokens, timings
    # During the encode: a request processing, every signal of the profile flat, /metrics answering throughout.
    flat = rec.longest_flat_busy_s(MM_SIGNALS)
    assert rec.failures == 0 and 1.5 <= flat < MM_WINDOW - 2 * INTERVAL, (flat, rec.failures, timings)
    busy = [body for _, body in rec.bodies if sample(body, "requests_processing") == 1]
    # The text before the image was decoded (one llama_decode call, no output): n_decode_total 1, but its prompt
    # tokens are only queued: prompt_tokens_total is flushed by a batch that produces output (issue 41 item 5).
    encoding = [body for body in busy if sample(body, "n_decode_total") == 1]
    assert len(encoding) >= 4 and all(sample(body, "prompt_tokens_total") == 0 for body in encoding), busy
    # After it: the image's tokens are counted as prompt tokens, never as decode calls: one call for the text
    # before the image, one for the text after it (it yields the first token), one for the second token.
    last = rec.bodies[-1][1]
    assert sample(last, "n_decode_total") == 3 and sample(last, "tokens_predicted_total") == 2, last
    assert sample(last, "prompt_tokens_total") == timings["prompt_n"], (last, timings)
    states = w.state_names()
    assert "stalled" not in states and kept and not w.remediations("deleted"), w.states()
    # The same bodies, replayed: never stalled with that window; a window shorter than the encode reads stalled.
    assert not any(v["stalled"] for v in replay(recorded, "--window", str(MM_WINDOW)))
    short = replay(recorded, "--window", f"{max(1.0, flat - 0.5):.1f}", "--min-samples", "3")
    assert any(v["stalled"] for v in short), [(v["t"], v["state"]) for v in short]
    print(f"{MM_IMAGES} images of {image_tokens} tokens (prompt {timings['prompt_n']} tokens in "
          f"{timings['prompt_ms'] / 1000:.1f}s): every signal flat for {flat:.1f}s with a request processing; "
          f"window {MM_WINDOW}s: {states}")


# Router mode: one llama-server serving two models (a child llama-server each), one pod. The target names one model
# in its path, autoload=false so that a scrape never loads (or, past --models-max, evicts) a model.
ROUTED = "/metrics?model=alpha&autoload=false"
PLAIN = {"app.kubernetes.io/name": "llama-router-plain"}


def test_router_mode_one_model_is_judged_at_its_metrics_path(llama: Start, model: Path, tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    for name in ("alpha", "beta"):
        (models / f"{name}.gguf").symlink_to(model)
    server = llama("127.0.0.48", models_dir=models, ctx=4096)
    pids = server.load_models("alpha", "beta")
    status, body = get(server.url + "/metrics", 2.0)
    assert status == 400 and b"model name is missing" in body, (status, body)
    targets = [{**TARGET, "path": ROUTED},
               {"name": "plain", "podSelector": "app.kubernetes.io/name=llama-router-plain", "profile": "llamacpp"}]
    other = Stream(server, "a stall of the pod", 15000, model="beta")
    stream: Stream | None = None
    freezer = LoopFreezer(server, pids["alpha"], ROUTED)
    try:
        other.wait_tokens(20, 30)
        with watch(server, tmp_path / "watch", dry_run_twin=True, twin_labels=PLAIN, targets=targets) as w:
            # alpha idle for a whole window while beta generates: idle, never stalled (its own /metrics).
            idle_from = w.wait_state("idle", 15)
            w.wait(lambda: time.time() > idle_from + WINDOW + INTERVAL, WINDOW + 5)
            stream = Stream(server, "the engine is", 15000, model="alpha")
            stream.wait_tokens(20, 30)
            w.wait_state("progressing", WINDOW)
            frozen_at, attempts = freezer.freeze_in_decode()
            tokens, beta_tokens = stream.tokens, other.tokens
            stalled_at = w.wait_state("stalled", WINDOW + INTERVAL + 5, after=frozen_at)
            assert w.wait(lambda: not w.pod_exists(), 10), w.tail()
            assert stream.tokens == tokens and other.tokens > beta_tokens + 20, (tokens, beta_tokens, other.tokens)
            freezer.release()
            stream.wait_tokens(tokens + 20, 10)
        assert stalled_at - frozen_at <= WINDOW + INTERVAL + 1.0, (frozen_at, stalled_at, attempts)
        assert [s for s in w.state_names() if s != "suspect"] == ["idle", "progressing", "stalled"], w.states()
        (deleted,) = w.remediations("deleted")
        assert w.name() in deleted["msg"], deleted
        # The plain /metrics of the same pod answers 400 every time: unknown throughout, never judged.
        plain = [r for r in w.records() if r.get("namespace") == DRY_NS and "state" in r]
        assert plain and {(r["state"], r.get("reason")) for r in plain} == {("unknown", "HTTP 400 Bad Request")}, plain
        assert not w.states(DRY_NS) and not w.remediations("dry_run"), w.states(DRY_NS)
        print(f"router: alpha idle beside beta generating, progressing, frozen -> stalled "
              f"{stalled_at - frozen_at:.1f}s (beta streamed {other.tokens - beta_tokens} tokens meanwhile); "
              "plain /metrics: unknown")
    finally:
        freezer.release()
        for s in (stream, other):
            if s is not None:
                s.close()
        # The router exits at once on SIGTERM only with no proxied request in flight (else after 10 s).
        deadline = time.monotonic() + 5
        with suppress(OSError, AssertionError):  # never hide the test's own failure
            while time.monotonic() < deadline and any(
                    sample(server.metrics(path=f"/metrics?model={name}&autoload=false"), "requests_processing")
                    for name in ("alpha", "beta")):
                time.sleep(0.2)

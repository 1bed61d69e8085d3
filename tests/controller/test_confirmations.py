"""The confirmation reads (watchdog/controller/confirmations.py): once per pod per cycle, a failed read backs the pod
off, and each tenant's reads have a time budget per cycle -- a hostile tenant's pods whose reads hang cost a
bounded time and never hold back another tenant's confirmation."""

from __future__ import annotations

from watchdog.adapters.metrics import new_metrics
from watchdog.controller.confirmations import Confirmations
from watchdog.controller.reading import Reading
from watchdog.core.model import WatchedPod
from watchdog.core.parsing import parse_exposition
from watchdog.core.profiles import get_profile

DEADLINE = 3.0
ENGINES = 64


def pod(uid: str, tenant: str) -> WatchedPod:
    return WatchedPod(uid, tenant, uid, "10.0.0.1", 8000, "/metrics", "vllm", "vllm", "enforce", 0, None)


def body(engines: int) -> str:
    return "".join(f'vllm:num_requests_running{{engine="{i}",model_name="m"}} 4\n'
                   f'vllm:generation_tokens_total{{engine="{i}",model_name="m"}} 10\n' for i in range(engines))


class Source:
    """Pods of tenant ``hostile`` hang for the whole deadline and fail; every other pod answers at once."""

    def __init__(self) -> None:
        self.now, self.reads = 0.0, list[str]()

    def confirm(self, target: WatchedPod) -> Reading:
        self.reads.append(target.uid)
        if target.tenant == "hostile":
            self.now += DEADLINE
            return Reading("timeout", detail="deadline", what=f"scrape of {target.url}")
        return Reading("ok", parse_exposition(body(ENGINES), get_profile("vllm")))


def confirmations() -> tuple[Confirmations, Source]:
    source = Source()
    return Confirmations({"vllm": source}, new_metrics(), lambda: source.now, budget_s=DEADLINE), source  # type: ignore[dict-item]


def keys() -> list[str]:
    return [s.key for s in parse_exposition(body(ENGINES), get_profile("vllm")).series]


def test_a_pod_with_64_stalled_engines_is_read_once_per_cycle() -> None:
    # On main every engine series was read on its own: 64 reads of the same pod, 64 x 3 s when they hang.
    confirm, source = confirmations()
    confirm.begin_cycle()
    fine = pod("fine", "team-b")
    answers = [confirm.read(fine) for _ in keys()]  # every stalled series of the pod asks
    assert source.reads == ["fine"]
    assert all(not isinstance(a, str) and [s.key for s in a.series] == keys() for a in answers)


def test_a_hanging_pod_is_backed_off_and_its_tenant_budget_spares_the_others() -> None:
    confirm, source = confirmations()
    hanging = [pod(f"h{i}", "hostile") for i in range(3)]
    victim = pod("victim", "team-b")
    seen: list[list[str]] = []
    for _ in range(8):
        confirm.begin_cycle()
        source.reads.clear()
        for target in hanging:
            for _ in keys():
                assert isinstance(confirm.read(target), str)  # unknown: nothing is removed
        assert not isinstance(confirm.read(victim), str)  # never held back by the hostile tenant
        seen.append(list(source.reads))
    # One hanging read per cycle at most (the tenant's budget; the others wait their turn), each pod backed off 1, 2,
    # 4 cycles after failing.
    assert [len([r for r in reads if r != "victim"]) for reads in seen] == [1, 1, 1, 1, 1, 1, 1, 1]
    assert [r for reads in seen for r in reads if r != "victim"] == ["h0", "h1", "h0", "h1", "h2", "h0", "h1", "h2"]
    assert all(reads[-1] == "victim" for reads in seen)
    assert source.now == 8 * DEADLINE  # 8 cycles: 8 x 3 s, not 8 x 3 x 64 x 3 s


def test_a_backed_off_pod_waits_1_then_2_then_4_cycles() -> None:
    confirm, source = confirmations()
    hanging = pod("h", "hostile")
    read_in = []
    for cycle in range(16):
        confirm.begin_cycle()
        source.reads.clear()
        confirm.read(hanging)
        if source.reads:
            read_in.append(cycle)
    assert read_in == [0, 2, 5, 10, 15]

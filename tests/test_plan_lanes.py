"""The plan's search on several threads ("lanes", ``csrc/plan.c``) finds
exactly what it finds on one: the same frontier (peaks, costs, saved sets),
the same number of simulated decisions and the same work, on random joint
graphs under local search, on zoo models under both memory models, and with
work budgets that stop the search inside a round of lanes.  The lane count is
reported, so these comparisons are known to have run on several threads.  A
bad thread count names the option or the environment variable."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from fxcut import _C
from fxcut.planned import PeakPlanner
from fxcut.solve import planner
from fxcut.solve.planner import PlanProblem

sys.path.insert(0, str(Path(__file__).resolve().parent))
import zoo  # noqa: E402
from random_joint import random_joint  # noqa: E402
from test_planner import RANDOM_SEEDS, _problem  # noqa: E402


def _search(prob: PlanProblem, threads: int, *, max_work: int, exact_max_free: int = 0) -> tuple[Any, ...]:
    peaks, costs, masks, n_free, n_evals, exact, timed_out, work, out_of_work, lanes = _C.plan_frontier(
        prob.arrays, num_fwd_outputs=prob.num_fwd_outputs, role=prob.roles, storage_of=prob.storage,
        flops=prob.flops, exact_max_free=exact_max_free, max_work=max_work, time_limit=600.0, marks=prob.marks,
        threads=threads, **prob._model())
    assert not timed_out
    return (list(peaks), list(costs), bytes(masks), n_free, n_evals, exact, work, out_of_work), lanes


def _eval_work(prob: PlanProblem) -> int:
    a = prob.arrays
    return len(a) + a.in_ptr[len(a)] + 1


def _assert_same_on_lanes(prob: PlanProblem, budgets: list[int], lanes: tuple[int, ...] = (2, 3, 7)) -> None:
    for max_work in budgets:
        one, ran = _search(prob, 1, max_work=max_work)
        assert ran == 1
        for threads in lanes:
            got, ran = _search(prob, threads, max_work=max_work)
            assert ran == threads
            assert got == one, f"{threads} lanes, max_work {max_work}: a different search"


@pytest.mark.parametrize("seed", RANDOM_SEEDS[:6])
def test_lanes_find_the_same_frontier_on_random_graphs(seed: int) -> None:
    j = random_joint(seed, n_fw=12)
    prob, _ = _problem(j.module, j.num_fwd_outputs, j.static_lifetime_input_indices)
    unit = _eval_work(prob)
    # stops after 1, 5, 13 and 40 decisions (inside rounds of lanes), and the whole search
    _assert_same_on_lanes(prob, [unit, 5 * unit, 13 * unit, 40 * unit, 10**9])


@pytest.mark.parametrize("memory_model", ["unfused", "inductor"])
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_lanes_find_the_same_frontier_on_zoo_models(name: str, memory_model: str) -> None:
    cap = zoo.capture_inductor(name) if memory_model == "inductor" else zoo.capture(name)
    prob, _ = _problem(cap.fresh(), cap.num_fwd_outputs, planner=PeakPlanner(memory_model=memory_model))
    unit = _eval_work(prob)
    one, _ = _search(prob, 1, max_work=3000 * unit)
    assert one[4] > 100, "too short a search to compare"
    _assert_same_on_lanes(prob, [97 * unit, 3000 * unit], lanes=(2, 4))


def test_bad_thread_counts_are_named() -> None:
    cap = zoo.capture("mlp")
    prob, _ = _problem(cap.fresh(), cap.num_fwd_outputs)
    for bad in (-1, _C.PLAN_MAX_THREADS + 1):
        with pytest.raises(ValueError, match="threads"):
            _C.plan_frontier(prob.arrays, num_fwd_outputs=prob.num_fwd_outputs, role=prob.roles, threads=bad)


def test_thread_count_from_the_environment(monkeypatch: Any) -> None:
    monkeypatch.setenv(planner.THREADS_ENV, "3")
    assert planner.search_threads() == 3
    cap = zoo.capture("mlp")
    prob, _ = _problem(cap.fresh(), cap.num_fwd_outputs)
    assert prob.frontier([], exact_max_free=0, max_work=10**6).lanes == 3
    monkeypatch.delenv(planner.THREADS_ENV)
    assert 1 <= planner.search_threads() <= planner.DEFAULT_MAX_THREADS
    for bad in ("0", "many", str(_C.PLAN_MAX_THREADS + 1)):
        monkeypatch.setenv(planner.THREADS_ENV, bad)
        with pytest.raises(ValueError, match=planner.THREADS_ENV):
            planner.search_threads()

"""The library's round-5 findings (issue 38, item 6), one test each:

- ``install(memory_budget=b, safe_budget="bogus")`` names ``safe_budget``
  (and patches nothing), as ``install(safe_budget="bogus")`` does;
- the plan under inductor never picks a decision the route then changes:
  torch's decisions are its candidates with what they recompute unsafely
  (a random op's seeds) kept saved, so no WARNING on any compile and the
  record is the decision built;
- the exact solver's ``gap`` and ``proven_optimal`` agree, even when its
  time limit stops it at once;
- a plan never reads ``FXCUT_SAFE_BUDGET`` (a bad value does not fail its
  compile; the default path still names it);
- ``check_time_limit`` (and ``max_checks``) where the plan never asks
  inductor is a ValueError naming it; where it does, it reaches the plan.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch
import torch.nn as nn

import fxcut
import zoo
from fxcut.planned import PeakPlanner
from fxcut.route import report
from fxcut.route.plan import SAFE_BUDGET_ENV
from fxcut.tools.capture import capture


# --------------------------------------------------------------------------- install(safe_budget="bogus")


def test_install_names_a_bad_safe_budget_with_a_plan_too() -> None:
    fxds = pytest.importorskip("fxcut.integrations.deepspeed")
    pytest.importorskip("deepspeed.compile.partitioner")
    fxds.uninstall()
    for kwargs in (dict(memory_budget=0.5, safe_budget="bogus"), dict(safe_budget="bogus"),
                   dict(memory_budget=0.0, safe_budget=1)):
        with pytest.raises(ValueError, match="safe_budget"):
            fxds.install(**kwargs)
        assert not fxds.installed() and fxds._planned == {}
    fxds.install(memory_budget=0.5, safe_budget=True)  # a good value with a plan: accepted (and moot)
    try:
        assert set(fxds._planned) == set(fxds.DEEPCOMPILE_MEMORY_MODELS)
    finally:
        fxds.uninstall()


# --------------------------------------------------------------------------- the plan and random ops under inductor


class _Noise(nn.Module):
    """Two ``rand_like`` draws whose noise the backward needs: under inductor
    one ``prims.inductor_seeds`` node seeds both, and torch's decisions at
    the budgets the plan picks from recompute it."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(64, 64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * self.w * torch.rand_like(x)).sin().sum() + (x.cos() * torch.rand_like(x) * self.w).sum()


def test_the_plan_under_inductor_records_the_decision_built_and_warns_nothing(
        caplog: pytest.LogCaptureFixture) -> None:
    cap = capture(_Noise(), [torch.rand(64, 64)], lambda out, inputs: out, compiler="inductor")
    seeds = [n.name for n in cap.gm.graph.nodes if n.target is torch.ops.prims.inductor_seeds.default]
    assert seeds
    report.reset_plans()
    with caplog.at_level(logging.INFO, logger="fxcut"):
        for _ in range(2):  # every compile: the same plan, no warning
            fn = fxcut.planned_partitioner(0.2, memory_model="inductor", check_time_limit=fxcut.planned.ASK_TIME_LIMIT)
            fw, _ = cap.partition(fn)
            choice = fn.planner.last
            assert choice is not None and choice.check is not None
            built = [str(a) for a in list(fw.graph.nodes)[-1].args[0][cap.num_fwd_outputs:]]
            names = fn.planner.last_problem.arrays.name
            assert [names(i) for i in choice.saved] == built  # the record is what was built
            assert set(seeds) <= set(built)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    plans = report.last_plans()
    assert len(plans) == 2 and all(set(p.kept_saved) == set(seeds) for p in plans)
    # torch's decision was the pick (made safe): the case the finding was about
    assert all(p.choice.check is not None and p.choice.check.picked_torch_budget is not None for p in plans)


# --------------------------------------------------------------------------- gap and proven_optimal


@pytest.mark.parametrize("name", ["mlp", "moe"])
@pytest.mark.parametrize("budget", [0.0, 0.5])
def test_exact_gap_and_proven_optimal_agree_with_a_tiny_time_limit(name: str, budget: float) -> None:
    pytest.importorskip("highspy")
    cap = zoo.capture(name)
    fn = fxcut.planned_partitioner(budget, solver="exact", exact_time_limit=1e-3)
    cap.partition(fn)
    c = fn.planner.last
    assert c is not None and c.lower_bound_bytes is not None and c.lower_bound_bytes <= c.peak_bytes
    if budget == 0.0:  # the objective is the peak: proven exactly where its gap is 0
        assert c.proven_optimal == (c.gap == 0.0), (c.gap, c.proven_optimal)
    else:  # the objective is the recompute under the limit: proven exactly where its gap is 0
        assert c.proven_optimal == (c.recompute_gap == 0.0), (c.recompute_gap, c.proven_optimal)
    assert c.exact or not c.proven_optimal


def test_a_peak_at_its_bound_is_proven_before_the_milp_says_so() -> None:
    """mlp at b=0: the instant bound already equals the search's peak; a
    1 ms limit stops the MILP before it proves anything."""
    pytest.importorskip("highspy")
    cap = zoo.capture("mlp")
    fn = fxcut.planned_partitioner(0.0, solver="exact", exact_time_limit=1e-3)
    cap.partition(fn)
    c = fn.planner.last
    assert c is not None and c.gap == 0.0 and c.proven_optimal


# --------------------------------------------------------------------------- FXCUT_SAFE_BUDGET and a plan


def test_a_plan_never_reads_fxcut_safe_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    from fxcut.integrations.torch_compile import InductorPartitioner

    monkeypatch.setenv(SAFE_BUDGET_ENV, "bogus")
    cap = zoo.capture("mlp")
    cap.partition(fxcut.planned_partitioner(0.5))  # the plan's compile does not fail
    part = InductorPartitioner(memory_budget=0.5)
    key = part.uuid()  # inductor's cache key of a plan: no FXCUT_SAFE_BUDGET in it
    monkeypatch.setenv(SAFE_BUDGET_ENV, "1")
    assert InductorPartitioner(memory_budget=0.5).uuid() == key
    monkeypatch.setenv(SAFE_BUDGET_ENV, "bogus")
    for default_path in (lambda: InductorPartitioner().uuid(),
                         lambda: cap.partition(fxcut.min_cut_rematerialization_partition)):
        with pytest.raises(ValueError, match=SAFE_BUDGET_ENV):
            default_path()


def test_a_plans_compile_with_a_bad_fxcut_safe_budget_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SAFE_BUDGET_ENV, "bogus")
    torch._dynamo.reset()
    w = torch.rand(8, 8, requires_grad=True)
    try:
        torch.compile(lambda x, w: (x @ w).sin().sum(), backend=fxcut.aot_backend(memory_budget=0.5))(
            torch.rand(8, 8), w).backward()
    finally:
        torch._dynamo.reset()
    assert w.grad is not None


# --------------------------------------------------------------------------- check_time_limit where it is unused


_PLANNERS = [
    lambda **k: fxcut.planned_partitioner(0.5, **k),
    lambda **k: fxcut.planned_partitioner(0.5, memory_model="unfused_held", **k),
    lambda **k: PeakPlanner(0.5, memory_model="inductor", check=None, **k),
]
_BACKENDS = [
    lambda **k: fxcut.aot_backend(memory_budget=0.5, **k),
    lambda **k: fxcut.inductor_backend(memory_budget=0.5, memory_model="unfused", **k),
]


@pytest.mark.parametrize("make, option", [(m, o) for m in _PLANNERS for o in ("check_time_limit", "max_checks")]
                         + [(m, "check_time_limit") for m in _BACKENDS])
def test_check_options_where_inductor_is_never_asked_are_rejected(make: Any, option: str) -> None:
    with pytest.raises(ValueError, match=option):
        make(**{option: 5})


def test_check_time_limit_reaches_the_plan_where_inductor_is_asked() -> None:
    assert PeakPlanner(0.5, memory_model="inductor", check_time_limit=5.0).check_time_limit == 5.0
    # inductor is not asked unless told (a positive check_time_limit opts in)
    assert PeakPlanner(0.5, memory_model="inductor").check_time_limit == 0.0
    assert PeakPlanner(0.5).check_time_limit == 0.0  # unused, but the attribute reads the default
    report.reset_plans()
    torch._dynamo.reset()
    w = torch.rand(8, 8, requires_grad=True)
    backend = fxcut.aot_backend(memory_budget=0.5, memory_model="inductor", check_time_limit=0.0)
    try:
        torch.compile(lambda x, w: (x @ w).sin().sum(), backend=backend)(torch.rand(8, 8), w).backward()
    finally:
        torch._dynamo.reset()
    (plan,) = report.last_plans()
    assert plan.choice.check is not None and "check_time_limit=0" in plan.choice.check.skipped
    assert "not asked" in plan.choice.check.skipped and not plan.choice.check.asked

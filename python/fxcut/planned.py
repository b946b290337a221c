"""The peak-aware memory plan as a partition function: ``fxcut.planned_partitioner``.

:class:`PeakPlanner` is an :class:`~fxcut.route.plan.Objective`: the default
route (guard -> plan -> lower -> decide -> build, :mod:`fxcut.partition`)
makes torch's default decision, then asks the planner which values to save.
The planner seeds the search with torch's own decisions at several budgets
(:func:`fxcut.solve.budget.decide_with_budget`) and picks a point of the
(peak, recompute) frontier the C search finds (:mod:`fxcut.solve.planner`).
Everything else -- validation, DCE/CSE, tags, module building, fallback and
restore on failure -- is the default route's.  Verify mode does not apply:
the plan is meant to differ from torch's decision.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch.fx as fx

from ._numbers import check_int, check_number
from .partition import min_cut_rematerialization_partition
from .route.plan import Plan
from .solve import memory
from .solve.budget import BudgetDecision, RuntimeEstimates, check_budget, decide_with_budget
from .solve.planner import (DEFAULT_MAX_WORK, DEFAULT_SEED_BUDGETS, DEFAULT_TIME_LIMIT, Frontier, PlanProblem,
                            pick, region_groups, roles_for, saved_mask)
from .solve.hazards import recomputed_hazards
from .solve.roles import plan_roles

log = logging.getLogger("fxcut")

#: The planner options' upper limits (the C search takes exact_max_free <= 30;
#: 2**24 decisions is already minutes).
MAX_EXACT_CANDIDATES = 24
MAX_WORK = 2**62
#: seconds: the wall-clock safety net is a limit, not a wish for no limit
MAX_TIME_LIMIT = 1e6


def check_seed_budgets(seed_budgets: object) -> list[float]:
    """``seed_budgets`` as floats, each in [0, 1]; ValueError naming the
    option (and the entry) otherwise."""
    if isinstance(seed_budgets, (str, bytes)) or not hasattr(seed_budgets, "__iter__"):
        raise ValueError(f"seed_budgets must be a sequence of numbers in [0, 1], got {seed_budgets!r}")
    return [check_budget(b, f"seed_budgets[{k}]") for k, b in enumerate(seed_budgets)]


@dataclass
class PlanChoice:
    """What :meth:`PeakPlanner.plan` chose, for reports and benchmarks."""

    saved: list[int]
    peak_bytes: int
    recompute_flops: int
    torch_peak_bytes: int
    torch_recompute_flops: int
    lowest_peak_bytes: int
    frontier_points: int
    exact: bool
    seconds: float
    regions: dict[float, int] = field(default_factory=dict)
    #: torch's decision at each seed budget: (simulated peak, recompute flops)
    torch_points: dict[float, tuple[int, int]] = field(default_factory=dict)
    #: the wall-clock safety net stopped a search (the plan may then differ between calls)
    timed_out: bool = False


class PeakPlanner:
    """Chooses the saved set of a joint graph under a peak budget.

    ``memory_budget``: b in [0, 1] on the peak (module docstring).
    ``exact_max_candidates``: enumerate every decision when at most this many
    forward values are free to save or recompute (0..24).  ``max_work``:
    the search's deterministic budget (units of nodes + edges per simulated
    decision, 1..2**62): it stops there on every machine, so plans for two
    budgets on one graph come from the same search and their peaks are
    ordered as the budgets.  ``time_limit``: a wall-clock safety net in
    seconds (0 < time_limit <= 10**6); a search it cuts short may differ
    between calls (``PlanChoice.timed_out``).  A value out of range (an
    int too large for a float, NaN, an infinity or a bool included) is a
    ValueError naming the option.  ``seed_budgets``: torch budgets whose
    decisions seed the search (1.0 is always included: it defines b=1).
    Region budgets (``torch.autograd.graph.region_activation_memory_budget``)
    override ``memory_budget`` for the values of their region: each region
    is planned with its own limit, in graph order, the others held fixed.
    """

    def __init__(self, memory_budget: float = 1.0, *, exact_max_candidates: int = 16,
                 max_work: int = DEFAULT_MAX_WORK, time_limit: float = DEFAULT_TIME_LIMIT,
                 seed_budgets: Sequence[float] = DEFAULT_SEED_BUDGETS) -> None:
        self.memory_budget = check_budget(memory_budget, "memory_budget")
        self.exact_max_candidates = check_int("exact_max_candidates", exact_max_candidates, 0, MAX_EXACT_CANDIDATES)
        self.max_work = check_int("max_work", max_work, 1, MAX_WORK)
        self.time_limit = check_number("time_limit", time_limit, 0.0, MAX_TIME_LIMIT, lo_open=True)
        self.seed_budgets = sorted(set(check_seed_budgets(seed_budgets)) | {1.0})
        self.last: PlanChoice | None = None
        self.last_problem: PlanProblem | None = None
        self.last_frontier: Frontier | None = None

    def __repr__(self) -> str:
        return (f"PeakPlanner(memory_budget={self.memory_budget!r}, exact_max_candidates="
                f"{self.exact_max_candidates!r}, max_work={self.max_work!r}, time_limit={self.time_limit!r})")

    def choose_saved(self, plan: Plan, decision: BudgetDecision) -> list[int]:
        """The saved node indices (into ``decision.decision.arrays``) for
        the planned call ``plan`` whose default (budget 1) decision is
        ``decision``: :class:`fxcut.route.plan.Objective`'s hook."""
        choice = self.plan(plan.joint_module, decision, num_fwd_outputs=plan.num_fwd_outputs,
                           static_lifetime_input_indices=plan.static_indices)
        return choice.saved

    def problem(self, chosen: BudgetDecision, num_fwd_outputs: int,
                estimates: RuntimeEstimates | None = None) -> PlanProblem:
        arrays = chosen.decision.arrays
        marks = memory.extraction_marks(arrays)
        roles = plan_roles(chosen.decision, marks)
        # the memory model's own facts: its storages, its op costs (torch's knapsack estimator), its marks
        return PlanProblem(arrays, num_fwd_outputs, roles, memory.storage_of(arrays),
                           memory.node_flops(arrays, estimates), marks=marks)

    def torch_seeds(self, graph: fx.Graph, chosen: BudgetDecision, num_fwd_outputs: int,
                    static_lifetime_input_indices: list[int] | None,
                    estimates: RuntimeEstimates) -> dict[float, list[int]]:
        """torch's saved sets at the seed budgets (1.0: ``chosen``'s)."""
        out = {1.0: list(chosen.saved)}
        for b in self.seed_budgets:
            if b == 1.0:
                continue
            d = decide_with_budget(graph, b, num_fwd_outputs=num_fwd_outputs,
                                   static_lifetime_input_indices=static_lifetime_input_indices,
                                   arrays=chosen.decision.arrays, estimates=estimates)
            out[b] = list(d.saved)
        return out

    def plan(self, joint_module: fx.GraphModule, chosen: BudgetDecision, *, num_fwd_outputs: int,
             static_lifetime_input_indices: list[int] | None = None) -> PlanChoice:
        t0 = time.perf_counter()
        estimates = RuntimeEstimates()
        prob = self.problem(chosen, num_fwd_outputs, estimates)
        n = len(prob.arrays)
        seeds = self.torch_seeds(joint_module.graph, chosen, num_fwd_outputs, static_lifetime_input_indices,
                                 estimates)
        seed_masks = [saved_mask(n, s) for s in seeds.values()]
        # torch's points: the memory model on torch's own saved sets, not
        # through the plan's roles (which may only narrow what a plan does)
        torch_points = {b: prob.model_point(s) for b, s in seeds.items()}
        torch_sim = prob.simulate(seed_masks[0])
        if (torch_sim.peak_bytes, torch_sim.recompute_flops) != torch_points[1.0]:
            # Expected where torch's decision recomputes what the plan's roles keep saved (a random op,
            # a reader of mutated state); anything else is the roles and the memory model disagreeing.
            unsafe = recomputed_hazards(chosen.decision, chosen.saved, num_fwd_outputs)
            (log.info if unsafe else log.warning)(
                "plan: torch's default decision simulates to %s under the plan's roles, %s as torch made it%s",
                (torch_sim.peak_bytes, torch_sim.recompute_flops), torch_points[1.0],
                f" (it recomputes {', '.join(h.name for h in unsafe)}, which the plan keeps saved)" if unsafe else "")
        self.last_problem = prob
        groups = region_groups(prob, self.memory_budget)
        current = seed_masks[0]
        lowest, points, exact, timed_out = torch_sim.peak_bytes, 0, True, False
        per_region: dict[float, int] = {}
        limit_each = self.time_limit / max(1, len(groups))
        work_each = max(1, self.max_work // max(1, len(groups)))
        for budget, members in groups:
            roles = roles_for(prob.roles, members, current)
            front = prob.frontier(seed_masks + [current], roles=roles, exact_max_free=self.exact_max_candidates,
                                  max_work=work_each, time_limit=limit_each)
            timed_out = timed_out or front.timed_out
            base = prob.simulate(current, roles).peak_bytes
            k = pick(front, budget, base)
            current = front.masks[k]
            lowest = min(lowest, front.peak_bytes[0])
            points += len(front.peak_bytes)
            exact = exact and front.exact
            per_region[budget] = front.peak_bytes[k]
            self.last_frontier = front
        final = prob.simulate(current)
        saved = [i for i in range(n) if current[i]]
        self.last = PlanChoice(saved, final.peak_bytes, final.recompute_flops, torch_sim.peak_bytes,
                               torch_sim.recompute_flops, lowest, points, exact, time.perf_counter() - t0,
                               per_region, torch_points, timed_out)
        log.info("plan: budget %g, peak %d (torch %d, lowest %d), recompute %d flops (torch %d), %d points, %.1f ms",
                 self.memory_budget, final.peak_bytes, torch_sim.peak_bytes, lowest, final.recompute_flops,
                 torch_sim.recompute_flops, points, self.last.seconds * 1e3)
        return self.last



# --------------------------------------------------------------------------- the partition function


def planned_partitioner(memory_budget: float = 1.0, *, exact_max_candidates: int = 16,
                        max_work: int = DEFAULT_MAX_WORK, time_limit: float = DEFAULT_TIME_LIMIT,
                        seed_budgets: Sequence[float] = DEFAULT_SEED_BUDGETS) -> Any:
    """A partition_fn with torch's signature ``(joint_module, joint_inputs,
    compiler="inductor", *, num_fwd_outputs, static_lifetime_input_indices=None)``
    whose saved set is :class:`PeakPlanner`'s (options as there; a bad one
    raises ValueError naming it).  The default path does the rest."""
    planner = PeakPlanner(memory_budget, exact_max_candidates=exact_max_candidates, max_work=max_work,
                          time_limit=time_limit, seed_budgets=seed_budgets)

    def planned_partition(joint_module: fx.GraphModule, joint_inputs: Any, compiler: str = "inductor", *,
                          num_fwd_outputs: int, static_lifetime_input_indices: list[int] | None = None,
                          **kwargs: Any) -> tuple[fx.GraphModule, fx.GraphModule]:
        return min_cut_rematerialization_partition(
            joint_module, joint_inputs, compiler, num_fwd_outputs=num_fwd_outputs,
            static_lifetime_input_indices=static_lifetime_input_indices, objective=planner, **kwargs)

    planned_partition.planner = planner  # type: ignore[attr-defined]
    return planned_partition

__all__ = ["PeakPlanner", "PlanChoice", "planned_partitioner"]

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

The memory model is the backend's (``memory_model``): ``"inductor"`` when
inductor compiles the modules (kernels, inlined pointwise chains, in-place
buffers: :mod:`fxcut.solve.memory`), ``"unfused"`` when they run op by op
(AOT Autograd's no-op compilers).  The recompute cost (``cost``) is torch's
FLOPs or a modelled time (:mod:`fxcut.solve.cost`: bytes moved for
memory-bound ops, FLOPs for compute-bound ones, an inlined recomputation
nearly free under inductor); ``"time"`` is the default under inductor,
``"flops"`` under the unfused model (the figures docs/plan.md publishes).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch.fx as fx

from .partition import min_cut_rematerialization_partition
from .route.plan import Plan
from .solve import memory
from .solve.budget import BudgetDecision, RuntimeEstimates, check_budget, decide_with_budget
from .solve.cost import MachineModel, machine_for, node_costs
from .solve.planner import (DEFAULT_MAX_WORK, DEFAULT_SEED_BUDGETS, DEFAULT_TIME_LIMIT, Frontier, PlanProblem,
                            pick, region_groups, roles_for, saved_mask)
from .solve.roles import plan_roles

log = logging.getLogger("fxcut")


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
    #: the memory model ("unfused" or "inductor") and the recompute cost's unit
    #: ("flops": torch's FLOPs; "time": modelled picoseconds) the plan used
    memory_model: str = "unfused"
    cost: str = "flops"
    #: with check="inductor": what inductor said (fxcut.planned_check.CheckReport; None: no check)
    check: Any = None


COSTS: tuple[str, ...] = ("flops", "time")


def _check_cost(cost: object, memory_model: str) -> str:
    if cost is None:
        return "time" if memory_model == "inductor" else "flops"
    if cost not in COSTS:
        raise ValueError(f"cost must be None or one of {', '.join(map(repr, COSTS))}, got {cost!r}")
    return str(cost)


def _check_number(name: str, value: object, lo: float, hi: float, *, integer: bool = False) -> None:
    ok = not isinstance(value, bool) and isinstance(value, int if integer else (int, float))
    if not ok or not lo <= float(value) <= hi:  # type: ignore[arg-type]
        kind = "an int" if integer else "a number"
        raise ValueError(f"{name} must be {kind} in [{lo:g}, {hi:g}], got {value!r}")


class PeakPlanner:
    """Chooses the saved set of a joint graph under a peak budget.

    ``memory_budget``: b in [0, 1] on the peak (module docstring).
    ``exact_max_candidates``: enumerate every decision when at most this many
    forward values are free to save or recompute (0..24).  ``max_work``:
    the search's deterministic budget (units of nodes + edges per simulated
    decision, >= 1): it stops there on every machine, so plans for two
    budgets on one graph come from the same search and their peaks are
    ordered as the budgets.  ``time_limit``: a wall-clock safety net in
    seconds (> 0); a search it cuts short may differ between calls
    (``PlanChoice.timed_out``).  ``seed_budgets``: torch budgets whose
    decisions seed the search (1.0 is always included: it defines b=1).
    Region budgets (``torch.autograd.graph.region_activation_memory_budget``)
    override ``memory_budget`` for the values of their region: each region
    is planned with its own limit, in graph order, the others held fixed.
    ``memory_model``: ``"unfused"`` (the modules run op by op) or
    ``"inductor"`` (inductor compiles them); the backend decides (module
    docstring).  ``cost``: ``"flops"``, ``"time"``, or None (``"time"``
    under inductor, ``"flops"`` unfused).  ``machine``: the rates of the
    time model (None: :func:`fxcut.solve.cost.machine_for` the graph's device).
    ``check``: ``"inductor"`` (the default under the inductor model) asks
    inductor itself for the peaks of at most ``max_checks`` candidates and
    picks on those (:mod:`fxcut.planned_check`: b=1 never above torch's
    default decision as inductor runs it); None picks on the model alone.
    """

    def __init__(self, memory_budget: float = 1.0, *, exact_max_candidates: int = 16,
                 max_work: int = DEFAULT_MAX_WORK, time_limit: float = DEFAULT_TIME_LIMIT,
                 seed_budgets: Sequence[float] = DEFAULT_SEED_BUDGETS, memory_model: str = "unfused",
                 cost: str | None = None, machine: MachineModel | None = None, check: str | None = "default",
                 max_checks: int = 4) -> None:
        self.memory_model = memory.check_memory_model(memory_model)
        self.cost = _check_cost(cost, self.memory_model)
        if check == "default":
            check = "inductor" if self.memory_model == "inductor" else None
        if check not in (None, "inductor"):
            raise ValueError(f"check must be None or 'inductor', got {check!r}")
        _check_number("max_checks", max_checks, 1, 1000, integer=True)
        self.check = check
        self.max_checks = int(max_checks)
        if machine is not None and not isinstance(machine, MachineModel):
            raise ValueError(f"machine must be None or a fxcut.solve.cost.MachineModel, got {machine!r}")
        self.machine = machine
        _check_number("memory_budget", memory_budget, 0.0, 1.0)
        _check_number("exact_max_candidates", exact_max_candidates, 0, 24, integer=True)
        _check_number("max_work", max_work, 1, 2**62, integer=True)
        _check_number("time_limit", time_limit, 1e-6, math.inf)
        try:
            seeds = [float(check_budget(b)) for b in seed_budgets]
        except (TypeError, ValueError) as e:
            raise ValueError(f"seed_budgets: {e}") from None
        self.memory_budget = float(memory_budget)
        self.exact_max_candidates = int(exact_max_candidates)
        self.max_work = int(max_work)
        self.time_limit = float(time_limit)
        self.seed_budgets = sorted(set(seeds) | {1.0})
        self.last: PlanChoice | None = None
        self._route_plan: Plan | None = None
        self.last_problem: PlanProblem | None = None
        self.last_frontier: Frontier | None = None

    def __repr__(self) -> str:
        return (f"PeakPlanner(memory_budget={self.memory_budget!r}, exact_max_candidates="
                f"{self.exact_max_candidates!r}, max_work={self.max_work!r}, time_limit={self.time_limit!r}, "
                f"memory_model={self.memory_model!r}, cost={self.cost!r}, check={self.check!r})")

    def choose_saved(self, plan: Plan, decision: BudgetDecision) -> list[int]:
        """The saved node indices (into ``decision.decision.arrays``) for
        the planned call ``plan`` whose default (budget 1) decision is
        ``decision``: :class:`fxcut.route.plan.Objective`'s hook."""
        self._route_plan = plan  # its planned DCE/CSE: what inductor's check builds the modules on
        try:
            choice = self.plan(plan.joint_module, decision, num_fwd_outputs=plan.num_fwd_outputs,
                               static_lifetime_input_indices=plan.static_indices)
        finally:
            self._route_plan = None
        return choice.saved

    def problem(self, chosen: BudgetDecision, num_fwd_outputs: int,
                estimates: RuntimeEstimates | None = None) -> PlanProblem:
        arrays = chosen.decision.arrays
        marks = memory.extraction_marks(arrays)
        roles = plan_roles(chosen.decision, marks)
        storage = memory.storage_of(arrays)
        flops = memory.node_flops(arrays, estimates)
        fused = self.memory_model == "inductor"
        inlined = None
        if self.cost == "time":
            machine = self.machine or machine_for(memory.graph_device(arrays))
            flops, inlined = node_costs(arrays, flops, storage, machine, fused=fused)
        inductor = memory.inductor_model(arrays, inlined) if fused else None
        # the memory model's own facts: its storages, its op costs, its marks, the backend's model
        return PlanProblem(arrays, num_fwd_outputs, roles, storage, flops, marks=marks, inductor=inductor)

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
            log.warning("plan: torch's default decision simulates to %s under the plan's roles, %s as torch "
                        "made it", (torch_sim.peak_bytes, torch_sim.recompute_flops), torch_points[1.0])
        self.last_problem = prob
        groups = region_groups(prob, self.memory_budget)
        current = seed_masks[0]
        lowest, points, exact, timed_out = torch_sim.peak_bytes, 0, True, False
        per_region: dict[float, int] = {}
        limit_each = self.time_limit / max(1, len(groups))
        work_each = max(1, self.max_work // max(1, len(groups)))
        report = None
        for budget, members in groups:
            roles = roles_for(prob.roles, members, current)
            front = prob.frontier(seed_masks + [current], roles=roles, exact_max_free=self.exact_max_candidates,
                                  max_work=work_each, time_limit=limit_each)
            timed_out = timed_out or front.timed_out
            base = prob.simulate(current, roles).peak_bytes
            k = pick(front, budget, base)
            mask = front.masks[k]
            if self.check == "inductor" and len(groups) == 1:
                mask, report = self._checked(joint_module, prob, front, seed_masks[0], torch_sim.recompute_flops,
                                             budget, num_fwd_outputs, mask)
            current = mask
            lowest = min(lowest, front.peak_bytes[0])
            points += len(front.peak_bytes)
            exact = exact and front.exact
            per_region[budget] = front.peak_bytes[k] if mask is front.masks[k] else prob.simulate(mask, roles).peak_bytes
            self.last_frontier = front
        final = prob.simulate(current)
        saved = [i for i in range(n) if current[i]]
        self.last = PlanChoice(saved, final.peak_bytes, final.recompute_flops, torch_sim.peak_bytes,
                               torch_sim.recompute_flops, lowest, points, exact, time.perf_counter() - t0,
                               per_region, torch_points, timed_out, self.memory_model, self.cost, report)
        log.info("plan: budget %g, %s model, peak %d (torch %d, lowest %d), recompute %d %s (torch %d), %d points, "
                 "%.1f ms", self.memory_budget, self.memory_model, final.peak_bytes, torch_sim.peak_bytes, lowest,
                 final.recompute_flops, "ps" if self.cost == "time" else "flops", torch_sim.recompute_flops, points,
                 self.last.seconds * 1e3)
        return self.last

    def _checked(self, joint_module: fx.GraphModule, prob: PlanProblem, front: Frontier, torch_mask: bytes,
                 torch_cost: int, budget: float, num_fwd_outputs: int, fallback: bytes) -> tuple[bytes, Any]:
        """The saved mask :func:`fxcut.planned_check.checked_pick` picks on
        inductor's own peaks (``fallback``, the model's pick, when inductor
        cannot be asked: logged)."""
        from .planned_check import CheckReport, checked_pick, inductor_peak, prepared_copy

        nodes = prob.arrays.nodes
        candidates = list(front.masks) + [torch_mask]
        route_plan = self._route_plan

        def peak_of(j: int) -> int:
            copy, by_name = prepared_copy(joint_module, route_plan.prep if route_plan is not None else None, nodes)
            saved = [by_name[nodes[i].name] for i in range(len(nodes)) if candidates[j][i]]
            return inductor_peak(copy, saved, num_fwd_outputs)

        try:
            j, report = checked_pick(front, torch_cost, budget, peak_of, max_asks=self.max_checks)
        except Exception as e:  # inductor could not lower a candidate: the model's pick stands
            log.warning("plan: inductor could not be asked (%s: %s); the memory model's pick stands",
                        type(e).__name__, str(e).splitlines()[0] if str(e) else "")
            return fallback, CheckReport(failed=f"{type(e).__name__}: {e}")
        log.info("plan: inductor's peaks of %d candidates %s, limit %d, picked %d", len(report.asked),
                 report.asked, report.limit, j)
        return candidates[j], report



# --------------------------------------------------------------------------- the partition function


def planned_partitioner(memory_budget: float = 1.0, *, exact_max_candidates: int = 16,
                        max_work: int = DEFAULT_MAX_WORK, time_limit: float = DEFAULT_TIME_LIMIT,
                        seed_budgets: Sequence[float] = DEFAULT_SEED_BUDGETS, memory_model: str = "unfused",
                        cost: str | None = None, machine: MachineModel | None = None, check: str | None = "default",
                        max_checks: int = 4) -> Any:
    """A partition_fn with torch's signature ``(joint_module, joint_inputs,
    compiler="inductor", *, num_fwd_outputs, static_lifetime_input_indices=None)``
    whose saved set is :class:`PeakPlanner`'s (options as there; a bad one
    raises ValueError naming it).  ``memory_model``: ``"inductor"`` when
    inductor compiles the modules this partition_fn builds, ``"unfused"``
    when they run op by op (``fxcut.inductor_backend`` and
    ``fxcut.aot_backend`` choose for you).  The default path does the rest."""
    planner = PeakPlanner(memory_budget, exact_max_candidates=exact_max_candidates, max_work=max_work,
                          time_limit=time_limit, seed_budgets=seed_budgets, memory_model=memory_model, cost=cost,
                          machine=machine, check=check, max_checks=max_checks)

    def planned_partition(joint_module: fx.GraphModule, joint_inputs: Any, compiler: str = "inductor", *,
                          num_fwd_outputs: int, static_lifetime_input_indices: list[int] | None = None,
                          **kwargs: Any) -> tuple[fx.GraphModule, fx.GraphModule]:
        return min_cut_rematerialization_partition(
            joint_module, joint_inputs, compiler, num_fwd_outputs=num_fwd_outputs,
            static_lifetime_input_indices=static_lifetime_input_indices, objective=planner, **kwargs)

    planned_partition.planner = planner  # type: ignore[attr-defined]
    return planned_partition

__all__ = ["COSTS", "PeakPlanner", "PlanChoice", "planned_partitioner"]

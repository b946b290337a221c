"""The peak-aware memory plan as a partition function: ``fxcut.planned_partitioner``.

:class:`PeakPlanner` is an :class:`~fxcut.route.plan.Objective`: the default
route (guard -> plan -> lower -> decide -> build, :mod:`fxcut.partition`)
makes torch's default decision, then asks the planner which values to save.
The planner seeds the search with torch's own decisions at several budgets
(:meth:`fxcut.route.plan.Plan.budget_pass`) and picks a point of the
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

from ._numbers import check_int, check_number
from .partition import min_cut_rematerialization_partition
from .route.plan import Plan
from .solve import memory
from .solve import exact as exact_solver
from .solve.budget import BudgetDecision, RuntimeEstimates, check_budget
from .solve.cost import MachineModel, machine_for, node_costs
from .solve.planner import (DEFAULT_MAX_WORK, DEFAULT_SEED_BUDGETS, DEFAULT_TIME_LIMIT, Frontier, PlanProblem,
                            limit_of, pick, region_groups, roles_for, saved_mask)
from .solve.hazards import recomputed_hazards
from .solve.roles import plan_roles

log = logging.getLogger("fxcut")

#: planned_partitioner's solvers: the C search alone, the exact MILP after it, or the MILP's plan where proven
SOLVERS = ("search", "exact", "auto")
#: seconds the exact solver may take per graph (its bound is proven whenever it stops)
DEFAULT_EXACT_TIME_LIMIT = 60.0
#: The planner options' upper limits (the C search takes exact_max_free <= 30;
#: 2**24 decisions is already minutes).
MAX_EXACT_CANDIDATES = 24
MAX_WORK = 2**62
#: seconds: the wall-clock safety net is a limit, not a wish for no limit
MAX_TIME_LIMIT = 1e6
#: seconds inductor's check may spend per graph (fxcut.planned_check.asks_within)
DEFAULT_CHECK_TIME_LIMIT = 20.0
#: candidates the check may ask besides the first (the time limit usually binds first)
DEFAULT_MAX_CHECKS = 10
#: settling the picks (fxcut.planned_check.checked_pick) may ask, by the same prediction, as many
#: candidates as this many times check_time_limit fits (and at most max_checks): on the 14 real models
#: it took at most 5 asks where 3 fit (Whisper); cut shorter it can leave a pick worse than none
SETTLE_BUDGETS = 2


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
    #: the solver asked for ("search", "exact", "auto") and whether the plan is the exact solver's
    solver: str = "search"
    from_exact: bool = False
    #: proven: no decision has a peak below this (None: only the search ran, or the graph has a
    #: feature the exact formulation does not describe)
    lower_bound_bytes: int | None = None
    #: peak_bytes / lower_bound_bytes - 1 (0.0: the plan's peak is proven the lowest)
    gap: float | None = None
    #: under a peak limit (0 < b): proven least recompute FLOPs at or under the limit, and the plan's gap to it
    recompute_lower_bound: int | None = None
    recompute_gap: float | None = None
    #: the exact solver proved its objective optimal (the lowest peak at b=0, the least recompute else)
    proven_optimal: bool = False
    exact_seconds: float = 0.0
    #: the search's own plan (before the exact solver ran): (peak, recompute FLOPs)
    search_point: tuple[int, int] | None = None
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
    ``solver``: "search" (the default), "exact" or "auto": then the exact
    MILP (:func:`fxcut.solve.exact.certify`) runs after the search for up to
    ``exact_time_limit`` seconds and ``last`` carries its proven bound and
    gap (docs/exact.md); one budget per graph (with region budgets the
    search's plan is kept, no bound).
    ``memory_model``: ``"unfused"`` (the modules run op by op) or
    ``"inductor"`` (inductor compiles them); the backend decides (module
    docstring).  ``cost``: ``"flops"``, ``"time"``, or None (``"time"``
    under inductor, ``"flops"`` unfused).  ``machine``: the rates of the
    time model (None: :func:`fxcut.solve.cost.machine_for` the graph's device).
    ``check``: ``"inductor"`` (the default under the inductor model) asks
    inductor itself for the peaks of the model's lowest point, torch's
    default decision and at most ``max_checks - 1`` more candidates (the
    same ones whatever the budget) and picks on those
    (:mod:`fxcut.planned_check`: the peak monotonic in b; at b > 0 never
    above the lowest of torch's decisions at budgets >= b, nor costlier
    by the model; never saving more bytes than torch's default); then,
    where some budget's pick is one of torch's decisions not asked (its
    peak the model's), it asks those picks (settling), so that every
    budget's pick stands at inductor's own peak; None picks on the model
    alone.  ``check_time_limit``: the seconds the check's ordered asks may
    spend per graph (0 to 10**6; default 20; settling may take twice that
    again, and at most ``max_checks`` asks): it asks only as many
    candidates as its measured per-node cost predicts fit, the same on
    every machine; where none but torch's fits it is skipped, and then
    b > 0 plans the same pick among torch's decisions on the model's
    peaks, b=0 the model's lowest.
    """

    def __init__(self, memory_budget: float = 1.0, *, exact_max_candidates: int = 16,
                 max_work: int = DEFAULT_MAX_WORK, time_limit: float = DEFAULT_TIME_LIMIT,
                 seed_budgets: Sequence[float] = DEFAULT_SEED_BUDGETS, solver: str = "search",
                 exact_time_limit: float = DEFAULT_EXACT_TIME_LIMIT, memory_model: str = "unfused",
                 cost: str | None = None, machine: MachineModel | None = None, check: str | None = "default",
                 max_checks: int = DEFAULT_MAX_CHECKS, check_time_limit: float = DEFAULT_CHECK_TIME_LIMIT) -> None:
        if solver not in SOLVERS:
            raise ValueError(f"solver must be one of {', '.join(map(repr, SOLVERS))}, got {solver!r}")
        self.exact_time_limit = check_number("exact_time_limit", exact_time_limit, 1e-3, MAX_TIME_LIMIT)
        self.memory_budget = check_budget(memory_budget, "memory_budget")
        self.exact_max_candidates = check_int("exact_max_candidates", exact_max_candidates, 0, MAX_EXACT_CANDIDATES)
        self.max_work = check_int("max_work", max_work, 1, MAX_WORK)
        self.time_limit = check_number("time_limit", time_limit, 0.0, MAX_TIME_LIMIT, lo_open=True)
        self.seed_budgets = sorted(set(check_seed_budgets(seed_budgets)) | {1.0})
        self.memory_model = memory.check_memory_model(memory_model)
        self.cost = _check_cost(cost, self.memory_model)
        if check == "default":
            check = "inductor" if self.memory_model == "inductor" else None
        if check not in (None, "inductor"):
            raise ValueError(f"check must be None or 'inductor', got {check!r}")
        self.check = check
        self.max_checks = check_int("max_checks", max_checks, 1, 1000)
        self.check_time_limit = check_number("check_time_limit", check_time_limit, 0.0, MAX_TIME_LIMIT)
        if machine is not None and not isinstance(machine, MachineModel):
            raise ValueError(f"machine must be None or a fxcut.solve.cost.MachineModel, got {machine!r}")
        self.machine = machine
        if solver != "search" and self.memory_model != "unfused":
            raise ValueError(f"solver={solver!r} proves bounds on the unfused memory model only; "
                             f"memory_model={self.memory_model!r} plans with solver='search'")
        if solver != "search":
            exact_solver.require()  # a missing HiGHS is an ImportError naming the extra, before any graph
        self.solver = solver
        self.last: PlanChoice | None = None
        self.last_problem: PlanProblem | None = None
        self.last_frontier: Frontier | None = None

    def __repr__(self) -> str:
        return (f"PeakPlanner(memory_budget={self.memory_budget!r}, exact_max_candidates="
                f"{self.exact_max_candidates!r}, max_work={self.max_work!r}, time_limit={self.time_limit!r}, "
                f"solver={self.solver!r}, exact_time_limit={self.exact_time_limit!r}, "
                f"memory_model={self.memory_model!r}, cost={self.cost!r}, check={self.check!r}, "
                f"check_time_limit={self.check_time_limit!r})")

    def choose_saved(self, plan: Plan, decision: BudgetDecision) -> list[int]:
        """The saved node indices (into ``decision.decision.arrays``) for
        the planned call ``plan`` whose default (budget 1) decision is
        ``decision``: :class:`fxcut.route.plan.Objective`'s hook."""
        return self.plan(plan, decision).saved

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

    def torch_seeds(self, plan: Plan, chosen: BudgetDecision, estimates: RuntimeEstimates) -> dict[float, list[int]]:
        """torch's saved sets at the seed budgets (1.0: ``chosen``'s), under
        the plan's options, solver and estimator."""
        out = {1.0: list(chosen.saved)}
        for b in self.seed_budgets:
            if b != 1.0:
                out[b] = list(plan.budget_pass(chosen.decision.arrays, b, estimates).saved)
        return out

    def plan(self, plan: Plan, chosen: BudgetDecision) -> PlanChoice:
        """The plan for the planned call ``plan`` whose default (budget 1)
        decision is ``chosen``."""
        t0 = time.perf_counter()
        estimates = plan.estimates()
        num_fwd_outputs = plan.num_fwd_outputs
        prob = self.problem(chosen, num_fwd_outputs, estimates)
        n = len(prob.arrays)
        seeds = self.torch_seeds(plan, chosen, estimates)
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
        groups = region_groups(prob, self.memory_budget, plan.rules)
        current = seed_masks[0]
        lowest, points, exact, timed_out = torch_sim.peak_bytes, 0, True, False
        per_region: dict[float, int] = {}
        limit_each = self.time_limit / max(1, len(groups))
        work_each = max(1, self.max_work // max(1, len(groups)))
        peak_limit = 0
        report = None
        for budget, members in groups:
            skipped = self._check_skipped(n) if self.check == "inductor" and len(groups) == 1 else None
            if skipped is not None and budget > 0.0:
                # b > 0 without inductor's check: the same pick among torch's decisions, on the model's
                # peaks -- no search to run (the model's lowest, b=0's plan, is below all of them)
                log.info("plan: inductor not asked: %s; torch's decisions at budget %g on the model", skipped,
                         budget)
                current, report = self._checked(plan, prob, _NO_FRONTIER, seeds, budget, num_fwd_outputs,
                                                skipped=skipped)
                per_region[budget] = prob.simulate(current).peak_bytes
                continue
            roles = roles_for(prob.roles, members, current)
            front = prob.frontier(seed_masks + [current], roles=roles, exact_max_free=self.exact_max_candidates,
                                  max_work=work_each, time_limit=limit_each)
            timed_out = timed_out or front.timed_out
            base = prob.simulate(current, roles).peak_bytes
            k = pick(front, budget, base)
            peak_limit = limit_of(front, budget, base)
            mask = front.masks[k]
            if self.check == "inductor" and len(groups) == 1:
                mask, report = self._checked(plan, prob, front, seeds, budget, num_fwd_outputs, lowest=mask)
            current = mask
            lowest = min(lowest, front.peak_bytes[0])
            points += len(front.peak_bytes)
            exact = exact and front.exact
            per_region[budget] = (front.peak_bytes[k] if mask is front.masks[k]
                                  else prob.simulate(mask, roles).peak_bytes)
            self.last_frontier = front
        # no search ran (inductor's check skipped at b > 0): nothing was enumerated, the lowest is torch's
        exact = exact and points > 0
        cert = None
        searched = prob.simulate(current)
        if self.solver != "search":
            if len(groups) > 1:
                log.warning("plan: the exact solver plans one budget per graph; %d region budgets were planned "
                            "by the search alone (no bound)", len(groups))
            else:
                cert = exact_solver.certify(prob, current, limit=None if self.memory_budget == 0 else peak_limit,
                                     time_limit=self.exact_time_limit, lowest_mask=self.last_frontier.masks[0]
                                     if self.last_frontier is not None else None,
                                     take="best" if self.solver == "exact" else "proven")
                if cert.why_not is not None:
                    log.warning("plan: no exact bound for this graph: %s", cert.why_not)
                current = cert.mask
        final = prob.simulate(current)
        saved = [i for i in range(n) if current[i]]
        self.last = PlanChoice(saved, final.peak_bytes, final.recompute_flops, torch_sim.peak_bytes,
                               torch_sim.recompute_flops, lowest, points, exact, time.perf_counter() - t0,
                               per_region, torch_points, timed_out, self.solver,
                               search_point=(searched.peak_bytes, searched.recompute_flops),
                               memory_model=self.memory_model, cost=self.cost, check=report)
        if cert is not None:
            _record(self.last, cert, self.memory_budget)
        log.info("plan: budget %g, %s model, peak %d (torch %d, lowest %d), recompute %d %s (torch %d), %d points, "
                 "%.1f ms", self.memory_budget, self.memory_model, final.peak_bytes, torch_sim.peak_bytes, lowest,
                 final.recompute_flops, "ps" if self.cost == "time" else "flops", torch_sim.recompute_flops, points,
                 self.last.seconds * 1e3)
        return self.last

    def _check_skipped(self, nodes: int) -> str | None:
        """Why inductor's check cannot run on a graph of ``nodes`` nodes
        within ``check_time_limit`` (None: it can)."""
        from .planned_check import asks_within

        fits = asks_within(self.check_time_limit, nodes)
        if fits >= 2:
            return None
        return (f"check_time_limit={self.check_time_limit:g} s fits {fits} ask(s) of this {nodes}-node "
                f"graph; 2 are needed (torch's decision and one candidate)")

    def _checked(self, plan: Plan, prob: PlanProblem, front: Frontier, seeds: dict[float, list[int]],
                 budget: float, num_fwd_outputs: int, *, lowest: bytes | None = None,
                 skipped: str | None = None) -> tuple[bytes, Any]:
        """The saved mask :func:`fxcut.planned_check.checked_pick` picks among
        the frontier's points and torch's decisions at the seed budgets
        ``seeds`` (1.0: its default), on inductor's own peaks where it is
        asked.  Where it cannot be asked (``skipped``: the time budget fits
        no candidate besides torch's; inductor fails on one: logged), the
        same rule picks among torch's decisions on the model's peaks, and at
        b=0 the plan is ``lowest``, the model's lowest point (below all of
        torch's decisions by the model)."""
        from .planned_check import (OVERRUN, CheckReport, TorchDecision, asks_within, checked_pick, decision_peak,
                                     holds_saved_tensors)

        nodes = prob.arrays.nodes
        n = len(nodes)
        fits = asks_within(self.check_time_limit, n)
        why = skipped if skipped is not None else self._check_skipped(n)  # None exactly when fits >= 2
        if why is not None and budget == 0.0 and lowest is not None:
            log.info("plan: inductor not asked: %s; the memory model's lowest", why)
            return lowest, CheckReport(skipped=why, budget_asks=fits)
        # torch's decisions, one per saved set, each under the largest seed budget choosing it
        torch_masks: dict[bytes, float] = {}
        for b, saved in sorted(seeds.items(), key=lambda item: -item[0]):
            torch_masks.setdefault(saved_mask(n, saved), b)
        candidates = list(front.masks) + list(torch_masks)
        sims = [prob.simulate(m) for m in candidates]
        torch_decisions = [TorchDecision(b, sim.peak_bytes, sim.recompute_flops)
                           for b, sim in zip(torch_masks.values(), sims[len(front.masks):])]
        saved_bytes = [sim.saved_bytes for sim in sims]
        holds = holds_saved_tensors(plan.joint_module)
        first: dict[bytes, int] = {}
        for j, m in enumerate(candidates):
            first.setdefault(m, j)

        def on_the_model(why: str, report: CheckReport) -> tuple[bytes, CheckReport]:
            if budget == 0.0 and lowest is not None:
                return lowest, report
            j, picked = checked_pick(front, torch_decisions, budget, None, same=lambda k: first[candidates[k]],
                                     saved_bytes=saved_bytes, holds_saved=holds)
            picked.skipped, picked.failed = report.skipped, report.failed
            picked.budget_asks, picked.seconds = report.budget_asks, report.seconds
            log.info("plan: %s; torch's decision at budget %g picked on the model", why, picked.picked_torch_budget)
            return candidates[j], picked

        if why is not None:
            log.info("plan: inductor not asked: %s", why)
            return on_the_model(why, CheckReport(skipped=why, budget_asks=fits))
        t0 = time.perf_counter()

        def peak_of(j: int) -> int:
            return decision_peak(plan, nodes, [i for i in range(n) if candidates[j][i]], num_fwd_outputs)

        def keep_asking() -> bool:
            return time.perf_counter() - t0 <= OVERRUN * self.check_time_limit

        try:
            j, report = checked_pick(front, torch_decisions, budget, peak_of, max_asks=min(self.max_checks, fits - 1),
                                     keep_asking=keep_asking, same=lambda k: first[candidates[k]],
                                     saved_bytes=saved_bytes, holds_saved=holds,
                                     settle_asks=min(self.max_checks, SETTLE_BUDGETS * fits))
        except Exception as e:  # inductor could not lower a candidate
            log.warning("plan: inductor could not be asked (%s: %s); %s", type(e).__name__,
                        str(e).splitlines()[0] if str(e) else "",
                        "the memory model's lowest stands" if budget == 0.0 else
                        "torch's decisions are compared on the memory model")
            return on_the_model("inductor failed", CheckReport(failed=f"{type(e).__name__}: {e}", budget_asks=fits,
                                                               seconds=time.perf_counter() - t0))
        report.budget_asks = fits
        report.seconds = time.perf_counter() - t0
        log.info("plan: inductor's peaks of %d candidates %s, limit %d, picked %d (%.1f s)", len(report.asked),
                 report.asked, report.limit, j, report.seconds)
        return candidates[j], report


#: no frontier: where the check is skipped at b > 0 no search runs, and the pick is among torch's decisions
_NO_FRONTIER = Frontier([], [], [], 0, 0, True, False, 0, False)


def _record(choice: PlanChoice, cert: exact_solver.Certificate, budget: float) -> None:
    """The exact solver's answer, on the plan's record."""
    choice.from_exact = cert.from_exact
    choice.exact_seconds = cert.seconds
    if cert.why_not is not None:
        return
    if budget == 0:
        choice.lowest_peak_bytes = min(choice.lowest_peak_bytes, cert.peak_bytes)
    choice.lower_bound_bytes = cert.peak_bound
    choice.gap = _gap(choice.peak_bytes, cert.peak_bound)
    if budget == 0:
        choice.proven_optimal = cert.peak_optimal
    else:
        choice.recompute_lower_bound = cert.cost_bound
        choice.recompute_gap = _gap(choice.recompute_flops, cert.cost_bound)
        choice.proven_optimal = cert.cost_optimal
    choice.exact = choice.exact or choice.proven_optimal


def _gap(value: int, bound: int | None) -> float | None:
    if bound is None:
        return None
    if bound <= 0:
        return 0.0 if value <= 0 else math.inf
    return value / bound - 1.0


# --------------------------------------------------------------------------- the partition function


def planned_partitioner(memory_budget: float = 1.0, *, exact_max_candidates: int = 16,
                        max_work: int = DEFAULT_MAX_WORK, time_limit: float = DEFAULT_TIME_LIMIT,
                        seed_budgets: Sequence[float] = DEFAULT_SEED_BUDGETS, solver: str = "search",
                        exact_time_limit: float = DEFAULT_EXACT_TIME_LIMIT, memory_model: str = "unfused",
                        cost: str | None = None, machine: MachineModel | None = None, check: str | None = "default",
                        max_checks: int = DEFAULT_MAX_CHECKS, check_time_limit: float = DEFAULT_CHECK_TIME_LIMIT) -> Any:
    """A partition_fn with torch's signature ``(joint_module, joint_inputs,
    compiler="inductor", *, num_fwd_outputs, static_lifetime_input_indices=None)``
    whose saved set is :class:`PeakPlanner`'s (options as there; a bad one
    raises ValueError naming it).  The default path does the rest.

    ``solver``: "search" (the default: the C search alone), "exact" (then the
    MILP of :mod:`fxcut.solve.exact`, seeded with the search's plan, for up to
    ``exact_time_limit`` seconds: its plan when better, proven or not) or
    "auto" (the exact plan only where it is proven optimal, else the
    search's).  Either way ``fn.planner.last`` carries the proven bound and
    the gap.  "exact" and "auto" need HiGHS (``pip install 'fxcut[exact]'``)
    and the unfused memory model.  ``memory_model``: ``"inductor"`` when
    inductor compiles the modules this partition_fn builds, ``"unfused"``
    when they run op by op (``fxcut.inductor_backend`` and
    ``fxcut.aot_backend`` choose for you)."""
    planner = PeakPlanner(memory_budget, exact_max_candidates=exact_max_candidates, max_work=max_work,
                          time_limit=time_limit, seed_budgets=seed_budgets, solver=solver,
                          exact_time_limit=exact_time_limit, memory_model=memory_model, cost=cost,
                          machine=machine, check=check, max_checks=max_checks, check_time_limit=check_time_limit)

    def planned_partition(joint_module: fx.GraphModule, joint_inputs: Any, compiler: str = "inductor", *,
                          num_fwd_outputs: int, static_lifetime_input_indices: list[int] | None = None,
                          **kwargs: Any) -> tuple[fx.GraphModule, fx.GraphModule]:
        return min_cut_rematerialization_partition(
            joint_module, joint_inputs, compiler, num_fwd_outputs=num_fwd_outputs,
            static_lifetime_input_indices=static_lifetime_input_indices, objective=planner, **kwargs)

    planned_partition.planner = planner  # type: ignore[attr-defined]
    return planned_partition

__all__ = ["COSTS", "PeakPlanner", "PlanChoice", "planned_partitioner"]

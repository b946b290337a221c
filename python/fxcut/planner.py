"""The peak-aware memory plan: ``fxcut.planned_partitioner``.

torch's ``activation_memory_budget`` limits the summed bytes of the saved
values; what runs out is the *peak* of live activations over the forward and
the backward.  The planner simulates that peak for a decision (the C core,
:func:`fxcut._C.plan_simulate`) and searches the decisions (which forward
values to save, the others recomputed by the backward) for the Pareto
frontier of (peak, recompute FLOPs) (:func:`fxcut._C.plan_frontier`),
starting from torch's own decisions at budgets 0, 0.1, ..., 1, so that every
torch decision is on the frontier or dominated by a point of it.

``memory_budget`` b is on the peak: with P1 the simulated peak of torch's
default partition and P0 the lowest peak on the frontier, the plan is the
frontier point of least recompute cost whose peak is at most
``P0 + b * (P1 - P0)``.  The peak is therefore monotonic in b, b=1 gives a
peak no higher than torch's with no more recompute, b=0 the lowest peak found.

Everything else is the default route's (guard -> plan -> lower -> core ->
build, :mod:`fxcut.partition`): the same validation, DCE/CSE, tag passes,
module building, fallback to torch for a graph fxcut does not model, and
restore-on-failure; the planner is the plan's objective
(:class:`fxcut.plan.Objective`) and only replaces *which* values are saved,
through :meth:`PeakPlanner.choose_saved`.  Verify mode does not apply: the
plan is meant to differ from torch's decision.
Never recomputed by a plan: inputs, MUST_SAVE-tagged values, random ops
(unless tagged to be recomputed, which torch handles), collectives, impure /
mutating / effectful ops, backward hooks, symbolic values.  Always
recomputed: MUST_RECOMPUTE / PREFER_RECOMPUTE tags (SAC, the ZeRO-3 walk),
values that must be in the backward.
"""

from __future__ import annotations

import logging
import math
import time
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import torch.fx as fx

from . import _C, core
from .budget import BudgetDecision, RuntimeEstimates, check_budget, decide_with_budget
from .lower import GraphArrays
from .roles import plan_roles

if TYPE_CHECKING:
    from .plan import Plan

log = logging.getLogger("fxcut")

DEFAULT_SEED_BUDGETS: tuple[float, ...] = tuple(k / 10 for k in range(11))
#: The search's work budget: units of (nodes + edges) per simulated decision.
#: The search stops there, at the same point on every machine, so separate
#: calls on one graph search the same frontier (monotonic in the budget).
DEFAULT_MAX_WORK = 40_000_000
#: The wall-clock safety net of the search (seconds), far above what the
#: work budget takes: a limit, not the usual stop.
DEFAULT_TIME_LIMIT = 60.0



# --------------------------------------------------------------------------- per-node facts


def storage_of(arrays: GraphArrays) -> array[int]:
    """The node whose storage each value shares: a view or alias op's first
    positional argument (its own storage for every other node)."""
    out = array("i", range(len(arrays)))
    flags, kind, arg_ptr, arg_idx = arrays.flags, arrays.kind, arrays.arg_ptr, arrays.arg_idx
    alias = _C.F_VIEW | _C.F_NO_COPY
    for i in range(len(arrays)):
        if kind[i] == _C.KIND_CALL_FUNCTION and flags[i] & alias and arg_ptr[i] < arg_ptr[i + 1]:
            out[i] = arg_idx[arg_ptr[i]]
    return out


def node_flops(arrays: GraphArrays, roles: bytes, estimates: RuntimeEstimates | None = None) -> array[int]:
    """The cost of running each forward op once, as torch's knapsack
    estimates it (``activation_memory_budget_runtime_estimator``, FLOPs by
    default, memoised per op signature); 0 for the rest."""
    out = array("q", [0]) * len(arrays)
    estimate = estimates or RuntimeEstimates()
    free_ops = _C.F_GETITEM | _C.F_VIEW
    for i in range(len(arrays)):
        if (roles[i] not in (_C.PLAN_ROLE_FREE, _C.PLAN_ROLE_RECOMPUTE) or arrays.kind[i] != _C.KIND_CALL_FUNCTION
                or arrays.flags[i] & free_ops):
            continue
        try:
            value = float(estimate([arrays.nodes[i]])[0])
        except Exception:  # an op torch's estimator cannot run on its meta values: counted free
            log.debug("plan: no runtime estimate for node %d (%s)", i, arrays.nodes[i].name)
            continue
        out[i] = max(0, int(round(value))) if math.isfinite(value) else 0
    return out


# --------------------------------------------------------------------------- simulation and frontier


class Simulation(NamedTuple):
    peak_bytes: int
    fw_peak_bytes: int
    bw_peak_bytes: int
    saved_bytes: int
    recompute_flops: int
    peak_step: int
    n_fw_steps: int
    n_recomputed: int
    saved: bytes
    schedule: memoryview
    live_bytes: memoryview


class Frontier(NamedTuple):
    peak_bytes: list[int]
    recompute_flops: list[int]
    masks: list[bytes]
    n_free: int
    n_evals: int
    exact: bool
    timed_out: bool
    work: int
    out_of_work: bool


@dataclass
class PlanProblem:
    """One graph's plan inputs: the arrays, roles, storages and costs."""

    arrays: GraphArrays
    num_fwd_outputs: int
    roles: bytes
    storage: array[int]
    flops: array[int]
    marks: bytes | None = None

    def simulate(self, saved: bytes | Sequence[int], roles: bytes | None = None) -> Simulation:
        mask = saved if isinstance(saved, bytes) else _mask(len(self.arrays), saved)
        out = core.plan_simulate(self.arrays, num_fwd_outputs=self.num_fwd_outputs, role=roles or self.roles,
                                 saved=mask, storage_of=self.storage, flops=self.flops, marks=self.marks)
        return Simulation(*out)

    def model_point(self, saved: Sequence[int]) -> tuple[int, int]:
        """(peak, recompute FLOPs) of the decision saving exactly ``saved``:
        the memory model alone, no plan role applied."""
        from . import memory

        est = memory.simulate(self.arrays, saved, self.num_fwd_outputs, storage=self.storage, flops=self.flops,
                              marks=self.marks)
        return est.peak_bytes, est.recompute_flops

    def frontier(self, seeds: Sequence[bytes], *, roles: bytes | None = None, exact_max_free: int = 16,
                 max_work: int = DEFAULT_MAX_WORK, time_limit: float = 60.0, max_points: int = 1024) -> Frontier:
        n = len(self.arrays)
        peaks, costs, masks, n_free, n_evals, exact, timed_out, work, out_of_work = core.plan_frontier(
            self.arrays, num_fwd_outputs=self.num_fwd_outputs, role=roles or self.roles,
            storage_of=self.storage, flops=self.flops, seeds=b"".join(seeds), exact_max_free=exact_max_free,
            max_work=max_work, time_limit=time_limit, max_points=max_points, marks=self.marks)
        return Frontier(list(peaks), list(costs), [masks[k * n:(k + 1) * n] for k in range(len(peaks))],
                        n_free, n_evals, exact, timed_out, work, out_of_work)


def _mask(n: int, saved: Sequence[int]) -> bytes:
    m = bytearray(n)
    for i in saved:
        m[i] = 1
    return bytes(m)


def pick(frontier: Frontier, budget: float, torch_peak: int) -> int:
    """The frontier point for ``budget``: the least recompute cost with peak
    at most ``P0 + budget * (torch_peak - P0)``."""
    p0 = frontier.peak_bytes[0]
    limit = p0 + budget * max(0, torch_peak - p0)
    k = 0
    for j, p in enumerate(frontier.peak_bytes):
        if p <= limit + 1e-9:
            k = j
    return k


# --------------------------------------------------------------------------- the planner


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
    """

    def __init__(self, memory_budget: float = 1.0, *, exact_max_candidates: int = 16,
                 max_work: int = DEFAULT_MAX_WORK, time_limit: float = DEFAULT_TIME_LIMIT,
                 seed_budgets: Sequence[float] = DEFAULT_SEED_BUDGETS) -> None:
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
        self.last_problem: PlanProblem | None = None
        self.last_frontier: Frontier | None = None

    def __repr__(self) -> str:
        return (f"PeakPlanner(memory_budget={self.memory_budget!r}, exact_max_candidates="
                f"{self.exact_max_candidates!r}, max_work={self.max_work!r}, time_limit={self.time_limit!r})")

    def choose_saved(self, plan: Plan, decision: BudgetDecision) -> list[int]:
        """The saved node indices (into ``decision.decision.arrays``) for
        the planned call ``plan`` whose default (budget 1) decision is
        ``decision``: :class:`fxcut.plan.Objective`'s hook."""
        choice = self.plan(plan.joint_module, decision, num_fwd_outputs=plan.num_fwd_outputs,
                           static_lifetime_input_indices=plan.static_indices)
        return choice.saved

    def problem(self, chosen: BudgetDecision, num_fwd_outputs: int,
                estimates: RuntimeEstimates | None = None) -> PlanProblem:
        from . import memory

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
        seed_masks = [_mask(n, s) for s in seeds.values()]
        # torch's points: the memory model on torch's own saved sets, not
        # through the plan's roles (which may only narrow what a plan does)
        torch_points = {b: prob.model_point(s) for b, s in seeds.items()}
        torch_sim = prob.simulate(seed_masks[0])
        if (torch_sim.peak_bytes, torch_sim.recompute_flops) != torch_points[1.0]:
            log.warning("plan: torch's default decision simulates to %s under the plan's roles, %s as torch "
                        "made it", (torch_sim.peak_bytes, torch_sim.recompute_flops), torch_points[1.0])
        self.last_problem = prob
        groups = _region_groups(prob, self.memory_budget)
        current = seed_masks[0]
        lowest, points, exact, timed_out = torch_sim.peak_bytes, 0, True, False
        per_region: dict[float, int] = {}
        limit_each = self.time_limit / max(1, len(groups))
        work_each = max(1, self.max_work // max(1, len(groups)))
        for budget, members in groups:
            roles = _roles_for(prob.roles, members, current)
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


def _region_groups(prob: PlanProblem, default: float) -> list[tuple[float, list[int]]]:
    """The FREE nodes grouped by their region budget (``default`` where
    none), groups in the graph order of their first node."""
    by_budget: dict[float, list[int]] = {}
    annotation = _annotation_reader()
    for i, node in enumerate(prob.arrays.nodes):
        if prob.roles[i] != _C.PLAN_ROLE_FREE:
            continue
        b = annotation(node) if annotation is not None else None
        b = default if b is None else float(b)
        by_budget.setdefault(b, []).append(i)
    if not by_budget:
        return [(default, [])]
    return list(by_budget.items())


def _annotation_reader() -> Any:
    try:
        from torch.fx.traceback import _get_memory_budget_annotation
    except ImportError:  # torch 2.12: no region budgets
        return None
    return _get_memory_budget_annotation


def _roles_for(roles: bytes, members: list[int], current: bytes) -> bytes:
    """``roles`` with only ``members`` FREE: every other FREE node held at
    ``current`` (saved where it saves, recomputed where it does not)."""
    out = bytearray(roles)
    keep = set(members)
    for i, r in enumerate(roles):
        if r == _C.PLAN_ROLE_FREE and i not in keep:
            out[i] = _C.PLAN_ROLE_SAVE if current[i] else _C.PLAN_ROLE_RECOMPUTE
    return bytes(out)


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
        from .partition import min_cut_rematerialization_partition

        return min_cut_rematerialization_partition(
            joint_module, joint_inputs, compiler, num_fwd_outputs=num_fwd_outputs,
            static_lifetime_input_indices=static_lifetime_input_indices, objective=planner, **kwargs)

    planned_partition.planner = planner  # type: ignore[attr-defined]
    return planned_partition


__all__ = ["DEFAULT_MAX_WORK", "DEFAULT_SEED_BUDGETS", "DEFAULT_TIME_LIMIT", "Frontier", "PeakPlanner", "PlanChoice", "PlanProblem", "Simulation",
           "node_flops", "pick", "plan_roles", "planned_partitioner", "storage_of"]

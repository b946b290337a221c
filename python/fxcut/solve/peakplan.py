"""The peak-aware memory plan: :class:`PeakPlanner`, over the graph array.

torch's ``activation_memory_budget`` limits the summed bytes of the saved
values; what runs out is the *peak* of live activations.  A
:class:`PeakPlanner` chooses the saved set of one joint graph under a peak
budget ``memory_budget`` b: it seeds the C search (:mod:`fxcut.solve.planner`)
with torch's own decisions at several budgets and picks a point of the
(peak, recompute) frontier it finds -- b=1 no higher than torch's default,
b=0 the lowest peak found, the peak monotonic in b.  Under inductor's memory
model it may ask inductor for the peaks of a few candidates and pick on
those (:mod:`fxcut.solve.check`).  Everything torch knows of the graph comes
in as :class:`PlanInputs`, made by the route (:mod:`fxcut.route.decide`)
from the running torch: torch's decisions at other budgets, the node facts,
the asks.  The planner itself reads only arrays.

The memory model is the backend's (``memory_model``): ``"inductor"`` when
inductor compiles the modules (kernels, inlined pointwise chains, in-place
buffers: :mod:`fxcut.solve.memory`), ``"unfused"`` when they run op by op
(torch's ``aot_eager``, :func:`fxcut.aot_backend`), ``"unfused_held"`` when
they run op by op with the backward holding its saved values to its end
(DeepSpeed DeepCompile's eager backend).  The recompute cost (``cost``) is torch's
FLOPs or a modelled time (:mod:`fxcut.solve.cost`: bytes moved for
memory-bound ops, FLOPs for compute-bound ones, an inlined recomputation
nearly free under inductor); ``"time"`` is the default under inductor,
``"flops"`` under the unfused model (the figures docs/plan.md publishes).
"""

from __future__ import annotations

import logging
import math
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .._numbers import check_int, check_number
from . import exact as exact_solver
from . import memory
from .budget import BudgetDecision, check_budget
from .check import OVERRUN, CheckReport, TorchDecision, asks_within, checked_pick
from .cost import MachineModel, machine_for, node_costs
from .hazards import Unsafe, keep_saved, recomputed_hazards
from .planner import (DEFAULT_MAX_WORK, DEFAULT_SEED_BUDGETS, DEFAULT_TIME_LIMIT, Frontier, PlanProblem, limit_of,
                      pick, region_groups, roles_for, saved_mask)
from .roles import plan_roles

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
#: seconds inductor's check may spend per graph (fxcut.planned_check.asks_within) unless told: none, the
#: plan rests on the inductor model (2026-12-07: the model's b=0 pick measured equal to the asked one on
#: GPT-2, Llama and BERT, within 0.5% on ViT, at 1.08x stock's first compile against the asks' 1.8x)
DEFAULT_CHECK_TIME_LIMIT = 0.0
#: the check_time_limit of the benchmark's runs that ask inductor (docs/plan.md): a positive one opts in
ASK_TIME_LIMIT = 20.0
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


COSTS: tuple[str, ...] = ("flops", "time")


def _check_cost(cost: object, memory_model: str) -> str:
    if cost is None:
        return "time" if memory_model == "inductor" else "flops"
    if cost not in COSTS:
        raise ValueError(f"cost must be None or one of {', '.join(map(repr, COSTS))}, got {cost!r}")
    return str(cost)



@dataclass
class PlanInputs:
    """What the plan reads of one graph besides its array -- torch's side,
    made by the route: torch's default decision (budget 1) and
    ``torch_saved(b)``, its saved set at another budget; the node facts
    (:class:`fxcut.solve.memory.ModelInputs` with the inductor model's
    kinds where the plan models inductor, ``numel``, ``device``, the region
    budgets, the hazards and the ``nondeterministic_seeded`` calls); and,
    for the check, ``ask(saved)`` -> inductor's forward and backward peaks
    of a decision (None: no check; ``no_ask``: why, where the check was
    asked for but cannot run on this graph) and whether the graph's saved
    tensors outlive its run (``holds_saved``)."""

    decision: BudgetDecision[Any]
    num_fwd_outputs: int
    torch_saved: Callable[[float], list[int]]
    model: memory.ModelInputs
    numel: array[int]
    device: str
    region_budget: Sequence[float | None]
    unsafe: Unsafe
    seeded: bytes
    ask: Callable[[Sequence[int]], tuple[int, int]] | None = None
    no_ask: str = ""
    holds_saved: bool = False


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
    #: the bounds prove the plan's objective optimal: at b=0 the lowest peak (exactly where ``gap`` is 0),
    #: else the least recompute under the limit (exactly where ``recompute_gap`` is 0)
    proven_optimal: bool = False
    exact_seconds: float = 0.0
    #: the search's own plan (before the exact solver ran): (peak, recompute FLOPs)
    search_point: tuple[int, int] | None = None
    #: the memory model ("unfused", "unfused_held" or "inductor") and the recompute cost's unit
    #: ("flops": torch's FLOPs; "time": modelled picoseconds) the plan used
    memory_model: str = "unfused"
    cost: str = "flops"
    #: with check="inductor": what inductor said (None: no check)
    check: CheckReport | None = None
    #: the plan's budget b (on the peak), and torch's own decision at ``activation_memory_budget=b``
    #: (its saved bytes budget: another b) on the plan's memory model: (peak, recompute cost);
    #: torch's default decision's is ``torch_points[1.0]``
    budget: float = 1.0
    torch_at_budget: tuple[int, int] | None = None
    #: the bytes the plan's saved values hold (the memory model's storages) and the joint graph's nodes
    saved_bytes: int = 0
    nodes: int = 0
    #: values of torch's decisions the plan's candidates keep saved (random ops, readers of mutated
    #: state: :func:`fxcut.solve.hazards.keep_saved`), by node index: the plan never recomputes them
    kept_saved: list[int] = field(default_factory=list)

    @property
    def torch_default(self) -> tuple[int, int]:
        """torch's default decision (budget 1) on the plan's memory model: (peak, recompute cost)."""
        return self.torch_points.get(1.0, (self.torch_peak_bytes, self.torch_recompute_flops))


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
    search's plan is kept, no bound).  The MILP describes each memory
    model: the unfused and held ones exactly, the inductor one by a
    relaxation (:mod:`fxcut.solve.inductor_bound`), so there the bound is
    proven but further from the plan.
    ``memory_model``: ``"unfused"`` (the modules run op by op),
    ``"unfused_held"`` (op by op, the backward holding its saved values) or
    ``"inductor"`` (inductor compiles them); the backend decides (module
    docstring).  ``cost``: ``"flops"``, ``"time"``, or None (``"time"``
    under inductor, ``"flops"`` unfused).  ``machine``: the rates of the
    time model (None: :func:`fxcut.solve.cost.machine_for` the graph's device).
    ``check``: ``"inductor"`` (the default under the inductor model) picks
    among the search's points and torch's decisions at the seed budgets;
    with a positive ``check_time_limit`` it asks inductor itself for the
    peaks of the model's lowest point, torch's default decision and at most
    ``max_checks - 1`` more candidates (the same ones whatever the budget)
    and picks on those
    (:mod:`fxcut.solve.check`: the peak monotonic in b; at b > 0 never
    above the lowest of torch's decisions at budgets >= b, nor costlier
    by the model; never saving more bytes than torch's default); then,
    where some budget's pick is one of torch's decisions not asked (its
    peak the model's), it asks those picks (settling), so that every
    budget's pick stands at inductor's own peak; None picks on the model
    alone.  ``check_time_limit``: the seconds the check's ordered asks may
    spend per graph (0 to 10**6; default 0: inductor is not asked, the
    plan rests on the inductor model; the benchmark's asking runs use 20;
    settling may take twice that again, and at most ``max_checks`` asks):
    it asks only as many candidates as its measured per-node cost predicts
    fit, the same on every machine; where none but torch's fits (0 among
    them) it is skipped, and then b > 0 plans the same pick among torch's
    decisions on the model's peaks, b=0 the model's lowest.  ``max_checks``
    and ``check_time_limit`` (None: 10 and 0 s) bound that check only:
    given where it never runs
    (``check=None``, an unfused memory model) they are a ValueError naming
    them.

    The route (:mod:`fxcut.route.decide`) runs the planner for a call whose
    objective it is and records the plan in :attr:`last`.
    """

    def __init__(self, memory_budget: float = 1.0, *, exact_max_candidates: int = 16,
                 max_work: int = DEFAULT_MAX_WORK, time_limit: float = DEFAULT_TIME_LIMIT,
                 seed_budgets: Sequence[float] = DEFAULT_SEED_BUDGETS, solver: str = "search",
                 exact_time_limit: float = DEFAULT_EXACT_TIME_LIMIT, memory_model: str = "unfused",
                 cost: str | None = None, machine: MachineModel | None = None, check: str | None = "default",
                 max_checks: int | None = None, check_time_limit: float | None = None) -> None:
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
        self.check = _check_check(check, self.memory_model)
        self.max_checks = check_int("max_checks", DEFAULT_MAX_CHECKS if max_checks is None else max_checks, 1, 1000)
        self.check_time_limit = check_number("check_time_limit", DEFAULT_CHECK_TIME_LIMIT if check_time_limit is None
                                             else check_time_limit, 0.0, MAX_TIME_LIMIT)
        _check_unused_check_options(self.check, self.memory_model, max_checks=max_checks,
                                    check_time_limit=check_time_limit)
        if machine is not None and not isinstance(machine, MachineModel):
            raise ValueError(f"machine must be None or a fxcut.solve.cost.MachineModel, got {machine!r}")
        self.machine = machine
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

    def problem(self, inputs: PlanInputs) -> PlanProblem:
        """The search's problem for one graph: its roles, storages, costs
        (FLOPs, or the time model's picoseconds) and memory model."""
        chosen = inputs.decision
        arrays = chosen.arrays
        model = inputs.model
        roles = plan_roles(chosen.decision, inputs.unsafe, inputs.seeded, model.marks)
        flops, inlined = model.flops, None
        if self.cost == "time":
            machine = self.machine or machine_for(inputs.device)
            flops, inlined = node_costs(arrays, model.flops, model.storage, inputs.numel, machine,
                                        fused=self.memory_model == "inductor")
        inductor = replace(model.inductor, fused_cost=inlined) if model.inductor is not None else None
        return PlanProblem(arrays, inputs.num_fwd_outputs, roles, model.storage, flops, marks=model.marks,
                           inductor=inductor, hold_saved=model.hold_saved, workspace=model.workspace)

    def torch_seeds(self, inputs: PlanInputs) -> dict[float, list[int]]:
        """torch's saved sets at the seed budgets (1.0: its default decision's)."""
        out = {1.0: list(inputs.decision.saved)}
        for b in self.seed_budgets:
            if b != 1.0:
                out[b] = list(inputs.torch_saved(b))
        return out

    def plan(self, inputs: PlanInputs) -> PlanChoice:
        """The plan for one graph (torch's side: ``inputs``), recorded in :attr:`last`.

        torch's decisions seed the search and are the check's candidates as
        the plan may build them: each with the values it would recompute
        unsafely (a random op, a reader of mutated state) kept saved, as
        the route keeps any plan's (:mod:`fxcut.route.safety`) -- so the
        plan recorded is the decision built.  torch's figures on the record
        (``torch_points``, ``torch_at_budget``) are torch's own decisions."""
        t0 = time.perf_counter()
        prob = self.problem(inputs)
        raw = self.torch_seeds(inputs)
        seeds, kept = _safe_seeds(inputs, raw)
        n = len(prob.arrays)
        seed_masks = [saved_mask(n, s) for s in seeds.values()]
        # torch's points: the memory model on torch's own saved sets, not
        # through the plan's roles (which may only narrow what a plan does)
        torch_points = {b: prob.model_point(s) for b, s in raw.items()}
        b = self.memory_budget
        at_b = torch_points[b] if b in torch_points else prob.model_point(inputs.torch_saved(b))
        torch_sim = prob.simulate(seed_masks[0])
        self._note_roles_differ(inputs, (torch_sim.peak_bytes, torch_sim.recompute_flops), torch_points[1.0])
        self.last_problem = prob
        search = _Search(self, prob, inputs, seeds, seed_masks)
        current = search.run(inputs.region_budget)
        searched = prob.simulate(current)
        cert = None
        if self.solver != "search":
            current, cert = self._certify(prob, current, search)
        saved = _built(inputs, current)
        final = prob.simulate(saved_mask(n, saved))
        self.last = PlanChoice(saved, final.peak_bytes, final.recompute_flops, torch_sim.peak_bytes,
                               torch_sim.recompute_flops, min(torch_sim.peak_bytes, search.lowest), search.points,
                               search.exact and search.points > 0, time.perf_counter() - t0, search.per_region,
                               torch_points, search.timed_out, self.solver,
                               search_point=(searched.peak_bytes, searched.recompute_flops),
                               memory_model=self.memory_model, cost=self.cost, check=search.report, budget=b,
                               torch_at_budget=at_b, saved_bytes=final.saved_bytes, nodes=n, kept_saved=kept)
        if cert is not None:
            _record(self.last, cert, self.memory_budget)
        log.debug("plan: budget %g, %s model, peak %d (torch %d, lowest %d), recompute %d %s (torch %d), %d points, "
                  "%.1f ms", self.memory_budget, self.memory_model, final.peak_bytes, torch_sim.peak_bytes,
                  self.last.lowest_peak_bytes, final.recompute_flops, "ps" if self.cost == "time" else "flops",
                  torch_sim.recompute_flops, search.points, self.last.seconds * 1e3)
        return self.last

    def _note_roles_differ(self, inputs: PlanInputs, under_roles: tuple[int, int], as_made: tuple[int, int]) -> None:
        """Log where torch's default decision simulates differently under the
        plan's roles: expected where it recomputes what the roles keep saved
        (a random op, a reader of mutated state); anything else is the roles
        and the memory model disagreeing."""
        if under_roles == as_made:
            return
        chosen = inputs.decision
        unsafe = recomputed_hazards(chosen.decision, chosen.saved, inputs.num_fwd_outputs, inputs.unsafe)
        (log.debug if unsafe else log.warning)(
            "plan: torch's default decision simulates to %s under the plan's roles, %s as torch made it%s",
            under_roles, as_made,
            f" (it recomputes {', '.join(h.name for h in unsafe)}, which the plan keeps saved)" if unsafe else "")

    def _certify(self, prob: PlanProblem, current: bytes, search: _Search
                 ) -> tuple[bytes, exact_solver.Certificate | None]:
        """The exact solver after the search (one budget per graph)."""
        if len(search.groups) > 1:
            log.warning("plan: the exact solver plans one budget per graph; %d region budgets were planned "
                        "by the search alone (no bound)", len(search.groups))
            return current, None
        cert = exact_solver.certify(prob, current, limit=None if self.memory_budget == 0 else search.peak_limit,
                                    time_limit=self.exact_time_limit,
                                    lowest_mask=self.last_frontier.masks[0] if self.last_frontier is not None
                                    else None, take="best" if self.solver == "exact" else "proven")
        if cert.why_not is not None:
            log.warning("plan: no exact bound for this graph: %s", cert.why_not)
        return cert.mask, cert

    def check_skipped(self, nodes: int) -> str | None:
        """Why inductor's check cannot run on a graph of ``nodes`` nodes
        within ``check_time_limit`` (None: it can)."""
        if self.check_time_limit == 0.0:
            return ("inductor is not asked (check_time_limit=0, the default; a positive check_time_limit, e.g. "
                    f"{ASK_TIME_LIMIT:g} s, asks it about the plan's candidates)")
        fits = asks_within(self.check_time_limit, nodes)
        if fits >= 2:
            return None
        return (f"check_time_limit={self.check_time_limit:g} s fits {fits} ask(s) of this {nodes}-node "
                f"graph; 2 are needed (torch's decision and one candidate)")


def _safe_seeds(inputs: PlanInputs, raw: dict[float, list[int]]) -> tuple[dict[float, list[int]], list[int]]:
    """torch's saved sets as the plan may build them -- each with what it
    recomputes unsafely kept saved (:func:`fxcut.solve.hazards.keep_saved`,
    as the route keeps it) -- and the values so kept, by node index."""
    if not inputs.unsafe:
        return raw, []
    decision = inputs.decision.decision
    out: dict[float, list[int]] = {}
    kept: set[int] = set()
    for b, saved in raw.items():
        out[b] = keep_saved(decision, saved, inputs.num_fwd_outputs, inputs.unsafe)
        kept.update(set(out[b]) - set(saved))
    return out, sorted(kept)


def _built(inputs: PlanInputs, mask: bytes) -> list[int]:
    """The saved node indices of ``mask`` as the route builds them: what
    the plan's roles keep saved (a random op, a reader of mutated state)
    included, in graph order."""
    saved = [i for i, m in enumerate(mask) if m]
    if not inputs.unsafe:
        return saved
    safe = keep_saved(inputs.decision.decision, saved, inputs.num_fwd_outputs, inputs.unsafe)
    if len(safe) != len(saved):
        log.debug("plan: kept saved what the plan's pick would recompute unsafely: %s",
                  ", ".join(inputs.decision.arrays.name(i) for i in safe[len(saved):]))
    return sorted(safe)


def _check_unused_check_options(check: str | None, memory_model: str, **given: object) -> None:
    """The check's options where the plan never asks inductor (``check``
    None: the unfused memory models' default, or asked for): a ValueError
    naming the first one given, rather than an option silently unused."""
    for name, value in given.items():
        if value is not None and check is None:
            why = "check=None" if memory_model == "inductor" else f"memory_model={memory_model!r}"
            raise ValueError(f"{name} bounds inductor's check of the plan, which never runs with {why}; "
                             f"drop {name} (it applies to memory_model='inductor' with its default check)")


def _check_check(check: object, memory_model: str) -> str | None:
    if check == "default":
        return "inductor" if memory_model == "inductor" else None
    if check not in (None, "inductor"):
        raise ValueError(f"check must be None or 'inductor', got {check!r}")
    return check if check is None else "inductor"


class _Search:
    """One plan's search, region by region, and the check's pick where it runs."""

    def __init__(self, planner: PeakPlanner, prob: PlanProblem, inputs: PlanInputs, seeds: dict[float, list[int]],
                 seed_masks: list[bytes]) -> None:
        self.planner, self.prob, self.inputs = planner, prob, inputs
        self.seeds, self.seed_masks = seeds, seed_masks
        self.lowest = prob.simulate(seed_masks[0]).peak_bytes
        self.points, self.exact, self.timed_out, self.peak_limit = 0, True, False, 0
        self.per_region: dict[float, int] = {}
        self.report: CheckReport | None = None
        self.groups: list[tuple[float, list[int]]] = []

    def run(self, region_budget: Sequence[float | None]) -> bytes:
        """The saved mask after planning every region group in turn."""
        planner, prob = self.planner, self.prob
        self.groups = groups = region_groups(prob, planner.memory_budget, region_budget)
        current = self.seed_masks[0]
        checking = planner.check == "inductor" and len(groups) == 1
        limit_each = planner.time_limit / max(1, len(groups))
        work_each = max(1, planner.max_work // max(1, len(groups)))
        for budget, members in groups:
            skipped = planner.check_skipped(len(prob.arrays)) if checking else None
            if skipped is not None and budget > 0.0:
                # b > 0 without inductor's check: the same pick among torch's decisions, on the model's
                # peaks -- no search to run (the model's lowest, b=0's plan, is below all of them)
                log.debug("plan: inductor not asked: %s; torch's decisions at budget %g on the model", skipped,
                          budget)
                current, self.report = _Checked(self, _NO_FRONTIER, budget).pick(skipped=skipped)
                self.per_region[budget] = prob.simulate(current).peak_bytes
                continue
            current = self._search_group(budget, members, current, checking, limit_each, work_each)
        return current

    def _search_group(self, budget: float, members: list[int], current: bytes, checking: bool,
                      time_limit: float, max_work: int) -> bytes:
        planner, prob = self.planner, self.prob
        roles = roles_for(prob.roles, members, current)
        front = prob.frontier(self.seed_masks + [current], roles=roles, exact_max_free=planner.exact_max_candidates,
                              max_work=max_work, time_limit=time_limit)
        self.timed_out = self.timed_out or front.timed_out
        base = prob.simulate(current, roles).peak_bytes
        k = pick(front, budget, base)
        self.peak_limit = limit_of(front, budget, base)
        mask = front.masks[k]
        if checking:
            mask, self.report = _Checked(self, front, budget).pick(lowest=mask)
        self.lowest = min(self.lowest, front.peak_bytes[0])
        self.points += len(front.peak_bytes)
        self.exact = self.exact and front.exact
        self.per_region[budget] = (front.peak_bytes[k] if mask is front.masks[k]
                                   else prob.simulate(mask, roles).peak_bytes)
        planner.last_frontier = front
        return mask


class _Checked:
    """The saved mask :func:`fxcut.solve.check.checked_pick` picks among a
    frontier's points and torch's decisions at the seed budgets (1.0: its
    default), on inductor's own peaks where it is asked.  Where it cannot be
    asked (``skipped``: the time budget fits no candidate besides torch's;
    inductor fails on one: logged), the same rule picks among torch's
    decisions on the model's peaks, and at b=0 the plan is ``lowest``, the
    model's lowest point (below all of torch's decisions by the model)."""

    def __init__(self, search: _Search, front: Frontier, budget: float) -> None:
        self.planner, self.prob, self.front, self.budget = search.planner, search.prob, front, budget
        self.inputs, self.seeds = search.inputs, search.seeds
        self.fits = asks_within(self.planner.check_time_limit, len(self.prob.arrays))
        self.candidates: list[bytes] = []
        self.torch: list[TorchDecision] = []
        self.saved_bytes: list[int] = []
        self.first: dict[bytes, int] = {}

    def _candidates(self) -> None:
        """The frontier's points, then torch's decisions, one per saved set,
        each under the largest seed budget choosing it, simulated."""
        n = len(self.prob.arrays)
        torch_masks: dict[bytes, float] = {}
        for b, saved in sorted(self.seeds.items(), key=lambda item: -item[0]):
            torch_masks.setdefault(saved_mask(n, saved), b)
        self.candidates = list(self.front.masks) + list(torch_masks)
        sims = [self.prob.simulate(m) for m in self.candidates]
        self.torch = [TorchDecision(b, sim.peak_bytes, sim.recompute_flops)
                      for b, sim in zip(torch_masks.values(), sims[len(self.front.masks):])]
        self.saved_bytes = [sim.saved_bytes for sim in sims]
        for j, m in enumerate(self.candidates):
            self.first.setdefault(m, j)

    def same(self, k: int) -> int:
        return self.first[self.candidates[k]]

    def pick(self, *, lowest: bytes | None = None, skipped: str | None = None) -> tuple[bytes, CheckReport]:
        why = skipped if skipped is not None else self.planner.check_skipped(len(self.prob.arrays))
        if why is None and self.inputs.ask is None:
            why = self.inputs.no_ask or "inductor cannot be asked about this graph"
        if why is not None and self.budget == 0.0 and lowest is not None:
            log.debug("plan: inductor not asked: %s; the memory model's lowest", why)
            return lowest, CheckReport(skipped=why, budget_asks=self.fits)
        self._candidates()
        if why is not None:
            log.debug("plan: inductor not asked: %s", why)
            return self._on_the_model(why, CheckReport(skipped=why, budget_asks=self.fits), lowest)
        return self._asked(lowest)

    def _on_the_model(self, why: str, report: CheckReport, lowest: bytes | None) -> tuple[bytes, CheckReport]:
        if self.budget == 0.0 and lowest is not None:
            return lowest, report
        j, picked = checked_pick(self.front, self.torch, self.budget, None, same=self.same,
                                 saved_bytes=self.saved_bytes, holds_saved=self.inputs.holds_saved)
        picked.skipped, picked.failed = report.skipped, report.failed
        picked.budget_asks, picked.seconds = report.budget_asks, report.seconds
        log.debug("plan: %s; torch's decision at budget %g picked on the model", why, picked.picked_torch_budget)
        return self.candidates[j], picked

    def _asked(self, lowest: bytes | None) -> tuple[bytes, CheckReport]:
        planner, n, ask = self.planner, len(self.prob.arrays), self.inputs.ask
        assert ask is not None
        t0 = time.perf_counter()

        def peak_of(j: int) -> int:
            return max(ask([i for i in range(n) if self.candidates[j][i]]))

        def keep_asking() -> bool:
            return time.perf_counter() - t0 <= OVERRUN * planner.check_time_limit

        try:
            j, report = checked_pick(self.front, self.torch, self.budget, peak_of,
                                     max_asks=min(planner.max_checks, self.fits - 1), keep_asking=keep_asking,
                                     same=self.same, saved_bytes=self.saved_bytes,
                                     holds_saved=self.inputs.holds_saved,
                                     settle_asks=min(planner.max_checks, SETTLE_BUDGETS * self.fits))
        except Exception as e:  # inductor could not lower a candidate  # noqa: BLE001
            log.warning("plan: inductor could not be asked (%s: %s); %s", type(e).__name__,
                        str(e).splitlines()[0] if str(e) else "",
                        "the memory model's lowest stands" if self.budget == 0.0 else
                        "torch's decisions are compared on the memory model")
            return self._on_the_model("inductor failed", CheckReport(
                failed=f"{type(e).__name__}: {e}", budget_asks=self.fits, seconds=time.perf_counter() - t0), lowest)
        report.budget_asks = self.fits
        report.seconds = time.perf_counter() - t0
        log.debug("plan: inductor's peaks of %d candidates %s, limit %d, picked %d (%.1f s)", len(report.asked),
                  report.asked, report.limit, j, report.seconds)
        return self.candidates[j], report


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


__all__ = ["COSTS", "MAX_TIME_LIMIT", "PeakPlanner", "PlanChoice", "PlanInputs", "SOLVERS"]

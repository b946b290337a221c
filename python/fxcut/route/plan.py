"""The partition's :class:`Plan`: everything decided about a call before the graph is lowered.

:func:`make_plan` validates the call (the module, ``num_fwd_outputs``, the
static indices, the nodes), reads the running torch's config once through
the call's :class:`~fxcut.torchrules.adapter.TorchAdapter` -- the
MinCutOptions, the memory budget (config, legacy marker, region annotation)
and its solver -- and plans torch's dead-code elimination and CSE (with
``num_fwd_outputs`` as the partitioner runs it) without writing anything.

The partition (:func:`fxcut.min_cut_rematerialization_partition`) makes one
plan and hands it down the route lower -> decide -> build; explain, the
HTML page and :func:`fxcut.memory_pareto` read the same plan, so they look
at the graph the partitioner decides on, under the same budget.

``Plan.objective``: None is torch's exact decision; a
:class:`~fxcut.solve.peakplan.PeakPlanner` is fxcut's peak-aware plan, which
the route's decide step runs itself; anything else is an :class:`Objective`,
a user's choice of saved values from the decision the core made.
``Plan.safe_budget`` (``safe_budget=True`` or ``FXCUT_SAFE_BUDGET=1``):
torch's decision, except that a value torch would recompute although
recomputing it draws other random numbers or reads state the step mutates
is kept saved (:mod:`fxcut.route.safety`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch.fx as fx

from ..solve.budget import BudgetDecision, BudgetInputs, budget_pass, check_budget
from ..solve.core import MinCutOptions
from ..solve.peakplan import PeakPlanner
from ..torchrules.adapter import Estimator, LoweredGraph, Preparation, RuntimeEstimates, Solver, TorchAdapter
from ..torchrules.versions import Rules


class Objective(Protocol):
    """What a non-default plan optimises instead of torch's decision."""

    def choose_saved(self, plan: Plan, decision: BudgetDecision[LoweredGraph]) -> list[int]:
        """The node indices to save for the backward.

        ``decision``: the core's decision under ``plan`` (its
        ``decision.arrays`` is the lowered graph: indices are positions in
        ``decision.arrays.nodes``; ``decision.saved`` is torch's choice,
        ``decision.decision.node_class`` / ``ban_reason`` / ``weight`` the
        classification).  Called once per graph, before anything is
        written; the returned indices must name nodes the forward computes
        (the build raises ValueError naming any that do not).  Must not
        modify the graph.
        """
        ...


@dataclass
class Plan:
    """One partition call, decided up front (nothing written yet)."""

    joint_module: fx.GraphModule
    num_fwd_outputs: int
    #: ``static_lifetime_input_indices`` as a list of ints
    static_indices: list[int]
    #: the running torch, as this call asks it (its rules: the nearest release's on an untested torch)
    torch: TorchAdapter
    options: MinCutOptions
    #: the resolved activation memory budget, in [0, 1]
    budget: float
    #: ``config.activation_memory_budget_solver`` (or the caller's)
    solver: Solver
    #: ``config.activation_memory_budget_runtime_estimator`` (checked when the budget is below 1)
    estimator: Estimator
    #: region budget values and the nodes without one (checked once the
    #: forward is known)
    regions: list[float]
    unannotated: list[fx.Node]
    #: dead-code elimination and CSE, planned as the partitioner runs them
    prep: Preparation
    #: None: torch's exact decision; a PeakPlanner: fxcut's plan; else what chooses the saved values
    objective: PeakPlanner | Objective | None = None
    #: keep saved what torch's decision would recompute unsafely (random
    #: draws, reads of mutated state): a deviation from torch's decision
    safe_budget: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def graph(self) -> fx.Graph:
        return self.joint_module.graph

    @property
    def rules(self) -> Rules:
        """The running torch's rules (:attr:`torch`'s)."""
        return self.torch.rules

    def estimates(self) -> RuntimeEstimates:
        """A runtime-estimate cache under the plan's estimator."""
        return self.torch.runtime_estimates(self.estimator)

    def budget_inputs(self, lowered: LoweredGraph, estimates: RuntimeEstimates | None = None) -> BudgetInputs:
        """What the budget pass reads of torch for the plan's graph lowered as ``lowered``."""
        return self.torch.budget_inputs(lowered, self.graph, solver=self.solver,
                                        estimates=estimates if estimates is not None else self.estimates(),
                                        static_lifetime_input_indices=self.static_indices)

    def budget_pass(self, lowered: LoweredGraph, budget: float | None = None,
                    estimates: RuntimeEstimates | None = None,
                    inputs: BudgetInputs | None = None) -> BudgetDecision[LoweredGraph]:
        """torch's budget pass over the plan's graph lowered as ``lowered``,
        under the plan's options, solver, estimator and rules (all checked
        when the plan was made); ``budget``: another budget than the plan's
        (in [0, 1]: the caller checked it), for the budget sweeps;
        ``inputs``: the pass's torch inputs made once for several passes."""
        return budget_pass(lowered, self.budget if budget is None else budget, num_fwd_outputs=self.num_fwd_outputs,
                           static_lifetime_input_indices=self.static_indices, options=self.options,
                           inputs=inputs if inputs is not None else self.budget_inputs(lowered, estimates))


def make_plan(
    joint_module: fx.GraphModule,
    torch: TorchAdapter,
    *,
    num_fwd_outputs: int,
    static_lifetime_input_indices: Any = None,
    objective: PeakPlanner | Objective | None = None,
    budget: float | None = None,
    solver: Solver | None = None,
    safe_budget: bool | None = None,
) -> Plan:
    """Validate one partition call and plan it (reads the config now, as
    torch does at call time; writes nothing).  ``torch``: the running torch
    as the guard looked it up; every step after the plan reads
    ``plan.torch``.  ``budget`` / ``solver``: override the resolved budget
    and the configured solver (the Pareto sweep's budgets).
    ``safe_budget``: :func:`safe_budget_mode`'s argument (None:
    ``FXCUT_SAFE_BUDGET`` decides; a plan with an objective never reads it)."""
    check_call(joint_module, num_fwd_outputs, objective)
    safe = safe_budget_mode(safe_budget) if objective is None or safe_budget is not None else False
    static_indices = check_static_indices(static_lifetime_input_indices)
    torch.check_graph(joint_module.graph)
    torch.check_offloading()  # an import that fails, fails before any write
    resolved, regions, unannotated = torch.resolve_budget(joint_module)
    if objective is not None:
        # The objective owns the budget (region budgets included): the core
        # makes torch's default decision, which the objective starts from.
        resolved, regions, unannotated = 1.0, [], []
    resolved = check_budget(resolved) if budget is None else check_budget(budget, "budget")
    solver = torch.config("activation_memory_budget_solver") if solver is None else solver
    estimator = torch.config("activation_memory_budget_runtime_estimator")
    if 0.0 < resolved < 1.0 or objective is not None:  # an objective may run budget passes at any budget
        torch.check_budget_settings(solver, estimator)
    options = torch.options()
    prep = torch.prepare(joint_module.graph, num_fwd_outputs)
    return Plan(joint_module, num_fwd_outputs, static_indices, torch, options, resolved, solver, estimator, regions,
                unannotated, prep, objective, safe)


def check_call(joint_module: object, num_fwd_outputs: object, objective: object) -> None:
    """The call's own arguments, before anything reads the graph."""
    if not isinstance(joint_module, fx.GraphModule):
        raise TypeError(
            f"joint_module must be a torch.fx.GraphModule, got {type(joint_module).__name__}"
        )
    if isinstance(num_fwd_outputs, bool) or not isinstance(num_fwd_outputs, int):
        raise TypeError(f"num_fwd_outputs must be an int, got {num_fwd_outputs!r}")
    if objective is not None and not isinstance(objective, PeakPlanner) and not callable(
            getattr(objective, "choose_saved", None)):
        raise TypeError(f"objective must have a choose_saved(plan, decision) method, got {objective!r}")


SAFE_BUDGET_ENV = "FXCUT_SAFE_BUDGET"


def safe_budget_mode(safe_budget: bool | None = None) -> bool:
    """``safe_budget`` as given (True/False), else ``FXCUT_SAFE_BUDGET``
    (``1``/``true``/``on``/``yes``; ``0``/``false``/``off``/``no``/unset).
    Anything else is a ValueError naming the option."""
    if safe_budget is not None:
        if not isinstance(safe_budget, bool):
            raise ValueError(f"safe_budget must be True, False or None, got {safe_budget!r}")
        return safe_budget
    value = os.environ.get(SAFE_BUDGET_ENV, "").strip().lower()
    if value in ("", "0", "false", "off", "no"):
        return False
    if value in ("1", "true", "on", "yes"):
        return True
    raise ValueError(f"{SAFE_BUDGET_ENV}={os.environ[SAFE_BUDGET_ENV]!r}: expected 1 or 0 (true/false, on/off)")


def check_static_indices(indices: Any) -> list[int]:
    """``static_lifetime_input_indices`` as a list of ints (out-of-range
    values are kept: torch ignores them, and so does the decision)."""
    if indices is None:
        return []
    try:
        values = list(indices)
    except TypeError:
        raise TypeError(
            f"static_lifetime_input_indices must be a list of ints, got {type(indices).__name__}"
        ) from None
    for k, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(
                f"static_lifetime_input_indices[{k}] = {v!r} is not an int (a primal input's position)"
            )
    return values


__all__ = ["Objective", "Plan", "SAFE_BUDGET_ENV", "check_call", "check_static_indices", "make_plan",
           "safe_budget_mode"]

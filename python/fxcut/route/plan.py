"""The partition's :class:`Plan`: everything decided about a call before the graph is lowered.

:func:`make_plan` validates the call (the module, ``num_fwd_outputs``, the
static indices, the nodes), reads the running torch's rules
(:mod:`fxcut.torchrules.versions`) and config once -- the MinCutOptions, the memory
budget (config, legacy marker, region annotation) and its solver -- and plans
torch's dead-code elimination and CSE (:mod:`fxcut.torchrules.prepare`, with
``num_fwd_outputs`` as the partitioner runs it) without writing anything.

The partition (:func:`fxcut.min_cut_rematerialization_partition`) makes one
plan and hands it down the route lower -> core -> build; explain, the HTML
page and :func:`fxcut.memory_pareto` read the same plan, so they look at the
graph the partitioner decides on, under the same budget.

``Plan.objective``: None is torch's exact decision.  Anything else is an
:class:`Objective` that chooses the saved values from the decision the core
made (the peak-aware planner of issue 15 is one).  ``Plan.safe_budget``
(``safe_budget=True`` or ``FXCUT_SAFE_BUDGET=1``): torch's decision, except
that a value torch would recompute although recomputing it draws other
random numbers or reads state the step mutates is kept saved
(:mod:`fxcut.route.safety`).
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch.fx as fx

from .._numbers import check_number
from ..solve.arrays import KIND_OF_OP, GraphArrays
from ..solve.budget import (BudgetDecision, Estimator, RuntimeEstimates, Solver, budget_pass, check_budget,
                            check_estimator, check_solver, legacy_budget, region_budgets)
from ..solve.core import MinCutOptions
from ..torchrules import prepare
from ..torchrules.gate import NODE_READERS, TorchChanged
from ..torchrules.ops import TargetFacts, dce_impure_random, default_facts
from ..torchrules.versions import Rules, rules_or_nearest



class Objective(Protocol):
    """What a non-default plan optimises instead of torch's decision."""

    def choose_saved(self, plan: Plan, decision: BudgetDecision) -> list[int]:
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
    #: the running torch's rules (the nearest release's on an untested torch)
    rules: Rules
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
    prep: prepare.Preparation
    facts: TargetFacts
    impure_random: bool
    #: None: torch's exact decision; else what chooses the saved values
    objective: Objective | None = None
    #: keep saved what torch's decision would recompute unsafely (random
    #: draws, reads of mutated state): a deviation from torch's decision
    safe_budget: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def graph(self) -> fx.Graph:
        return self.joint_module.graph

    def estimates(self) -> RuntimeEstimates:
        """A runtime-estimate cache under the plan's estimator."""
        return RuntimeEstimates(self.estimator)

    def budget_pass(self, arrays: GraphArrays, budget: float | None = None,
                    estimates: RuntimeEstimates | None = None) -> BudgetDecision:
        """torch's budget pass over the plan's graph lowered as ``arrays``,
        under the plan's options, solver, estimator and rules (all checked
        when the plan was made); ``budget``: another budget than the plan's
        (in [0, 1]: the caller checked it), for the budget sweeps."""
        return budget_pass(self.graph, self.budget if budget is None else budget, arrays=arrays,
                           num_fwd_outputs=self.num_fwd_outputs, static_lifetime_input_indices=self.static_indices,
                           options=self.options, solver=self.solver, rules=self.rules,
                           estimates=estimates if estimates is not None else self.estimates())


def make_plan(
    joint_module: fx.GraphModule,
    *,
    num_fwd_outputs: int,
    static_lifetime_input_indices: Any = None,
    objective: Objective | None = None,
    budget: float | None = None,
    solver: Solver | None = None,
    rules: Rules | None = None,
    safe_budget: bool | None = None,
) -> Plan:
    """Validate one partition call and plan it (reads the config now, as
    torch does at call time; writes nothing).  ``budget`` / ``solver``:
    override the resolved budget and the configured solver (the Pareto
    sweep's budgets).  ``rules``: the running torch's rules, as the guard
    looked them up (looked up here when None); every step after the plan
    reads ``plan.rules``.  ``safe_budget``: :func:`safe_budget_mode`'s
    argument (None: ``FXCUT_SAFE_BUDGET`` decides)."""

    if not isinstance(joint_module, fx.GraphModule):
        raise TypeError(
            f"joint_module must be a torch.fx.GraphModule, got {type(joint_module).__name__}"
        )
    if isinstance(num_fwd_outputs, bool) or not isinstance(num_fwd_outputs, int):
        raise TypeError(f"num_fwd_outputs must be an int, got {num_fwd_outputs!r}")
    if objective is not None and not callable(getattr(objective, "choose_saved", None)):
        raise TypeError(f"objective must have a choose_saved(plan, decision) method, got {objective!r}")
    safe = safe_budget_mode(safe_budget)
    static_indices = check_static_indices(static_lifetime_input_indices)
    graph = joint_module.graph
    check_nodes(graph)
    if rules is None:
        rules = rules_or_nearest()
    if rules.config("enable_activation_offloading"):
        offloading_pass(rules)  # an import that fails, fails before any write
    resolved, regions, unannotated = resolve_budget(joint_module, rules)
    if objective is not None:
        # The objective owns the budget (region budgets included): the core
        # makes torch's default decision, which the objective starts from.
        resolved, regions, unannotated = 1.0, [], []
    resolved = check_budget(resolved) if budget is None else check_budget(budget, "budget")
    solver = rules.config("activation_memory_budget_solver") if solver is None else solver
    estimator = rules.config("activation_memory_budget_runtime_estimator")
    if 0.0 < resolved < 1.0 or objective is not None:  # an objective may run budget passes at any budget
        check_solver(solver)
        check_estimator(estimator)
    options = MinCutOptions.from_config(rules)
    facts = default_facts()
    impure_random = dce_impure_random()
    prep = prepare.plan(graph, facts, cse=bool(rules.config("cse")), impure_random=impure_random,
                        rules=rules, num_fwd_outputs=num_fwd_outputs)
    return Plan(joint_module, num_fwd_outputs, static_indices, rules, options, resolved, solver, estimator, regions,
                unannotated, prep, facts, impure_random, objective, safe)


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


def resolve_budget(joint_module: fx.GraphModule, rules: Rules) -> tuple[float, list[float], list[fx.Node]]:
    """The memory budget as torch resolves it, in increasing precedence:
    the config, the first float ``meta["memory_budget"]``, a region
    annotation.  Also the region values and unannotated nodes, for
    :func:`fxcut.solve.budget.check_regions` once the forward is known."""
    budget = rules.config("activation_memory_budget")
    legacy = legacy_budget(joint_module.graph)
    if legacy is not None:
        budget = legacy
    regions, unannotated = region_budgets(joint_module, rules)
    for value in regions:
        try:
            check_number("region budget", value, 0.0, 1.0)
        except ValueError:
            raise ValueError(
                f"torch.autograd.graph.region_activation_memory_budget: the region budget {value!r} "
                f"(meta['custom'] of node {_annotated_with(joint_module, value)!r}) must be a number "
                "in [0, 1]"
            ) from None
    if regions:
        budget = regions[0]
    return budget, regions, unannotated


def _annotated_with(joint_module: fx.GraphModule, value: Any) -> str:
    """The name of the first node annotated with region budget ``value``."""
    from torch.fx.traceback import _get_memory_budget_annotation

    for sub in joint_module.modules():
        if isinstance(sub, fx.GraphModule):
            for node in sub.graph.nodes:
                b = _get_memory_budget_annotation(node)
                if b is value or b == value:
                    return str(node.name)
    return "?"


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


def offloading_pass(rules: Rules) -> Any:
    """torch's activation offloading pass (``config.enable_activation_offloading``)."""
    module = importlib.import_module(rules.offloading_module)
    pass_: Any = module.enable_activation_offloading
    return pass_


def check_nodes(graph: fx.Graph) -> None:
    """One pass over the nodes before anything else: a graph that ends in
    an output node, fx ops only, callable call_function targets, and unique
    names (module extraction matches nodes by name; two nodes of one name
    would be silently confused -- torch's lint catches this in its DCE).
    A node of a subclass of ``fx.Node`` is a gap (:class:`TorchChanged`)."""
    names: set[str] = set()
    last: fx.Node | None = None
    kinds = KIND_OF_OP
    node_cls = fx.Node
    for i, node in enumerate(graph.nodes):
        if node.__class__ is not node_cls:
            # The readers (C and Python) know fx.Node's own layout only: a gap, torch decides.
            raise TorchChanged(NODE_READERS, TypeError(
                f"node {i} ({node.name!r}) is a {type(node).__qualname__}, a subclass of torch.fx.Node, "
                "whose layout fxcut's node readers do not know"))
        op = node.op
        if op not in kinds:
            raise ValueError(
                f"node {i} ({node.name!r}) has op {op!r}, which is not an fx op "
                f"(one of {', '.join(kinds)})"
            )
        if op == "call_function" and not callable(node.target):
            raise TypeError(
                f"node {i} ({node.name!r}) is a call_function whose target {node.target!r} is not callable"
            )
        if node.name in names:
            raise ValueError(f"node name {node.name!r} is used by two nodes of the graph")
        names.add(node.name)
        last = node
    if last is None:
        raise ValueError("joint_module's graph is empty: a joint graph has placeholders and an output node")
    if last.op != "output":
        raise ValueError(f"joint_module's graph does not end in an output node (its last node is {last.name!r})")


__all__ = ["Objective", "Plan", "SAFE_BUDGET_ENV", "check_nodes", "check_static_indices", "make_plan",
           "offloading_pass", "resolve_budget", "safe_budget_mode"]

"""Decisions on a bare graph, for tools, benchmarks and tests: the running torch looked up per call.

The library decides inside a partition call, through the adapter its guard
made (:mod:`fxcut.route`).  A tool that decides a graph outside a partition
(a benchmark timing one stage, a test pinning one rule) asks here: each
function looks the running torch up itself (:func:`fxcut.torchrules.adapter.running_torch`)
unless handed an adapter, lowers the graph as it is (no DCE/CSE planned),
and runs the solvers over it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch.fx as fx

from ..solve.budget import BudgetDecision, budget_pass, check_budget
from ..solve.core import Decision, MinCutOptions, decide
from ..solve.memory import MemoryEstimate, ModelInputs, simulate
from ..torchrules.adapter import LoweredGraph, RuntimeEstimates, Solver, TorchAdapter, running_torch


def torch_now() -> TorchAdapter:
    """The running torch (its release's rules; the nearest on an untested torch)."""
    return running_torch()[0]


def lower_graph(graph: fx.Graph, torch: TorchAdapter | None = None) -> LoweredGraph:
    """The graph array of ``graph`` as it is, with everything the decision reads."""
    return (torch or torch_now()).lower(graph)


def default_options(torch: TorchAdapter | None = None) -> MinCutOptions:
    """The decision's options from torch's config, now."""
    return (torch or torch_now()).options()


def decide_graph(lowered: LoweredGraph, *, num_fwd_outputs: int, options: MinCutOptions | None = None,
                 static_lifetime_input_indices: Sequence[int] = (), torch: TorchAdapter | None = None,
                 **kwargs: Any) -> Decision[LoweredGraph]:
    """One cut of ``lowered`` under ``options`` (torch's config's when None)."""
    return decide(lowered, num_fwd_outputs=num_fwd_outputs, options=options or default_options(torch),
                  static_lifetime_input_indices=static_lifetime_input_indices, **kwargs)


def decide_with_budget(graph: fx.Graph, budget: float, *, num_fwd_outputs: int, arrays: LoweredGraph,
                       static_lifetime_input_indices: Sequence[int] | None = None,
                       options: MinCutOptions | None = None, estimates: RuntimeEstimates | None = None,
                       solver: Solver | None = None, torch: TorchAdapter | None = None
                       ) -> BudgetDecision[LoweredGraph]:
    """torch's budget pass over ``graph`` lowered as ``arrays`` (one
    lowering serves every budget), the budget, solver and estimator checked
    here; ``options``, ``solver`` and the estimator from torch's config
    unless given; ``estimates``: a runtime cache to share across calls."""
    torch = torch or torch_now()
    budget = check_budget(budget)
    solver = torch.config("activation_memory_budget_solver") if solver is None else solver
    if estimates is None:
        estimates = torch.runtime_estimates(torch.config("activation_memory_budget_runtime_estimator"))
    if 0.0 < budget < 1.0:
        torch.check_budget_settings(solver, estimates.estimator)
    statics = list(static_lifetime_input_indices or [])
    inputs = torch.budget_inputs(arrays, graph, solver=solver, estimates=estimates,
                                 static_lifetime_input_indices=statics)
    return budget_pass(arrays, budget, num_fwd_outputs=num_fwd_outputs, static_lifetime_input_indices=statics,
                       options=options or torch.options(), inputs=inputs)


def model_inputs(lowered: LoweredGraph, model: str = "unfused", torch: TorchAdapter | None = None) -> ModelInputs:
    """What the memory model reads of ``lowered`` (storages, flops, marks, inductor's kinds)."""
    return (torch or torch_now()).model_inputs(lowered, model)


def simulate_saved(lowered: LoweredGraph, saved: Sequence[int | fx.Node], num_fwd_outputs: int, *,
                   model: str | ModelInputs = "unfused", timeline: bool = False,
                   torch: TorchAdapter | None = None) -> MemoryEstimate:
    """The memory model of the decision saving ``saved`` (node indices or
    nodes of ``lowered``)."""
    indices = [lowered.index[x] if isinstance(x, fx.Node) else x for x in saved]
    inputs = model if isinstance(model, ModelInputs) else model_inputs(lowered, model, torch)
    return simulate(lowered, indices, num_fwd_outputs, inputs, timeline=timeline)


__all__ = ["decide_graph", "decide_with_budget", "default_options", "lower_graph", "model_inputs",
           "simulate_saved", "torch_now"]

"""The activation memory budget: torch's ``choose_saved_values_set``, decided by fxcut.

With ``torch._functorch.config.activation_memory_budget`` (or a node's
``meta["memory_budget"]``, or a ``region_activation_memory_budget``
annotation) below 1, torch trades recomputation for memory:

1. budget 0 saves the inputs and nothing else;
2. otherwise the plain min-cut; budget 1 stops there, and so does a cut
   that saves no more than the inputs;
3. the "more aggressive" and "aggressive" cuts (fewer bans), each taken when
   its memory ratio is under the budget;
4. else a 0-1 knapsack over the nodes still banned and needed by the
   backward: which to keep saved so that the most runtime stays saved within
   the budget; the others are un-banned (``dont_ban``) for a last cut.

Steps 1-3 and the candidate list (order and ties as torch forms them) run
in C over one lowered graph (:func:`fxcut.solve.core.budget_plan`); the runtimes of
the candidates come from torch's own per-node ``estimate_runtime`` (facts
about ops, like sizes; memoised per op signature for ``"flops"``); the
knapsack runs in C (:mod:`fxcut.solve.knapsack`); the last cut reuses the same
graph array.  :func:`decide_plan` is the partition route's decision step
(the plan's budget, options and solver); the budget sweep is
:mod:`fxcut.pareto`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

import torch
import torch.fx as fx
from torch._functorch import config
from torch.utils._mode_utils import no_dispatch
from torch.utils._ordered_set import OrderedSet

import fxcut._C as _C
from .._numbers import check_number
from .core import Decision, MinCutOptions, budget_plan, decide
from .knapsack import SOLVERS, KnapsackChoice, solve
from .arrays import GraphArrays
from ..torchrules.versions import Rules, rules_or_nearest

if TYPE_CHECKING:  # both import inductor (seconds): at run time only when a budget below 1 needs them
    from torch._functorch.partitioners import NodeInfo
    from torch._inductor.custom_graph_pass import CustomKnapsackSolver, CustomRuntimeEstimator

#: ``activation_memory_budget_solver``: a name (fxcut's solvers and torch's) or torch's custom solver.
Solver: TypeAlias = "str | CustomKnapsackSolver"
#: ``activation_memory_budget_runtime_estimator``: a name in :data:`ESTIMATORS` or torch's custom estimator.
Estimator: TypeAlias = "str | CustomRuntimeEstimator"

STAGES: dict[int, str] = {
    _C.STAGE_NO_BACKWARD: "no_backward",
    _C.STAGE_INPUTS: "inputs",
    _C.STAGE_MIN_CUT: "min_cut",
    _C.STAGE_MORE_AGGRESSIVE: "more_aggressive",
    _C.STAGE_AGGRESSIVE: "aggressive",
    _C.STAGE_NO_CANDIDATES: "no_candidates",
    _C.STAGE_KNAPSACK: "knapsack",
}

ESTIMATORS: tuple[str, ...] = ("flops", "profile", "testing")
#: Solvers torch knows that fxcut hands back to torch's own code.
_TORCH_SOLVERS = ("dynamic_memory_budget_dp",)


# --------------------------------------------------------------------------- configuration


def check_budget(budget: object, name: str = "activation_memory_budget") -> float:
    """The budget as a float; ValueError naming it (``name``) unless it is
    a number in [0, 1] (:func:`fxcut._numbers.check_number`)."""
    return check_number(name, budget, 0.0, 1.0)


def check_solver(solver: object) -> None:
    # Inductor's module (seconds to import): only when a budget below 1 is checked.
    from torch._inductor.custom_graph_pass import CustomKnapsackSolver

    if isinstance(solver, CustomKnapsackSolver):
        return
    if isinstance(solver, str) and (solver in SOLVERS or solver in _TORCH_SOLVERS):
        return
    known = ", ".join(repr(s) for s in (*SOLVERS, *_TORCH_SOLVERS))
    raise ValueError(
        f"unknown activation_memory_budget_solver {solver!r}; known: {known}, or a CustomKnapsackSolver"
    )


def check_estimator(estimator: object) -> None:
    from torch._inductor.custom_graph_pass import CustomRuntimeEstimator  # inductor: see check_solver

    if isinstance(estimator, CustomRuntimeEstimator) or (isinstance(estimator, str) and estimator in ESTIMATORS):
        return
    raise ValueError(
        f"unknown activation_memory_budget_runtime_estimator {estimator!r}; known: "
        f"{', '.join(map(repr, ESTIMATORS))}, or a CustomRuntimeEstimator"
    )


def legacy_budget(graph: fx.Graph) -> float | None:
    """The first node's float ``meta["memory_budget"]`` (the old
    ``MemoryBudgetMode`` marker), as torch reads it."""
    for node in graph.nodes:
        value = node.meta.get("memory_budget", None)
        if isinstance(value, float):
            return value
    return None


def region_budgets(joint_module: fx.GraphModule, rules: Rules) -> tuple[list[float], list[fx.Node]]:
    """``region_activation_memory_budget`` annotations of the joint graph and
    of the subgraph modules under it (distinct values, in order), and the
    annotated graph's nodes without one (torch requires full coverage of the
    forward; the caller filters these by its classification)."""
    if not rules.region_memory_budgets:
        return [], []
    from torch.fx.traceback import _get_memory_budget_annotation

    values: list[float] = []
    unannotated: list[fx.Node] = []
    joint_graph = joint_module.graph
    for node in joint_graph.nodes:
        b = _get_memory_budget_annotation(node)
        if b is None:
            unannotated.append(node)
        elif b not in values:
            values.append(b)
    for _, sub in joint_module.named_modules():
        if isinstance(sub, fx.GraphModule) and sub.graph is not joint_graph:
            for node in sub.graph.nodes:
                b = _get_memory_budget_annotation(node)
                if b is None:
                    if node.op == "call_function":
                        unannotated.append(node)
                elif b not in values:
                    values.append(b)
    return values, unannotated


def check_regions(values: list[float], unannotated: list[fx.Node], is_forward_op: Callable[[fx.Node], bool],
                  rules: Rules) -> None:
    """torch's rules for region budgets: one value per joint graph, covering
    every forward op (nodes of subgraph modules count as forward ops)."""
    # The key phrases ("conflicting budgets within a single joint graph",
    # "must cover the entire forward") are torch's, so that code matching
    # torch's message matches fxcut's.
    if len(values) > 1:
        raise RuntimeError(
            "torch.autograd.graph.region_activation_memory_budget: conflicting budgets within a single "
            f"joint graph (including nested subgraphs): {sorted(values)}; one joint graph takes one "
            "budget, so put a graph break between regions of different budgets"
        )
    if values and rules.config("activation_memory_budget_require_full_coverage"):
        missing = [n for n in unannotated if is_forward_op(n)]
        if missing:
            raise RuntimeError(
                "torch.autograd.graph.region_activation_memory_budget: must cover the entire forward of "
                f"a graph (including HOP bodies); {len(missing)} forward op(s) lie outside the region: "
                f"{[n.name for n in missing]}"
            )


# --------------------------------------------------------------------------- per-node facts


def input_storage_mask(arrays: GraphArrays) -> bytes:
    """1 where a node's value lives in the storage of a graph input (torch's
    ``get_node_storage(node) in input_storages``; ``None`` counts as a
    storage, as it does there)."""
    from torch._inductor.fx_utils import get_node_storage  # inductor: see check_solver

    flags, kind = arrays.flags, arrays.kind
    input_bits = _C.F_PRIMAL | _C.F_FWD_SEED
    nodes = arrays.nodes
    inputs = {
        get_node_storage(nodes[i])
        for i in range(len(nodes))
        if kind[i] == _C.KIND_PLACEHOLDER and flags[i] & input_bits
    }
    none_is_input = None in inputs
    mask = bytearray(len(nodes))
    has_storage = torch._C._has_storage
    for i, node in enumerate(nodes):
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor) and has_storage(val):
            if val.untyped_storage()._cdata in inputs:
                mask[i] = 1
        elif none_is_input:
            mask[i] = 1
    return bytes(mask)


def _hint(x: Any) -> Any:
    if isinstance(x, torch.SymInt):
        # Loaded already wherever a SymInt exists; not worth its 0.8 s in ``import fxcut``.
        from torch.fx.experimental.symbolic_shapes import optimization_hint

        return optimization_hint(x, fallback=4096)
    return x


def _signature(value: Any) -> Any:
    """A hashable stand-in for an argument of a node, as far as its flop count
    can tell: a node by its value's shape, stride, dtype, device and layout
    (symbols by their hints, as the estimator sees them), literals as they
    are.  Raises TypeError for anything it cannot vouch for."""
    if isinstance(value, fx.Node):
        val = value.meta.get("val")
        if isinstance(val, torch.Tensor):
            return ("tensor", tuple(_hint(s) for s in val.shape), tuple(_hint(s) for s in val.stride()),
                    val.dtype, val.device, val.layout)
        if isinstance(val, torch.SymInt):
            return ("symint", _hint(val))
        if isinstance(val, (torch.SymFloat, torch.SymBool)):
            return ("sym", type(val).__name__)
        raise TypeError("argument without a tensor or symbolic value")
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_signature(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, _signature(v)) for k, v in value.items()))
    if value is None or isinstance(value, (bool, int, float, str, torch.dtype, torch.device,
                                           torch.layout, torch.memory_format)):
        return value
    raise TypeError(f"argument of type {type(value).__name__}")


class RuntimeEstimates:
    """Per-node runtime estimates, as torch's ``estimate_runtime`` gives them
    under ``estimator`` (the plan's, checked once by the caller).
    ``"flops"`` depends only on the op and its arguments' shapes, so equal
    signatures share one estimate (a model of 48 equal layers is estimated
    once per layer shape); ``"profile"`` and custom estimators are asked per
    node, as torch asks them."""

    def __init__(self, estimator: Estimator = "flops") -> None:
        self.estimator = estimator
        self._by_signature: dict[Any, float] = {}
        self.calls = 0

    def __call__(self, nodes: Sequence[fx.Node]) -> list[float]:
        mode = self.estimator
        if mode == "testing":
            return [1] * len(nodes)
        if mode != "flops":
            self.calls += len(nodes)
            return [self._estimate(node) for node in nodes]
        out = []
        for node in nodes:
            try:
                key = (node.target, _signature(node.args), _signature(node.kwargs))
                hash(key)
            except TypeError:
                key = None
            if key is not None and key in self._by_signature:
                out.append(self._by_signature[key])
                continue
            self.calls += 1
            value = self._estimate(node)
            if key is not None:
                self._by_signature[key] = value
            out.append(value)
        return out

    def _estimate(self, node: fx.Node) -> float:
        # torch's estimators live in its partitioner, which imports inductor (seconds):
        # only when a budget below 1 needs them (``import fxcut`` does not import inductor).
        from torch._functorch import partitioners as tp

        if config.activation_memory_budget_runtime_estimator == self.estimator:
            return float(tp.estimate_runtime(node))
        # torch's estimate_runtime reads its mode from the config: this object's mode for this call.
        with config.patch(activation_memory_budget_runtime_estimator=self.estimator):
            return float(tp.estimate_runtime(node))


# --------------------------------------------------------------------------- the decision


@dataclass
class BudgetDecision:
    """What the budget pass decided, by node index."""

    budget: float
    stage: str
    saved: list[int]
    decision: Decision  # of the last cut (tags, classes)
    min_act_size: float = 0.0
    max_act_size: float = 0.0
    ratio_more_aggressive: float = math.nan
    ratio_aggressive: float = math.nan
    candidates: list[int] = field(default_factory=list)
    memories: list[float] = field(default_factory=list)
    runtimes: list[float] = field(default_factory=list)
    knapsack: KnapsackChoice | None = None
    n_cuts: int = 0
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def recomputed_candidates(self) -> list[int]:
        if self.knapsack is None:
            return []
        return [self.candidates[k] for k in self.knapsack.recomputable]

    @property
    def saved_nodes(self) -> list[fx.Node]:
        nodes = self.decision.arrays.nodes
        return [nodes[i] for i in self.saved]


def _torch_node_info(decision: Decision, static_lifetime_input_indices: Sequence[int]) -> NodeInfo:
    """torch's NodeInfo from fxcut's classification (for custom solvers)."""
    from torch._functorch import partitioners as tp  # imports inductor: see RuntimeEstimates

    nodes = decision.arrays.nodes
    cls = decision.node_class
    fw = OrderedSet(n for i, n in enumerate(nodes) if cls[i] & _C.C_REQUIRED_FW)
    bw = OrderedSet(n for i, n in enumerate(nodes) if cls[i] & _C.C_REQUIRED_BW)
    closure = OrderedSet(n for i, n in enumerate(nodes) if cls[i] & _C.C_TANGENTS_CLOSURE)
    unclaimed = OrderedSet(n for n in nodes if n not in fw and n not in bw)
    # torch's private helpers, not re-exported by its partitioner module:
    primals = [n for n in nodes if tp._is_primal(n)]  # type: ignore[attr-defined]
    inputs = primals + [n for n in nodes if tp._is_fwd_seed_offset(n)]  # type: ignore[attr-defined]
    static = OrderedSet(p for k, p in enumerate(primals) if k in static_lifetime_input_indices)
    fw_order = {n: k for k, n in enumerate(n for n in nodes if n in fw)}
    return tp.NodeInfo(inputs, fw, bw, closure, unclaimed, fw_order, static)


def _knapsack(
    solver: Solver,
    memories: list[float],
    runtimes: list[float],
    max_memory: float,
    graph: fx.Graph,
    candidate_nodes: list[fx.Node],
    node_info: Callable[[], NodeInfo],
) -> KnapsackChoice:
    if isinstance(solver, str) and solver in SOLVERS:
        return solve(solver, memories, runtimes, max_memory)
    # dynamic_memory_budget_dp and custom solvers: torch's own dispatch.
    from torch._functorch import partitioners as tp  # imports inductor: see RuntimeEstimates

    with no_dispatch():
        value, saved, recomputable = tp._optimize_runtime_with_given_memory(
            graph, memories, runtimes, max_memory, node_info(), candidate_nodes
        )
    return KnapsackChoice(value, list(saved), list(recomputable), None)


def decide_with_budget(
    graph: fx.Graph,
    budget: float,
    *,
    num_fwd_outputs: int,
    static_lifetime_input_indices: list[int] | None = None,
    options: MinCutOptions | None = None,
    arrays: GraphArrays,
    estimates: RuntimeEstimates | None = None,
    solver: Solver | None = None,
    rules: Rules | None = None,
) -> BudgetDecision:
    """The budget pass over ``graph`` (read only), lowered as ``arrays``
    (one lowering serves every budget), for a caller without a plan: the
    budget, the solver and the estimator checked here; ``options``, ``solver``
    and the estimator from the config of ``rules`` (the running torch's,
    looked up when None) unless given.  ``estimates``: a runtime cache to
    share across calls.  The route's decide step has all of this checked in
    its plan already and calls :func:`budget_pass`."""
    rules = rules or rules_or_nearest()
    budget = check_budget(budget)
    solver = rules.config("activation_memory_budget_solver") if solver is None else solver
    if estimates is None:
        estimates = RuntimeEstimates(rules.config("activation_memory_budget_runtime_estimator"))
    if 0.0 < budget < 1.0:
        check_solver(solver)
        check_estimator(estimates.estimator)
    return budget_pass(graph, budget, arrays=arrays, num_fwd_outputs=num_fwd_outputs,
                       static_lifetime_input_indices=list(static_lifetime_input_indices or []),
                       options=options or MinCutOptions.from_config(rules), solver=solver, rules=rules,
                       estimates=estimates)


def budget_pass(
    graph: fx.Graph,
    budget: float,
    *,
    arrays: GraphArrays,
    num_fwd_outputs: int,
    static_lifetime_input_indices: list[int],
    options: MinCutOptions,
    solver: Solver,
    rules: Rules,
    estimates: RuntimeEstimates,
) -> BudgetDecision:
    """torch's budget pass (module docstring) over ``graph`` lowered as
    ``arrays``, with every input already checked (budget in [0, 1], a known
    solver and estimator): nothing is looked up or checked again."""
    opts, statics = options, static_lifetime_input_indices
    t1 = time.perf_counter()
    mask = input_storage_mask(arrays) if 0.0 < budget < 1.0 else None
    t2 = time.perf_counter()
    out = budget_plan(arrays, opts, memory_budget=budget, num_fwd_outputs=num_fwd_outputs,
                      static_lifetime_input_indices=statics, input_storage=mask)
    t3 = time.perf_counter()
    plan = Decision.from_core(arrays, out.decision)
    stage = STAGES[out.stage]
    result = BudgetDecision(
        budget=budget,
        stage=stage,
        saved=list(plan.saved),
        decision=plan,
        min_act_size=out.min_act_size,
        max_act_size=out.max_act_size,
        ratio_more_aggressive=out.ratio_more_aggressive,
        ratio_aggressive=out.ratio_aggressive,
        candidates=list(out.candidates),
        memories=list(out.memories),
        n_cuts=out.n_passes,
        seconds={"lower": arrays.seconds, "storage": t2 - t1, "plan": t3 - t2},
    )
    if stage == "no_candidates" and rules.no_candidates_saves_aggressive_cut:
        # Nothing left to trade off: the cut the knapsack would end with.
        final = decide(arrays, num_fwd_outputs=num_fwd_outputs, static_lifetime_input_indices=statics,
                       options=opts.aggressive())
        result.decision, result.saved = final, list(final.saved)
        result.n_cuts += 1
    if stage != "knapsack":
        return result
    nodes = arrays.nodes
    candidate_nodes = [nodes[i] for i in result.candidates]
    result.runtimes = estimates(candidate_nodes)
    t4 = time.perf_counter()
    result.knapsack = _knapsack(
        solver, result.memories, result.runtimes, max(budget, 0), graph, candidate_nodes,
        lambda: _torch_node_info(plan, statics),
    )
    t5 = time.perf_counter()
    dont_ban = bytearray(len(arrays))
    for k in result.knapsack.recomputable:
        dont_ban[result.candidates[k]] = 1
    final = decide(arrays, num_fwd_outputs=num_fwd_outputs, static_lifetime_input_indices=statics,
                   options=opts.aggressive(), dont_ban_mask=bytes(dont_ban))
    t6 = time.perf_counter()
    result.decision = final
    result.saved = list(final.saved)
    result.n_cuts += 1
    result.seconds.update(estimate=t4 - t3, knapsack=t5 - t4, final_cut=t6 - t5)
    return result


__all__ = [
    "BudgetDecision", "ESTIMATORS", "Estimator", "RuntimeEstimates", "STAGES", "Solver", "budget_pass", "check_budget",
    "check_estimator", "check_regions", "check_solver", "decide_with_budget", "input_storage_mask",
]

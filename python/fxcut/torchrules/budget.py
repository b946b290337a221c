"""What the activation memory budget reads of torch: its config, its estimator, its knapsack dispatch.

fxcut's budget pass (:mod:`fxcut.solve.budget`) runs over the graph array;
this module supplies what only torch knows, as the release of the
:class:`~fxcut.torchrules.versions.Rules` has it:

- the budget itself: the config, the first float ``meta["memory_budget"]``
  (the old ``MemoryBudgetMode`` marker), a ``region_activation_memory_budget``
  annotation (:func:`legacy_budget`, :func:`region_budgets`,
  :func:`check_regions`: torch's rules for them);
- the solver and estimator names torch accepts (:func:`check_solver`,
  :func:`check_estimator`);
- the candidates' runtimes, torch's own per-node ``estimate_runtime``
  (:class:`RuntimeEstimates`: facts about ops, like sizes; memoised per op
  signature for ``"flops"``);
- which values live in a graph input's storage (:func:`input_storage_mask`);
- torch's knapsack dispatch for its ``dynamic_memory_budget_dp`` and custom
  solvers (:func:`torch_knapsack`);

and bundles them as the pass's :class:`~fxcut.solve.budget.BudgetInputs`
(:func:`budget_inputs`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import torch
import torch.fx as fx
from torch._functorch import config
from torch.utils._mode_utils import no_dispatch
from torch.utils._ordered_set import OrderedSet

import fxcut._C as _C
from ..solve.budget import BudgetInputs, KnapsackFn
from ..solve.core import Decision
from ..solve.knapsack import SOLVERS, KnapsackChoice
from .versions import Rules

if TYPE_CHECKING:  # both import inductor (seconds): at run time only when a budget below 1 needs them
    from torch._functorch.partitioners import NodeInfo
    from torch._inductor.custom_graph_pass import CustomKnapsackSolver, CustomRuntimeEstimator

    from .lower import LoweredGraph

#: ``activation_memory_budget_solver``: a name (fxcut's solvers and torch's) or torch's custom solver.
Solver: TypeAlias = "str | CustomKnapsackSolver"
#: ``activation_memory_budget_runtime_estimator``: a name in :data:`ESTIMATORS` or torch's custom estimator.
Estimator: TypeAlias = "str | CustomRuntimeEstimator"

ESTIMATORS: tuple[str, ...] = ("flops", "profile", "testing")
#: Solvers torch knows that fxcut hands back to torch's own code.
_TORCH_SOLVERS = ("dynamic_memory_budget_dp",)


class RegionBudgetError(RuntimeError):
    """torch's own error for region budgets that conflict or leave a forward
    op uncovered (the phrases are torch's, so code matching torch's message
    matches fxcut's): the user's graph, not a gap."""


# --------------------------------------------------------------------------- configuration


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


def region_budget_of(nodes: Sequence[fx.Node], rules: Rules) -> list[float | None]:
    """Per node, its region budget annotation (None where it has none, and
    everywhere on a release without region budgets): what the peak plan
    groups its choices by."""
    if not rules.region_memory_budgets:
        return [None] * len(nodes)
    from torch.fx.traceback import _get_memory_budget_annotation

    out: list[float | None] = []
    for node in nodes:
        b = _get_memory_budget_annotation(node)
        out.append(None if b is None else float(b))
    return out


def annotated_with(joint_module: fx.GraphModule, value: Any) -> str:
    """The name of the first node annotated with region budget ``value``."""
    from torch.fx.traceback import _get_memory_budget_annotation

    for sub in joint_module.modules():
        if isinstance(sub, fx.GraphModule):
            for node in sub.graph.nodes:
                b = _get_memory_budget_annotation(node)
                if b is value or b == value:
                    return str(node.name)
    return "?"


def check_regions(values: list[float], unannotated: list[fx.Node], is_forward_op: Callable[[fx.Node], bool],
                  rules: Rules) -> None:
    """torch's rules for region budgets: one value per joint graph, covering
    every forward op (nodes of subgraph modules count as forward ops)."""
    # The key phrases ("conflicting budgets within a single joint graph",
    # "must cover the entire forward") are torch's, so that code matching
    # torch's message matches fxcut's.
    if len(values) > 1:
        raise RegionBudgetError(
            "torch.autograd.graph.region_activation_memory_budget: conflicting budgets within a single "
            f"joint graph (including nested subgraphs): {sorted(values)}; one joint graph takes one "
            "budget, so put a graph break between regions of different budgets"
        )
    if values and rules.config("activation_memory_budget_require_full_coverage"):
        missing = [n for n in unannotated if is_forward_op(n)]
        if missing:
            raise RegionBudgetError(
                "torch.autograd.graph.region_activation_memory_budget: must cover the entire forward of "
                f"a graph (including HOP bodies); {len(missing)} forward op(s) lie outside the region: "
                f"{[n.name for n in missing]}"
            )


# --------------------------------------------------------------------------- per-node facts


def input_storage_mask(nodes: Sequence[fx.Node], kind: Sequence[int], flags: Sequence[int]) -> bytes:
    """1 where a node's value lives in the storage of a graph input (torch's
    ``get_node_storage(node) in input_storages``; ``None`` counts as a
    storage, as it does there); ``kind`` and ``flags``: the graph array's."""
    from torch._inductor.fx_utils import get_node_storage  # inductor: see check_solver

    input_bits = _C.F_PRIMAL | _C.F_FWD_SEED
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


# --------------------------------------------------------------------------- torch's knapsack dispatch


def _torch_node_info(nodes: Sequence[fx.Node], decision: Decision[Any],
                     static_lifetime_input_indices: Sequence[int]) -> NodeInfo:
    """torch's NodeInfo from fxcut's classification (for custom solvers)."""
    from torch._functorch import partitioners as tp  # imports inductor: see RuntimeEstimates

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


def torch_knapsack(graph: fx.Graph, nodes: Sequence[fx.Node], static_lifetime_input_indices: Sequence[int]
                   ) -> KnapsackFn:
    """torch's own dispatch (``_optimize_runtime_with_given_memory``), for
    its ``dynamic_memory_budget_dp`` and custom solvers, over the graph
    whose lowered nodes are ``nodes``."""

    def knapsack(memories: list[float], runtimes: list[float], max_memory: float, candidates: list[int],
                 decision: Decision[Any]) -> KnapsackChoice:
        from torch._functorch import partitioners as tp  # imports inductor: see RuntimeEstimates

        info = _torch_node_info(nodes, decision, static_lifetime_input_indices)
        with no_dispatch():
            value, saved, recomputable = tp._optimize_runtime_with_given_memory(
                graph, memories, runtimes, max_memory, info, [nodes[i] for i in candidates]
            )
        return KnapsackChoice(value, list(saved), list(recomputable), None)

    return knapsack


def budget_inputs(lowered: LoweredGraph, graph: fx.Graph, rules: Rules, *, solver: Solver,
                  estimates: RuntimeEstimates, static_lifetime_input_indices: Sequence[int]) -> BudgetInputs:
    """The budget pass's inputs for ``lowered`` (the graph array of
    ``graph`` as the plan leaves it), under a checked ``solver`` and the
    runtime cache ``estimates`` (its estimator checked)."""
    nodes = lowered.nodes
    storage: list[bytes] = []

    def input_storage() -> bytes:
        if not storage:
            storage.append(input_storage_mask(nodes, lowered.kind, lowered.flags))
        return storage[0]

    def runtimes(indices: Sequence[int]) -> list[float]:
        return estimates([nodes[i] for i in indices])

    chosen: str | KnapsackFn = solver if isinstance(solver, str) and solver in SOLVERS else torch_knapsack(
        graph, nodes, static_lifetime_input_indices)
    return BudgetInputs(chosen, runtimes, input_storage, rules.no_candidates_saves_aggressive_cut)


__all__ = ["ESTIMATORS", "Estimator", "RegionBudgetError", "RuntimeEstimates", "Solver", "annotated_with",
           "budget_inputs", "check_estimator", "check_regions", "check_solver", "input_storage_mask",
           "legacy_budget", "region_budget_of", "region_budgets", "torch_knapsack"]

"""fxcut's drop-in ``min_cut_rematerialization_partition``.

The decision (tag passes, classification, bans, weights, the flow network,
the min-cut) runs in C over the graph array; the forward and backward modules
are then built by the installed torch's own machinery from the saved values,
so they are what torch would build.
"""

from __future__ import annotations

import importlib
import logging
from array import array
from dataclasses import dataclass
from typing import Any

import torch.fx as fx

from . import _C, extract, prepare
from . import budget as budget_pass
from .budget import BudgetDecision, check_budget, check_regions, legacy_budget, region_budgets
from .core import Decision, plan_and_lower
from .guard import guarded_partition, note_fallback
from .lower import KIND_OF_OP
from .ops import is_rng_node
from .snapshot import ModuleSnapshot
from .versions import rules_or_nearest

log = logging.getLogger("fxcut")


def _log_decision(decision: Decision, seconds: dict[str, float], *, budget: float, stage: str) -> None:
    """The one INFO line of a partition, and the bans per rule at DEBUG."""
    lower = decision.arrays.seconds
    core = sum(v for k, v in seconds.items() if k != "lower")
    log.info(
        "decision: %d nodes, %d needed by backward, %d saved, cut %d (lower %.1f ms, core %.1f ms)",
        len(decision.arrays), decision.n_required_bw, len(decision.saved), decision.cut_value,
        lower * 1e3, core * 1e3,
    )
    if log.isEnabledFor(logging.DEBUG):
        counts = decision.ban_counts()
        log.debug("bans: %s", ", ".join(f"{reason} {n}" for reason, n in counts.items()) or "none")
        if budget < 1:
            log.debug("budget %g decided by the %s pass", budget, stage)


def _resolve_budget(joint_module: fx.GraphModule) -> tuple[float, list[float], list[fx.Node]]:
    """The memory budget as torch resolves it, in increasing precedence:
    the config, the first float ``meta["memory_budget"]``, a region
    annotation.  Also the region values and unannotated nodes, for
    :func:`fxcut.budget.check_regions` once the forward is known."""
    from torch._functorch import config

    budget = config.activation_memory_budget
    legacy = legacy_budget(joint_module.graph)
    if legacy is not None:
        budget = legacy
    regions, unannotated = region_budgets(joint_module)
    for value in regions:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
            raise ValueError(
                f"torch.autograd.graph.region_activation_memory_budget: the region budget {value!r} "
                f"(meta['custom'] of node {_annotated_with(joint_module, value)!r}) must be a number "
                "in [0, 1]"
            )
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


def _write_back_tags(decision: Decision) -> None:
    """Write the tags the passes changed, as torch's passes do in place."""
    from torch.utils.checkpoint import CheckpointPolicy

    before = decision.arrays.tag
    if before.tobytes() == decision.tag:
        return
    after = array("b", decision.tag)
    for i, (old, new) in enumerate(zip(before, after)):
        if old != new:
            decision.arrays.nodes[i].meta["recompute"] = CheckpointPolicy(new)


@dataclass
class PartitionPlan:
    """Everything :func:`min_cut_rematerialization_partition` decided
    before writing anything: the DCE/CSE plan, the chosen cut, and what
    torch's module extraction needs besides the graph."""

    prep: prepare.Preparation
    chosen: BudgetDecision
    budget: float
    static_indices: list[int]
    has_recomputable: bool
    has_recomputable_rng: bool


class _UseTorch(Exception):
    """The C classification does not model this graph: torch decides it."""


def plan_partition(
    joint_module: fx.GraphModule,
    *,
    num_fwd_outputs: int,
    static_lifetime_input_indices: Any = None,
) -> PartitionPlan:
    """Validate the input and decide the partition; writes nothing.

    Raises a named error for bad input, and :class:`_UseTorch` for a graph
    shape the C classification does not model.
    """
    from torch._functorch import config

    if not isinstance(joint_module, fx.GraphModule):
        raise TypeError(
            f"joint_module must be a torch.fx.GraphModule, got {type(joint_module).__name__}"
        )
    if isinstance(num_fwd_outputs, bool) or not isinstance(num_fwd_outputs, int):
        raise TypeError(f"num_fwd_outputs must be an int, got {num_fwd_outputs!r}")
    static_indices = _check_static_indices(static_lifetime_input_indices)
    graph = joint_module.graph
    _check_nodes(graph)
    if config.enable_activation_offloading:
        _offloading_pass()  # an import that fails, fails before any write

    # Plan dead-code elimination and CSE, lower the graph as they will leave
    # it, and decide -- all before touching the user's graph.
    budget, regions, unannotated = _resolve_budget(joint_module)
    budget = check_budget(budget)
    rules = rules_or_nearest()
    prep, arrays = plan_and_lower(graph, cse=bool(rules.config("cse")), num_fwd_outputs=num_fwd_outputs)
    try:
        if regions:
            # torch checks the regions once the forward is classified and
            # before any cut: a budget-0 plan classifies without cutting.
            probe = budget_pass.decide_with_budget(graph, 0.0, num_fwd_outputs=num_fwd_outputs,
                                       static_lifetime_input_indices=static_indices,
                                       arrays=arrays)
            if probe.stage != "no_backward":
                fw = probe.decision.node_class
                check_regions(
                    regions,
                    unannotated,
                    lambda n: n.graph is not graph
                    or (n in arrays.index and n.op == "call_function"
                        and bool(fw[arrays.index[n]] & _C.C_REQUIRED_FW)),
                )
        chosen = budget_pass.decide_with_budget(
            graph,
            budget,
            num_fwd_outputs=num_fwd_outputs,
            static_lifetime_input_indices=static_indices,
            arrays=arrays,
        )
    except NotImplementedError as e:
        raise _UseTorch(str(e)) from None
    # As torch reads them: the tags on the graph, before the passes.
    tags = chosen.decision.arrays.tag.tobytes()
    recomputable = (_C.TAG_MUST_RECOMPUTE, _C.TAG_PREFER_RECOMPUTE)
    nodes = chosen.decision.arrays.nodes
    has_recomputable = any(t in recomputable for t in tags)
    has_recomputable_rng = has_recomputable and any(
        t in recomputable and is_rng_node(nodes[i], rules.zero_dropout_sdpa_is_rng)
        for i, t in enumerate(tags)
    )
    return PartitionPlan(prep, chosen, budget, static_indices, has_recomputable, has_recomputable_rng)


def apply_partition(
    joint_module: fx.GraphModule, plan: PartitionPlan, *, num_fwd_outputs: int, joint_inputs: Any
) -> tuple[fx.GraphModule, fx.GraphModule]:
    """Carry out ``plan``: DCE and CSE in place, the recompute tags the
    passes changed, then torch's module extraction.  Writes to
    ``joint_module``; the caller restores it if this raises."""
    from torch._functorch import config
    from torch._functorch import partitioners as tp
    from torch.utils._ordered_set import OrderedSet

    chosen = plan.chosen
    try:
        prepare.apply(joint_module, plan.prep, chosen.decision.arrays.nodes)
    except prepare.PreparationMismatch:
        log.error("fxcut: DCE/CSE plan diverged from the graph; deciding again on the graph as it is")
        chosen = budget_pass.decide_with_budget(
            joint_module.graph,
            plan.budget,
            num_fwd_outputs=num_fwd_outputs,
            static_lifetime_input_indices=plan.static_indices,
        )
    joint_graph = joint_module.graph
    if chosen.stage == "knapsack" and config.visualize_memory_budget_pareto:
        log.warning("fxcut: visualize_memory_budget_pareto is torch's SVG; fxcut.memory_pareto() "
                    "sweeps the budget and plots it")
    decision = chosen.decision
    _write_back_tags(decision)
    primals = [n for n in joint_graph.nodes if tp._is_primal(n)]  # type: ignore[attr-defined]
    static_set = set(plan.static_indices)
    static_nodes = OrderedSet(p for i, p in enumerate(primals) if i in static_set)

    if chosen.stage == "no_backward":
        return tp.default_partition(
            joint_module,
            joint_inputs,
            num_fwd_outputs=num_fwd_outputs,
            static_lifetime_input_indices=plan.static_indices,
            static_lifetime_input_nodes=static_nodes,
        )

    saved_values = chosen.saved_nodes
    _log_decision(decision, chosen.seconds, budget=chosen.budget, stage=chosen.stage)
    if getattr(config, "_sync_decision_cross_ranks", False):
        saved_values = tp._sync_decision_cross_ranks(joint_graph, saved_values)
    return _build_modules(
        joint_module, saved_values, num_fwd_outputs, static_nodes, plan.has_recomputable,
        plan.has_recomputable_rng,
    )


def _partition(joint_module: fx.GraphModule, _joint_inputs: Any, compiler: str = "inductor", *,
               num_fwd_outputs: int, static_lifetime_input_indices: list[int] | None = None,
               **kwargs: Any) -> tuple[fx.GraphModule, fx.GraphModule]:
    """fxcut's partition, unguarded: the public entry is
    :func:`min_cut_rematerialization_partition` below (through fxcut.guard).

    Same signature and result; the decision of what to save is made by
    fxcut's C core and equals the installed torch's.  Reads
    ``torch._functorch.config`` at call time.  On any error the module is
    left exactly as it was (nodes, args, kwargs, meta, generated code).
    """
    from torch._functorch import partitioners as tp

    try:
        plan = plan_partition(joint_module, num_fwd_outputs=num_fwd_outputs,
                              static_lifetime_input_indices=static_lifetime_input_indices)
    except _UseTorch as e:
        # A graph shape the C classification does not model (a forward
        # output that needs a backward value): torch decides it.
        note_fallback(str(e))
        snapshot = ModuleSnapshot(joint_module)
        try:
            return tp.min_cut_rematerialization_partition(
                joint_module,
                _joint_inputs,
                compiler,
                num_fwd_outputs=num_fwd_outputs,
                static_lifetime_input_indices=static_lifetime_input_indices,
            )
        except BaseException:
            snapshot.restore()
            raise
    snapshot = ModuleSnapshot(joint_module)
    try:
        return apply_partition(joint_module, plan, num_fwd_outputs=num_fwd_outputs, joint_inputs=_joint_inputs)
    except BaseException:
        snapshot.restore()
        raise


def _check_static_indices(indices: Any) -> list[int]:
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


def _offloading_pass() -> Any:
    """torch's activation offloading pass (``config.enable_activation_offloading``)."""
    module = importlib.import_module(rules_or_nearest().offloading_module)
    pass_: Any = module.enable_activation_offloading
    return pass_


def _check_nodes(graph: fx.Graph) -> None:
    """One pass over the nodes before anything else: a graph that ends in
    an output node, fx ops only, callable call_function targets, and unique
    names (module extraction matches nodes by name; two nodes of one name
    would be silently confused -- torch's lint catches this in its DCE)."""
    names: set[str] = set()
    last: fx.Node | None = None
    kinds = KIND_OF_OP
    for i, node in enumerate(graph.nodes):
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


def _build_modules(joint_module: fx.GraphModule, saved_values: list[fx.Node], num_fwd_outputs: int,
                   static_nodes: Any, has_recomputable: bool, has_recomputable_rng: bool
                   ) -> tuple[fx.GraphModule, fx.GraphModule]:
    """The forward and backward modules from the saved values: fxcut's own
    builder (:mod:`fxcut.extract`, the modules torch's passes would build),
    or torch's passes for the graphs that builder leaves to them."""
    saved = extract.split_saved(saved_values)
    if not (has_recomputable and has_recomputable_rng):
        built = extract.build_modules(joint_module, saved, num_fwd_outputs, static_nodes)
        if built is not None:
            return built
    return _torch_build_modules(joint_module, saved, num_fwd_outputs, static_nodes, has_recomputable,
                                has_recomputable_rng)


def _torch_build_modules(joint_module: fx.GraphModule, saved: extract.SavedValues, num_fwd_outputs: int,
                         static_nodes: Any, has_recomputable: bool, has_recomputable_rng: bool
                         ) -> tuple[fx.GraphModule, fx.GraphModule]:
    """torch's own module extraction and the passes after it (the reference
    :mod:`fxcut.extract` is tested against)."""
    from torch._functorch import config
    from torch._functorch import partitioners as tp

    fw_module, bw_module = tp._extract_fwd_bwd_modules(
        joint_module,
        saved.values,
        saved_sym_nodes=saved.sym,
        saved_opaque_nodes=saved.opaque,
        num_fwd_outputs=num_fwd_outputs,
        static_lifetime_input_nodes=static_nodes,
    )
    if has_recomputable and has_recomputable_rng:
        fw_module, bw_module = tp.functionalize_rng_ops(
            joint_module, fw_module, bw_module, len(saved.sym)
        )
    bw_module = tp.reordering_to_mimic_autograd_engine(bw_module)
    if config.enable_activation_offloading:
        _offloading_pass()(fw_module, bw_module, num_fwd_outputs, static_nodes)
    fw_module = tp.raise_getitems(fw_module)  # type: ignore[attr-defined]
    bw_module = tp.raise_getitems(bw_module)  # type: ignore[attr-defined]
    fw_module = tp.thread_graphsafe_rng_from_hops(fw_module, is_backward=False)
    bw_module = tp.thread_graphsafe_rng_from_hops(bw_module, is_backward=True)
    return fw_module, bw_module


def min_cut_rematerialization_partition(
    joint_module: fx.GraphModule,
    _joint_inputs: Any,
    compiler: str = "inductor",
    *,
    num_fwd_outputs: int,
    static_lifetime_input_indices: list[int] | None = None,
    **kwargs: Any,
) -> tuple[fx.GraphModule, fx.GraphModule]:
    """Drop-in for torch's ``min_cut_rematerialization_partition``.

    Same signature and result; the decision of what to save is made by
    fxcut's C core and equals the installed torch's.  Reads
    ``torch._functorch.config`` at call time.  Goes through
    :mod:`fxcut.guard`: torch's own partitioner decides on an untested torch
    or a graph fxcut does not model, and ``verify=`` (or ``FXCUT_VERIFY``)
    checks the result against torch's.
    """
    return guarded_partition(
        _partition, joint_module, _joint_inputs, compiler, num_fwd_outputs=num_fwd_outputs,
        static_lifetime_input_indices=static_lifetime_input_indices, **kwargs,
    )

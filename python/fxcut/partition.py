"""fxcut's drop-in ``min_cut_rematerialization_partition``.

The decision (tag passes, classification, bans, weights, the flow network,
the min-cut) runs in C over the graph array; the forward and backward modules
are then built by the installed torch's own machinery from the saved values,
so they are what torch would build.
"""

from __future__ import annotations

import logging
from array import array
from typing import Any

import torch.fx as fx

from . import _C, prepare
from .core import Decision, _impure_random
from .lower import lower_for_partition
from .ops import default_facts, is_rng_node
from .versions import is_assert_only_symbool, rules_or_nearest

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

    from .budget import legacy_budget, region_budgets

    budget = config.activation_memory_budget
    legacy = legacy_budget(joint_module.graph)
    if legacy is not None:
        budget = legacy
    regions, unannotated = region_budgets(joint_module)
    if regions:
        budget = regions[0]
    return budget, regions, unannotated


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


def _partition(
    joint_module: fx.GraphModule,
    _joint_inputs: Any,
    compiler: str = "inductor",
    *,
    num_fwd_outputs: int,
    static_lifetime_input_indices: list[int] | None = None,
    **kwargs: Any,
) -> tuple[fx.GraphModule, fx.GraphModule]:
    """fxcut's partition, unguarded: the public entry is
    :func:`min_cut_rematerialization_partition` below (through fxcut.guard).

    Same signature and result; the decision of what to save is made by
    fxcut's C core and equals the installed torch's.  Reads
    ``torch._functorch.config`` at call time.
    """
    from torch._functorch import config
    from torch._functorch import partitioners as tp

    if not isinstance(joint_module, fx.GraphModule):
        raise TypeError(
            f"joint_module must be a torch.fx.GraphModule, got {type(joint_module).__name__}"
        )
    if isinstance(num_fwd_outputs, bool) or not isinstance(num_fwd_outputs, int):
        raise TypeError(f"num_fwd_outputs must be an int, got {num_fwd_outputs!r}")
    graph = joint_module.graph
    _check_unique_names(graph)
    from .budget import check_budget, check_regions, decide_with_budget

    facts = default_facts()
    rules = rules_or_nearest()
    impure_random = _impure_random()
    # Plan dead-code elimination and CSE, lower the graph as they will leave
    # it, and decide -- all before touching the user's graph, so a bad input
    # or an unsatisfiable decision leaves it exactly as it was.
    budget, regions, unannotated = _resolve_budget(joint_module)
    budget = check_budget(budget)
    prep = prepare.plan(graph, facts, cse=bool(rules.config("cse")), impure_random=impure_random,
                        rules=rules, num_fwd_outputs=num_fwd_outputs)
    arrays = lower_for_partition(
        graph, facts, impure_random=impure_random, removed=prep.removed, replace=prep.replace
    )
    try:
        if regions:
            # torch checks the regions once the forward is classified and
            # before any cut: a budget-0 plan classifies without cutting.
            probe = decide_with_budget(graph, 0.0, num_fwd_outputs=num_fwd_outputs,
                                       static_lifetime_input_indices=static_lifetime_input_indices,
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
        chosen = decide_with_budget(
            graph,
            budget,
            num_fwd_outputs=num_fwd_outputs,
            static_lifetime_input_indices=static_lifetime_input_indices,
            arrays=arrays,
        )
    except NotImplementedError as e:
        # A graph shape the C classification does not model (a forward
        # output that needs a backward value): torch decides it.
        from .guard import note_fallback

        note_fallback(str(e))
        return tp.min_cut_rematerialization_partition(
            joint_module,
            _joint_inputs,
            compiler,
            num_fwd_outputs=num_fwd_outputs,
            static_lifetime_input_indices=static_lifetime_input_indices,
        )
    try:
        prepare.apply(joint_module, prep, arrays.nodes)
    except prepare.PreparationMismatch:
        log.error("fxcut: DCE/CSE plan diverged from the graph; deciding again on the graph as it is")
        chosen = decide_with_budget(
            joint_module.graph,
            budget,
            num_fwd_outputs=num_fwd_outputs,
            static_lifetime_input_indices=static_lifetime_input_indices,
        )
    joint_graph = joint_module.graph
    if chosen.stage == "knapsack" and config.visualize_memory_budget_pareto:
        log.warning("fxcut: visualize_memory_budget_pareto is torch's SVG; fxcut.memory_pareto() "
                    "sweeps the budget and plots it")
    decision = chosen.decision
    arrays = decision.arrays
    tags = arrays.tag.tobytes()
    has_recomputable = any(t in (2, 3) for t in tags)
    has_recomputable_rng = has_recomputable and any(
        t in (2, 3) and is_rng_node(arrays.nodes[i], rules.zero_dropout_sdpa_is_rng)
        for i, t in enumerate(tags)
    )
    _write_back_tags(decision)
    static_indices = list(static_lifetime_input_indices or [])
    primals = [n for n in joint_graph.nodes if tp._is_primal(n)]
    from torch.utils._ordered_set import OrderedSet

    static_nodes = OrderedSet(p for i, p in enumerate(primals) if i in static_indices)

    if chosen.stage == "no_backward":
        return tp.default_partition(
            joint_module,
            _joint_inputs,
            num_fwd_outputs=num_fwd_outputs,
            static_lifetime_input_indices=static_indices,
            static_lifetime_input_nodes=static_nodes,
        )

    saved_values = chosen.saved_nodes
    _log_decision(decision, chosen.seconds, budget=chosen.budget, stage=chosen.stage)
    if getattr(config, "_sync_decision_cross_ranks", False):
        saved_values = tp._sync_decision_cross_ranks(joint_graph, saved_values)
    return _build_modules(
        joint_module, saved_values, num_fwd_outputs, static_nodes, has_recomputable, has_recomputable_rng
    )


def _check_unique_names(graph: fx.Graph) -> None:
    """Module extraction matches nodes by name; two nodes of one name would
    be silently confused (torch's lint catches this in its DCE)."""
    names: set[str] = set()
    for node in graph.nodes:
        if node.name in names:
            raise ValueError(f"node name {node.name!r} is used by two nodes of the graph")
        names.add(node.name)


def _build_modules(
    joint_module: fx.GraphModule,
    saved_values: list[fx.Node],
    num_fwd_outputs: int,
    static_nodes: Any,
    has_recomputable: bool,
    has_recomputable_rng: bool,
) -> tuple[fx.GraphModule, fx.GraphModule]:
    """torch's own module extraction from the saved values."""
    from torch._functorch import config
    from torch._functorch import partitioners as tp
    from torch.fx.experimental.proxy_tensor import is_sym_node

    saved_sym_nodes = [n for n in saved_values if is_sym_node(n) and not is_assert_only_symbool(n)]
    saved_opaque_nodes = [n for n in saved_values if tp.is_opaque_node(n)]
    saved_values = [n for n in saved_values if not is_sym_node(n) and not tp.is_opaque_node(n)]
    fw_module, bw_module = tp._extract_fwd_bwd_modules(
        joint_module,
        saved_values,
        saved_sym_nodes=saved_sym_nodes,
        saved_opaque_nodes=saved_opaque_nodes,
        num_fwd_outputs=num_fwd_outputs,
        static_lifetime_input_nodes=static_nodes,
    )
    if has_recomputable and has_recomputable_rng:
        fw_module, bw_module = tp.functionalize_rng_ops(
            joint_module, fw_module, bw_module, len(saved_sym_nodes)
        )
    bw_module = tp.reordering_to_mimic_autograd_engine(bw_module)
    if config.enable_activation_offloading:
        import importlib

        offloading = importlib.import_module(rules_or_nearest().offloading_module)
        offloading.enable_activation_offloading(fw_module, bw_module, num_fwd_outputs, static_nodes)
    fw_module = tp.raise_getitems(fw_module)
    bw_module = tp.raise_getitems(bw_module)
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
    from .guard import guarded_partition

    return guarded_partition(
        _partition, joint_module, _joint_inputs, compiler, num_fwd_outputs=num_fwd_outputs,
        static_lifetime_input_indices=static_lifetime_input_indices, **kwargs,
    )

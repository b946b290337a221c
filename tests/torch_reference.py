"""torch's own decision, step by step: the reference fxcut must equal, and
the baseline its benchmarks time.

Calls the installed torch's partitioner functions in the order its
``min_cut_rematerialization_partition`` does (tag passes, classification,
dist_from_bw, ``solve_min_cut``), on a graph module the caller owns (torch's
passes write tags into it).  Dead-code elimination and CSE, torch's own, are
:func:`torch_prepared` (the tests' and benchmarks' one copy of them); fxcut
plans the same passes without touching the graph
(:func:`fxcut_prepared_arrays`: its plan, then the lowering of the graph as
that plan would leave it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.fx as fx
from torch._functorch import config
from torch._functorch import partitioners as tp


def torch_prepared(gm: fx.GraphModule, cse: bool | None = None) -> fx.GraphModule:
    """torch's partitioner's first passes, in place on ``gm`` (pass a copy):
    dead-code elimination, then CSE when ``cse`` (default: ``config.cse``).
    Returns ``gm``."""
    gm.graph.eliminate_dead_code()
    gm.recompile()
    if config.cse if cse is None else cse:
        gm.graph = tp.fx_graph_cse(gm.graph)
    return gm


def fxcut_prepared_arrays(graph: fx.Graph, cse: bool | None = None, num_fwd_outputs: int | None = None):
    """fxcut's counterpart of :func:`torch_prepared`, read only: its planned
    dead-code elimination (and CSE when ``cse``, default ``config.cse``;
    with ``num_fwd_outputs`` as the partitioner runs it from torch 2.14,
    without as ``fx_graph_cse`` alone) and the graph array of ``graph`` as
    that plan would leave it."""
    from fxcut.torchrules import prepare
    from fxcut.torchrules.lower import lower_for_partition
    from fxcut.torchrules.ops import dce_impure_random, default_facts
    from fxcut.torchrules.versions import rules_or_nearest

    facts, impure_random, rules = default_facts(), dce_impure_random(), rules_or_nearest()
    prep = prepare.plan(graph, facts, cse=bool(config.cse if cse is None else cse), impure_random=impure_random,
                        rules=rules, num_fwd_outputs=num_fwd_outputs)
    return lower_for_partition(graph, facts, impure_random=impure_random, rules=rules, removed=prep.removed,
                               replace=prep.replace)


@dataclass
class TorchDecision:
    saved: list[str]
    banned: set[str]
    required_fw: set[str]
    required_bw: set[str]
    n_required_bw: int


def _classified(gm: fx.GraphModule, num_fwd_outputs: int, static_lifetime_input_indices: list[int] | None):
    """torch's passes before the cut, in its order: tag clean-up, forced
    saves, classification, dist_from_bw.  None when nothing is needed for
    backward (torch then partitions by default)."""
    if tp.has_recomputable_ops(gm):
        tp.cleanup_recompute_tags(gm, is_default_partition=False)
    if not config.unsafe_allow_optimization_of_collectives:
        tp.force_save_collectives(gm)
    tp.force_save_effectful_ops(gm)
    tp.force_save_bw_mutation_src(gm)
    info = tp.classify_nodes(gm, static_lifetime_input_indices or [], num_fwd_outputs)
    if len(info.required_bw_nodes) == 0:
        return None
    for node in reversed(gm.graph.nodes):
        if node.op == "output":
            node.dist_from_bw = int(1e9)
        elif not info.is_required_fw(node):
            node.dist_from_bw = 0
        else:
            node.dist_from_bw = int(1e9)
            for user in node.users:
                node.dist_from_bw = min(node.dist_from_bw, user.dist_from_bw + 1)
    return info


def torch_decision(
    gm: fx.GraphModule, num_fwd_outputs: int, static_lifetime_input_indices: list[int] | None = None
) -> TorchDecision:
    info = _classified(gm, num_fwd_outputs, static_lifetime_input_indices)
    if info is None:
        return TorchDecision([], set(), set(), set(), 0)
    gentle = not config.aggressive_recomputation
    options = tp.MinCutOptions(
        ban_if_used_far_apart=gentle and config.ban_recompute_used_far_apart,
        ban_if_long_fusible_chains=gentle and config.ban_recompute_long_fusible_chains,
        ban_if_materialized_backward=gentle and config.ban_recompute_materialized_backward,
        ban_if_not_in_allowlist=gentle and config.ban_recompute_not_in_allowlist,
        ban_if_reduction=config.ban_recompute_reductions,
    )
    saved, banned = tp.solve_min_cut(gm.graph, info, options)
    return TorchDecision(
        saved=[n.name for n in saved],
        banned={n.name for n in banned},
        required_fw={n.name for n in info.required_fw_nodes},
        required_bw={n.name for n in info.required_bw_nodes},
        n_required_bw=len(info.required_bw_nodes),
    )


def torch_budget_decision(
    gm: fx.GraphModule,
    num_fwd_outputs: int,
    memory_budget: float,
    static_lifetime_input_indices: list[int] | None = None,
) -> list[str] | None:
    """torch's ``choose_saved_values_set`` at ``memory_budget`` after the
    same passes as :func:`torch_decision`: the saved values' names, or None
    when no node is required for backward (torch partitions by default)."""
    info = _classified(gm, num_fwd_outputs, static_lifetime_input_indices)
    if info is None:
        return None
    saved = tp.choose_saved_values_set(gm.graph, info, memory_budget=memory_budget)
    return [n.name for n in saved]

"""Carrying out a decision on the joint graph: DCE/CSE applied, tags written, the two modules built.

The only code that writes to the user's joint graph.  It applies the
planned dead-code elimination and CSE (:mod:`.prepare`), writes back the
recompute tags the core's tag passes changed (as torch's passes do in
place), and builds the forward and backward modules from the saved values
-- with fxcut's own builder (:mod:`.extract`) where the release's rules say
it models torch's extraction and the passes after it (``Rules.module_builder``:
fxcut's on every supported release), else with torch's own passes
(:func:`torch_build_modules`).  A graph without a backward goes to torch's
``default_partition``.  The caller (the guard) restores the joint graph if
this raises.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

import torch.fx as fx
from torch.utils.checkpoint import CheckpointPolicy

import fxcut._C as _C
from ..solve.core import Decision
from . import extract
from .lower import LoweredGraph
from .ops import is_rng_node
from .versions import Rules

PartitionResult = tuple[fx.GraphModule, fx.GraphModule]


def recomputable_rng(lowered: LoweredGraph, rules: Rules) -> tuple[bool, bool]:
    """Whether the graph has nodes tagged to be recomputed, and whether one
    of them needs its RNG state threaded (torch's RNG functionalization),
    as torch reads the tags before its passes."""
    tags = lowered.tag.tobytes()
    recomputable = (_C.TAG_MUST_RECOMPUTE, _C.TAG_PREFER_RECOMPUTE)
    has = any(t in recomputable for t in tags)
    rng = has and any(t in recomputable and is_rng_node(lowered.nodes[i], rules.zero_dropout_sdpa_is_rng)
                      for i, t in enumerate(tags))
    return has, rng


def write_back_tags(lowered: LoweredGraph, decision: Decision[Any]) -> None:
    """Write the tags the core's passes changed, as torch's passes do in place."""
    before = lowered.tag
    if before.tobytes() == decision.tag:
        return
    after = array("b", decision.tag)
    for i, (old, new) in enumerate(zip(before, after)):
        if old != new:
            lowered.nodes[i].meta["recompute"] = CheckpointPolicy(new)


def static_nodes(joint_module: fx.GraphModule, static_indices: Sequence[int]) -> Any:
    """The static-lifetime primals (torch's ordered set of them)."""
    from torch._functorch import partitioners as tp
    from torch.utils._ordered_set import OrderedSet

    primals = [n for n in joint_module.graph.nodes if tp._is_primal(n)]  # type: ignore[attr-defined]
    wanted = set(static_indices)
    return OrderedSet(p for i, p in enumerate(primals) if i in wanted)


def default_partition(joint_module: fx.GraphModule, joint_inputs: Any, num_fwd_outputs: int,
                      static_indices: list[int]) -> PartitionResult:
    """torch's ``default_partition``: a graph without a backward."""
    from torch._functorch import partitioners as tp

    return tp.default_partition(joint_module, joint_inputs, num_fwd_outputs=num_fwd_outputs,
                                static_lifetime_input_indices=static_indices,
                                static_lifetime_input_nodes=static_nodes(joint_module, static_indices))


def sync_cross_ranks(joint_module: fx.GraphModule, saved: list[fx.Node], rules: Rules) -> list[fx.Node]:
    """torch's ``_sync_decision_cross_ranks`` where the config asks for it."""
    if not rules.config("_sync_decision_cross_ranks"):
        return saved
    from torch._functorch import partitioners as tp

    synced: list[fx.Node] = tp._sync_decision_cross_ranks(joint_module.graph, saved)
    return synced


def build_modules(joint_module: fx.GraphModule, saved_values: list[fx.Node], num_fwd_outputs: int,
                  static_indices: Sequence[int], recomputable: tuple[bool, bool], rules: Rules, *,
                  impure_random: bool) -> PartitionResult:
    """The forward and backward modules from the saved values: fxcut's own
    builder (:mod:`.extract`, the modules torch's passes would build), or
    torch's passes for the graphs that builder leaves to them.
    ``recomputable``: :func:`recomputable_rng` of the graph."""
    saved = extract.split_saved(saved_values)
    nodes = static_nodes(joint_module, static_indices)
    has_recomputable, has_recomputable_rng = recomputable
    if not (has_recomputable and has_recomputable_rng):
        built = extract.build_modules(joint_module, saved, num_fwd_outputs, nodes, rules,
                                      impure_random=impure_random)
        if built is not None:
            return built
    return torch_build_modules(joint_module, saved, num_fwd_outputs, nodes, has_recomputable,
                               has_recomputable_rng, rules)


def offloading_pass(rules: Rules) -> Any:
    """torch's activation offloading pass (``config.enable_activation_offloading``)."""
    import importlib

    module = importlib.import_module(rules.offloading_module)
    pass_: Any = module.enable_activation_offloading
    return pass_


def torch_build_modules(joint_module: fx.GraphModule, saved: extract.SavedValues, num_fwd_outputs: int,
                        static_nodes: Any, has_recomputable: bool, has_recomputable_rng: bool, rules: Rules
                        ) -> PartitionResult:
    """torch's own module extraction and the passes after it (the reference
    :mod:`.extract` is tested against), as the release of ``rules`` runs them."""
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
    if rules.config("enable_activation_offloading"):
        offloading_pass(rules)(fw_module, bw_module, num_fwd_outputs, static_nodes)
    fw_module = tp.raise_getitems(fw_module)  # type: ignore[attr-defined]
    bw_module = tp.raise_getitems(bw_module)  # type: ignore[attr-defined]
    fw_module = tp.thread_graphsafe_rng_from_hops(fw_module, is_backward=False)
    bw_module = tp.thread_graphsafe_rng_from_hops(bw_module, is_backward=True)
    return fw_module, bw_module


__all__ = ["PartitionResult", "build_modules", "default_partition", "offloading_pass", "recomputable_rng",
           "static_nodes", "sync_cross_ranks", "torch_build_modules", "write_back_tags"]

"""Asking inductor what a decision's modules allocate: the plan's opt-in check.

For one saved set of a planned call: a copy of the joint graph with the
route's planned DCE/CSE applied (the graph the decision's node indices
describe), its forward and backward modules built by torch's passes, each
handed to inductor's lowering, scheduler and wrapper code generation on
fake tensors (:func:`fxcut.torchrules.inductor.ask_inductor`, nothing
compiled), and the peak the generated code allocates read back.  The
joint graph itself is never touched.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.fx as fx
from torch.utils._ordered_set import OrderedSet

from . import prepare
from .build import torch_build_modules
from .extract import split_saved
from .inductor import ask_inductor, donated_indices
from .snapshot import copy_graph_module
from .versions import Rules


def prepared_copy(joint_module: fx.GraphModule, prep: prepare.Preparation | None, lowered: Sequence[fx.Node]
                  ) -> tuple[fx.GraphModule, dict[str, fx.Node]]:
    """A copy of the joint module with the planned dead-code elimination
    and CSE ``prep`` applied (the graph the decision's node indices
    describe), and its nodes by name; ``prep`` None: a plain copy."""
    copy = copy_graph_module(joint_module)
    old = list(joint_module.graph.nodes)
    new = list(copy.graph.nodes)
    to_new = dict(zip(old, new))
    if prep is not None:
        moved = prepare.Preparation(
            dead={to_new[n] for n in prep.dead},
            replace={to_new[a]: to_new[b] for a, b in prep.replace.items()},
            region_ids=None if prep.region_ids is None else {to_new[n]: r for n, r in prep.region_ids.items()})
        prepare.apply(copy, moved, [to_new[n] for n in lowered])
    return copy, {n.name: n for n in copy.graph.nodes}


def inductor_peaks(joint_module: fx.GraphModule, saved_nodes: Sequence[fx.Node], num_fwd_outputs: int,
                   rules: Rules) -> tuple[int, int]:
    """The peaks inductor's generated code allocates in the forward and in
    the backward of the step whose forward saves ``saved_nodes`` (nodes of
    ``joint_module``); the modules built by torch's passes as the release of
    ``rules`` runs them."""
    fw, bw = torch_build_modules(joint_module, split_saved(list(saved_nodes)), num_fwd_outputs, OrderedSet(),
                                 False, False, rules)
    f = ask_inductor(fw, is_backward=False)
    b = ask_inductor(bw, is_backward=True, donated=donated_indices(fw, bw))
    return f.wrapper_peak, b.wrapper_peak


def decision_peaks(joint_module: fx.GraphModule, prep: prepare.Preparation | None, lowered: Sequence[fx.Node],
                   saved: Sequence[int], num_fwd_outputs: int, rules: Rules) -> tuple[int, int]:
    """Inductor's forward and backward peaks of the decision saving
    ``saved`` (indices into ``lowered``, the planned call's lowered nodes):
    the graph after the plan's DCE/CSE ``prep``, split and built as the
    route builds it, then :func:`inductor_peaks`."""
    copy, by_name = prepared_copy(joint_module, prep, lowered)
    return inductor_peaks(copy, [by_name[lowered[i].name] for i in saved], num_fwd_outputs, rules)


def dynamic_inputs(joint_module: fx.GraphModule) -> str:
    """Why the graph cannot be asked about ("": it can): a placeholder is a
    symbolic integer or a tensor with a symbolic size or stride.  Inductor's
    lowering of the modules would run on the compile's own ShapeEnv and add
    guards to it -- a recompile per size under ``dynamic=True``, a
    ``ConstraintViolationError`` under ``mark_dynamic`` -- so the plan
    stays on the memory model there."""
    for node in joint_module.graph.find_nodes(op="placeholder"):
        val = node.meta.get("val")
        if isinstance(val, torch.SymInt | torch.SymFloat | torch.SymBool):
            return f"the graph has dynamic shapes (input {node.name!r} is symbolic): asking inductor would " \
                   "specialize them"
        if isinstance(val, torch.Tensor) and not all(isinstance(d, int) for d in (*val.shape, *val.stride())):
            return f"the graph has dynamic shapes (input {node.name!r} has symbolic sizes): asking inductor " \
                   "would specialize them"
    return ""


def holds_saved_tensors(joint_module: fx.GraphModule) -> bool:
    """Whether the step runs other work while this graph's saved tensors
    are alive: its forward returns a differentiable output that is not a
    scalar (a tangent input of more than one element), so what it returns
    goes on to further differentiable work -- the next graph of a model
    split by a graph break, or eager code -- and its backward runs only
    after that work's.  A graph ending in its loss (one scalar tangent)
    runs its backward next: its saved tensors count in its own peak alone."""
    from torch._functorch._aot_autograd.utils import _is_tangent  # the extraction's own test (gated in versions)

    for node in joint_module.graph.find_nodes(op="placeholder"):
        val = node.meta.get("val")
        if _is_tangent(node) and isinstance(val, torch.Tensor):
            numel = val.numel()
            if not (isinstance(numel, int) and numel <= 1):
                return True
    return False


__all__ = ["decision_peaks", "holds_saved_tensors", "inductor_peaks", "prepared_copy"]
